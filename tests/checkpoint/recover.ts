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
import type { Layer } from "effect"
import { Controller, save, type RecoverOptions, type RecoveryReport, type StartError } from "../../src/controller/index.ts"
import { attempt, type Trial } from "../faults/trial.ts"
import { initState, lossValue, restored, saved, train } from "./train.ts"

export const STEPS = 8, SAVE_EVERY = 3, KILL_AT = 7
const KILLED = 2
const FIXTURES = resolve(import.meta.dir, "../..")

/**
 * Trains STEPS steps under supervise on a mesh of `dims` (killing rank `kill` once at step
 * KILL_AT), with the controller `layer` makes given its recover options; the losses by step and
 * the recoveries reported.
 */
export const supervised = (layer: (recover: RecoverOptions) => Layer.Layer<Controller, StartError>, dims: Readonly<Record<string, number>>, kill?: number) => {
  const reports: RecoveryReport[] = []
  const losses = new Map<number, number>()
  let killedAt: number | undefined
  const program = Effect.gen(function* () {
    const ctl = yield* Controller
    return yield* ctl.supervise((start) => Effect.gen(function* () {
      const mesh = start.resumed?.mesh ?? (yield* ctl.mesh(dims))
      const s = start.resumed ? restored(start.resumed.state) : yield* initState(mesh)
      const bits = yield* train(mesh, s, STEPS - s.step, (st) => Effect.gen(function* () {
        if (st.step % SAVE_EVERY === 0) yield* Effect.flatMap(save(mesh, saved(st), "run"), (p) => p.durable)
        // Killed with the next step's commands about to go out: they fail, the step's fetch says WorkerLost.
        if (kill !== undefined && start.restarts === 0 && st.step === KILL_AT - 1) {
          process.kill(ctl.workers()[kill]!.pid, "SIGKILL")
          killedAt = performance.now()
        }
      }))
      bits.forEach((b, i) => losses.set(STEPS - bits.length + i + 1, b))
      return bits
    }))
  }).pipe(Effect.provide(layer({ from: "run", maxRestarts: 2, onRecover: (r) => void reports.push(r) })))
  return Effect.runPromise(program).then(() => ({ losses, reports, killedAt }))
}

/** Controller.local's workers with a checkpoint root and recovery. */
const local = (root: string) => (recover: RecoverOptions) =>
  Controller.local({ world: 4, checkpoints: root, functionPath: [FIXTURES], onWorkerLine: () => {}, recover })

/** The conditions a run with one recovery must meet against the uninterrupted one. */
export const checkRecovered = (trial: Trial, whole: Awaited<ReturnType<typeof supervised>>, hit: Awaited<ReturnType<typeof supervised>>, killed: number): void => {
  trial.check(whole.reports.length === 0, `the uninterrupted run recovered ${whole.reports.length} times`)
  const r = hit.reports[0]
  if (!trial.check(hit.reports.length === 1 && r !== undefined, `${hit.reports.length} recoveries, expected 1`) || r === undefined) return
  trial.figure("loss noticed→resumed", r.ms)
  const resumedAt = Math.floor((KILL_AT - 1) / SAVE_EVERY) * SAVE_EVERY
  trial.check(r.lost.rank === killed && r.lost.signal !== "SIGTERM", `the report names rank ${r.lost.rank} (${r.lost.signal}), not rank ${killed}`)
  trial.check(r.step === resumedAt && r.version?.startsWith(`step-${String(resumedAt).padStart(8, "0")}-`) === true, `resumed from ${r.version} (step ${r.step}), expected step ${resumedAt}`)
  const final = hit.losses.get(STEPS), expected = whole.losses.get(STEPS)
  trial.check(final !== undefined && final === expected, `final loss ${final === undefined ? "missing" : lossValue(final)} differs from the uninterrupted run's ${lossValue(expected!)}`)
  for (let step = resumedAt + 1; step <= STEPS; step++)
    trial.check(hit.losses.get(step) === whole.losses.get(step), `step ${step}: loss ${lossValue(hit.losses.get(step)!)} after recovery, ${lossValue(whole.losses.get(step)!)} uninterrupted`)
}

export const lostWorkerRecovered = (): Promise<Trial> => attempt(async (trial) => {
  const roots = [mkdtempSync(join(tmpdir(), "monarch-recover-")), mkdtempSync(join(tmpdir(), "monarch-recover-"))]
  try {
    const whole = await supervised(local(roots[0]!), { dp: 2, tp: 2 })
    const t0 = performance.now()
    const hit = await supervised(local(roots[1]!), { dp: 2, tp: 2 }, KILLED)
    trial.figure("run with a recovery", performance.now() - t0)
    checkRecovered(trial, whole, hit, KILLED)
    trial.check(hit.reports[0]?.lost.signal === "SIGKILL", `the lost rank's signal was ${hit.reports[0]?.lost.signal}, not SIGKILL`)
  } finally {
    for (const root of roots) rmSync(root, { recursive: true, force: true })
  }
})
