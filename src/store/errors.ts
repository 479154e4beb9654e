/**
 * Failures of the TCPStore client and server. `StoreTimeout` is a wait (or blocking get) that ran
 * out of time; everything else is a `StoreError` whose `reason` says which part failed, so a
 * caller can catch the whole family or match one reason. Both are schema-backed, so a worker can
 * forward them to the controller unchanged.
 */
import { Schema } from "effect"

/** A WAIT (or the WAIT of a blocking get) saw its keys missing for the whole timeout. */
export class StoreTimeout extends Schema.TaggedError<StoreTimeout>()("StoreTimeout", {
  /** The keys waited for, as sent on the wire (prefixes applied, with the leading "/"). */
  keys: Schema.Array(Schema.String),
  timeoutMs: Schema.Number,
}) {
  override get message() {
    return `store wait timed out after ${this.timeoutMs} ms, keys: ${this.keys.join(", ")}`
  }
}

/**
 * Why a store operation failed:
 * - `Connect`: no connection (or no handshake) to the server within the connect timeout.
 * - `ConnectionLost`: the server closed or reset the connection while a request was in flight
 *   (the server also closes on a GET of a missing key, like torch's own servers).
 * - `Protocol`: the server answered something the protocol does not allow.
 * - `Unsupported`: the operation does not exist in the dialect the server speaks.
 * - `Listen`: the server could not bind its address.
 * - `Thread`: the server thread failed to start or stop.
 */
export const StoreErrorReason = Schema.Literals([
  "Connect",
  "ConnectionLost",
  "Protocol",
  "Unsupported",
  "Listen",
  "Thread",
])
export type StoreErrorReason = typeof StoreErrorReason.Type

export class StoreError extends Schema.TaggedError<StoreError>()("StoreError", {
  reason: StoreErrorReason,
  /** What was being done and what went wrong, with the address involved. */
  detail: Schema.String,
}) {
  override get message() {
    return `store ${this.reason}: ${this.detail}`
  }
}
