/**
 * Scenario 6: what a lost or stopped worker takes with it, precisely. Results depend on ranks:
 * a rank-local command's result on rank r on r alone, a collective's on its group, a send's on
 * its sender. When rank 3 dies (kill -9), exactly the results whose dependencies reach it fail
 * (WorkerLost); every other result, in flight or new, on the same mesh or another, completes.
 * When rank 3 is stopped (SIGSTOP) inside a tp all_reduce, a fetch waits only for the ranks its
 * value depends on: the top row answers as usual, a fetch with a deadline that needs rank 3
 * fails with DeadlineExceeded naming the ranks behind, and after SIGCONT the bottom row's
 * communicator, failed at its comm timeout, is opened again on the next collective.
 */
import { Effect, ManagedRuntime } from "effect"
import { Controller, DeadlineExceeded, WorkerLost, type ControllerApi, type HostTensor } from "../../src/controller/index.ts"
import type { HangReport } from "../../src/controller/core.ts"
import { ROOT } from "./procs.ts"
import { attempt, type Trial } from "./trial.ts"

export const COMM_TIMEOUT_MS = 3000
const VICTIM = 3
const FIXTURES = "tests/faults/fixtures"
const f32x4 = [{ dtype: "f32" as const, shape: [4] }]
/** An answer that does not wait for the victim comes at once; this allows for a loaded machine. */
const PROMPT_MS = 1500
/** A fetch deadline shorter than the comm timeout, so the hang is still on when it fires. */
export const DEADLINE_MS = 1500

type Run = <A, E>(e: Effect.Effect<A, E, Controller>) => Promise<A>

/** A fresh 2x2 mesh on 4 local workers, with rank 3's pid. */
const withMesh = async (t: Trial, hangs: HangReport[], tcp: boolean, body: (o: { run: Run; rt: ManagedRuntime.ManagedRuntime<Controller, unknown>; ctl: ControllerApi; victimPid: number }) => Promise<void>) => {
  const rt = ManagedRuntime.make(Controller.local({
    world: 4, functionPath: [ROOT], env: { MONARCH_COMM_TIMEOUT_MS: String(COMM_TIMEOUT_MS), ...(tcp ? { MONARCH_COMM_SHM: "0" } : {}) },
    hangAfterMs: 1000, onHang: (r) => void hangs.push(r), onWorkerLine: () => {}, onProblem: () => {},
  }))
  try {
    const run: Run = (e) => rt.runPromise(e)
    const ctl = await run(Effect.service(Controller))
    const flat = await run((await run(ctl.mesh({ dp: 2, tp: 2 }))).flatten("all"))
    const victimPid = Number(await run(flat.fetch(null, VICTIM, { fn: `${FIXTURES}:pid` })))
    await body({ run, rt, ctl, victimPid })
  } finally {
    await rt.dispose()
  }
}

/** `p`'s outcome, or "hung" after ms. */
const within = <A>(p: Promise<A>, ms: number): Promise<A | "hung"> => Promise.race([p, Bun.sleep(ms).then(() => "hung" as const)])

/** The failure `e` ends with, or a description of the value it gave (an array of values as is). */
const errorOf = (rt: ManagedRuntime.ManagedRuntime<Controller, unknown>, e: Effect.Effect<unknown, unknown, Controller>) =>
  rt.runPromise(e.pipe(Effect.match({ onFailure: (error) => error, onSuccess: (v) => (Array.isArray(v) ? v : `a value (${Bun.inspect(v)})`) })))

interface Report {
  readonly rank: number
  readonly type: string
  readonly message: string
}

/** Every RemoteFunctionFailed as it reaches the controller (observed, then passed on unchanged). */
const watchReports = (ctl: ControllerApi): Report[] => {
  const reports: Report[] = []
  const deliver = ctl.core.onMessage.bind(ctl.core)
  ctl.core.onMessage = (rank, msg) => {
    if (msg._tag === "RemoteFunctionFailed") reports.push({ rank, type: msg.error.type, message: msg.error.message })
    deliver(rank, msg)
  }
  return reports
}

