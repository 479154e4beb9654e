/**
 * The protocol's vocabulary: every message between the controller and a worker, declared
 * once each: its wire code, then its fields in wire order, each a name and a kind
 * (fields.ts). On the wire a message is a msgpack array `[code, ...fields]`. The types below,
 * the codec (codec.ts) and the message tables of docs/protocol.md
 * (scripts/protocol-doc.ts, checked by tests/protocol/doc.test.ts) are all derived from
 * these tables.
 */
import {
  anyValue, boolField, bytesField, choice, commandList, errorField, factoryField, identField, metaList, ndsliceField, optional, refField, refList, strField, strList, strOrNil, uintField,
  uintList, valueList, valueMap, type Field,
} from "./fields.ts"
import { DTYPES, type FloatNumber, type HostTensor, type Ref, type SharedTensor } from "./values.ts"

/** The handshake's nonces and proofs (HMAC-SHA256), src/net/handshake.ts. */
export const NONCE_BYTES = 32
export const PROOF_BYTES = 32
const nonceField = bytesField(NONCE_BYTES)
const proofField = bytesField(PROOF_BYTES)

/**
 * Argument and result trees: plain msgpack data with Refs (looked up on the worker) and
 * host tensors anywhere inside.
 */
export type Value =
  | null
  | boolean
  | number
  | FloatNumber
  | bigint
  | string
  | Uint8Array
  | Ref
  | HostTensor
  | SharedTensor
  | ReadonlyArray<Value>
  | { readonly [key: string]: Value }

/** Collective reductions; `stack` gathers instead of reducing. */
export const REDUCTIONS = ["sum", "prod", "min", "max", "avg", "stack"] as const
export type Reduction = (typeof REDUCTIONS)[number]

/** One field: its name, its kind, and a note for the doc's table. */
type FieldSpec = readonly [name: string, kind: Field<any>, note?: string]

/** The message a list of fields makes (without its _tag): an optional() field may be absent. */
type FieldsOf<F extends ReadonlyArray<FieldSpec>> =
  & { readonly [E in F[number] as E[1] extends { readonly optional: true } ? never : E[0]]: E[1] extends Field<infer T> ? T : never }
  & { readonly [E in F[number] as E[1] extends { readonly optional: true } ? E[0] : never]?: E[1] extends Field<infer T> ? T : never }

/** A cross-field rule: the field to blame and the problem, or undefined when it holds. */
type Rule<F extends ReadonlyArray<FieldSpec>> = (m: FieldsOf<F>) => readonly [field: F[number][0], problem: string] | undefined

export interface MessageSpec<F extends ReadonlyArray<FieldSpec> = ReadonlyArray<FieldSpec>> {
  readonly code: number
  readonly fields: F
  readonly rule?: Rule<F>
}

const message = <const F extends ReadonlyArray<FieldSpec>>(code: number, fields: F, rule?: Rule<F>): MessageSpec<F> => {
  // Optional fields end the array: a shorter array is then the same message without them.
  const first = fields.findIndex(([, kind]) => kind.optional)
  if (first >= 0 && fields.slice(first).some(([, kind]) => !kind.optional)) throw new Error(`message ${code}: optional fields must come last`)
  return { code, fields, rule }
}

/** A CommandGroup's commands: an interface, so that the type's recursion is deferred. */
export interface Commands extends ReadonlyArray<WorkerMessage> {}
const commands: Field<Commands> = commandList()
const values = valueList<Value>()

