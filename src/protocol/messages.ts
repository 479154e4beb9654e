/**
 * The protocol's vocabulary: every message between the controller and a worker, as typed
 * values. On the wire each message is a msgpack array `[code, ...fields]` with the fields in
 * the order written here (codec.ts; docs/protocol.md). The worker and the controller, their
 * tests and the protocol doc all take the messages from this file.
 */
import type { NDSlice } from "./ndslice.ts"
import type { ErrorPayload, HostTensor, Ref, TensorFactory } from "./values.ts"

/**
 * Argument and result trees: plain msgpack data with Refs (looked up on the worker) and
 * host tensors anywhere inside.
 */
export type Value =
  | null
  | boolean
  | number
  | bigint
  | string
  | Uint8Array
  | Ref
  | HostTensor
  | ReadonlyArray<Value>
  | { readonly [key: string]: Value }

/** Collective reductions; `stack` gathers instead of reducing. */
export const REDUCTIONS = ["sum", "prod", "min", "max", "avg", "stack"] as const
export type Reduction = (typeof REDUCTIONS)[number]

// ---- controller -> worker ---------------------------------------------------------------

/** Defines `result` as this rank's view of a mesh: for each named dim, its group of ranks. */
export interface CreateDeviceMesh {
  readonly _tag: "CreateDeviceMesh"
  readonly result: Ref
  /** One name per dim of `ranks`. */
  readonly names: ReadonlyArray<string>
  /** The ranks of the mesh; this worker's rank must be one of them. */
  readonly ranks: NDSlice
}

/** Defines `result` as a stream; `default` picks the device's default stream. */
export interface CreateStream {
  readonly _tag: "CreateStream"
  readonly result: Ref
  readonly default: boolean
}

/**
 * Calls `function` on `stream` with looked-up args and kwargs, and defines each of
 * `results` as one tensor of its (flattened) result. On failure `results` and `mutates`
 * are poisoned with this ident.
 */
export interface CallFunction {
  readonly _tag: "CallFunction"
  /** The command's sequence number; failures and Status are reported against it. */
  readonly ident: number
  readonly results: ReadonlyArray<Ref>
  /** Inputs the function changes in place: poisoned too when it fails. */
  readonly mutates: ReadonlyArray<Ref>
  /** `ops.<name>` for a built-in, or `<module>:<export>` for a user module. */
  readonly function: string
  readonly args: ReadonlyArray<Value>
  readonly kwargs: { readonly [key: string]: Value }
  readonly stream: Ref
}

/** Looks up `object`, applies `function` when given, and answers FetchResult(ident, value). */
export interface FetchValue {
  readonly _tag: "FetchValue"
  readonly ident: number
  readonly mutates: ReadonlyArray<Ref>
  /** Same forms as CallFunction.function; null sends the value itself. */
  readonly function: string | null
  readonly object: Value
  readonly stream: Ref
}

/** Everything up to `ident` has been sent: the worker answers Status(ident + 1) now. */
export interface RequestStatus {
  readonly _tag: "RequestStatus"
  readonly ident: number
}

/** Ends the command loop (in restartable mode: starts a fresh state and sends Restarted). */
export interface Exit {
  readonly _tag: "Exit"
}

/** Commands run in order, as if sent one by one. */
export interface CommandGroup {
  readonly _tag: "CommandGroup"
  readonly commands: ReadonlyArray<WorkerMessage>
}

/** Forgets refs (by id). An unknown id is a ProtocolError for that id; the rest still go. */
export interface DeleteRefs {
  readonly _tag: "DeleteRefs"
  readonly refs: ReadonlyArray<number>
}

/**
 * Defines `result` as an alias of `tensor` for use on stream `to`. Unless already borrowed,
 * records an event on `from`, which the first use on `to` waits for.
 */
export interface BorrowCreate {
  readonly _tag: "BorrowCreate"
  readonly result: Ref
  readonly tensor: Ref
  readonly from: Ref
  readonly to: Ref
  readonly alreadyBorrowed: boolean
}

/** Stream `to` waits for the event recorded at creation (borrow = BorrowCreate.result.id). */
export interface BorrowFirstUse {
  readonly _tag: "BorrowFirstUse"
  readonly borrow: number
}

/** Records an event on `to` after the borrow's last use, for the drop to wait on. */
export interface BorrowLastUse {
  readonly _tag: "BorrowLastUse"
  readonly borrow: number
}

/** Ends the borrow: if it was used, `from` waits until `to` is done with it. */
export interface BorrowDrop {
  readonly _tag: "BorrowDrop"
  readonly borrow: number
}

/**
 * A collective over one or more dims of `mesh`: all_reduce, reduce_scatter of dim 0
 * (`scatter`), all_gather into `[n, ...shape]` (`stack`), or all_to_all (`stack` and
 * `scatter`). A rank whose input is poisoned joins with `factory` zeros.
 */
