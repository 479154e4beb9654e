/**
 * The controller's end of the worker links: a listener (loopback TCP by default, or a Unix
 * socket) that admits a connection once its first message is a WorkerHello carrying the
 * job's token, and then routes each worker's messages by rank. A connection without the
 * token is refused and reported. Until it is admitted a connection costs little: its first
 * frame may be no longer than a hello needs, and only so many such connections are kept.
 */
import type { Socket } from "bun"
import { Context, Data, Effect, Layer, type Scope } from "effect"
import { timingSafeEqual } from "node:crypto"
import { Connection } from "../net/connection.ts"
import { decodeControllerMessage } from "../protocol/codec.ts"
import { DEFAULT_MAX_FRAME_BYTES } from "../protocol/framing.ts"
import type { ControllerMessage, WorkerHello, WorkerMessage } from "../protocol/messages.ts"

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
}

export interface ListenerEvents {
  /** A connection with the token said hello; closing `link` before returning refuses it. */
  readonly onWorker: (link: WorkerLink) => void
  readonly onMessage: (rank: number, msg: ControllerMessage) => void
  /** A rank's link closed (after being admitted). */
  readonly onDisconnect: (rank: number) => void
  /** A frame from an admitted worker that did not decode, or a refused connection. */
  readonly onProblem: (problem: string) => void
  /**
   * A WorkerHello without the job's token, from `host`: refused, and reported to onProblem too.
   * Workers retry, so one worker started with another token comes back many times.
   */
  readonly onWrongToken?: (hello: WorkerHello, host: string) => void
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
  /** The longest first frame, before a connection is admitted (default MAX_HELLO_BYTES). */
  readonly maxHelloBytes?: number
  /**
   * Connections kept open before they are admitted (default MAX_PENDING_CONNECTIONS); one more
   * closes the oldest, so a flood of silent connections cannot hold out a worker that says
   * hello at once.
   */
  readonly maxPendingConnections?: number
  /** A connection that sends no whole message this long after opening is closed (default 10 s). */
  readonly helloTimeoutMs?: number
  /** Whether the listener and its links alone keep this process running (default true); false: they let it exit once nothing else holds it. */
  readonly holdsProcess?: boolean
}

/** A WorkerHello is well under 100 bytes with a 32-character token; MONARCH_TOKEN may be up to 1 KiB. */
export const MAX_HELLO_BYTES = 4096
export const MAX_PENDING_CONNECTIONS = 64

export interface Listener {
  /** "host:port" or "unix:/path": what workers connect to (CONTROLLER_ADDR). */
  readonly address: string
}

/** Compares tokens in time that does not depend on where they first differ. */
const sameToken = (given: string, token: string): boolean => {
  const a = Buffer.from(given), b = Buffer.from(token)
  return a.length === b.length && timingSafeEqual(a, b)
}

interface State {
  conn: Connection<ControllerMessage>
  link: WorkerLink | undefined
  /** Closes the connection unless its first message comes in time. */
  helloTimer: ReturnType<typeof setTimeout> | undefined
}

export const listen = (o: ListenOptions): Effect.Effect<Listener, ListenError, Scope.Scope> =>
  Effect.gen(function* () {
    const host = o.host ?? "127.0.0.1"
    const helloTimeoutMs = o.helloTimeoutMs ?? 10_000
    const maxPending = o.maxPendingConnections ?? MAX_PENDING_CONNECTIONS
    /** Connections not admitted yet, oldest first. */
    const pending = new Set<State>()
    const open = (socket: Socket<State>) => {
      socket.setNoDelay?.(true)
      if (o.holdsProcess === false) socket.unref()
      if (pending.size >= maxPending) {
        const oldest = pending.values().next().value!
        pending.delete(oldest)
        o.onProblem(`closed the oldest of ${maxPending} connections that had not said hello, to take a new one`)
        oldest.conn.close()
      }
      const state: State = {
        link: undefined,
        helloTimer: undefined,
        conn: new Connection<ControllerMessage>(socket as Socket<unknown>, {
          decode: decodeControllerMessage,
          onMessage: (msg) => {
            if (state.link) return o.onMessage(state.link.hello.rank, msg)
            clearTimeout(state.helloTimer)
            pending.delete(state)
            if (msg._tag !== "WorkerHello" || !sameToken(msg.token, o.token)) {
              o.onProblem(`refused a connection whose first message was ${msg._tag === "WorkerHello" ? "a WorkerHello with the wrong token" : msg._tag}`)
              if (msg._tag === "WorkerHello") o.onWrongToken?.(msg, socket.remoteAddress || "local")
              return state.conn.close()
            }
            const link: WorkerLink = {
              hello: msg,
              host: socket.remoteAddress || "local",
              send: (m) => !state.conn.closed && state.conn.send(m)._tag === "Success",
              sendEncoded: (parts) => !state.conn.closed && (state.conn.writer.write(parts), true),
              sendRawForTestsOnly: (body) => void state.conn.writer.write(body),
              close: () => state.conn.close(),
            }
            o.onWorker(link)
            // A link onWorker closed at once was refused (its rank is taken, say): it never
            // speaks for that rank, and its close (reported during close()) is no disconnect.
            if (state.conn.closed) return
            state.link = link
            state.conn.reader.maxFrameBytes = o.maxFrameBytes ?? DEFAULT_MAX_FRAME_BYTES
          },
          onInvalid: (e) => {
            if (!state.link) {
              o.onProblem(`refused a connection that sent an invalid first frame: ${e.message}`)
              return state.conn.close()
            }
            o.onProblem(`rank ${state.link.hello.rank} sent an invalid frame: ${e.message}`)
          },
          onClose: () => {
            clearTimeout(state.helloTimer)
            pending.delete(state)
            if (state.link) o.onDisconnect(state.link.hello.rank)
          },
        }, o.maxHelloBytes ?? MAX_HELLO_BYTES),
      }
      socket.data = state
      pending.add(state)
      // A connection that never speaks would otherwise hold its socket for good.
      state.helloTimer = setTimeout(() => {
        if (state.link !== undefined || state.conn.closed) return
        o.onProblem(`refused a connection that sent no message within ${helloTimeoutMs} ms`)
        state.conn.close()
      }, helloTimeoutMs)
      state.helloTimer.unref?.()
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
