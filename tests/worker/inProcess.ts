/**
 * One worker's command loop in this process: the real loop, handlers, cpu backend and
 * function table, one-member Gloo communicators, and the controller's side as a queue of
 * commands in and a list of reports out. Every call into a communicator is recorded (and
 * then made), so a test can say what a handler asked of the transport, not only what came
 * back: a rank that skips a collective, or posts a p2p op it should not, shows at once here,
 * where between processes it shows only as a peer waiting out its comm timeout.
 */
import { Cause, Effect, Fiber, Queue, References } from "effect"
import { Comm } from "../../ffi/comm.ts"
import { loadNative } from "../../ffi/native.ts"
import { Tensor } from "../../ffi/tensor.ts"
import { Communicators } from "../../src/comm/communicators.ts"
import type { ControllerMessage, WorkerMessage } from "../../src/protocol/messages.ts"
import { FunctionTable } from "../../src/worker/functions.ts"
import { makeDispatch } from "../../src/worker/handlers/index.ts"
import { runLoop } from "../../src/worker/loop.ts"
import { makeSession, type Session } from "../../src/worker/session.ts"
import { FIXTURES } from "./harness.ts"

export const native = loadNative("cpu")

/** A communicator call as the handler made it: the op, and the values of its input at the time. */
export interface CommCall {
  readonly op: string
  readonly input?: ReadonlyArray<number>
  readonly p2p?: ReadonlyArray<{ readonly kind: "send" | "recv"; readonly peer: number }>
}

const valuesOf = (t: Tensor): number[] => [...new Float32Array(t.toHost().data.slice().buffer)]

/** A connected one-member communicator whose collectives and p2p calls are recorded in `calls`. */
const recordingComm = (calls: CommCall[]): Comm => {
  const comm = Comm.create(native, 0, 1, 2000)
  comm.connect([new Uint8Array(0)])
  const allReduce = comm.allReduce.bind(comm), allGather = comm.allGather.bind(comm), p2p = comm.p2p.bind(comm)
  comm.allReduce = (out, input, op, s) => {
    calls.push({ op: "allReduce", input: valuesOf(input) })
    allReduce(out, input, op, s)
  }
  comm.allGather = (out, input, s) => {
    calls.push({ op: "allGather", input: valuesOf(input) })
    allGather(out, input, s)
  }
  comm.p2p = (ops, s) => {
    calls.push({ op: "p2p", p2p: ops.map((o) => ({ kind: o.kind, peer: o.peer })) })
    p2p(ops, s)
  }
  return comm
}

export interface InProcessWorker {
  /** What the worker sent the controller, in order. */
  readonly sent: ControllerMessage[]
  /** What its communicators were asked to do, in order. */
  readonly calls: CommCall[]
  /** Runs one command through a session's handlers to its end (no loop, no periodic Status). */
  readonly dispatch: (m: WorkerMessage) => Promise<void>
  /** The session `dispatch` runs in. */
  readonly session: Session
  close(): void
}

/** The handlers log each root failure at info; the reports themselves are what these tests read. */
const quiet = <A, E>(e: Effect.Effect<A, E>) => e.pipe(Effect.provideService(References.MinimumLogLevel, "Warn"))

const makeComms = (calls: CommCall[]): Communicators => new Communicators(recordingComm(calls), () => Effect.sync(() => recordingComm(calls)))

/** Rank 0 of a world of 1, its handlers driven one command at a time. */
export const inProcessWorker = (): InProcessWorker => {
  const sent: ControllerMessage[] = [], calls: CommCall[] = []
  const session = makeSession({ rank: 0, world: 1, native, comms: makeComms(calls), functions: new FunctionTable([FIXTURES]), send: (m) => void sent.push(m) })
  const run = makeDispatch(session)
  return {
    sent, calls, session,
    dispatch: (m) => Effect.runPromise(quiet(run(m))),
    close: () => session.comms.world.destroy(),
  }
}

export interface InProcessLoop {
  readonly sent: ControllerMessage[]
  readonly send: (...ms: WorkerMessage[]) => void
  /** The first report after those already seen that `pick` accepts, waiting up to `ms`; else fails saying `because`. */
  next<A>(pick: (m: ControllerMessage) => A | undefined, because: string, ms?: number): Promise<A>
  close(): Promise<void>
}

/** The real command loop (runLoop) of rank 0 of a world of 1, fed from a queue. */
export const inProcessLoop = (options: { readonly restartable: boolean }): InProcessLoop => {
  const sent: ControllerMessage[] = [], calls: CommCall[] = []
  const messages = Effect.runSync(Queue.unbounded<WorkerMessage, Cause.Done>())
  const comms = makeComms(calls)
  const fiber = Effect.runFork(quiet(runLoop({ messages, send: (m) => void sent.push(m), linkState: () => "open" }, { rank: 0, world: 1, native, comms, functions: new FunctionTable([FIXTURES]) }, options)))
  let seen = 0
  return {
    sent,
    send: (...ms) => { for (const m of ms) Queue.offerUnsafe(messages, m) },
    async next(pick, because, ms = 2000) {
      const deadline = performance.now() + ms
      while (true) {
        for (; seen < sent.length; seen++) {
          const a = pick(sent[seen]!)
          if (a !== undefined) {
            seen++
            return a
          }
        }
        if (performance.now() > deadline) throw new Error(`${because} (nothing matching within ${ms} ms; the worker sent ${sent.slice(-8).map((m) => m._tag).join(", ") || "nothing"})`)
        await Bun.sleep(1)
      }
    },
    async close() {
      await Effect.runPromise(Fiber.interrupt(fiber))
      comms.world.destroy()
    },
  }
}