/** Controller -> worker: codes 1..63. */
export const WORKER_MESSAGES = {
  /** Defines `result` as this rank's view of a mesh: for each named dim, its group of ranks. */
  CreateDeviceMesh: message(1, [
    ["result", refField],
    // One name per dim of `ranks`.
    ["names", strList],
    // The ranks of the mesh; this worker's rank must be one of them.
    ["ranks", ndsliceField],
  ], (m) =>
    m.names.length !== m.ranks.ndim ? ["names", `${m.names.length} names for a ${m.ranks.ndim}-dim NDSlice`]
    : new Set(m.names).size !== m.names.length ? ["names", `repeated name in [${m.names.join(", ")}]`]
    : undefined),
  /** Defines `result` as a stream; `default` picks the device's default stream. */
  CreateStream: message(2, [["result", refField], ["default", boolField]]),
  /**
   * Calls `function` on `stream` with looked-up args and kwargs, and defines each of
   * `results` as one tensor of its (flattened) result. On failure `results` and `mutates`
   * are poisoned with this ident.
   */
  CallFunction: message(3, [
    // The command's sequence number; failures and Status are reported against it.
    ["ident", identField],
    ["results", refList],
    // Inputs the function changes in place: poisoned too when it fails.
    ["mutates", refList],
    // `ops.<name>` for a built-in, or `<module>:<export>` for a user module.
    ["function", strField],
    ["args", values],
    ["kwargs", valueMap<Value>()],
    ["stream", refField],
    // What a user function declared it returns: the worker fails the command at its root when a result differs.
    ["declared", optional(metaList), "per result, [dtype, shape] or nil"],
    // A function that runs its own collectives: the mesh, and the dims of its group (given together).
    ["mesh", optional(refField)],
    ["dims", optional(strList), "the group's dims, in member order"],
  ], (m) =>
    m.declared !== undefined && m.declared.length !== m.results.length ? ["declared", `${m.declared.length} declarations for ${m.results.length} results`]
    : m.mesh !== undefined && m.dims === undefined ? ["dims", "a mesh without the dims of its group"]
    : m.dims !== undefined && (m.dims.length === 0 || new Set(m.dims).size !== m.dims.length) ? ["dims", `[${m.dims.join(", ")}] is not a set of one or more dims`]
    : undefined),
  /** Looks up `object`, applies `function` when given, and answers FetchResult(ident, value). */
  FetchValue: message(4, [
    ["ident", identField],
    ["mutates", refList],
    // Same forms as CallFunction.function; nil sends the value itself.
    ["function", strOrNil],
    ["object", anyValue<Value>()],
    ["stream", refField],
  ]),
  /** Everything up to `ident` has been sent: the worker answers Status(ident + 1) now, if that advances it. */
  RequestStatus: message(5, [["ident", identField]]),
  /** Ends the command loop (in restartable mode: starts a fresh state and sends Restarted). */
  Exit: message(6, []),
  /** Commands run in order, as if sent one by one. */
  CommandGroup: message(7, [["commands", commands, "each a full `[code, ...]` array, codes below 64"]]),
  /** Forgets refs (by id). An unknown id is a ProtocolError for that id; the rest still go. */
  DeleteRefs: message(8, [["refs", uintList, "ref ids"]]),
  /**
   * Defines `result` as an alias of `tensor` for use on stream `to`. Unless already borrowed,
   * records an event on `from`, which the first use on `to` waits for.
   */
  BorrowCreate: message(9, [["result", refField], ["tensor", refField], ["from", refField], ["to", refField], ["alreadyBorrowed", boolField]]),
  /** Stream `to` waits for the event recorded at creation. */
  BorrowFirstUse: message(10, [["borrow", uintField, "the BorrowCreate result's id"]]),
  /** Records an event on `to` after the borrow's last use, for the drop to wait on. */
  BorrowLastUse: message(11, [["borrow", uintField]]),
  /** Ends the borrow: if it was used, `from` waits until `to` is done with it. */
  BorrowDrop: message(12, [["borrow", uintField]]),
  /**
   * A collective over one or more dims of `mesh`: all_reduce, reduce_scatter of dim 0
   * (`scatter`), all_gather into `[n, ...shape]` (`stack`), or all_to_all (`stack` and
   * `scatter`). A rank whose input is poisoned joins with `factory` zeros.
   */
  Reduce: message(13, [
    // Failures of the collective itself are reported against it (not in the Python seed).
    ["ident", identField],
    ["result", refField],
    ["tensor", refField],
    ["factory", factoryField],
    ["mesh", refField],
    ["stream", refField],
    // Mesh dim names; several dims reduce over the ranks that vary in any of them.
    ["dims", strList],
    ["reduction", choice(REDUCTIONS, "reduction"), `one of ${REDUCTIONS.join(", ")}`],
    ["scatter", boolField],
    // Write into the input tensor instead of a new one (all_reduce and all_to_all only).
    ["inplace", boolField],
  ]),
  /**
   * Batched point-to-point: the rank at index i of `fromRanks` sends `tensor` to the rank at
   * index i of `toRanks`, which defines `result` as what it received. Sending to oneself is a
   * copy. A poisoned input is sent as `factory` zeros.
   */
  SendTensor: message(14, [
    ["ident", identField],
    ["result", refField],
    ["fromRanks", ndsliceField],
    ["toRanks", ndsliceField],
    ["tensor", refField],
    ["factory", factoryField],
    ["stream", refField],
  ], (m) => (m.fromRanks.length !== m.toRanks.length ? ["toRanks", `${m.toRanks.length} ranks for ${m.fromRanks.length} in fromRanks`] : undefined)),
  /**
   * Defines recording `recording` on this worker: `commands` as a step recorded once on the
   * controller (compile), to be run by CallRecording. Inside, `formals` and `params` stand for
   * a call's actuals and params, `results` for what it defines, and every other ref a command
   * defines is a temporary, freed when the call ends. Command k runs with ident `ident + k`
   * of the call; a call takes `idents` idents in all.
   */
  DefineRecording: message(15, [
    ["recording", uintField],
    ["idents", uintField],
    ["formals", uintList, "ref ids"],
    ["params", uintList, "ref ids"],
    ["results", uintList, "ref ids"],
    ["commands", commands, "CallFunction, Reduce, SendTensor and Borrow* arrays, idents from 0"],
  ]),
  /**
   * Runs recording `recording` as idents `ident` .. `ident + idents - 1`: `actuals` bind its
   * formals, `params` its params, and `results` are defined as its results (a poisoned one
   * poisoned). Its temporaries are freed when it ends.
   */
  CallRecording: message(16, [
    ["ident", identField],
    ["recording", uintField],
    ["results", refList],
    ["actuals", refList],
    ["params", values],
  ]),
  /**
   * Forgets recording `recording` (its compiled step was disposed, replaced or collected on the
   * controller): later calls of it are refused as unknown. Calls sent before it run as usual.
   */
  DeleteRecording: message(17, [["recording", uintField]]),
  /**
   * The handshake's second message, the answer to WorkerChallenge: the controller's nonce, and
   * its proof that it holds the job token (src/net/handshake.ts). Anywhere else it is refused.
   */
  ControllerProof: message(18, [["nonce", nonceField], ["proof", proofField, "HMAC-SHA256 keyed by the job token"]]),
  /**
   * Rank `rank` is gone (the controller saw it exit or disconnect). The worker acts on it as soon
   * as it arrives, even while a command runs: a rendezvous or collective waiting for that rank
   * fails now (CommError peer-lost) instead of at the comm timeout, and so does every later one
   * whose group holds it, so the commands behind it run at once. Sent on its own, outside any
   * CommandGroup.
   */
  PeerLost: message(19, [["rank", uintField]]),
  /**
   * Command `ident` was not sent to this rank: its group holds a rank the controller knows is
   * lost, and the controller already failed it. Defines `refs` (what the command would have
   * defined here) as failed at `ident`, reporting nothing.
   */
  Withheld: message(20, [["ident", identField], ["refs", refList]]),
  /**
   * Checkpoints (codes 40..44; paths are relative to the worker's checkpoint root, which it never
   * writes or reads outside of). Copies `tensors` to host memory now, a snapshot later commands
   * cannot change, then writes those whose `writers` list this rank as
   * `<dir>/rank-<rank>.safetensors` in the background and answers FetchResult(ident,
   * `{ file, bytes, header, hashes, ms }`, header its header's digest) once the file is durable
   * (or `{ error }`): the command itself completes at once.
   */
  SaveShards: message(40, [
    ["ident", identField],
    ["dir", strField, "the version's temporary directory"],
    ["tensors", refList],
    // The tensors' names in the file, one per tensor.
    ["names", strList],
    ["writers", valueList<Value>(), "per tensor, the ranks that write it: [uint]"],
    ["stream", refField],
  ], (m) => (m.names.length !== m.tensors.length ? ["names", `${m.names.length} names for ${m.tensors.length} tensors`]
    : m.writers.length !== m.tensors.length ? ["writers", `${m.writers.length} writer lists for ${m.tensors.length} tensors`] : undefined)),
  /**
   * Publishes a version whose shards are durable in `tmp`: writes `manifest` there, syncs, renames
   * it to `<dir>/<version>`, replaces `<dir>/LATEST` by rename, keeps the newest `keep` versions;
   * answers FetchResult(ident, null).
   */
  CommitCheckpoint: message(41, [
    ["ident", identField],
    ["dir", strField],
    ["tmp", strField],
    ["version", strField],
    ["manifest", strField, "JSON"],
    ["keep", uintField],
  ]),
  /**
   * Answers FetchResult(ident, `{ version, manifest }`) for a checkpoint directory (the version
   * LATEST names unless `version` is given), or `{ header }` (JSON) for a `.safetensors` file.
   */
  ReadCheckpoint: message(42, [["ident", identField], ["path", strField], ["version", strOrNil]]),
  /**
   * Defines each of `results` from a block of a tensor in a safetensors file: `sources[i]` lists,
   * per rank, `[rank, file, key, offsets, shape, hash or nil, saved]`; this rank reads its own
   * entry. `saved` (a checkpoint's block; nil or absent for a file torch wrote) is `[dtype,
   * header digest]`: the file's header must have that digest and the entry that dtype and
   * `shape` exactly, and `hash` is then required.
   */
  LoadShards: message(43, [
    ["ident", identField],
    ["results", refList],
    ["sources", valueList<Value>(), "per result: [[rank, file, key, [uint], [uint], str or nil, [dtype, str] or nil]]"],
    ["stream", refField],
  ], (m) => (m.sources.length !== m.results.length ? ["sources", `${m.sources.length} sources for ${m.results.length} results`] : undefined)),
  /** Removes `tmp`, the temporary directory of a save that failed (a `.tmp-` directory); answers FetchResult(ident, null). */
  DropCheckpoint: message(44, [["ident", identField], ["tmp", strField]]),
  /**
   * Shared memory (codes 21..23; src/net/shm.ts, src/net/uploads.ts): maps the controller's memfd at `path`
   * (`/proc/<pid>/fd/<fd>`) of exactly `bytes` bytes, which starts with `check`, as segment
   * `segment`, and from then on answers a fetch of one tensor of at least `minBytes` bytes by
   * writing it there (FetchShared) while the segment is free. Answered with SegmentMapped.
   */
  SharedSegment: message(21, [
    ["segment", uintField],
    ["path", strField],
    ["bytes", uintField],
    ["check", bytesField(16), "the segment's first 16 bytes"],
    ["minBytes", uintField],
  ]),
  /** The controller copied out what FetchShared left in `segment`: the worker may write there again. */
  SegmentFree: message(22, [["segment", uintField]]),
  /**
   * Maps the controller's upload segment at `path` (checked as SharedSegment's), which it shares
   * with every worker of this host: from then on a host tensor in a CallFunction's arguments may
   * come as a SharedTensor, its bytes in that segment. An older upload segment is unmapped (no
   * command after this one names it). Answered with SegmentMapped.
   */
  UploadSegment: message(23, [
    ["segment", uintField],
    ["path", strField],
    ["bytes", uintField],
    ["check", bytesField(16), "the segment's first 16 bytes"],
  ]),
} as const

