/**
 * The worker's link to its controller: a socket to the controller's address and the handshake
 * (src/net/handshake.ts: this worker's challenge, the controller's proof checked before
 * anything else is sent, then WorkerHello with this worker's proof), then commands in (onto
 * the loop's queue) and reports out. A frame that does not decode is answered with a
 * ProtocolError message and the link goes on; before the controller's proof nothing is
 * answered: a peer that does not prove the token gets no more than the challenge.
 */
import type { Socket } from "bun"
import { Cause, Data, Duration, Effect, Queue, Result, type Scope } from "effect"
import { Connection, parseAddress } from "../net/connection.ts"
import { MAX_HELLO_BYTES, newNonce, proof, proves, tcpChannel, unixChannel, type Transcript } from "../net/handshake.ts"
import { WorkerSegments } from "../net/shm.ts"
import { WorkerUploads } from "../net/uploads.ts"
import { decodeWorkerMessage } from "../protocol/codec.ts"
import { DEFAULT_MAX_FRAME_BYTES } from "../protocol/framing.ts"
import type { ControllerMessage, WorkerHello, WorkerMessage } from "../protocol/messages.ts"
import { ErrorPayload } from "../protocol/values.ts"
import type { DirectReads } from "./direct.ts"
import type { Inbox } from "./loop.ts"
import type { LinkState } from "./session.ts"

export class LinkError extends Data.TaggedError("LinkError")<{ readonly message: string }> {}

/** The peer at the controller's address did not prove it holds the job token: an impostor, or another job's controller. */
export class ControllerUnproven extends Data.TaggedError("ControllerUnproven")<{ readonly message: string }> {}

export interface ControllerLink extends Inbox {
  readonly close: () => void
  /** Whether the controller sent any command: it admitted this worker. */
  readonly commandsSeen: () => boolean
}

export interface LinkOptions {
  readonly address: string
  /** The job token the controller must prove it holds, and this worker proves with. */
  readonly token: string
  readonly hello: Omit<WorkerHello, "_tag" | "proof">
  readonly maxFrameBytes?: number
  /** How long the controller may take to send its proof (default 10 s). */
  readonly proofTimeoutMs?: number
  /** Called for each frame refused, after the ProtocolError reply went out. */
  readonly onInvalid?: (message: string) => void
  /** Called for a PeerLost as it arrives, ahead of the commands queued before it (which may be waiting for that rank). */
  readonly onPeerLost: (rank: number) => void
  /** Tensors to read large host tensors of commands into, straight from the socket (direct.ts). */
  readonly direct?: DirectReads
}

/** Whether a message is, or holds, an Exit. */
const holdsExit = (m: WorkerMessage): boolean => m._tag === "Exit" || (m._tag === "CommandGroup" && m.commands.some(holdsExit))

/**
 * Connects, passes the handshake, and feeds commands to `messages` until either side closes.
 * Fails with ControllerUnproven when the peer's proof is missing or wrong.
 */
