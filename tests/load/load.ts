/**
 * The load check: a steady stream of cheap in-place commands on each rank's counter (command
 * i negates it when i is even and adds i when i is odd) to every worker of a local world
 * through the controller library, with a fixed number of fetches of the counter always in
 * flight. The steps do not commute, and every fetch knows exactly what it must see (the
 * controller follows the same steps as sign * start + offset), so a lost, repeated or
 * swapped command, or a value from the wrong rank, shows as a wrong value; fetches must also
 * complete in the order they were issued. RSS and CPU time of the controller and of every
 * worker are read from /proc after a warm-up and then at even steps to the end.
 */
import { readFileSync } from "node:fs"
import { Effect, Fiber, type Layer, ManagedRuntime } from "effect"
import { Controller, type HostTensor } from "../../src/controller/index.ts"
import { COUNTER_STRIDE, SETTLE_MS } from "./fixtures.ts"

const ROOT = new URL("../..", import.meta.url).pathname
const CLOCK_TICKS = 100

export interface LoadOptions {
  readonly world: number
  /** Commands each worker receives (each command goes to every rank of the mesh). */
  readonly commandsPerWorker: number
  /** Commands between two fetches. */
  readonly fetchEvery: number
  /** Fetches kept in flight while commands are issued. */
  readonly inFlight: number
  /** Commands issued before the first reading (not counted in the rates). */
  readonly warmupCommands: number
  /** Readings after the warm-up, evenly spread over the rest (at least 1: the end). */
  readonly readings: number
}

/** What /proc says about every process at one point: bytes resident, CPU seconds. */
export interface Reading {
  readonly at: number
  readonly rss: { readonly controller: number; readonly workers: ReadonlyArray<number> }
  readonly cpu: { readonly controller: number; readonly workers: ReadonlyArray<number> }
}

export interface LoadResult {
  readonly commands: number
  readonly fetches: number
  /** Fetches whose value was not the one expected, and the first few described. */
  readonly wrongValues: number
  readonly wrongExamples: ReadonlyArray<string>
  /** Fetches that completed before one issued earlier. */
  readonly outOfOrder: number
  /** The fewest fetches in flight while commands were issued after the warm-up, once the pipeline had filled. */
  readonly minInFlight: number
  /** The reading after the warm-up, then `readings` more, the last at the end. */
  readonly readings: ReadonlyArray<Reading>
  /** Commands per second after the warm-up (pauses for readings left out), each worker's copy counted (all workers together). */
  readonly commandsPerSecond: number
  /**
   * CPU time per command after the warm-up, in microseconds: the controller's per command
   * issued, a worker's per command run (the readings' forced collections included).
   */
  readonly controllerMicrosPerCommand: number
  readonly workerMicrosPerCommand: number
  /** Frames the controller sent per worker and commands per frame (batching). */
  readonly commandsPerFrame: number
  /** Worker ProtocolErrors and the like reported to the controller. */
  readonly problems: ReadonlyArray<string>
}

const procStatus = (pid: number | "self", field: string): number => {
  const line = readFileSync(`/proc/${pid}/status`, "utf8").split("\n").find((l) => l.startsWith(`${field}:`))
  if (!line) throw new Error(`no ${field} in /proc/${pid}/status`)
  return Number(line.split(/\s+/)[1])
}

/** VmRSS of a process in bytes. */
export const rssOf = (pid: number | "self"): number => procStatus(pid, "VmRSS") * 1024

/** User plus system CPU seconds of a process. */
export const cpuOf = (pid: number | "self"): number => {
  const stat = readFileSync(`/proc/${pid}/stat`, "utf8")
  // The fields after the command name (which may hold spaces) start at state, field 3.
  const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ")
  return (Number(fields[11]) + Number(fields[12])) / CLOCK_TICKS
}

interface Answer {
  readonly seq: number
  readonly rank: number
  readonly expected: number
  readonly got: number
}

