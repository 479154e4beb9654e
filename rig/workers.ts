/**
 * A raw-message controller for tests and benchmarks: real worker processes (src/worker.ts
 * under the launcher, with its store) connected to a real listener, and helpers to send
 * commands and await what each rank sends back.
 */
import { Effect, Exit, Scope } from "effect"
import { listen, type WorkerLink } from "../src/controller/listener.ts"
import { launch, type Job, type ProcessExit } from "../src/launcher/index.ts"
import type { ControllerMessage, WorkerMessage } from "../src/protocol/messages.ts"

const WORKER = new URL("../src/worker.ts", import.meta.url).pathname

type Tag = ControllerMessage["_tag"]
type Of<T extends Tag> = Extract<ControllerMessage, { _tag: T }>

export interface Harness {
  readonly world: number
  readonly job: Job
  readonly links: ReadonlyArray<WorkerLink>
  /** Everything each rank sent, in order (WorkerHello first). */
  readonly received: ReadonlyArray<ControllerMessage[]>
  readonly problems: string[]
  readonly exits: ProcessExit[]
  readonly lines: string[]
  send(ranks: number | ReadonlyArray<number> | "all", msg: WorkerMessage): void
  /**
   * The next message of `tag` from `rank` after those already taken, waiting up to timeoutMs;
   * a timeout's error starts with `because` when given (the behaviour the wait stands for).
   */
  next<T extends Tag>(rank: number, tag: T, timeoutMs?: number, because?: string): Promise<Of<T>>
  /** Status from `rank` once it reports having passed `ident`. */
  passed(rank: number, ident: number, timeoutMs?: number, because?: string): Promise<void>
  /** The first value `what` returns that is not undefined (checked on every message), or fails after timeoutMs saying `because`. */
  until<A>(what: () => A | undefined, timeoutMs: number, because: string): Promise<A>
  /** Messages of `tag` from `rank` so far, without waiting (taken ones included). */
  seen<T extends Tag>(rank: number, tag: T): Of<T>[]
  close(): Promise<void>
}

export interface HarnessOptions {
  readonly world: number
  readonly env?: Record<string, string>
  readonly token?: string
  /** The workers' MONARCH_FUNCTION_PATH (the roots of the user functions they may call), when given. */
  readonly functionPath?: string
}

/** Starts `world` workers and waits until every one has said hello. */
export const startWorkers = async (o: HarnessOptions): Promise<Harness> => {
  const scope = Effect.runSync(Scope.make())
  const received: ControllerMessage[][] = Array.from({ length: o.world }, () => [])
  const taken = Array.from({ length: o.world }, () => new Map<string, number>())
  const wakers = new Set<() => void>()
  const wake = () => { for (const w of [...wakers]) w() }
  const links: WorkerLink[] = []
  const problems: string[] = [], exits: ProcessExit[] = [], lines: string[] = []
  const token = o.token ?? `token-${Math.random().toString(36).slice(2)}`
  let helloCount = 0

  const run = <A, E>(e: Effect.Effect<A, E, Scope.Scope>) => Effect.runPromise(Scope.provide(scope)(e))
  const listener = await run(listen({
    token,
    onWorker: (link) => { links[link.hello.rank] = link; received[link.hello.rank]!.push(link.hello); helloCount++; wake() },
    onMessage: (rank, msg) => { received[rank]!.push(msg); wake() },
    onDisconnect: () => wake(),
    onProblem: (p) => { problems.push(p); wake() },
  }))
  const job = await run(launch({
    nproc: o.world,
    command: [WORKER],
    env: { CONTROLLER_ADDR: listener.address, MONARCH_TOKEN: token, ...(o.functionPath === undefined ? {} : { MONARCH_FUNCTION_PATH: o.functionPath }), MONARCH_COMM_TIMEOUT_MS: "10000", ...o.env },
    onLine: (rank, line) => { lines.push(`[${rank}] ${line}`); if (process.env.MONARCH_TEST_VERBOSE) console.error(`[${rank}] ${line}`) },
    graceMs: 1000,
  }))
  job.onExit((e) => { exits.push(e); wake() })

  const waitFor = <A>(what: () => A | undefined, timeoutMs: number, label: string, because?: string): Promise<A> =>
    new Promise((resolve, reject) => {
      const finish = () => {
        wakers.delete(check)
        clearTimeout(timer)
      }
      // `what` may throw (a worker exited while waiting): that rejects the wait at once.
      const check = () => {
        let v: A | undefined
        try {
          v = what()
        } catch (e) {
          finish()
          reject(e)
          return true
        }
        if (v === undefined) return false
        finish()
        resolve(v)
        return true
      }
      const timer = setTimeout(() => {
        wakers.delete(check)
        reject(new Error(`${because === undefined ? "" : `${because}: `}timed out after ${timeoutMs} ms waiting for ${label}\n${lines.slice(-30).join("\n")}`))
      }, timeoutMs)
      if (!check()) wakers.add(check)
    })

  await waitFor(() => (helloCount === o.world ? true : exits.length > 0 ? (() => { throw new Error(`a worker exited during start-up: ${JSON.stringify(exits)}\n${lines.join("\n")}`) })() : undefined), 30_000, "every worker's hello")

  const h: Harness = {
    world: o.world, job, links, received, problems, exits, lines,
    send(ranks, msg) {
      const list = ranks === "all" ? links.map((_, r) => r) : typeof ranks === "number" ? [ranks] : ranks
      for (const r of list) links[r]!.send(msg)
    },
    next(rank, tag, timeoutMs = 10_000, because) {
      return waitFor(() => {
        const from = taken[rank]!.get(tag) ?? 0
        const i = received[rank]!.findIndex((m, j) => j >= from && m._tag === tag)
        if (i < 0) return undefined
        taken[rank]!.set(tag, i + 1)
        return received[rank]![i] as Of<typeof tag>
      }, timeoutMs, `${tag} from rank ${rank}`, because)
    },
    passed(rank, ident, timeoutMs = 10_000, because) {
      return waitFor(() => received[rank]!.some((m) => m._tag === "Status" && m.firstUncompletedIdent > ident) || undefined, timeoutMs, `rank ${rank} passing ident ${ident}`, because).then(() => undefined)
    },
    until(what, timeoutMs, because) {
      return waitFor(what, timeoutMs, "the condition", because)
    },
    seen(rank, tag) {
      return received[rank]!.filter((m) => m._tag === tag) as Of<typeof tag>[]
    },
    async close() {
      await Effect.runPromise(Scope.close(scope, Exit.void))
    },
  }
  return h
}
