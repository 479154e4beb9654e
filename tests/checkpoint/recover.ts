/**
 * A lost worker mid-training, recovered: Controller.local({ recover }) trains the small model
 * under supervise, saving every SAVE_EVERY steps; rank KILLED is killed (kill -9) during a step
 * after the second save; the controller replaces the workers, loads the last checkpoint and
 * resumes, and training ends with the same losses from the resumed step on, and the same final
 * loss, bit for bit, as an uninterrupted run. One try.
 */
import { Effect } from "effect"
import { mkdtempSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join, resolve } from "node:path"
import { Controller, save, type RecoveryReport } from "../../src/controller/index.ts"
import { attempt, type Trial } from "../faults/trial.ts"
import { initState, lossValue, train, type TrainState } from "./train.ts"

export const STEPS = 8, SAVE_EVERY = 3, KILL_AT = 7
const KILLED = 2
const FIXTURES = resolve(import.meta.dir, "../..")

/** Trains STEPS steps under supervise (killing rank KILLED once at step KILL_AT when `kill`); the losses by step and the reports. */
const supervised = (root: string, kill: boolean) => {
  const reports: RecoveryReport[] = []
  const losses = new Map<number, number>()
  let killedAt: number | undefined
  const program = Effect.gen(function* () {
    const ctl = yield* Controller
    return yield* ctl.supervise((start) => Effect.gen(function* () {
      const mesh = start.resumed?.mesh ?? (yield* ctl.mesh({ dp: 2, tp: 2 }))
      const s = start.resumed ? (start.resumed.state as unknown as TrainState) : yield* initState(mesh)
      const bits = yield* train(mesh, s, STEPS - s.step, (st) => Effect.gen(function* () {
        if (st.step % SAVE_EVERY === 0) yield* Effect.flatMap(save(mesh, st, "run"), (p) => p.durable)
        // Killed with the next step's commands about to go out: they fail, the step's fetch says WorkerLost.
        if (kill && start.restarts === 0 && st.step === KILL_AT - 1) {
          process.kill(ctl.workers()[KILLED]!.pid, "SIGKILL")
          killedAt = performance.now()
        }
      }))
      bits.forEach((b, i) => losses.set(STEPS - bits.length + i + 1, b))
      return bits
    }))
  }).pipe(Effect.provide(Controller.local({
    world: 4, checkpoints: root, functionPath: [FIXTURES], onWorkerLine: () => {},
    recover: { from: "run", maxRestarts: 2, onRecover: (r) => void reports.push(r) },
  })))
  return Effect.runPromise(program).then(() => ({ losses, reports, killedAt }))
}

export const lostWorkerRecovered = (): Promise<Trial> => attempt(async (trial) => {
  const roots = [mkdtempSync(join(tmpdir(), "monarch-recover-")), mkdtempSync(join(tmpdir(), "monarch-recover-"))]
  try {
    const whole = await supervised(roots[0]!, false)
    const t0 = performance.now()
    const hit = await supervised(roots[1]!, true)
    trial.figure("run with a recovery", performance.now() - t0)
    trial.check(whole.reports.length === 0, `the uninterrupted run recovered ${whole.reports.length} times`)
    const r = hit.reports[0]
    if (!trial.check(hit.reports.length === 1 && r !== undefined, `${hit.reports.length} recoveries, expected 1`) || r === undefined) return
    trial.figure("loss noticed→resumed", r.ms)
    const resumedAt = Math.floor((KILL_AT - 1) / SAVE_EVERY) * SAVE_EVERY
    trial.check(r.lost.rank === KILLED && r.lost.signal === "SIGKILL", `the report names rank ${r.lost.rank} (${r.lost.signal}), not rank ${KILLED} (SIGKILL)`)
    trial.check(r.step === resumedAt && r.version?.startsWith(`step-${String(resumedAt).padStart(8, "0")}-`) === true, `resumed from ${r.version} (step ${r.step}), expected step ${resumedAt}`)
    const final = hit.losses.get(STEPS), expected = whole.losses.get(STEPS)
    trial.check(final !== undefined && final === expected, `final loss ${final === undefined ? "missing" : lossValue(final)} differs from the uninterrupted run's ${lossValue(expected!)}`)
    for (let step = resumedAt + 1; step <= STEPS; step++)
      trial.check(hit.losses.get(step) === whole.losses.get(step), `step ${step}: loss ${lossValue(hit.losses.get(step)!)} after recovery, ${lossValue(whole.losses.get(step)!)} uninterrupted`)
  } finally {
    for (const root of roots) rmSync(root, { recursive: true, force: true })
  }
})
