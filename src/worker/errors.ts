/**
 * The worker's failures. `DependentOnError` is the poison stored in place of a value that
 * could not be computed; the others are root failures, reported once to the controller as
 * RemoteFunctionFailed with `toErrorPayload`.
 */
import { Data } from "effect"
import { ErrorPayload, type Frame } from "../protocol/values.ts"

/** The value depends on command `ident`, which failed; stored in the env in its place. */
export class DependentOnError extends Data.TaggedError("DependentOnError")<{ readonly ident: number }> {
  override get message(): string {
    return `depends on command ${this.ident}, which failed`
  }
}

/** A ref the controller never defined, or already deleted. */
export class UnknownRef extends Data.TaggedError("UnknownRef")<{ readonly id: number; readonly message: string }> {}

/** A ref that holds the wrong kind of value for its position (a tensor where a stream goes). */
export class WrongRefType extends Data.TaggedError("WrongRefType")<{ readonly message: string }> {}

/** A function name that does not resolve: unknown built-in, module outside the roots, no export. */
export class FunctionNotFound extends Data.TaggedError("FunctionNotFound")<{ readonly message: string }> {}

/** A function returned a different number of tensors than the command has results. */
export class ResultCountMismatch extends Data.TaggedError("ResultCountMismatch")<{ readonly message: string }> {}

/** A function returned a tensor whose dtype or shape is not what the command declared for that result. */
export class ResultMismatch extends Data.TaggedError("ResultMismatch")<{ readonly message: string }> {}

/** A function (built-in or user) threw or rejected; `cause` is what it threw. */
export class FunctionFailed extends Data.TaggedError("FunctionFailed")<{
  readonly function: string
  readonly cause: unknown
  readonly message: string
}> {}

/**
 * A collective's or send's input is not what the command's factory declares (dtype or shape):
 * the rank joins with the factory's zeros instead, so its peers never see a buffer of another
 * size, and fails the command with this.
 */
export class InputMismatch extends Data.TaggedError("InputMismatch")<{ readonly message: string }> {}

// "    at name (file:line:col)" or "    at file:line:col" (JavaScriptCore as printed by Bun).
const FRAME = /^\s*at (?:(.*?) \()?(.+?):(\d+):\d+\)?$/

const framesOf = (stack: string | undefined): Frame[] =>
  (stack ?? "").split("\n").flatMap((line) => {
    const m = FRAME.exec(line)
    return m ? [{ file: m[2]!, line: Number(m[3]), function: m[1] ?? "<anonymous>" }] : []
  })

/**
 * The wire form of a root failure: its type, its message, the frames of the original throw,
 * and its reason when it is a tagged error with one (CommError, ShimError).
 */
export const toErrorPayload = (error: unknown): ErrorPayload => {
  const root = error instanceof FunctionFailed && error.cause instanceof Error ? error.cause : error
  if (root instanceof Error) {
    const { _tag: type, reason } = root as { _tag?: unknown; reason?: unknown }
    return new ErrorPayload(typeof type === "string" ? type : root.name, root.message, framesOf(root.stack), typeof type === "string" && typeof reason === "string" ? reason : undefined)
  }
  return new ErrorPayload("Error", String(root), [])
}
