/**
 * The wire's one failure type (named apart from the ProtocolError message it is answered with): bytes that are not a valid frame or message, or a message
 * that cannot be encoded. Raised by codec.ts and framing.ts; the worker answers it with a
 * ProtocolError message (messages.ts) and goes on, unless it is fatal.
 */
import { Data } from "effect"

export class WireError extends Data.TaggedError("WireError")<{
  /** What was wrong and where, e.g. "CallFunction.results[2]: expected Ref, got string". */
  readonly message: string
  /**
   * True when the byte stream can no longer be split into frames (an oversized length
   * prefix): the connection must be closed. False for a bad message inside a good frame.
   */
  readonly fatal: boolean
}> {}
