/**
 * The protocol's one failure type: bytes that are not a valid frame or message, or a message
 * that cannot be encoded. Raised by codec.ts and framing.ts; the worker answers it with a
 * ProtocolError message (messages.ts) and goes on, unless it is fatal.
 */
import { Data } from "effect"

export class ProtocolError extends Data.TaggedError("ProtocolError")<{
  /** What was wrong and where, e.g. "CallFunction.results[2]: expected Ref, got string". */
  readonly message: string
  /**
   * True when the byte stream can no longer be split into frames (an oversized length
   * prefix): the connection must be closed. False for a bad message inside a good frame.
   */
  readonly fatal: boolean
}> {}
