/**
 * The worker's link to its controller: a socket to the controller's address, WorkerHello
 * first, then commands in (onto the loop's queue) and reports out. A frame that does not
 * decode is answered with a ProtocolError message and the link goes on.
 */
import type { Socket } from "bun"
import { Cause, Data, Effect, Queue, Result, type Scope } from "effect"
import { Connection, parseAddress } from "../net/connection.ts"
import { decodeWorkerMessage } from "../protocol/codec.ts"
import type { ControllerMessage, WorkerHello, WorkerMessage } from "../protocol/messages.ts"
import { ErrorPayload } from "../protocol/values.ts"
import type { Inbox } from "./loop.ts"
import type { LinkState } from "./session.ts"

export class LinkError extends Data.TaggedError("LinkError")<{ readonly message: string }> {}

export interface ControllerLink extends Inbox {
  readonly close: () => void
  /** Whether the controller sent any command: it admitted this worker. */
  readonly commandsSeen: () => boolean
}

export interface LinkOptions {
  readonly address: string
  readonly hello: Omit<WorkerHello, "_tag">
  readonly maxFrameBytes?: number
  /** Called for each frame refused, after the ProtocolError reply went out. */
  readonly onInvalid?: (message: string) => void
  /** Called for a PeerLost as it arrives, ahead of the commands queued before it (which may be waiting for that rank). */
  readonly onPeerLost: (rank: number) => void
}

/** Whether a message is, or holds, an Exit. */
const holdsExit = (m: WorkerMessage): boolean => m._tag === "Exit" || (m._tag === "CommandGroup" && m.commands.some(holdsExit))

/** Connects, introduces the worker, and feeds commands to `messages` until either side closes. */
export const connectController = (o: LinkOptions): Effect.Effect<ControllerLink, LinkError, Scope.Scope> =>
  Effect.gen(function* () {
    const messages = yield* Queue.unbounded<WorkerMessage, Cause.Done>()
    let conn: Connection<WorkerMessage> | undefined
    let exitReceived = false, closed = false, commands = false
    const target = yield* Effect.try({ try: () => parseAddress(o.address), catch: (e) => new LinkError({ message: (e as Error).message }) })
    yield* Effect.tryPromise({
      try: () =>
        Bun.connect<undefined>({
          ...target,
          socket: {
            binaryType: "uint8array",
            open(s: Socket<undefined>) {
              s.setNoDelay(true)
              conn = new Connection<WorkerMessage>(s, {
                decode: decodeWorkerMessage,
                onMessage: (m) => {
                  commands = true
                  if (m._tag === "PeerLost") return o.onPeerLost(m.rank)
                  if (holdsExit(m)) exitReceived = true
                  Queue.offerUnsafe(messages, m)
                },
                onInvalid: (e) => {
                  conn?.send({ _tag: "ProtocolError", message: e.message })
                  o.onInvalid?.(e.message)
                },
                onClose: () => {
                  closed = true
                  Queue.endUnsafe(messages)
                },
              }, o.maxFrameBytes)
            },
            data: (_s, chunk) => conn?.receive(chunk),
            drain: () => conn?.drain(),
            close: () => conn?.closedByPeer(),
            error: () => conn?.closedByPeer(),
          },
        } as Parameters<typeof Bun.connect<undefined>>[0]),
      catch: (e) => new LinkError({ message: `cannot reach the controller at ${o.address}: ${(e as Error).message}` }),
    })
    yield* Effect.addFinalizer(() => Effect.sync(() => conn?.close()))
    const send = (m: ControllerMessage) => {
      const sent = conn?.send(m)
      if (sent === undefined || Result.isSuccess(sent)) return
      // Only a value the wire cannot carry fails here; say so instead of dropping it. A fetch
      // fails with why, or the controller would see it passed without a result.
      const why = `worker could not encode ${m._tag}: ${sent.failure.message}`
      if (m._tag === "FetchResult") conn?.send({ _tag: "RemoteFunctionFailed", ident: m.ident, error: new ErrorPayload(sent.failure._tag, why, []) })
      else if (m._tag !== "ProtocolError") conn?.send({ _tag: "ProtocolError", message: why })
    }
    send({ _tag: "WorkerHello", ...o.hello })
    const linkState = (): LinkState => (!closed ? "open" : exitReceived ? "ended" : "lost")
    return { messages, send, linkState, close: () => conn?.close(), commandsSeen: () => commands }
  })