/** kill -9 of rank 3 with work in flight on the whole mesh: only what needs rank 3 fails. */
export const lostRankPrecisely = (): Promise<Trial> =>
  attempt((t) => withMesh(t, [], false, async ({ run, rt, ctl, victimPid }) => {
    const mesh = await run(ctl.mesh({ dp: 2, tp: 2 }))
    const sevens = await run(mesh.call("ops.full", [[4], 7]))
    t.checkValues(await run(mesh.fetch(await run(mesh.reduce(sevens, "tp", "sum")), 0)), [14, 14, 14, 14], "a tp sum before the fault")
    // Rank 3 is busy when it dies, so everything after is in flight there.
    await run(mesh.call(`${FIXTURES}:blockOnRank`, [VICTIM, 10_000, sevens], {}, { results: f32x4 }))
    const eights = await run(mesh.call("ops.add", [sevens, 1]))
    const rowSums = await run(mesh.reduce(eights, "tp", "sum"))
    const inFlight = [rt.runPromise(mesh.fetch(eights, 1)), rt.runPromise(mesh.fetch(rowSums, 0)), rt.runPromise(mesh.fetch(eights, 2))]
    await Bun.sleep(300)
    const killedAt = performance.now()
    process.kill(victimPid, "SIGKILL")

    // A failure is kept as the outcome, so the check below names it.
    const [mine, topSum, peers] = await Promise.all(inFlight.map((p) => within(p.catch((e: unknown) => e), COMM_TIMEOUT_MS * 2)))
    t.figure("kill→in-flight results", performance.now() - killedAt)
    t.checkValues(mine, [8, 8, 8, 8], "rank 1's own result of a rank-local op on the mesh holding rank 3")
    t.checkValues(topSum, [16, 16, 16, 16], "the top row's tp sum, in flight at the kill")
    t.checkValues(peers, [8, 8, 8, 8], "rank 2's own result, though rank 3 shares its tp group")
    const lost = await errorOf(rt, mesh.fetch(eights, VICTIM))
    t.check(lost instanceof WorkerLost && lost.rank === VICTIM, `rank 3's own result failed with ${lost}, not WorkerLost naming rank 3`)

    // Going on over the survivors, on the same mesh: rank-local work, and collectives whose
    // groups do not hold rank 3; the bottom row's needs rank 3 and fails, naming it.
    const nines = await run(mesh.call("ops.add", [eights, 1]))
    const sums = await run(mesh.reduce(nines, "tp", "sum"))
    t.checkValues(await rt.runPromise(mesh.fetch(nines, 2)).catch((e: unknown) => e), [9, 9, 9, 9], "new rank-local work on rank 2 after the loss")
    t.checkValues(await rt.runPromise(mesh.fetch(sums, 1)).catch((e: unknown) => e), [18, 18, 18, 18], "a new top-row tp sum after the loss")
    const bottom = await errorOf(rt, mesh.fetch(sums, 2))
    t.check(bottom instanceof WorkerLost && bottom.rank === VICTIM, `the bottom row's new tp sum failed with ${bottom}, not WorkerLost naming rank 3`)
    t.figure("kill→checks done", performance.now() - killedAt)
  }))

/**
 * SIGSTOP of rank 3 inside a tp all_reduce: what answers, what fails and when, and recovery
 * after SIGCONT. `tcp`: Gloo's TCP pairs only (MONARCH_COMM_SHM=0), not the shared-memory round.
 */
