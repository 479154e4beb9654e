/**
 * The proofs of a worker link's handshake (docs/protocol.md §5): the worker and the controller
 * each show they hold the job token without sending it, as SSH and SCRAM do.
 *
 *   worker -> controller   WorkerChallenge(rank, world, workerNonce)
 *   controller -> worker   ControllerProof(controllerNonce, proof("controller"))
 *   worker -> controller   WorkerHello(rank, world, pid, proof("worker"), device)
 *
 * A proof is HMAC-SHA256 keyed by the token over the transcript: both nonces (fresh on each
 * side, so no proof can be replayed), the role (so neither side's proof can be reflected back
 * as the other's), the rank and world, and the worker's end of the connection as each side sees
 * it. That last binds the proofs to one connection: a relay (a stranger who names itself in the
 * store and passes the worker's messages to the real controller over a connection of its own)
 * reaches the controller from another endpoint, so the controller's proof does not hold for the
 * worker and the worker's not for the controller. The worker checks the controller's proof
 * before it sends anything but its challenge.
 */
import { encode } from "@msgpack/msgpack"
import { createHmac, randomBytes, timingSafeEqual } from "node:crypto"
import { resolve } from "node:path"
import { NONCE_BYTES } from "../protocol/messages.ts"

/** Who a proof speaks for. */
export type Role = "controller" | "worker"

/** What both proofs are over. */
export interface Transcript {
  readonly rank: number
  readonly world: number
  /** The worker's end of the connection (tcpChannel, unixChannel). */
  readonly channel: string
  readonly workerNonce: Uint8Array
  readonly controllerNonce: Uint8Array
}

/** The longest frame either end takes before the handshake ends: its messages are each well under 200 bytes. */
export const MAX_HELLO_BYTES = 4096

/** Names this version of the handshake inside every MAC, so no other use of the token shares one. */
const LABEL = "monarch worker link handshake v1"

export const newNonce = (): Uint8Array => new Uint8Array(randomBytes(NONCE_BYTES))

/** `role`'s proof over the transcript (msgpack of its parts, so no two transcripts encode alike). */
export const proof = (token: string, role: Role, t: Transcript): Uint8Array =>
  new Uint8Array(createHmac("sha256", token).update(encode([LABEL, role, t.rank, t.world, t.channel, t.workerNonce, t.controllerNonce])).digest())

/** Whether `given` is `role`'s proof, compared in time that does not depend on where it differs. */
export const proves = (given: Uint8Array, token: string, role: Role, t: Transcript): boolean => {
  const want = proof(token, role, t)
  return given.byteLength === want.byteLength && timingSafeEqual(given, want)
}

/** The worker's end of a TCP connection; an IPv4 address mapped into IPv6 is written as IPv4, as the other end may see it. */
export const tcpChannel = (address: string, port: number): string => `tcp:${address.replace(/^::ffff:(\d+\.\d+\.\d+\.\d+)$/, "$1")}:${port}`

/** A Unix socket connection, named by the socket's path (absolute). */
export const unixChannel = (path: string): string => `unix:${resolve(path)}`
