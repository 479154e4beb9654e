/**
 * A user's program written from the README only, run from a folder where monarch-bun was
 * installed from its tarball (tests/package): linear regression on a {dp: 2} mesh with AdamW,
 * each step a compiled step (the gradient by grad(), averaged over dp, the lr and step number as
 * replay parameters) called inside a step scope. Trained 6 steps without a break, and 3 steps,
 * saved (weights and the optimizer's stateDict), loaded into a fresh model and optimizer and
 * trained 3 more. Prints one JSON line: both runs' losses and final weights.
 */
import { Effect } from "effect"
import { compile, Controller, grad, inStep, load, opsOn, param, restoreInto, save, type Mesh, type RemoteTensor } from "monarch-bun/controller"
import { AdamW, warmupCosine, type AdamWOptions, type OptimizerStateDict } from "monarch-bun/optim"

const STEPS = 6, STOP = 3
const lr = warmupCosine({ lr: 0.1, warmup: 2, total: STEPS })

/** A model (its weight), its optimizer and its compiled training step. */
const model = (mesh: Mesh) => {
  const w = opsOn(mesh).zeros([4, 1]).requiresGrad_()
  const opt = new AdamW([w], { lr: 0.1, weightDecay: 0.01 })
  const step = compile((x: RemoteTensor, y: RemoteTensor, rate: number, t: number) => Effect.gen(function* () {
    const err = x.matmul(w).sub(y)
    const loss = err.mul(err).mean()
    const [g] = grad(loss, [w])
    const avg = yield* mesh.reduce(g!, "dp", "avg")
    opt.lr = rate
    opt.step([[w, avg]], { step: t })
    return loss
  }), { warmup: 1 })
  return { w, opt, step }
}

/** Steps from..to-1, each in its own step scope; their losses. */
const train = (mesh: Mesh, m: ReturnType<typeof model>, from: number, to: number) => Effect.gen(function* () {
  const on = opsOn(mesh)
  const losses: number[] = []
  for (let t = from; t < to; t++) {
    const loss = yield* inStep(mesh, Effect.gen(function* () {
      const x = on.randn([16, 4], { seed: t })
      const y = x.matmul(on.arange(1, 5).reshape([4, 1]).mul(0.25))
      return yield* m.step(x, y, param(lr(t)), param(t + 1))
    }))
    losses.push(Number((yield* loss.fetch()).toArray()[0]))
    loss.release()
  }
  return losses
})

const weights = (w: RemoteTensor) => w.fetch().pipe(Effect.map((h) => [...h.toArray()].map(Number)))

const program = Effect.gen(function* () {
  const ctl = yield* Controller
  const mesh = yield* ctl.mesh({ dp: 2 })
  const whole = model(mesh)
  const wholeLosses = yield* train(mesh, whole, 0, STEPS)

  const first = model(mesh)
  const firstLosses = yield* train(mesh, first, 0, STOP)
  const pending = yield* save(mesh, { w: first.w, opt: first.opt.stateDict(), step: STOP }, "run")
  yield* pending.durable

  const resumed = model(mesh)
  const loaded = (yield* load(mesh, "run")).state as { w: RemoteTensor; opt: OptimizerStateDict<AdamWOptions>; step: number }
  yield* restoreInto({ w: resumed.w }, { w: loaded.w })
  resumed.opt.loadStateDict(loaded.opt)
  const resumedLosses = yield* train(mesh, resumed, loaded.step, STEPS)
  return {
    whole: { losses: wholeLosses, weights: yield* weights(whole.w) },
    resumed: { losses: [...firstLosses, ...resumedLosses], weights: yield* weights(resumed.w) },
    traces: [whole.step.traces, resumed.step.traces],
  }
})

const result = await Effect.runPromise(program.pipe(Effect.provide(Controller.local({ world: 2, checkpoints: "ckpt" }))))
console.log(JSON.stringify(result))