/** The messages a recording may hold: the commands that compute, and borrows' steps. */
export const RECORDABLE = ["CallFunction", "Reduce", "SendTensor", "BorrowCreate", "BorrowFirstUse", "BorrowLastUse", "BorrowDrop"] as const

/** Worker -> controller: codes 64 and up, so a message sent the wrong way is refused by code alone. */
export const CONTROLLER_MESSAGES = {
  /**
   * The handshake's last message, once the controller proved it holds the job token: who the
   * worker is, and its own proof (src/net/handshake.ts); a controller refuses a link without
   * the right one. rank and world are the challenge's.
   */
  WorkerHello: message(64, [
    ["rank", uintField],
    ["world", uintField],
    ["pid", uintField],
    ["proof", proofField, "HMAC-SHA256 keyed by the job token"],
    ["device", strField],
  ]),
  /** Every command with an ident below `firstUncompletedIdent` has completed on this worker. */
  Status: message(65, [["firstUncompletedIdent", uintField]]),
  FetchResult: message(66, [["ident", uintField], ["value", anyValue<Value>()]]),
  /** Command `ident` failed at its root (not because an input was poisoned). */
  RemoteFunctionFailed: message(67, [["ident", uintField], ["error", errorField]]),
  /** The worker started a fresh state after Exit (restartable mode). */
  Restarted: message(68, [["restarts", uintField, "Exits on this connection, this one included"]]),
  /** A frame or command the worker could not accept; it goes on with the next one. */
  ProtocolError: message(69, [["message", strField]]),
  /** The first message on a worker's link: which rank it is, and a fresh nonce for the controller's proof. */
  WorkerChallenge: message(70, [["rank", uintField], ["world", uintField], ["nonce", nonceField]]),
  /** The answer to SharedSegment: null when mapped, else why the worker refused it (the link goes on over the socket). */
  SegmentMapped: message(71, [["segment", uintField], ["problem", strOrNil]]),
  /** FetchResult(ident, a tensor of `dtype` and `shape`) whose bytes are at the start of `segment`, now in use until SegmentFree. */
  FetchShared: message(72, [["ident", uintField], ["segment", uintField], ["dtype", choice(DTYPES, "dtype")], ["shape", uintList]]),
  /** This worker is done with the SharedTensors at `offsets` of upload segment `segment` (copied into its tensors, or their command did not run): the controller may reuse them. */
  UploadTaken: message(73, [["segment", uintField], ["offsets", uintList]]),
} as const