export const connectController = (o: LinkOptions): Effect.Effect<ControllerLink, LinkError | ControllerUnproven, Scope.Scope> =>
  Effect.gen(function* () {
    const messages = yield* Queue.unbounded<WorkerMessage, Cause.Done>()
    const segments = new WorkerSegments()
    const uploads = new WorkerUploads((m) => send(m))
    let conn: Connection<WorkerMessage> | undefined
    let exitReceived = false, closed = false, commands = false
    /** Set when the controller's proof held: until then no message is taken as a command. */
    let proven = false
    const handshake = Promise.withResolvers<LinkError | ControllerUnproven | undefined>()
    const unproven = (why: string) => {
      handshake.resolve(new ControllerUnproven({ message: `the peer at ${o.address} ${why}: it is not this job's controller (an impostor named in the store, a relay, or another job's controller; or MONARCH_TOKEN differs)` }))
      conn?.close()
    }
    const target = yield* Effect.try({ try: () => parseAddress(o.address), catch: (e) => new LinkError({ message: (e as Error).message }) })
    yield* Effect.tryPromise({
      try: () =>
        Bun.connect<undefined>({
          ...target,
          socket: {
            binaryType: "uint8array",
            open(s: Socket<undefined>) {
              s.setNoDelay(true)
              const transcript: { -readonly [K in keyof Transcript]: Transcript[K] } = {
                rank: o.hello.rank, world: o.hello.world, workerNonce: newNonce(), controllerNonce: new Uint8Array(0),
                channel: "unix" in target ? unixChannel(target.unix) : tcpChannel(s.localAddress, s.localPort),
              }
              conn = new Connection<WorkerMessage>(s, {
                decode: decodeWorkerMessage,
                onMessage: (m) => {
                  if (!proven) {
                    if (m._tag !== "ControllerProof") return unproven(`sent ${m._tag} before proving it holds the job token`)
                    transcript.controllerNonce = m.nonce
                    if (!proves(m.proof, o.token, "controller", transcript)) return unproven("sent a proof that does not match the job token")
                    proven = true
                    conn!.reader.maxFrameBytes = o.maxFrameBytes ?? DEFAULT_MAX_FRAME_BYTES
                    conn!.send({ _tag: "WorkerHello", ...o.hello, proof: proof(o.token, "worker", transcript) })
                    return handshake.resolve(undefined)
                  }
                  commands = true
                  if (m._tag === "PeerLost") return o.onPeerLost(m.rank)
                  if (holdsExit(m)) exitReceived = true
                  Queue.offerUnsafe(messages, m)
                },
                onInvalid: (e) => {
                  if (!proven) return unproven(`sent an invalid frame before proving it holds the job token (${e.message})`)
                  conn?.send({ _tag: "ProtocolError", message: e.message })
                  o.onInvalid?.(e.message)
                },
                onClose: () => {
                  closed = true
                  segments.close()
                  uploads.close()
                  handshake.resolve(new LinkError({ message: `${o.address} closed the link before proving it holds the job token` }))
                  Queue.endUnsafe(messages)
                },
              }, MAX_HELLO_BYTES, o.direct === undefined ? undefined : (body, located) => (proven ? o.direct!.into(body, located) : undefined))
              conn.send({ _tag: "WorkerChallenge", rank: o.hello.rank, world: o.hello.world, nonce: transcript.workerNonce })
            },
            data: (_s, chunk) => conn?.receive(chunk),
            drain: () => conn?.drain(),
            close: () => conn?.closedByPeer(),
            error: () => conn?.closedByPeer(),
          },
        } as Parameters<typeof Bun.connect<undefined>>[0]),
      catch: (e) => new LinkError({ message: `cannot reach the controller at ${o.address}: ${(e as Error).message}` }),
    })
    yield* Effect.addFinalizer(() => Effect.sync(() => {
      conn?.close()
      segments.close()
      uploads.close()
    }))
    const send = (m: ControllerMessage) => {
      const sent = conn?.send(m)
      if (sent === undefined || Result.isSuccess(sent)) return
      // Only a value the wire cannot carry fails here; say so instead of dropping it. A fetch
      // fails with why, or the controller would see it passed without a result.
      const why = `worker could not encode ${m._tag}: ${sent.failure.message}`
      if (m._tag === "FetchResult") conn?.send({ _tag: "RemoteFunctionFailed", ident: m.ident, error: new ErrorPayload(sent.failure._tag, why, []) })
      else if (m._tag !== "ProtocolError") conn?.send({ _tag: "ProtocolError", message: why })
    }
    const proofTimeoutMs = o.proofTimeoutMs ?? 10_000
    const failed = yield* Effect.promise(() => handshake.promise).pipe(Effect.timeoutOrElse({
      duration: Duration.millis(proofTimeoutMs),
      orElse: () => Effect.succeed(new ControllerUnproven({ message: `the peer at ${o.address} sent no proof that it holds the job token within ${proofTimeoutMs} ms` })),
    }))
    if (failed !== undefined) return yield* failed
    const linkState = (): LinkState => (!closed ? "open" : exitReceived ? "ended" : "lost")
    const whenSent = (fn: () => void) => (conn === undefined ? fn() : conn.whenFlushed(fn))
    return { messages, send, linkState, whenSent, segments, uploads, ...(o.direct === undefined ? {} : { direct: o.direct }), close: () => conn?.close(), commandsSeen: () => commands }
  })
