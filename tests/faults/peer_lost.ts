/**
 * Collectives after a known loss: rank 1 of a dp=2 mesh is killed (kill -9) while rank 0 waits
 * for it in the rendezvous of their group's first all_reduce, with rank-local work queued behind
 * that on rank 0. The comm timeout is COMM_TIMEOUT_MS, far above what any check allows: what
 * the program sees must come from the loss itself.
 *
 * - The fetch of the all_reduce fails with WorkerLost naming rank 1, and the rank-local work
 *   queued behind it on rank 0 is answered, each within LIMIT_MS of the kill (the controller
 *   tells rank 0 of the loss; rank 0 stops waiting for rank 1's address).
 * - An all_reduce issued after the loss fails at once, with WorkerLost naming rank 1, though
 *   rank 0 is busy with an earlier command, and is not sent to rank 0 (rank 0 reports no
 *   failure of it: it never ran it).
 * - Under supervise, the body that failed so runs again on fresh workers within LIMIT_MS of
 *   the kill, plus the recovery's own reported time.
 */
import { Effect, ManagedRuntime } from "effect"
import { mkdtempSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { Controller, WorkerLost, type ControllerApi, type RecoveryReport } from "../../src/controller/index.ts"
import type { ControllerMessage } from "../../src/protocol/messages.ts"
import { ROOT } from "./procs.ts"
import { attempt, type Trial } from "./trial.ts"

export const COMM_TIMEOUT_MS = 20_000
/** From the kill to what the program sees: a couple of seconds at most. */
export const LIMIT_MS = 2000
/** How long rank 0 is busy when the all_reduce after the loss is issued. */
const BUSY_MS = 3000
const FIXTURES = "tests/faults/fixtures"
const f32x4 = [{ dtype: "f32" as const, shape: [4] }]

const controller = (extra: Partial<Parameters<typeof Controller.local>[0]> = {}) => Controller.local({
  world: 2, functionPath: [ROOT], env: { MONARCH_COMM_TIMEOUT_MS: String(COMM_TIMEOUT_MS) }, onWorkerLine: () => {}, onProblem: () => {}, ...extra,
})

/** The idents rank 0 reported failed (observed, then passed on unchanged). */
const watchFailures = (ctl: ControllerApi, rank: number): Set<number> => {
  const failed = new Set<number>()
  const core = ctl.core
  const deliver = core.onMessage.bind(core)
  core.onMessage = (r: number, msg: ControllerMessage) => {
    if (r === rank && msg._tag === "RemoteFunctionFailed") failed.add(msg.ident)
    deliver(r, msg)
  }
  return failed
}

const describe = (e: unknown) => (e instanceof Error ? `${e.constructor.name}: ${e.message}` : String(e))

/** Resolves once `ok()` holds, polling; false after `ms`. */
const until = async (ok: () => boolean, ms: number): Promise<boolean> => {
  const deadline = performance.now() + ms
  while (!ok()) {
    if (performance.now() > deadline) return false
    await Bun.sleep(5)
  }
  return true
}

export const collectiveAfterLoss = (): Promise<Trial> =>
  attempt(async (t) => {
    const rt = ManagedRuntime.make(controller())
    try {
      const run = <A, E>(e: Effect.Effect<A, E, Controller>) => rt.runPromise(e)
      const ctl = await run(Effect.service(Controller))
      const failedOn0 = watchFailures(ctl, 0)
      const mesh = await run(ctl.mesh({ dp: 2 }))
      const victim = Number(await run(mesh.fetch(null, 1, { fn: `${FIXTURES}:pid` })))
      const threes = await run(mesh.call("ops.full", [[4], 3]))

      // Rank 1 holds its process, so it never publishes its address for the dp group that the
      // all_reduce opens; rank 0 waits for it in the store, with rank-local work queued behind.
      const held = await run(mesh.call(`${FIXTURES}:blockOnRank`, [1, 30_000, threes], {}, { results: f32x4 }))
      const sum = await run(mesh.reduce(held, "dp", "sum"))
      const pending = rt.runPromise(Effect.flip(mesh.fetch(sum, 0)))
      const fives = await run(mesh.call("ops.full", [[2], 5]))
      const local = rt.runPromise(mesh.fetch(fives, 0))
      await Bun.sleep(300)

      const killedAt = performance.now()
      process.kill(victim, "SIGKILL")
      const error = await Promise.race([pending, Bun.sleep(COMM_TIMEOUT_MS + 5000).then(() => "hung")])
      const failedIn = t.figure("loss→failure", performance.now() - killedAt)
      t.check(error instanceof WorkerLost && error.rank === 1, `the all_reduce's fetch ended with ${describe(error)}, not WorkerLost naming rank 1`)
      t.check(failedIn < LIMIT_MS, `the all_reduce's fetch failed ${Math.round(failedIn)} ms after the kill`)
      const value = await Promise.race([local, Bun.sleep(COMM_TIMEOUT_MS + 5000).then(() => "hung")])
      const ranIn = t.figure("loss→rank-local work", performance.now() - killedAt)
      t.checkValues(value, [5, 5], "rank 0's rank-local work queued behind the all_reduce")
      t.check(ranIn < LIMIT_MS, `rank 0's rank-local work was answered ${Math.round(ranIn)} ms after the kill`)

      // Known lost now: a new all_reduce fails here at once, even while rank 0 is busy with
      // an earlier command, and never reaches rank 0.
      if (!t.check(await until(() => ctl.core.graph.isLost(1), LIMIT_MS), "the controller did not learn of rank 1's loss")) return
      await run(mesh.call(`${FIXTURES}:blockOnRank`, [0, BUSY_MS, threes], {}, { results: f32x4 }))
      await Bun.sleep(100)
      const reportedBefore = failedOn0.size
      const issuedAt = performance.now()
      const again = await run(mesh.reduce(threes, "dp", "sum"))
      const later = await run(Effect.flip(mesh.fetch(again, 0)))
      const tookMs = t.figure("known loss→failure", performance.now() - issuedAt)
      t.check(later instanceof WorkerLost && later.rank === 1, `an all_reduce issued after the loss ended with ${describe(later)}, not WorkerLost naming rank 1`)
      t.check(tookMs < 500, `an all_reduce issued after the loss failed after ${Math.round(tookMs)} ms`)
      // What rank 0 computes from the withheld result fails with the loss too.
      const derived = await run(Effect.flip(mesh.fetch(await run(mesh.call("ops.add", [again, 1])), 0)))
      t.check(derived instanceof WorkerLost && derived.rank === 1, `rank-local work on the withheld all_reduce's result ended with ${describe(derived)}, not WorkerLost naming rank 1`)
      // Rank 0 is still there, its values intact, and it ran nothing of the withheld all_reduce.
      const bumped = await run(mesh.call("ops.add", [threes, 1]))
      t.checkValues(await run(mesh.fetch(bumped, 0)), [4, 4, 4, 4], "rank-local work on rank 0 after the loss")
      t.check(failedOn0.size === reportedBefore, `rank 0 ran the all_reduce issued after the loss: it reported failures of idents [${[...failedOn0].slice(reportedBefore)}]`)
    } finally {
      await rt.dispose()
    }
  })

export const supervisedAfterLoss = (): Promise<Trial> =>
  attempt(async (t) => {
    const root = mkdtempSync(join(tmpdir(), "monarch-peer-lost-"))
    const reports: RecoveryReport[] = []
    let killedAt = 0, restartedAt = 0
    try {
      const program = Effect.gen(function* () {
        const ctl = yield* Controller
        return yield* ctl.supervise((start) => Effect.gen(function* () {
          if (start.restarts > 0) restartedAt = performance.now()
          const mesh = yield* ctl.mesh({ dp: 2 })
          const ones = yield* mesh.call("ops.ones", [[4]])
          if (start.restarts === 0) {
            process.kill(ctl.workers()[1]!.pid, "SIGKILL")
            killedAt = performance.now()
            yield* Effect.promise(() => until(() => ctl.core.graph.isLost(1), 5000))
          }
          return yield* mesh.fetch(yield* mesh.reduce(ones, "dp", "sum"), 0)
        }))
      }).pipe(Effect.provide(controller({ checkpoints: root, recover: { from: "run", maxRestarts: 1, onRecover: (r) => void reports.push(r) } })))
      const value = await Promise.race([Effect.runPromise(program), Bun.sleep(COMM_TIMEOUT_MS * 2).then(() => "hung")])
      t.checkValues(value, [2, 2, 2, 2], "the all_reduce on the fresh workers")
      const r = reports[0]
      if (!t.check(reports.length === 1 && r !== undefined && r.lost.rank === 1, `recoveries: ${JSON.stringify(reports)}, expected one naming rank 1`) || r === undefined) return
      const restart = t.figure("loss→body restarted", restartedAt - killedAt)
      t.figure("recovery", r.ms)
      t.check(restart < LIMIT_MS + r.ms, `the body restarted ${Math.round(restart)} ms after the kill; the recovery itself took ${Math.round(r.ms)} ms`)
    } finally {
      rmSync(root, { recursive: true, force: true })
    }
  })
