/**
 * Scenario 2: the controller goes away. Killed with SIGKILL (a controller program in its own
 * process, attached through the store), its workers drop what is queued and exit with the
 * link-lost status when they are not restartable; restartable ones wait, read the controller's
 * address again, and serve the next controller: one that publishes a new address in the store
 * (Controller.attach), or a listener re-bound on the same CONTROLLER_ADDR after the old one
 * closed every link; with the store gone too, they give up after their orphan timeout.
 */
import { Effect, Exit, ManagedRuntime, Scope } from "effect"
import { Controller } from "../../src/controller/index.ts"
import { listen, type WorkerLink } from "../../src/controller/listener.ts"
import type { ControllerMessage } from "../../src/protocol/messages.ts"
import { startServer } from "../../src/store/server.ts"
import { call, createStream, fetch, ref } from "../worker/build.ts"
import { EXIT_STATUS } from "../../src/worker/startup.ts"
import { FAULT_TOKEN, spawnController, spawnStore, spawnWorkers, stopAll, type Proc } from "./procs.ts"
import { attempt, type Trial } from "./trial.ts"

const WORLD = 2
const TIMEOUTS = { MONARCH_COMM_TIMEOUT_MS: "3000", MONARCH_STORE_TIMEOUT_MS: "10000" }
/** Losing the controller is seen at once (the socket closes); this bounds each wait here. */
const WAIT_MS = 5000

const WENT_AWAY = /the controller went away; waiting for a new one/

/** A store in this process, and workers that meet through it. */
const withStore = async (env: Record<string, string>, body: (workers: Proc[], store: { host: string; port: number }) => Promise<void>) => {
  const server = startServer({ port: 0 })
  const store = { host: "127.0.0.1", port: server.port }
  const workers = spawnWorkers(WORLD, store, { ...TIMEOUTS, ...env })
  try {
    await body(workers, store)
  } finally {
    await stopAll(workers)
    server.stop()
  }
}

/** Starts the first controller in its own process and waits until it has used the workers. */
const firstController = async (t: Trial, workers: Proc[], store: { host: string; port: number }, backlog?: typeof BACKLOG): Promise<Proc | undefined> => {
  const ctl = spawnController(WORLD, store, backlog)
  const ready = await ctl.line(/^ready /, 30_000)
  if (t.check(ready?.text === `ready ${WORLD},${WORLD}`, `the first controller never got its all-reduce: ${ready?.text}\n${ctl.tail()}\n${workers.map((w) => w.tail(5)).join("\n")}`)) return ctl
  await stopAll([ctl])
  return undefined
}

/** A backlog that would keep the workers busy for BACKLOG.commands × BACKLOG.holdMs after the controller died. */
export const BACKLOG = { commands: 100, holdMs: 200 } as const
/** "Within 1 s of its running command ending", plus process scheduling on a loaded machine. */
const ORPHAN_EXIT_MS = BACKLOG.holdMs + 1000 + 1000

/**
 * Not restartable, with a long backlog queued: every worker drops it once its running command
 * ends, exits with the link-lost status (not a clean Exit's 0) and says why.
 */
export const controllerKilled = (): Promise<Trial> =>
  attempt((t) => withStore({}, async (workers, store) => {
    const ctl = await firstController(t, workers, store, BACKLOG)
    if (!ctl) return
    if (!t.check((await ctl.line(/^queued /, 10_000)) !== undefined, `the controller never queued its backlog\n${ctl.tail()}`)) return
    // Let the batch reach the workers and the first command start.
    await Bun.sleep(300)
    const killedAt = ctl.kill()
    const ends = await Promise.all(workers.map((w) => w.exit(BACKLOG.commands * BACKLOG.holdMs)))
    ends.forEach((end, rank) => {
      const took = end ? Math.round(end.at - killedAt) : undefined
      t.check(end?.status === EXIT_STATUS.linkLost, `worker ${rank} ${end ? `exited with status ${end.status} ${took} ms after the kill` : "was still running"}, not ${EXIT_STATUS.linkLost} (link lost)\n${workers[rank]!.tail(6)}`)
      t.check(took !== undefined && took < ORPHAN_EXIT_MS, `worker ${rank} took ${took} ms to exit with ${BACKLOG.commands} commands of ${BACKLOG.holdMs} ms queued (limit ${ORPHAN_EXIT_MS} ms)`)
      t.check(workers[rank]!.lines.some((l) => /the controller went away; exiting/.test(l.text)), `worker ${rank} did not log why it exited`)
    })
    if (ends.every((e) => e !== undefined)) t.figure("kill→workers exited", Math.max(...ends.map((e) => e!.at)) - killedAt)
  }))

