// An optimizer's stateDict() saved with the parameters by `save` and restored by `load`,
// restoreInto and loadStateDict() into a fresh model and optimizer resumes training bitwise
// equal to a run that was never interrupted (AdamW with amsgrad, SGD with nesterov momentum),
// inside step scopes, on a {dp: 2} mesh of real workers; loadStateDict refuses a state that does
// not fit the optimizer and changes nothing then.
import { afterAll, beforeAll, describe, expect, test } from "bun:test"
import { Effect, ManagedRuntime } from "effect"
import { mkdtempSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { Controller, ControllerError, HostTensor, inStep, load, opsOn, restoreInto, save, type Mesh, type RemoteTensor } from "../../src/controller/index.ts"
import { AdamW, SGD, type OptimizerStateDict } from "../../src/optim/index.ts"

const SHAPES = [[4, 3], [3]]
const root = mkdtempSync(join(tmpdir(), "monarch-statedict-"))
let rt: ManagedRuntime.ManagedRuntime<Controller, unknown>
let mesh: Mesh
const run = <A, E>(e: Effect.Effect<A, E, Controller>) => rt.runPromise(e)

beforeAll(async () => {
  rt = ManagedRuntime.make(Controller.local({ world: 2, checkpoints: root, onWorkerLine: () => {} }))
  const ctl = await rt.runPromise(Effect.service(Controller))
  mesh = await run(ctl.mesh({ dp: 2 }))
}, 90_000)
afterAll(async () => {
  await rt?.dispose()
  rmSync(root, { recursive: true, force: true })
})

const bytesOf = async (t: RemoteTensor) => [...((await run(t.fetch())) as HostTensor).data]
const params = (init: boolean) => SHAPES.map((s, i) => (init ? opsOn(mesh).randn(s, { seed: 10 + i }) : opsOn(mesh).zeros(s)))
/** Steps from..to-1, each in its own step scope with gradients drawn from the step number. */
const train = async (opt: AdamW | SGD, ps: RemoteTensor[], from: number, to: number) => {
  for (let s = from; s < to; s++)
    await run(inStep(mesh, Effect.sync(() => opt.step(ps.map((p, i) => [p, opsOn(mesh).randn(SHAPES[i]!, { seed: 1000 * s + i }).mul(3)] as const)))))
}

const optimizers = {
  "AdamW with amsgrad": (ps: RemoteTensor[], lr: number) => new AdamW(ps, { lr, amsgrad: true, weightDecay: 0.1 }),
  "SGD with nesterov momentum": (ps: RemoteTensor[], lr: number) => new SGD(ps, { lr, momentum: 0.9, nesterov: true }),
}

describe("an optimizer's stateDict through save and load", () => {
  for (const [name, make] of Object.entries(optimizers))
    test(`${name}: a resume through save, load and loadStateDict is bitwise the uninterrupted run`, async () => {
      const whole = params(true), wholeOpt = make(whole, 0.05)
      await train(wholeOpt, whole, 0, 6)

      const first = params(true), firstOpt = make(first, 0.05)
      await train(firstOpt, first, 0, 3)
      const saved = firstOpt.stateDict()
      expect(Object.keys(saved.state)).toEqual(["0", "1"])
      expect(saved.state["0"]!.step).toBe(3)
      expect(saved.param_groups.map((g) => [g.lr, g.params])).toEqual([[0.05, [0, 1]]])
      const dir = `run-${name.split(" ")[0]}`
      const pending = await run(save(mesh, { params: first, opt: saved, step: 3 }, dir))
      await run(pending.durable)

      // A fresh process's view: other parameters, an optimizer made with another lr, restored from disk.
      const resumed = params(false), resumedOpt = make(resumed, 0.5)
      const loaded = (await run(load(mesh, dir))).state as { params: RemoteTensor[]; opt: OptimizerStateDict<{ lr: number }>; step: number }
      await run(restoreInto({ params: resumed }, { params: loaded.params }))
      resumedOpt.loadStateDict(loaded.opt as never)
      expect(resumedOpt.lr).toBe(0.05)
      expect(resumedOpt.stateDict().state["1"]!.step).toBe(3)
      await train(resumedOpt, resumed, loaded.step, 6)

      for (const [i, p] of whole.entries()) {
        const bytes = await bytesOf(p)
        expect(bytes).toHaveLength(4 * SHAPES[i]!.reduce((a, b) => a * b, 1))
        expect({ param: i, bytes: await bytesOf(resumed[i]!) }).toEqual({ param: i, bytes })
      }
      const a = wholeOpt.stateDict().state, b = resumedOpt.stateDict().state
      for (const key of Object.keys(a))
        for (const [buffer, t] of Object.entries(a[key]!))
          if (typeof t === "number") expect({ key, buffer, value: b[key]![buffer] }).toEqual({ key, buffer, value: t })
          else expect({ key, buffer, bytes: await bytesOf(b[key]![buffer] as RemoteTensor) }).toEqual({ key, buffer, bytes: await bytesOf(t) })
    }, 60_000)

  test("param_groups number the parameters across groups, as torch's state_dict: a second group continues the count", async () => {
    const ps = params(true)
    const opt = new SGD([{ params: [ps[0]!], lr: 0.1 }, { params: [ps[1]!], lr: 0.2 }], { momentum: 0.9 })
    await train(opt, ps, 0, 1)
    const saved = opt.stateDict()
    expect(saved.param_groups.map((g) => [g.lr, g.params])).toEqual([[0.1, [0]], [0.2, [1]]])
    expect(Object.keys(saved.state)).toEqual(["0", "1"])
  })

  test("loadStateDict refuses a state that does not fit (groups, parameters, buffers, steps) and changes nothing", async () => {
    const ps = params(true), opt = new AdamW(ps, { lr: 0.01 })
    await train(opt, ps, 0, 2)
    const good = opt.stateDict()
    const before = { lr: opt.lr, state: [...opt.state.entries()] }
    const other = opsOn(mesh).zeros([2, 2]), gone = opsOn(mesh).zeros([4, 3])
    gone.release()
    const bad: Array<[string, unknown, RegExp]> = [
      ["two groups", { ...good, param_groups: [...good.param_groups, ...good.param_groups] }, /the state has 2 parameter groups, the optimizer 1/],
      ["a group of one parameter", { ...good, param_groups: [{ ...good.param_groups[0]!, params: [0] }] }, /group 0 of the state has 1 parameters, the optimizer's 2/],
      ["a bad lr", { ...good, param_groups: [{ ...good.param_groups[0]!, lr: -1 }] }, /group 0: invalid learning rate: -1/],
      ["a parameter index past the end", { ...good, state: { ...good.state, 2: good.state["0"] } }, /state 2 names no parameter \(the optimizer has 2\)/],
      ["a buffer of another shape", { ...good, state: { ...good.state, 0: { ...good.state["0"]!, exp_avg: other } } }, /state 0's exp_avg is f32\[2,2\] but its parameter is f32\[4,3\]/],
      ["an unknown buffer", { ...good, state: { ...good.state, 1: { ...good.state["1"]!, momentum_buffer: other } } }, /state 1 has momentum_buffer; a AdamW state holds step, exp_avg, exp_avg_sq, max_exp_avg_sq/],
      ["a released buffer", { ...good, state: { ...good.state, 0: { ...good.state["0"]!, exp_avg_sq: gone } } }, /state 0's exp_avg_sq RemoteTensor\(\d+ f32\[4,3\] on Mesh\(dp=2\)\) was released/],
      ["a step that is not a count", { ...good, state: { ...good.state, 0: { ...good.state["0"]!, step: 1.5 } } }, /state 0's step is 1.5, not a count of steps/],
    ]
    for (const [what, dict, message] of bad) {
      const refusal = (() => { try { opt.loadStateDict(dict as never) } catch (e) { return e } })()
      expect({ what, refused: refusal instanceof ControllerError, message: (refusal as Error)?.message }).toEqual({ what, refused: true, message: expect.stringMatching(message) })
    }
    expect({ lr: opt.lr, state: [...opt.state.entries()] }).toEqual(before)
    expect([...opt.state.values()].every((s) => !s.expAvg.released)).toBe(true)
  })
})
