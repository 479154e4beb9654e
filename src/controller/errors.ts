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

/** A call refused by the controller before it reached any worker (bad arguments, unknown shape). */
export class ControllerError extends Data.TaggedError("ControllerError")<{
  readonly message: string
  /**
   * What kind of refusal, where a program may act on it: "overlap" (an in-place op whose input
   * shares some of the memory it writes), "modified-inplace" (a backward that would read a saved
   * tensor changed in place since).
   */
  readonly reason?: "overlap" | "modified-inplace"
}> {}

/** Why a command failed: on a worker, a worker lost, or a command the controller could not send. */
export type Failure = RemoteError | WorkerLost | ControllerError | DeadlineExceeded

/** Starting or attaching to workers failed. */
export class StartError extends Data.TaggedError("StartError")<{ readonly message: string }> {}