/** Restartable, when the controller and the store die together: how long a worker waits for either. */
export const ORPHAN_TIMEOUT_MS = 2000

/** Restartable, controller and store both killed: the workers give up after the orphan timeout, status link lost. */
export const controllerAndStoreKilled = (): Promise<Trial> =>
  attempt(async (t) => {
    const { proc: store, address } = await spawnStore()
    const workers = spawnWorkers(WORLD, address, { ...TIMEOUTS, MONARCH_RESTARTABLE: "1", MONARCH_ORPHAN_TIMEOUT_MS: String(ORPHAN_TIMEOUT_MS) })
    let ctl: Proc | undefined
    try {
      ctl = await firstController(t, workers, address)
      if (!ctl) return
      const killedAt = ctl.kill()
      store.kill()
      const ends = await Promise.all(workers.map((w) => w.exit(ORPHAN_TIMEOUT_MS + 10_000)))
      ends.forEach((end, rank) => {
        const took = end ? Math.round(end.at - killedAt) : undefined
        t.check(end?.status === EXIT_STATUS.linkLost, `worker ${rank} ${end ? `exited with status ${end.status} after ${took} ms` : `was still running ${ORPHAN_TIMEOUT_MS + 10_000} ms after`}, not ${EXIT_STATUS.linkLost} (link lost)\n${workers[rank]!.tail(6)}`)
        t.check(took === undefined || took >= ORPHAN_TIMEOUT_MS, `worker ${rank} gave up after ${took} ms, before its orphan timeout of ${ORPHAN_TIMEOUT_MS} ms`)
        t.check(took === undefined || took < ORPHAN_TIMEOUT_MS + 4000, `worker ${rank} took ${took} ms to give up (orphan timeout ${ORPHAN_TIMEOUT_MS} ms)`)
        t.check(workers[rank]!.lines.some((l) => /neither a controller nor the store answered/.test(l.text)), `worker ${rank} did not log why it gave up\n${workers[rank]!.tail(6)}`)
      })
      if (ends.every((e) => e !== undefined)) t.figure("kill→workers gave up", Math.max(...ends.map((e) => e!.at)) - killedAt)
    } finally {
      await stopAll([...workers, ctl, store])
    }
  })

/** Restartable: the workers outlive the controller and a new one, found through the store, uses them. */
export const controllerReplacedThroughStore = (): Promise<Trial> =>
  attempt((t) => withStore({ MONARCH_RESTARTABLE: "1" }, async (workers, store) => {
    const ctl = await firstController(t, workers, store)
    if (!ctl) return
    const killedAt = ctl.kill()
    const waiting = await Promise.all(workers.map((w) => w.line(WENT_AWAY, WAIT_MS)))
    if (!t.check(waiting.every((l) => l !== undefined), `not every worker said it waits for a new controller\n${workers.map((w) => w.tail(5)).join("\n")}`)) return
    t.figure("kill→workers waiting", Math.max(...waiting.map((l) => l!.at)) - killedAt)
    // The dead controller's address stays in the store meanwhile: they must keep trying.
    await Bun.sleep(1200)
    if (!t.check(workers.every((w) => w.running), `a worker exited while waiting:\n${workers.map((w) => w.tail(5)).join("\n")}`)) return

    const startedAt = performance.now()
    const rt = ManagedRuntime.make(Controller.attach({ world: WORLD, store, token: FAULT_TOKEN, startTimeoutMs: WAIT_MS + 5000, onProblem: (p) => t.problems.push(`new controller: ${p}`) }))
    try {
      const next = await rt.runPromise(Effect.service(Controller))
      t.figure("new controller→all reconnected", performance.now() - startedAt)
      const sums = await rt.runPromise(Effect.gen(function* () {
        const mesh = yield* next.mesh({ all: WORLD })
        const fours = yield* mesh.call("ops.full", [[3], 4])
        return yield* mesh.fetchAll(yield* mesh.reduce(fours, "all", "sum"))
      }))
      t.figure("new controller→first all-reduce result", performance.now() - startedAt)
      sums.forEach((v, rank) => t.checkValues(v, [8, 8, 8], `the new controller's all-reduce on rank ${rank}`))
      t.check(workers.every((w) => w.running), "a worker process was replaced")
    } finally {
      await rt.dispose()
    }
  }))