export const MESSAGES = { ...WORKER_MESSAGES, ...CONTROLLER_MESSAGES }

type Table = typeof MESSAGES
export type Tag = keyof Table

/** The message of a tag, as a flat object type. */
export type MessageOf<K extends Tag> = { readonly _tag: K } & { readonly [P in keyof FieldsOf<Table[K]["fields"]>]: FieldsOf<Table[K]["fields"]>[P] }

export type CreateDeviceMesh = MessageOf<"CreateDeviceMesh">
export type CreateStream = MessageOf<"CreateStream">
export type CallFunction = MessageOf<"CallFunction">
export type FetchValue = MessageOf<"FetchValue">
export type RequestStatus = MessageOf<"RequestStatus">
export type Exit = MessageOf<"Exit">
export type CommandGroup = MessageOf<"CommandGroup">
export type DeleteRefs = MessageOf<"DeleteRefs">
export type BorrowCreate = MessageOf<"BorrowCreate">
export type BorrowFirstUse = MessageOf<"BorrowFirstUse">
export type BorrowLastUse = MessageOf<"BorrowLastUse">
export type BorrowDrop = MessageOf<"BorrowDrop">
export type Reduce = MessageOf<"Reduce">
export type SendTensor = MessageOf<"SendTensor">
export type DefineRecording = MessageOf<"DefineRecording">
export type CallRecording = MessageOf<"CallRecording">
export type DeleteRecording = MessageOf<"DeleteRecording">
export type PeerLost = MessageOf<"PeerLost">
export type Withheld = MessageOf<"Withheld">
export type SaveShards = MessageOf<"SaveShards">
export type CommitCheckpoint = MessageOf<"CommitCheckpoint">
export type ReadCheckpoint = MessageOf<"ReadCheckpoint">
export type LoadShards = MessageOf<"LoadShards">
export type ControllerProof = MessageOf<"ControllerProof">
export type DropCheckpoint = MessageOf<"DropCheckpoint">
export type WorkerHello = MessageOf<"WorkerHello">
export type WorkerChallenge = MessageOf<"WorkerChallenge">
export type Status = MessageOf<"Status">
export type FetchResult = MessageOf<"FetchResult">
export type RemoteFunctionFailed = MessageOf<"RemoteFunctionFailed">
export type Restarted = MessageOf<"Restarted">
export type ProtocolError = MessageOf<"ProtocolError">
export type SharedSegment = MessageOf<"SharedSegment">
export type SegmentFree = MessageOf<"SegmentFree">
export type SegmentMapped = MessageOf<"SegmentMapped">
export type FetchShared = MessageOf<"FetchShared">
export type UploadSegment = MessageOf<"UploadSegment">
export type UploadTaken = MessageOf<"UploadTaken">

export type WorkerMessage = { [K in keyof typeof WORKER_MESSAGES]: MessageOf<K> }[keyof typeof WORKER_MESSAGES]
export type ControllerMessage = { [K in keyof typeof CONTROLLER_MESSAGES]: MessageOf<K> }[keyof typeof CONTROLLER_MESSAGES]
export type Message = WorkerMessage | ControllerMessage

const perMessage = <V>(f: (m: MessageSpec) => V): { readonly [K in Tag]: V } =>
  Object.fromEntries(Object.entries(MESSAGES).map(([tag, m]) => [tag, f(m)])) as { readonly [K in Tag]: V }

/** The wire code of each message, the array's first element. */
export const MESSAGE_CODES = perMessage((m) => m.code)

/** Field names in wire order, per message. */
export const MESSAGE_FIELDS = perMessage((m): ReadonlyArray<string> => m.fields.map((f) => f[0])) as {
  readonly [K in Tag]: ReadonlyArray<Exclude<keyof MessageOf<K>, "_tag">>
}
