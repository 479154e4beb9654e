/**
 * The command loop: takes the controller's messages in order and runs each through the
 * session's handler table, sends Status every second when it advanced, and on Exit either
 * ends or (restartable mode) starts a fresh session and sends Restarted. When the link
 * closes it takes no more commands: what is queued is dropped once the running one ends.
 */
import { Cause, Effect, Queue, References, Schedule } from "effect"
import type { ControllerMessage, WorkerMessage } from "../protocol/messages.ts"
import type { WorkerSegments } from "../net/shm.ts"
import type { WorkerUploads } from "../net/uploads.ts"
import type { DirectReads } from "./direct.ts"
import type { TraceWriter } from "../trace/writer.ts"
import { makeDispatch } from "./handlers/index.ts"
import { IDLE_WAIT_US } from "./inflight.ts"
import { closeSession, ioTurn, makeSession, sendStatus, type LinkState, type Session } from "./session.ts"

/** What the loop needs of the link to the controller. */
export interface Inbox {
  /** Valid commands in arrival order; ends (Cause.Done) when the controller goes away. */
  readonly messages: Queue.Dequeue<WorkerMessage, Cause.Done>
  readonly send: (msg: ControllerMessage) => void
  readonly linkState: () => LinkState
  /** Calls `fn` once what was sent so far has left the process (default: at once). */
  readonly whenSent?: (fn: () => void) => void
  /** The link's shared-memory segments, when it takes any. */
  readonly segments?: WorkerSegments
  /** The controller's upload segment as the link maps it, when it takes shared memory. */
  readonly uploads?: WorkerUploads
  /** The tensors the link reads frames' host tensors into. */
  readonly direct?: DirectReads
}

export type SessionDeps = Omit<Parameters<typeof makeSession>[0], "send" | "linkState" | "whenSent" | "segments" | "uploads" | "direct">

/**
 * How the loop ended: an Exit command (also one received before the link closed, when not
 * restartable), or the controller going away.
 */
export type LoopEnd = "exit" | "disconnected"

export const runLoop = (inbox: Inbox, deps: SessionDeps, options: { readonly restartable: boolean; readonly trace?: TraceWriter }): Effect.Effect<LoopEnd> =>
  Effect.gen(function* () {
    // Checked once: a disabled logDebug per command still costs an effect step.
    const level = yield* References.MinimumLogLevel
    const debug = level === "Debug" || level === "Trace"
    let restarts = 0
    const fresh = () => makeSession({ ...deps, send: inbox.send, linkState: inbox.linkState, ...(inbox.whenSent ? { whenSent: inbox.whenSent } : {}), segments: inbox.segments, uploads: inbox.uploads, direct: inbox.direct })
    let session: Session = fresh()
    let dispatch = makeDispatch(session, debug, options.trace)
    const closed = (): LoopEnd => {
      closeSession(session)
      return inbox.linkState() === "ended" && !options.restartable ? "exit" : "disconnected"
    }
    yield* Effect.forkChild(Effect.sync(() => sendStatus(session)).pipe(Effect.repeat(Schedule.spaced("1 second"))))
    while (true) {
      // Collectives in flight and no command to run: settle them as they end, looking at the link between waits.
      if (session.inflight.size > 0 && (yield* Queue.size(inbox.messages)) === 0) {
        const rest = session.inflight.settleDone(IDLE_WAIT_US)
        if (rest) yield* rest
        if (session.inflight.size === 0) sendStatus(session)
        yield* Effect.promise(() => new Promise<void>((resume) => setTimeout(resume, 0)))
        if (inbox.linkState() !== "open") return closed()
        continue
      }
      const batch = yield* Queue.takeAll(inbox.messages).pipe(Effect.catchCause(() => Effect.succeed(null)))
      if (batch === null || inbox.linkState() !== "open") return closed()
      for (const m of batch) {
        yield* dispatch(m)
        if (session.exiting) {
          sendStatus(session)
          closeSession(session)
          if (!options.restartable) return "exit"
          session = fresh()
          dispatch = makeDispatch(session, debug, options.trace)
          inbox.send({ _tag: "Restarted", restarts: ++restarts })
        }
        const turn = ioTurn(session)
        if (turn) yield* turn
        if (inbox.linkState() !== "open") return closed()
      }
    }
  })
