// A whole training step recorded once (real workers, dp=2): forward, backward (autograd's
// ordinary commands), the gradient's all_reduce and an SGD update of a captured weight, with a
// learning rate that changes every call, replayed without retracing and matching the same step
// run op by op, bit for bit. With AdamW, whose moments are made on its first step: compiled with
// warmup: 1 (that call op by op, the next traced) and the step number passed in, replays equal
// the same steps op by op; without warmup the step is refused at its first call, saying why.
import { afterAll, beforeAll, expect, test } from "bun:test"
import { Effect, ManagedRuntime } from "effect"
import { compile, Controller, grad, noGrad, opsOn, param, type Mesh, type RemoteTensor } from "../../src/controller/index.ts"
import { AdamW } from "../../src/optim/index.ts"

const ROOT = new URL("../..", import.meta.url).pathname
let rt: ManagedRuntime.ManagedRuntime<Controller, unknown>
let mesh: Mesh

beforeAll(async () => {
  rt = ManagedRuntime.make(Controller.local({ world: 2, functionPath: [ROOT], onWorkerLine: () => {} }))
  const ctl = await rt.runPromise(Effect.service(Controller))
  mesh = await rt.runPromise(ctl.mesh({ dp: 2 }))
}, 60_000)
afterAll(() => rt?.dispose())

const run = <A, E>(e: Effect.Effect<A, E, Controller>) => rt.runPromise(e)
const all = (t: RemoteTensor) => run(Effect.map(mesh.fetchAll(t), (hs) => hs.map((h) => Array.from((h as { toArray(): Float32Array }).toArray()))))

/** One SGD step of a one-layer model on `w`: the loss, with w updated in place. */
const training = (w: RemoteTensor) => (x: RemoteTensor, y: RemoteTensor, lr: number) => Effect.gen(function* () {
  const err = x.matmul(w).relu().sub(y)
  const loss = err.mul(err).mean()
  const [g] = grad(loss, [w])
  const avg = yield* mesh.reduce(g!, "dp", "avg")
  noGrad(() => w.sub_(avg.mul(lr)))
  return loss
})

test("forward, backward, all_reduce and the optimizer step in one recording, replayed with a new learning rate each call", async () => {
  const on = opsOn(mesh)
  const w1 = on.randn([8, 4], { seed: 3 }).requiresGrad_(), w2 = on.randn([8, 4], { seed: 3 }).requiresGrad_()
  // Each rank its own batch, so the all_reduce matters.
  const x = await run(mesh.call("tests/recordings/fixtures:byRank", [on.randn([16, 8], { seed: 4 })], {}, { results: [{ dtype: "f32", shape: [16, 8] }] }))
  const y = on.randn([16, 4], { seed: 5 })
  const retraces: string[] = []
  const step = compile(training(w1), { onRetrace: (why) => void retraces.push(why) })
  const eager = training(w2)
  const losses: number[] = []
  for (let i = 0; i < 6; i++) {
    const lr = 0.05 / (1 + i)
    const recorded = await run(step(x, y, param(lr)))
    const plain = await run(eager(x, y, lr))
    expect(await all(recorded)).toEqual(await all(plain))
    expect(await all(w1)).toEqual(await all(w2))
    losses.push((await all(recorded))[0]![0]!)
  }
  expect(step.traces).toBe(1)
  expect(retraces).toEqual([])
  expect(losses.at(-1)!).toBeLessThan(losses[0]!)
}, 60_000)

/** An AdamW step of the same model: gradients averaged over dp into each .grad, lr and step number given. */
const adamStep = (w: RemoteTensor, opt: AdamW) => (x: RemoteTensor, y: RemoteTensor, lr: number, t: number) => Effect.gen(function* () {
  const err = x.matmul(w).relu().sub(y)
  const loss = err.mul(err).mean()
  const [g] = grad(loss, [w])
  w.grad = yield* mesh.reduce(g!, "dp", "avg")
  opt.lr = lr
  opt.step(undefined, { step: t })
  opt.zeroGrad()
  return loss
})

test("an AdamW step compiled with warmup: 1 replays as its steps run op by op, its moments kept and its lr and step number replay parameters", async () => {
  const on = opsOn(mesh)
  const w1 = on.randn([8, 4], { seed: 3 }).requiresGrad_(), w2 = on.randn([8, 4], { seed: 3 }).requiresGrad_()
  const opt1 = new AdamW([w1], { lr: 0.01 }), opt2 = new AdamW([w2], { lr: 0.01 })
  const x = await run(mesh.call("tests/recordings/fixtures:byRank", [on.randn([16, 8], { seed: 4 })], {}, { results: [{ dtype: "f32", shape: [16, 8] }] }))
  const y = on.randn([16, 4], { seed: 5 })
  const step = compile(adamStep(w1, opt1), { warmup: 1, onRetrace: (why) => { throw new Error(why) } })
  const eager = adamStep(w2, opt2)
  for (let i = 0; i < 6; i++) {
    const lr = 0.02 / (1 + i)
    expect(await all(await run(step(x, y, param(lr), param(i + 1))))).toEqual(await all(await run(eager(x, y, lr, i + 1))))
    expect(await all(w1)).toEqual(await all(w2))
  }
  // The first call ran op by op, the second was traced, the rest replayed.
  expect(step.traces).toBe(1)
  expect(await all(opt1.state.get(w1)!.expAvg)).toEqual(await all(opt2.state.get(w2)!.expAvg))
}, 60_000)

test("without warmup, a step whose optimizer makes its moments on the first call is refused, saying to warm it up; nothing is sent", async () => {
  const on = opsOn(mesh)
  const w = on.randn([8, 4], { seed: 3 }).requiresGrad_()
  const before = await all(w)
  const step = compile(adamStep(w, new AdamW([w])), { name: "cold" })
  const failure = await run(Effect.flip(step(on.randn([16, 8], { seed: 4 }), on.randn([16, 4], { seed: 5 }), 0.01, 1)))
  expect(failure.message).toMatch(/^compile\(cold\): traced again, its step uses a tensor its first trace made \(.* was made inside compile\(cold\)'s step and not returned from it: .*\): state made on its first call, such as an optimizer's moments, would be made afresh by every replay; compile it with \{ warmup: 1 \}/)
  expect(await all(w)).toEqual(before)
}, 60_000)
