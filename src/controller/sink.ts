/**
 * Where the commands the Mesh API issues go: the live Core (numbered, tracked in the
 * dependency graph, batched to the workers), or compile's recorder while it records a step
 * (kept, sending nothing). Core.sink is the one in use; compile swaps it for the duration of a
 * trace, so no method branches on a mode. Besides the four ways a command goes out, a sink is
 * told of the handles made, the tensors read and the memory written meanwhile (the recorder keeps
 * them; the live core ignores them).
 */
import type { Effect } from "effect"
import type { Value, WorkerMessage } from "../protocol/messages.ts"
import type { DType, SharedTensor } from "../protocol/values.ts"
import type { ControllerError, Failure } from "./errors.ts"
import type { Exchange, Node } from "./graph.ts"
import type { TensorHandle } from "./handles.ts"
import type { CallSite } from "./sites.ts"
import type { Storage } from "./storage.ts"

export interface Sink {
  /** Queues a message without an ident for `ranks`. */
  post(ranks: ReadonlyArray<number>, msg: WorkerMessage): void
  /**
   * Queues a command with an ident for `ranks`: `inputs` are the ref ids it reads, `defines`
   * those it (re)defines, `exchange` how its ranks depend on each other.
   */
  command(ranks: ReadonlyArray<number>, label: string, inputs: ReadonlyArray<number>, defines: ReadonlyArray<number>, site: CallSite | undefined, make: (ident: number) => WorkerMessage, exchange?: Exchange): Node
  /** A command whose message differs per rank (`make(ident, rank)`), each rank sent only its own. */
  commandEach(ranks: ReadonlyArray<number>, label: string, inputs: ReadonlyArray<number>, defines: ReadonlyArray<number>, site: CallSite | undefined, make: (ident: number, rank: number) => WorkerMessage): Node
  /** Fetches a value from `ranks` (see Core.fetch). */
  fetch(ranks: ReadonlyArray<number>, inputs: ReadonlyArray<number>, label: string, site: CallSite | undefined, make: (ident: number) => WorkerMessage, deadlineMs?: number, late?: boolean): Effect.Effect<ReadonlyArray<Value>, Failure | ControllerError>
  /**
   * A host tensor for `ranks` placed in the shared-memory segment their links share, written by
   * `fill` (Core.share); undefined when it must travel in the command.
   */
  share(ranks: ReadonlyArray<number>, dtype: DType, shape: ReadonlyArray<number>, fill: (into: Uint8Array) => void): SharedTensor | undefined
  /** Deletes refs on `ranks`, in command order. */
  release(ranks: ReadonlyArray<number>, refs: ReadonlyArray<number>): void
  /** A tensor handle was made. */
  made(t: TensorHandle): void
  /** A command reads tensor `t` (an argument the Mesh checked). */
  read(t: TensorHandle): void
  /** A command writes `storage` in place. */
  wrote(storage: Storage): void
}
