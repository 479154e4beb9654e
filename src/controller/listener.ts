/**
 * The controller's end of the worker links: a listener (loopback TCP by default, or a Unix
 * socket) that admits a connection once it has passed the handshake (src/net/handshake.ts):
 * its WorkerChallenge answered with this controller's proof, its WorkerHello carrying the
 * worker's proof that it holds the job's token. Then it routes each worker's messages by rank.
 * A connection that fails is refused and reported. Until it is admitted a connection costs
 * little: its frames may be no longer than the handshake needs, and only so many such
 * connections are kept.
 */
import type { Socket } from "bun"
import { Context, Data, Effect, Layer, type Scope } from "effect"
import { Connection } from "../net/connection.ts"
import { MAX_HELLO_BYTES, newNonce, proof, proves, tcpChannel, unixChannel, type Transcript } from "../net/handshake.ts"
import { ControllerSegments, DEFAULT_SHARED_MIN_BYTES, SegmentRefused } from "../net/shm.ts"
import { ControllerUploads } from "../net/uploads.ts"
import { decodeControllerMessage } from "../protocol/codec.ts"
import { DEFAULT_MAX_FRAME_BYTES } from "../protocol/framing.ts"
import type { ControllerMessage, WorkerHello, WorkerMessage } from "../protocol/messages.ts"
import { ErrorPayload, HostTensor } from "../protocol/values.ts"

export class ListenError extends Data.TaggedError("ListenError")<{ readonly message: string }> {}

/** An admitted worker. */
export interface WorkerLink {
  readonly hello: WorkerHello
  /** The address the worker connected from ("local" over a Unix socket). */
  readonly host: string
  /** Encodes and sends; returns false when the link is closed or the message cannot be encoded. */
  readonly send: (msg: WorkerMessage) => boolean
  /** Sends a message already encoded (encodeMessageParts), e.g. one batch for several ranks. */
  readonly sendEncoded: (parts: ReadonlyArray<Uint8Array>) => boolean
  /** Sends a raw frame body (tests of bad input only). */
  readonly sendRawForTestsOnly: (body: Uint8Array) => void
  readonly close: () => void
  /** The upload segment this link's worker shares with the others of this host (src/net/uploads.ts); undefined for a link from another host, or with shared memory off. */
  readonly uploads?: ControllerUploads | undefined
}

export interface ListenerEvents {
  /** A connection passed the handshake; closing `link` before returning refuses it. */
  readonly onWorker: (link: WorkerLink) => void
  readonly onMessage: (rank: number, msg: ControllerMessage) => void
  /** A rank's link closed (after being admitted). */
  readonly onDisconnect: (rank: number) => void
  /** A frame from an admitted worker that did not decode, or a refused connection. */
  readonly onProblem: (problem: string) => void
  /**
   * A peer from `host` that holds another job token: a worker that closed the connection once
   * it had the controller's proof (which did not hold with its token), or a WorkerHello whose
   * proof does not hold. Refused, and reported to onProblem too. Workers retry, so one worker
   * started with another token comes back many times.
   */
  readonly onWrongToken?: (peer: { readonly rank: number; readonly pid?: number }, host: string) => void
}

