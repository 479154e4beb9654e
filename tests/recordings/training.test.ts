// A whole training step recorded once (real workers, dp=2): forward, backward (autograd's
// ordinary commands), the gradient's all_reduce and an SGD update of a captured weight, with a
// learning rate that changes every call, replayed without retracing and matching the same step
// run op by op, bit for bit.
import { afterAll, beforeAll, expect, test } from "bun:test"
import { Effect, ManagedRuntime } from "effect"
import { compile, Controller, grad, noGrad, opsOn, type Mesh, type RemoteTensor } from "../../src/controller/index.ts"

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
    const recorded = await run(step(x, y, lr))
    const plain = await run(eager(x, y, lr))
    expect(await all(recorded)).toEqual(await all(plain))
    expect(await all(w1)).toEqual(await all(w2))
    losses.push((await all(recorded))[0]![0]!)
  }
  expect(step.traces).toBe(1)
  expect(retraces).toEqual([])
  expect(losses.at(-1)!).toBeLessThan(losses[0]!)
}, 60_000)