export const stoppedWorker = (tcp = false): Promise<Trial> => {
  const hangs: HangReport[] = []
  return attempt((t) => withMesh(t, hangs, tcp, async ({ run, rt, ctl, victimPid }) => {
    const reports = watchReports(ctl)
    const mesh = await run(ctl.mesh({ dp: 2, tp: 2 }))
    const sevens = await run(mesh.call("ops.full", [[4], 7]))
    const warm = await run(mesh.fetchAll(await run(mesh.reduce(sevens, "tp", "sum"))))
    warm.forEach((v, r) => t.checkValues(v, [14, 14, 14, 14], `the tp sum on rank ${r} before the stop`))

    process.kill(victimPid, "SIGSTOP")
    let continued = false
    try {
      const stoppedAt = performance.now()
      const sums = await run(mesh.reduce(sevens, "tp", "sum"))
      const eights = await run(mesh.call("ops.add", [sevens, 1]))
      // Values on the top row never touch rank 3: they answer at once.
      const [own, topSum] = await Promise.all([within(rt.runPromise(mesh.fetch(eights, 0)), PROMPT_MS), within(rt.runPromise(mesh.fetch(sums, 1)), PROMPT_MS)])
      t.figure("stop→top row answered", performance.now() - stoppedAt)
      t.checkValues(own, [8, 8, 8, 8], "rank 0's rank-local result while rank 3 is stopped")
      t.checkValues(topSum, [14, 14, 14, 14], "the top row's tp sum while rank 3 is stopped")
      // The bottom row's sum needs rank 3: with a deadline, a typed failure naming global ranks.
      const late = await errorOf(rt, mesh.fetch(sums, 2, { deadlineMs: DEADLINE_MS }))
      const lateAt = t.figure("stop→deadline failure", performance.now() - stoppedAt)
      if (t.check(late instanceof DeadlineExceeded, `the bottom row's sum with a ${DEADLINE_MS} ms deadline ended with ${late}, not DeadlineExceeded`)) {
        const d = late as DeadlineExceeded
        t.check(d.behind.some((b) => b.rank === VICTIM) && d.message.includes(`rank ${VICTIM} at command`), `DeadlineExceeded does not name rank 3: ${d.message}`)
      }
      t.check(lateAt < DEADLINE_MS + PROMPT_MS, `the deadline failure took ${Math.round(lateAt)} ms (deadline ${DEADLINE_MS} ms)`)
      // Rank 2 gives up at its comm timeout; its error names the global rank it waited for.
      t.checkValues(await within(rt.runPromise(mesh.fetch(eights, 2)), COMM_TIMEOUT_MS + PROMPT_MS), [8, 8, 8, 8], "rank 2's rank-local result, after its all_reduce timed out")
      const report = hangs.find((h) => h.behind.includes(VICTIM))
      t.check(report !== undefined && report.behind.includes(2), `no hang report named ranks [2, 3]: ${JSON.stringify(hangs.map((h) => h.behind))}`)
      const failed = await errorOf(rt, mesh.fetch(sums, 2, { deadlineMs: COMM_TIMEOUT_MS }))
      if (t.check(failed instanceof DeadlineExceeded, `the bottom row's sum (rank 3 still stopped) ended with ${failed}, not DeadlineExceeded`))
        t.check((failed as DeadlineExceeded).behind.map((b) => b.rank).join() === String(VICTIM), `once rank 2 gave up, only rank 3 should be behind: ${(failed as DeadlineExceeded).message}`)
      const peerError = reports.find((r) => r.rank === 2)
      if (t.check(peerError !== undefined, "rank 2 reported no failure of its all_reduce"))
        // Gloo's own timeout names no peer; then the group's global ranks say who was in it.
        t.check(peerError!.type === "CommError" && (peerError!.message.includes(`rank ${VICTIM}`) || peerError!.message.includes(`ranks [2, ${VICTIM}]`)) && !/\brank 1\b/.test(peerError!.message),
          `rank 2's CommError does not name global rank 3: ${peerError!.type}: ${peerError!.message}`)
    } finally {
      process.kill(victimPid, "SIGCONT")
      continued = true
    }
    // After SIGCONT: the failed communicator is replaced on the group's next collective.
    const continuedAt = performance.now()
    const again = await within(errorOf(rt, mesh.fetchAll(await run(mesh.reduce(sevens, "tp", "sum")))).then((v) => (Array.isArray(v) ? v : String(v))), COMM_TIMEOUT_MS * 3)
    t.figure("SIGCONT→tp sums on every rank", performance.now() - continuedAt)
    if (t.check(Array.isArray(again), `the tp sums after SIGCONT ended with ${again}`))
      (again as ReadonlyArray<HostTensor>).forEach((v, r) => t.checkValues(v, [14, 14, 14, 14], `the tp sum on rank ${r} after SIGCONT`))
    t.check(continued, "rank 3 was continued")
  }))
}