export interface ListenOptions extends ListenerEvents {
  readonly token: string
  /** Default 127.0.0.1 on an ephemeral port. */
  readonly host?: string
  readonly port?: number
  /** Listen on a Unix socket instead. */
  readonly unix?: string
  /** The longest frame from an admitted worker (default DEFAULT_MAX_FRAME_BYTES). */
  readonly maxFrameBytes?: number
  /** The longest frame before a connection is admitted (default MAX_HELLO_BYTES). */
  readonly maxHelloBytes?: number
  /**
   * Connections kept open before they are admitted (default MAX_PENDING_CONNECTIONS); one more
   * closes the oldest, so a flood of silent connections cannot hold out a worker that says
   * hello at once.
   */
  readonly maxPendingConnections?: number
  /** A connection that has not finished the handshake this long after opening is closed (default 10 s). */
  readonly helloTimeoutMs?: number
  /** Whether the listener and its links alone keep this process running (default true); false: they let it exit once nothing else holds it. */
  readonly holdsProcess?: boolean
  /**
   * Shared memory with workers on this host (over a Unix socket or loopback): a fetched or
   * uploaded tensor of at least `minBytes` (default DEFAULT_SHARED_MIN_BYTES) moves through a
   * segment both keep mapped (src/net/shm.ts, src/net/uploads.ts); false: every byte goes by the
   * socket.
   */
  readonly sharedMemory?: false | { readonly minBytes?: number }
  /** Called with each admitted link's segments (tests and the bench count what went through them). */
  readonly onSegments?: (rank: number, segments: ControllerSegments) => void
  /** Called once with the upload segments of this listener's local links (tests and the bench count them). */
  readonly onUploads?: (uploads: ControllerUploads) => void
}

export { MAX_HELLO_BYTES } from "../net/handshake.ts"
export const MAX_PENDING_CONNECTIONS = 64

export interface Listener {
  /** "host:port" or "unix:/path": what workers connect to (CONTROLLER_ADDR). */
  readonly address: string
}

interface State {
  conn: Connection<ControllerMessage>
  link: WorkerLink | undefined
  /** Set once the WorkerChallenge came and this controller's proof went out. */
  transcript: Transcript | undefined
  /** Closes the connection unless the handshake ends in time. */
  helloTimer: ReturnType<typeof setTimeout> | undefined
  /** Set when this end closes it before the handshake ends (a close then is no token refusal). */
  refused: boolean
  /** The link's shared-memory segments, once admitted. */
  segments: ControllerSegments | undefined
}

/** Whether process `pid` (a local worker's, from its hello) still runs. */
const alive = (pid: number): boolean => {
  try {
    process.kill(pid, 0)
    return true
  } catch (e) {
    return (e as NodeJS.ErrnoException).code === "EPERM"
  }
}

/** Loopback addresses, as a TCP socket's remoteAddress gives them: peers on this host. */
const LOOPBACK = new Set(["127.0.0.1", "::1", "::ffff:127.0.0.1"])

