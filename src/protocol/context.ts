/**
 * The state one encode or one decode needs while the library walks the message: codec.ts
 * keeps one context per Encoder or Decoder (the library hands it to every ext codec) and
 * resets it at the start of each call, so nothing per call lives in module variables.
 */
import type { WorkerMessage } from "./messages.ts"
import type { ScanStack } from "./scan.ts"

export interface DecodeContext {
  /** Copy tensor and bin bytes out of the frame: it is only borrowed (FrameOwnership). */
  copyBytes: boolean
  /** Checks one command of a CommandGroup: the message codec itself, one level down. */
  readonly command: (wire: unknown, depth: number, ctx: DecodeContext) => WorkerMessage
  /** The pre-scan's scratch: free again once the outer scan is done, so an ErrorPayload's inner scan reuses it. */
  readonly scanStack: ScanStack
}

/** A large tensor left out of the encoder's buffer (encodeMessageParts). */
export interface OutOfLine {
  /** Position in the encoder's output of the ext 32 length to patch. */
  readonly lengthAt: number
  readonly extLength: number
  /** Position in the encoder's output where the tensor bytes belong. */
  readonly at: number
  readonly data: Uint8Array
}

export interface EncodeContext {
  outOfLine: OutOfLine[]
  /** Bytes of the tensors in outOfLine: the final body is this much longer than the buffer. */
  outOfLineBytes: number
  /** One command of a CommandGroup as its wire array. */
  readonly command: (m: unknown, depth: number, ctx: EncodeContext) => unknown[]
}
