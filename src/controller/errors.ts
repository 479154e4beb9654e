/**
 * What a controller program sees fail. `RemoteError` is a command that failed on a worker
 * (or depends on one that did); `WorkerLost` is a worker that died or disconnected while a
 * result needed it; `ControllerError` is a call the controller refused before sending it.
 */
import { Data } from "effect"

export interface WorkerFrame {
  readonly file: string
  readonly line: number
  readonly function: string
}

/** A result that depends on a command that failed on a worker. */
export class RemoteError extends Data.TaggedError("RemoteError")<{
  /** The command that failed at the root (this result may depend on it). */
  readonly ident: number
  /** The rank that reported it. */
  readonly rank: number
  /** The function the root command ran, when it was a call. */
  readonly function: string | undefined
  /** The worker-side error's type, e.g. "TypeError" or "ShimError". */
  readonly type: string
  readonly reason: string
  /** The worker-side error's own reason, when it has one (a CommError's: timeout, peer-lost, ...). */
  readonly kind: string | undefined
  readonly frames: ReadonlyArray<WorkerFrame>
  /** Where in the controller program the root command was issued. */
  readonly site: string | undefined
}> {
  override get message(): string {
    const fn = this.function ? ` (${this.function})` : ""
    // The worker's own frames (handlers, Effect) say little; show the function's.
    const user = this.frames.filter((f) => !/\/src\/worker\/|\/node_modules\/|^node:/.test(f.file))
    const frames = (user.length > 0 ? user : this.frames).slice(0, 4).map((f) => `\n    at ${f.function} (${f.file}:${f.line})`).join("")
    return `rank ${this.rank}: command ${this.ident}${fn} failed with ${this.type}: ${this.reason}${frames}${this.site ? `\n  issued at ${this.site}` : ""}`
  }
}

/** A worker that a result needed died or disconnected. */
export class WorkerLost extends Data.TaggedError("WorkerLost")<{
  readonly rank: number
  /** Exit status when the process is ours (128 + signal for a signal), else undefined. */
  readonly status: number | undefined
  readonly signal: string | undefined
  /** The command whose result was lost. */
  readonly ident: number
}> {
  override get message(): string {
    const how = this.status === undefined ? "disconnected" : `exited with status ${this.status}${this.signal ? ` (${this.signal})` : ""}`
    return `rank ${this.rank} ${how}; command ${this.ident} cannot complete`
  }
}

/** A fetch whose value was not final within its deadline: the ranks behind, each at the command it has not passed. */
export class DeadlineExceeded extends Data.TaggedError("DeadlineExceeded")<{
  /** The fetch. */
  readonly ident: number
  readonly label: string
  readonly deadlineMs: number
  readonly behind: ReadonlyArray<{ readonly rank: number; readonly ident: number; readonly label: string | undefined }>
  readonly site: string | undefined
}> {
  override get message(): string {
    const where = this.behind.map((b) => `rank ${b.rank} at command ${b.ident}${b.label ? ` (${b.label})` : ""}`).join(", ")
    return `fetch ${this.ident} (${this.label}) was not answered within its ${this.deadlineMs} ms deadline: ${where} not passed yet${this.site ? `\n  issued at ${this.site}` : ""}`
  }
}

/**
 * What kind of refusal a ControllerError is, so a program (or a test) tells refusals apart
 * without matching their messages, as CommError's reason does for communication.
 */
export type RefusalReason =
  /** A value the call cannot take: its type, range or form (an option, an index, a dim name, a host value). */
  | "argument"
  /** An op's rule refused the call: dtypes, shapes or keywords that do not fit (the registry's check). */
  | "op-rule"
  /** The call needs a tensor's dtype and shape, which the controller does not know. */
  | "unknown-meta"
  /** A handle was used after release(), or one made while compile traced a step and not returned. */
  | "released"
  /** A handle another controller made (its ref ids would name this one's own refs). */
  | "foreign"
  /** Tensors, meshes or ranks that do not go together: another mesh, ranks outside it, sizes that differ. */
  | "mesh"
  /** A placement that does not fit its tensor or mesh, or a partial tensor where a whole one is needed. */
  | "placement"
  /** An in-place op whose input shares some of the memory it writes. */
  | "overlap"
  /** A backward that would read a saved tensor changed in place since. */
  | "modified-inplace"
  /**
   * Autograd cannot do it: nothing requires grad, a graph already consumed, an in-place change
   * or a collective of a tensor that requires grad, a gradient without gradOutput or a floating result.
   */
  | "autograd"
  /** compile: what a recording cannot hold (a fetch, a per-rank command, a borrow made outside the step, a compiled call while another traces). */
  | "not-recordable"
  /** compile: the step is not one recording (its commands change between traces, a replay parameter changes them, a captured tensor was released, it is too big for a worker). */
  | "not-replayable"
  /** compile: the compiled step was disposed (a later call), or is in use (a dispose while it traces). */
  | "disposed"
  | "in-use"
  /** A state or checkpoint that does not fit: a tree a checkpoint cannot hold, one the program's state does not match, a path outside the root, a file not written. */
  | "checkpoint"
  /** An optimizer's parameter groups or state that do not fit it. */
  | "optimizer"
  /** A command the wire could not carry (it fails instead of being sent). */
  | "unsendable"
  /** Ranks passed a fetch without sending its result. */
  | "no-result"
  /** Something thrown inside a call that was not a refusal, its message kept. */
  | "thrown"

/** A call refused by the controller before it reached any worker (bad arguments, unknown shape); `reason` says which kind. */
export class ControllerError extends Data.TaggedError("ControllerError")<{
  readonly message: string
  readonly reason: RefusalReason
}> {}

/** A refusal: the ControllerError a call throws (or fails with) before anything is sent. */
export const refuse = (reason: RefusalReason, message: string): ControllerError => new ControllerError({ reason, message })

/** Why a command failed: on a worker, a worker lost, or a command the controller could not send. */
export type Failure = RemoteError | WorkerLost | ControllerError | DeadlineExceeded

/** Starting or attaching to workers failed. */
export class StartError extends Data.TaggedError("StartError")<{ readonly message: string }> {}