/** A minimal controller on a raw listener: the links, and every message each rank sent. */
const rawController = async (scope: Scope.Scope, token: string, port: number) => {
  const links: WorkerLink[] = []
  const received: ControllerMessage[][] = Array.from({ length: WORLD }, () => [])
  const listener = await Effect.runPromise(Scope.provide(scope)(listen({
    token, port,
    onWorker: (link) => void (links[link.hello.rank] = link),
    onMessage: (rank, msg) => void received[rank]!.push(msg),
    onDisconnect: () => {},
    onProblem: () => {},
  })))
  const until = async (done: () => boolean, timeoutMs: number) => {
    const deadline = performance.now() + timeoutMs
    while (!done() && performance.now() < deadline) await Bun.sleep(5)
    return done()
  }
  return { address: listener.address, links, received, until }
}

/** Restartable with a fixed CONTROLLER_ADDR: the listener closes every link, then comes back on the same port. */
export const listenerRebound = (): Promise<Trial> =>
  attempt(async (t) => {
    const token = `fault-${Math.random().toString(36).slice(2)}`
    const first = Effect.runSync(Scope.make())
    let second: Scope.Closeable | undefined
    try {
      const old = await rawController(first, token, 0)
      const port = Number(old.address.split(":").at(-1))
      await withStore({ MONARCH_RESTARTABLE: "1", CONTROLLER_ADDR: old.address, MONARCH_TOKEN: token }, async (workers) => {
        if (!t.check(await old.until(() => old.links.filter(Boolean).length === WORLD, 30_000), `the workers never said hello\n${workers.map((w) => w.tail(5)).join("\n")}`)) return
        const closedAt = performance.now()
        await Effect.runPromise(Scope.close(first, Exit.void))
        const waiting = await Promise.all(workers.map((w) => w.line(WENT_AWAY, WAIT_MS)))
        if (!t.check(waiting.every((l) => l !== undefined), `not every worker said it waits for a new controller\n${workers.map((w) => w.tail(5)).join("\n")}`)) return
        t.figure("links closed→workers waiting", Math.max(...waiting.map((l) => l!.at)) - closedAt)
        // Nothing listens on the port meanwhile: their connection attempts are refused.
        await Bun.sleep(1200)
        if (!t.check(workers.every((w) => w.running), `a worker exited while waiting:\n${workers.map((w) => w.tail(5)).join("\n")}`)) return

        second = Effect.runSync(Scope.make())
        const reboundAt = performance.now()
        const next = await rawController(second, token, port)
        if (!t.check(await next.until(() => next.links.filter(Boolean).length === WORLD, WAIT_MS), "not every worker came back to the re-bound port")) return
        t.figure("re-bound→all reconnected", performance.now() - reboundAt)
        for (const link of next.links) {
          link.send(createStream)
          link.send(call(0, [10], "ops.full", [[2], 6]))
          link.send(fetch(1, ref(10)))
        }
        await next.until(() => next.received.every((msgs) => msgs.some((m) => m._tag === "FetchResult")), WAIT_MS)
        next.received.forEach((msgs, rank) => {
          const result = msgs.find((m) => m._tag === "FetchResult")
          t.checkValues(result?._tag === "FetchResult" ? result.value : undefined, [6, 6], `rank ${rank}'s answer to the re-bound listener`)
        })
      })
    } finally {
      await Effect.runPromise(Scope.close(first, Exit.void))
      if (second) await Effect.runPromise(Scope.close(second, Exit.void))
    }
  })