export interface Reduce {
  readonly _tag: "Reduce"
  /** Failures of the collective itself are reported against it (not in the Python seed). */
  readonly ident: number
  readonly result: Ref
  readonly tensor: Ref
  readonly factory: TensorFactory
  readonly mesh: Ref
  readonly stream: Ref
  /** Mesh dim names; several dims reduce over the ranks that vary in any of them. */
  readonly dims: ReadonlyArray<string>
  readonly reduction: Reduction
  readonly scatter: boolean
  /** Write into the input tensor instead of a new one (all_reduce and all_to_all only). */
  readonly inplace: boolean
}

/**
 * Batched point-to-point: the rank at index i of `fromRanks` sends `tensor` to the rank at
 * index i of `toRanks`, which defines `result` as what it received. Sending to oneself is a
 * copy. A poisoned input is sent as `factory` zeros.
 */
export interface SendTensor {
  readonly _tag: "SendTensor"
  readonly ident: number
  readonly result: Ref
  readonly fromRanks: NDSlice
  readonly toRanks: NDSlice
  readonly tensor: Ref
  readonly factory: TensorFactory
  readonly stream: Ref
}

export type WorkerMessage =
  | CreateDeviceMesh
  | CreateStream
  | CallFunction
  | FetchValue
  | RequestStatus
  | Exit
  | CommandGroup
  | DeleteRefs
  | BorrowCreate
  | BorrowFirstUse
  | BorrowLastUse
  | BorrowDrop
  | Reduce
  | SendTensor

// ---- worker -> controller ---------------------------------------------------------------

/** The first message on a worker's link: who it is, and the job token it was given. */
export interface WorkerHello {
  readonly _tag: "WorkerHello"
  readonly rank: number
  readonly world: number
  readonly pid: number
  /** The job's shared secret; a controller refuses a link without the right one. */
  readonly token: string
  readonly device: string
}

/** Every command with an ident below `firstUncompletedIdent` has completed on this worker. */
export interface Status {
  readonly _tag: "Status"
  readonly firstUncompletedIdent: number
}

export interface FetchResult {
  readonly _tag: "FetchResult"
  readonly ident: number
  readonly value: Value
}

/** Command `ident` failed at its root (not because an input was poisoned). */
export interface RemoteFunctionFailed {
  readonly _tag: "RemoteFunctionFailed"
  readonly ident: number
  readonly error: ErrorPayload
}

/** The worker started a fresh state after Exit (restartable mode). */
export interface Restarted {
  readonly _tag: "Restarted"
  /** How many times this worker has restarted. */
  readonly restarts: number
}

/** A frame or command the worker could not accept; it goes on with the next one. */
export interface ProtocolError {
  readonly _tag: "ProtocolError"
  readonly message: string
}

export type ControllerMessage =
  | WorkerHello
  | Status
  | FetchResult
  | RemoteFunctionFailed
  | Restarted
  | ProtocolError

export type Message = WorkerMessage | ControllerMessage

/**
 * The wire code of each message, the array's first element. Controller-bound messages
 * start at 64 so a message sent in the wrong direction is rejected by code alone.
 */
export const MESSAGE_CODES = {
  CreateDeviceMesh: 1,
  CreateStream: 2,
  CallFunction: 3,
  FetchValue: 4,
  RequestStatus: 5,
  Exit: 6,
  CommandGroup: 7,
  DeleteRefs: 8,
  BorrowCreate: 9,
  BorrowFirstUse: 10,
  BorrowLastUse: 11,
  BorrowDrop: 12,
  Reduce: 13,
  SendTensor: 14,
  WorkerHello: 64,
  Status: 65,
  FetchResult: 66,
  RemoteFunctionFailed: 67,
  Restarted: 68,
  ProtocolError: 69,
} as const satisfies Record<Message["_tag"], number>

/**
 * Field order on the wire, per message. The codec encodes and validates in this order;
 * the `satisfies` clause makes a missing or misspelt field a type error.
 */
export const MESSAGE_FIELDS = {
  CreateDeviceMesh: ["result", "names", "ranks"],
  CreateStream: ["result", "default"],
  CallFunction: ["ident", "results", "mutates", "function", "args", "kwargs", "stream"],
  FetchValue: ["ident", "mutates", "function", "object", "stream"],
  RequestStatus: ["ident"],
  Exit: [],
  CommandGroup: ["commands"],
  DeleteRefs: ["refs"],
  BorrowCreate: ["result", "tensor", "from", "to", "alreadyBorrowed"],
  BorrowFirstUse: ["borrow"],
  BorrowLastUse: ["borrow"],
  BorrowDrop: ["borrow"],
  Reduce: ["ident", "result", "tensor", "factory", "mesh", "stream", "dims", "reduction", "scatter", "inplace"],
  SendTensor: ["ident", "result", "fromRanks", "toRanks", "tensor", "factory", "stream"],
  WorkerHello: ["rank", "world", "pid", "token", "device"],
  Status: ["firstUncompletedIdent"],
  FetchResult: ["ident", "value"],
  RemoteFunctionFailed: ["ident", "error"],
  Restarted: ["restarts"],
  ProtocolError: ["message"],
} as const satisfies { [K in Message["_tag"]]: ReadonlyArray<Exclude<keyof Extract<Message, { _tag: K }>, "_tag">> }