export const listen = (o: ListenOptions): Effect.Effect<Listener, ListenError, Scope.Scope> =>
  Effect.gen(function* () {
    const host = o.host ?? "127.0.0.1"
    const helloTimeoutMs = o.helloTimeoutMs ?? 10_000
    const maxPending = o.maxPendingConnections ?? MAX_PENDING_CONNECTIONS
    /** Connections not admitted yet, oldest first. */
    const pending = new Set<State>()
    const minBytes = o.sharedMemory === false ? undefined : o.sharedMemory?.minBytes ?? DEFAULT_SHARED_MIN_BYTES
    const uploads = minBytes === undefined ? undefined : new ControllerUploads(minBytes)
    if (uploads !== undefined) {
      o.onUploads?.(uploads)
      yield* Effect.addFinalizer(() => Effect.sync(() => uploads.close()))
    }
    const open = (socket: Socket<State>) => {
      socket.setNoDelay?.(true)
      if (o.holdsProcess === false) socket.unref()
      if (pending.size >= maxPending) {
        const oldest = pending.values().next().value!
        pending.delete(oldest)
        o.onProblem(`closed the oldest of ${maxPending} connections that had not finished the handshake, to take a new one`)
        oldest.refused = true
        oldest.conn.close()
      }
      const state: State = {
        link: undefined,
        transcript: undefined,
        helloTimer: undefined,
        refused: false,
        segments: undefined,
        conn: new Connection<ControllerMessage>(socket as Socket<unknown>, {
          decode: decodeControllerMessage,
          onMessage: (msg) => {
            if (state.link) return state.segments === undefined ? o.onMessage(state.link.hello.rank, msg) : shared(state.link, state.segments, msg)
            const refuse = (why: string) => {
              state.refused = true
              clearTimeout(state.helloTimer)
              pending.delete(state)
              o.onProblem(`refused a connection ${why}`)
              state.conn.close()
            }
            const t = state.transcript
            if (t === undefined) {
              if (msg._tag !== "WorkerChallenge") return refuse(`whose first message was ${msg._tag}, not a WorkerChallenge`)
              const channel = o.unix !== undefined ? unixChannel(o.unix) : tcpChannel(socket.remoteAddress, socket.remotePort)
              const transcript: Transcript = { rank: msg.rank, world: msg.world, channel, workerNonce: msg.nonce, controllerNonce: newNonce() }
              state.transcript = transcript
              state.conn.send({ _tag: "ControllerProof", nonce: transcript.controllerNonce, proof: proof(o.token, "controller", transcript) })
              return
            }
            if (msg._tag !== "WorkerHello") return refuse(`that answered the controller's proof with ${msg._tag}, not a WorkerHello`)
            if (msg.rank !== t.rank || msg.world !== t.world) return refuse(`whose WorkerHello (rank ${msg.rank} of ${msg.world}) is not its challenge's (rank ${t.rank} of ${t.world})`)
            if (!proves(msg.proof, o.token, "worker", t)) {
              o.onWrongToken?.({ rank: msg.rank, pid: msg.pid }, socket.remoteAddress || "local")
              return refuse("whose WorkerHello did not prove it holds the job token")
            }
            clearTimeout(state.helloTimer)
            pending.delete(state)
            const local = o.unix !== undefined || LOOPBACK.has(socket.remoteAddress)
            const link: WorkerLink = {
              hello: msg,
              host: socket.remoteAddress || "local",
              send: (m) => !state.conn.closed && state.conn.send(m)._tag === "Success",
              sendEncoded: (parts) => !state.conn.closed && (state.conn.writer.write(parts), true),
              sendRawForTestsOnly: (body) => void state.conn.writer.write(body),
              close: () => state.conn.close(),
              uploads: local ? uploads : undefined,
            }
            o.onWorker(link)
            // A link onWorker closed at once was refused (its rank is taken, say): it never
            // speaks for that rank, and its close (reported during close()) is no disconnect.
            if (state.conn.closed) return
            state.link = link
            state.conn.reader.maxFrameBytes = o.maxFrameBytes ?? DEFAULT_MAX_FRAME_BYTES
            state.segments = new ControllerSegments(local ? minBytes : undefined)
            o.onSegments?.(msg.rank, state.segments)
            if (local) uploads?.attach(msg.rank, link.send)
          },
          onInvalid: (e) => {
            if (!state.link) {
              o.onProblem(`refused a connection that sent an invalid frame before its handshake ended: ${e.message}`)
              state.refused = true
              return state.conn.close()
            }
            o.onProblem(`rank ${state.link.hello.rank} sent an invalid frame: ${e.message}`)
          },
          onClose: () => {
            state.segments?.close()
            if (state.link !== undefined) state.link.uploads?.detach(state.link.hello.rank)
            clearTimeout(state.helloTimer)
            pending.delete(state)
            if (state.link) o.onDisconnect(state.link.hello.rank)
            // A worker closes after the controller's proof when that proof fails with its token.
            else if (state.transcript !== undefined && !state.refused) {
              o.onProblem(`a worker claiming rank ${state.transcript.rank} closed the connection on the controller's proof: it holds another job token`)
              o.onWrongToken?.({ rank: state.transcript.rank }, socket.remoteAddress || "local")
            }
          },
        }, o.maxHelloBytes ?? MAX_HELLO_BYTES),
      }
      socket.data = state
      pending.add(state)
      // A connection that never finishes the handshake would otherwise hold its socket for good.
      state.helloTimer = setTimeout(() => {
        if (state.link !== undefined || state.conn.closed) return
        o.onProblem(`refused a connection that did not finish the handshake within ${helloTimeoutMs} ms`)
        state.refused = true
        state.conn.close()
      }, helloTimeoutMs)
      state.helloTimer.unref?.()
    }
    /**
     * A link's shared-memory messages: the answer to an offer; a FetchShared copied out and
     * passed on as the FetchResult it stands for (or the fetch's failure, when it does not check
     * out); a large tensor fetched over the socket makes an offer of a segment that fits it.
     */
    const shared = (link: WorkerLink, segments: ControllerSegments, msg: ControllerMessage) => {
      const rank = link.hello.rank
      if (msg._tag === "SegmentMapped") {
        if (link.uploads?.mapped(rank, msg.segment, msg.problem)) return
        try {
          segments.mapped(msg.segment, msg.problem)
        } catch (e) {
          o.onProblem(`rank ${rank}: ${(e as SegmentRefused).message}`)
        }
        return
      }
      if (msg._tag === "UploadTaken") {
        try {
          if (link.uploads === undefined) throw new SegmentRefused({ message: `UploadTaken for upload segment ${msg.segment}: this link was offered none` })
          link.uploads.taken(rank, msg.segment, msg.offsets)
        } catch (e) {
          o.onProblem(`rank ${rank}: ${(e as SegmentRefused).message}`)
        }
        return
      }
      if (msg._tag === "FetchShared") {
        let value: HostTensor | undefined
        try {
          value = segments.take(msg.segment, msg.dtype, msg.shape, () => alive(link.hello.pid))
        } catch (e) {
          const why = e instanceof SegmentRefused ? e.message : String(e)
          o.onProblem(`rank ${rank}: ${why}`)
          return o.onMessage(rank, { _tag: "RemoteFunctionFailed", ident: msg.ident, error: new ErrorPayload("SegmentRefused", why, []) })
        }
        // Not written (the worker reports why) or its process is gone (its link's close says so).
        if (value === undefined) return
        link.send({ _tag: "SegmentFree", segment: msg.segment })
        return o.onMessage(rank, { _tag: "FetchResult", ident: msg.ident, value })
      }
      o.onMessage(rank, msg)
      if (msg._tag === "FetchResult" && msg.value instanceof HostTensor) {
        const offer = segments.offerFor(msg.value.data.byteLength)
        if (offer !== undefined) link.send({ _tag: "SharedSegment", ...offer })
      }
    }
    const handlers = {
      binaryType: "uint8array" as const,
      open,
      data: (s: Socket<State>, chunk: Uint8Array) => s.data.conn.receive(chunk),
      drain: (s: Socket<State>) => s.data.conn.drain(),
      close: (s: Socket<State>) => s.data?.conn.closedByPeer(),
      error: (s: Socket<State>) => s.data?.conn.closedByPeer(),
    }
    const server = yield* Effect.acquireRelease(
      Effect.try({
        try: () => o.unix !== undefined
          ? Bun.listen<State>({ unix: o.unix, socket: handlers })
          : Bun.listen<State>({ hostname: host, port: o.port ?? 0, socket: handlers }),
        catch: (e) => new ListenError({ message: `cannot listen on ${o.unix ?? `${host}:${o.port ?? 0}`}: ${(e as Error).message}` }),
      }),
      (s) => Effect.sync(() => s.stop(true)),
    )
    if (o.holdsProcess === false) server.unref()
    return { address: o.unix === undefined ? `${host}:${(server as { port: number }).port}` : `unix:${o.unix}` }
  })

/**
 * The controller's side of the worker links as a service: `Controller.local` and `attach`
 * take it from the context, so a program can provide another transport.
 */
export class Transport extends Context.Service<Transport, {
  readonly listen: (options: ListenOptions) => Effect.Effect<Listener, ListenError, Scope.Scope>
}>()("monarch/Transport") {
  /** TCP (loopback unless told otherwise) or a Unix socket, through `listen`. */
  static readonly layer = Layer.succeed(Transport, { listen })
}
