// The GPT on the mesh (examples/gpt/model.ts) against its torch twin (examples/gpt/twin.py):
// the same initial weights and batches, handed to torch rather than re-drawn, AdamW with the
// same hyper-parameters and gradient clipping by global norm; the first 20 losses must agree within 1e-4 relative (f32), with
// tp=1 (dp=4, tied head), its steps issued op by op, and tp=2 (dp=2, untied head), its steps
// through compile as the demo runs them (one trace, replays with a warmup-cosine schedule's
// learning rate). Skips, saying why, without torch.
import { afterAll, beforeAll, expect, test } from "bun:test"
import { Effect, ManagedRuntime } from "effect"
import { Controller, type ControllerApi, type HostTensor, param, type RemoteTensor, replicate, shard } from "../../src/controller/index.ts"
import { AdamW, warmupCosine } from "../../src/optim/index.ts"
import { blockSize, makeBatches, VOCAB } from "../../examples/gpt/data.ts"
import { compiledTrainStep, distributeBatch, GPT, trainStep } from "../../examples/gpt/model.ts"
import { adamw, torchLosses, torchMissing, type AdamWOptions } from "../../examples/gpt/twin.ts"
import { type GPTConfig, initialWeights, paramSpecs } from "../../examples/gpt/weights.ts"
import { describeUnless } from "../skip.ts"

const ROOT = new URL("../..", import.meta.url).pathname
const STEPS = 20, ROWS = 16, DIGITS = 4
/** Small enough that every step clips: the global norm over the dp and tp shards must be torch's. */
const CLIP = 0.05
const schedule = warmupCosine({ lr: 3e-3, warmup: 4, total: STEPS, minLr: 3e-4 })
const OPTIM: AdamWOptions = { lr: 3e-3, betas: [0.9, 0.99], eps: 1e-8, weight_decay: 0.01, clip: CLIP, lrs: Array.from({ length: STEPS }, (_, t) => schedule(t)) }
let rt: ManagedRuntime.ManagedRuntime<Controller, unknown>
let ctl: ControllerApi

const lossesOnMesh = (dims: { dp: number; tp: number }, config: GPTConfig, weights: ReadonlyMap<string, Float32Array>, compiled: boolean) =>
  rt.runPromise(Effect.gen(function* () {
    const mesh = yield* ctl.mesh(dims)
    const model = yield* GPT.make(mesh, config, weights)
    // The parameters say how tp splits them (checkpoints and clipping read it).
    expect([model.params.get("h.0.attn.q.weight")!.placement.tp, model.params.get("h.0.mlp.proj.weight")!.placement.tp, model.params.get("wte.weight")!.placement.tp])
      .toEqual([shard(0), shard(1), replicate])
    const opt = new AdamW(model.parameters, adamw(OPTIM))
    const recorded = compiledTrainStep(model, opt, OPTIM.clip)
    const step = (x: RemoteTensor, y: RemoteTensor, t: number) => (compiled ? recorded(x, y, param(schedule(t)), param(t + 1)) : trainStep(model, opt, x, y, OPTIM.clip, { lr: schedule(t), step: t + 1 }))
    const losses: number[] = []
    for (const [t, b] of makeBatches(11, STEPS, ROWS, DIGITS).entries()) {
      const [x, y] = yield* distributeBatch(mesh, b)
      losses.push(((yield* mesh.fetch(yield* step(x, y, t))) as HostTensor<"f32">).toArray()[0]!)
    }
    // Compiled: the first call ran op by op, the second was traced, the rest replayed.
    expect(recorded.traces).toBe(compiled ? 1 : 0)
    recorded.dispose()
    return losses
  }))

const compare = async (dims: { dp: number; tp: number }, tied: boolean, compiled: boolean) => {
  const config: GPTConfig = { vocab: VOCAB, block: blockSize(DIGITS), dim: 32, heads: 4, layers: 2, tied }
  const weights = initialWeights(config, 5)
  const shapes = new Map(paramSpecs(config).map((s) => [s.name, s.shape]))
  const [ours, theirs] = await Promise.all([lossesOnMesh(dims, config, weights, compiled), torchLosses(config, weights, shapes, makeBatches(11, STEPS, ROWS, DIGITS), OPTIM)])
  expect(ours.length).toBe(STEPS)
  const off = ours.flatMap((l, i) => (Math.abs(l - theirs[i]!) <= 1e-4 * Math.abs(theirs[i]!) ? [] : [`step ${i + 1}: mesh ${l}, torch ${theirs[i]}`]))
  expect(off).toEqual([])
  // Training, not just agreeing: the loss fell.
  expect(ours.at(-1)!).toBeLessThan(ours[0]!)
}

describeUnless(torchMissing())("the GPT's losses against its torch twin", () => {
  beforeAll(async () => {
    rt = ManagedRuntime.make(Controller.local({ world: 4, functionPath: [ROOT], onWorkerLine: () => {} }))
    ctl = await rt.runPromise(Effect.service(Controller))
  }, 60_000)
  afterAll(() => rt?.dispose())

  test("tp=1 (dp=4, tied head), op by op: the first 20 losses within 1e-4 relative", () => compare({ dp: 4, tp: 1 }, true, false), 120_000)
  test("tp=2 (dp=2, untied head), through compile: the first 20 losses within 1e-4 relative", () => compare({ dp: 2, tp: 2 }, false, true), 120_000)
})