const program = (o: LoadOptions) =>
  Effect.gen(function* () {
    const ctl = yield* Controller
    const mesh = yield* ctl.mesh({ all: o.world })
    /** Settles every process's heap first (workers collect garbage and settle before answering). */
    const read = Effect.gen(function* () {
      const pids = (yield* mesh.fetchAll(null, { fn: "tests/load/fixtures:settledPid" })).map(Number)
      Bun.gc(true)
      yield* Effect.sleep(SETTLE_MS)
      return {
        at: performance.now(),
        rss: { controller: rssOf("self"), workers: pids.map(rssOf) },
        cpu: { controller: cpuOf("self"), workers: pids.map(cpuOf) },
      } satisfies Reading
    })
    const counter = yield* mesh.call("tests/load/fixtures:counter", [], {}, { results: [{ dtype: "f64", shape: [1] }] })

    let issued = 0, fetches = 0, answered = 0, wrongValues = 0, outOfOrder = 0
    // Every counter is sign * (its start) + offset after the commands issued so far.
    let sign = 1, offset = 0
    let minInFlight = Number.POSITIVE_INFINITY
    const wrongExamples: string[] = []
    const inFlight: Array<Fiber.Fiber<Answer, unknown>> = []
    const check = (a: Answer) => {
      if (a.seq !== answered) outOfOrder++
      answered = a.seq + 1
      if (a.got === a.expected) return
      wrongValues++
      if (wrongExamples.length < 5) wrongExamples.push(`fetch ${a.seq} from rank ${a.rank}: expected ${a.expected}, got ${a.got}`)
    }
    // The fiber starts at once, so the fetch is issued right after the first `issued` commands.
    const issueFetch = Effect.suspend(() => {
      const seq = fetches++, rank = seq % o.world, expected = sign * rank * COUNTER_STRIDE + offset
      return mesh.fetch(counter, rank).pipe(
        Effect.map((v): Answer => ({ seq, rank, expected, got: Number((v as HostTensor).toArray()[0]) })),
        Effect.forkChild({ startImmediately: true }),
      )
    })
    const answerOldest = Effect.suspend(() => Fiber.join(inFlight.shift()!)).pipe(Effect.map(check))
    const issue = (until: number, steady: boolean) =>
      Effect.gen(function* () {
        let full = false
        while (issued < until) {
          const n = Math.min(o.fetchEvery, until - issued)
          for (const end = issued + n; issued < end; issued++) {
            if (issued % 2 === 0) {
              yield* mesh.run("ops.mul_", [counter, -1], {}, { mutates: [counter] })
              sign = -sign
              offset = -offset
            } else {
              yield* mesh.run("ops.add_", [counter, issued], {}, { mutates: [counter] })
              offset += issued
            }
          }
          inFlight.push(yield* issueFetch)
          // Only the oldest is awaited, and only beyond `inFlight`: that many stay in flight
          // while the next commands are issued.
          if (inFlight.length > o.inFlight) yield* answerOldest
          if (steady && (full ||= inFlight.length >= o.inFlight)) minInFlight = Math.min(minInFlight, inFlight.length)
        }
        while (inFlight.length > 0) yield* answerOldest
      })

    const warmup = Math.min(o.warmupCommands, o.commandsPerWorker)
    yield* issue(warmup, false)
    const readings = [yield* read]
    const sentWarm = { ...ctl.core.sent }
    let issuingMs = 0
    for (let k = 1; k <= o.readings; k++) {
      const t = performance.now()
      yield* issue(warmup + Math.round(((o.commandsPerWorker - warmup) * k) / o.readings), true)
      issuingMs += performance.now() - t
      readings.push(yield* read)
    }
    const first = readings[0]!, last = readings.at(-1)!
    const measured = o.commandsPerWorker - warmup
    const workerCpu = last.cpu.workers.reduce((sum, c, r) => sum + c - first.cpu.workers[r]!, 0)
    const frames = ctl.core.sent.frames - sentWarm.frames, sentCommands = ctl.core.sent.commands - sentWarm.commands
    return {
      commands: issued, fetches, wrongValues, wrongExamples, outOfOrder,
      minInFlight: Number.isFinite(minInFlight) ? minInFlight : 0,
      readings,
      commandsPerSecond: (measured * o.world) / (issuingMs / 1000),
      controllerMicrosPerCommand: ((last.cpu.controller - first.cpu.controller) * 1e6) / measured,
      workerMicrosPerCommand: (workerCpu * 1e6) / (measured * o.world),
      commandsPerFrame: sentCommands / Math.max(frames, 1),
    }
  })

/** Runs the load against a fresh local world (its own workers), and stops them. */
export const runLoad = async (o: LoadOptions): Promise<LoadResult> => {
  const problems: string[] = []
  const layer = Controller.local({ world: o.world, functionPath: [ROOT], captureSites: false, onProblem: (p) => problems.push(p), onWorkerLine: () => {} })
  const rt = ManagedRuntime.make(layer as Layer.Layer<Controller, unknown>)
  try {
    return { ...(await rt.runPromise(program(o))), problems }
  } finally {
    await rt.dispose()
  }
}
