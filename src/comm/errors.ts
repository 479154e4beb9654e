/**
 * The communication layer's one failure, `CommError`, with a `reason` saying which part failed.
 * The reason travels in the failure's ErrorPayload, so the controller tells a lost peer's
 * symptom from a bad call by tag and reason. This file loads no native code: the controller
 * imports it.
 */
import { Data } from "effect"

/**
 * Why a collective, a send or the opening of a communicator failed:
 * - `timeout`: a communication did not complete within the comm timeout (the shim's TIMEOUT).
 * - `peer-lost`: the transport failed, a peer is most likely gone (the shim's COMM status).
 * - `rendezvous`: opening the communicator failed: the store, or a member that never came.
 * - `invalid`: the call itself was wrong (sizes, dims, dtypes); no peer is to blame.
 * - `device`: the device failed under the collective (memory, the CUDA runtime).
 */
const COMM_REASONS = ["timeout", "peer-lost", "rendezvous", "invalid", "device"] as const
export type CommReason = (typeof COMM_REASONS)[number]

const TAG = "CommError"

/** A collective or send failed in the communication layer. */
export class CommError extends Data.TaggedError(TAG)<{
  readonly reason: CommReason
  readonly message: string
  readonly cause?: unknown
}> {}

/** The reason a shim status (ShimError.reason) gives a failed collective or send. */
export const reasonOfShimStatus = (status: string): CommReason => {
  switch (status) {
    case "Timeout": return "timeout"
    case "Comm": return "peer-lost"
    case "Invalid": case "Unsupported": return "invalid"
    default: return "device"
  }
}

/**
 * Whether a failure reported with this type and reason may be the loss of a peer seen from
 * the other side of a collective (the controller then blames the loss, not the reporter).
 */
export const mayBePeerLoss = (type: string, reason: string | undefined): boolean =>
  type === TAG && (reason === "timeout" || reason === "peer-lost" || reason === "rendezvous")
