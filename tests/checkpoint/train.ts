/**
 * A small model trained on a mesh for the resume and recovery tests, until the GPT demo lands:
 * a linear layer y = x W^T, its rows sharded over tp, on data each rank draws from the step and
 * its rank, mean-squared error, the gradient written by hand (until autograd lands) and averaged
 * over dp, and src/optim's fused AdamW, whose moments and step the saved state carries. Every
 * step is a function of the state and the step, so a resumed run repeats an uninterrupted one
 * bit for bit.
 */
import { Effect } from "effect"
import { eager, opsOn, shard, type HostTensor, type Mesh, type RemoteTensor, type State } from "../../src/controller/index.ts"
import { AdamW } from "../../src/optim/index.ts"

export interface TrainState {
  readonly w: RemoteTensor
  readonly opt: AdamW
  step: number
}

const IN = 6, OUT = 8, BATCH = 16

export const initState = (mesh: Mesh): Effect.Effect<TrainState, unknown> =>
  eager(() => {
    const rows = OUT / (mesh.dims.tp ?? 1)
    // Each tp rank's block of W: rows of the whole, drawn from the same seed so dp replicas agree.
    const w = opsOn(mesh).randn([rows, IN], { seed: 11 }).place({ tp: shard(0) })
    return { w, opt: new AdamW([w], { lr: 0.05, weightDecay: 0.01 }), step: 0 }
  })

/** What a checkpoint holds: the weight, AdamW's state for it (its step and moments) and the step. */
export const saved = (s: TrainState): State => {
  const a = s.opt.state.get(s.w)
  return { w: s.w, adam: a === undefined ? null : { step: a.step, expAvg: a.expAvg, expAvgSq: a.expAvgSq }, step: s.step }
}

/** A state from a loaded checkpoint: the weight, a new AdamW given its saved state, the step. */
export const restored = (tree: State): TrainState => {
  const t = tree as { w: RemoteTensor; adam: { step: number; expAvg: RemoteTensor; expAvgSq: RemoteTensor } | null; step: number }
  const opt = new AdamW([t.w], { lr: 0.05, weightDecay: 0.01 })
  if (t.adam !== null) opt.state.set(t.w, { ...t.adam, maxExpAvgSq: undefined })
  return { w: t.w, opt, step: t.step }
}

/** One AdamW step on the state; returns the step's loss as the mesh's mean. */
const step = (mesh: Mesh, s: TrainState): Effect.Effect<RemoteTensor, unknown> =>
  Effect.gen(function* () {
    const t = s.step + 1
    const x = yield* mesh.call("tests/checkpoint/fixtures:rankRandn", [[BATCH, IN], t], {}, { results: [{ dtype: "f32", shape: [BATCH, IN] }] })
    const target = yield* mesh.call("tests/checkpoint/fixtures:rankRandn", [[BATCH, s.w.shape![0]!], 100 + t], {}, { results: [{ dtype: "f32", shape: [BATCH, s.w.shape![0]!] }] })
    const { loss, grad } = yield* eager(() => {
      const err = x.matmul(s.w.t()).sub(target)
      return { loss: err.mul(err).mean(), grad: err.t().matmul(x).mul(2 / (BATCH * s.w.shape![0]!)) }
    })
    const g = yield* mesh.reduce(grad, "dp", "avg")
    const mean = yield* mesh.reduce(loss, ["dp", "tp"], "avg")
    yield* eager(() => s.opt.step([[s.w, g]]))
    s.step = t
    return mean
  })

/** Trains `steps` steps; each step's loss as its f32 bits, so equality is bitwise. */
export const train = (mesh: Mesh, s: TrainState, steps: number, afterStep?: (s: TrainState) => Effect.Effect<void, unknown>): Effect.Effect<number[], unknown> =>
  Effect.gen(function* () {
    const losses: number[] = []
    for (let i = 0; i < steps; i++) {
      const loss = yield* step(mesh, s)
      losses.push(new Uint32Array(((yield* mesh.fetch(loss)) as HostTensor).toArray().buffer as ArrayBuffer)[0]!)
      if (afterStep) yield* afterStep(s)
    }
    return losses
  })

/** A loss's f32 bits as the number it is, for messages. */
export const lossValue = (bits: number): number => new Float32Array(new Uint32Array([bits]).buffer)[0]!
