/**
 * A small model trained on a mesh for the resume and recovery tests, until the GPT demo and
 * AdamW land: a linear layer y = x W^T, its rows sharded over tp, on data each rank draws from
 * the step and its rank, mean-squared error, the gradient written by hand and averaged over dp,
 * and AdamW composed from ops (moments and step in the state). Everything a step computes is a
 * function of the state and the step, so a resumed run repeats an uninterrupted one bit for bit.
 */
import { Effect } from "effect"
import { eager, opsOn, shard, type HostTensor, type Mesh, type RemoteTensor } from "../../src/controller/index.ts"

export interface TrainState {
  w: RemoteTensor
  m: RemoteTensor
  v: RemoteTensor
  step: number
}

const IN = 6, OUT = 8, BATCH = 16
const LR = 0.05, B1 = 0.9, B2 = 0.999, EPS = 1e-8, WD = 0.01

export const initState = (mesh: Mesh): Effect.Effect<TrainState, unknown> =>
  eager(() => {
    const on = opsOn(mesh), rows = OUT / (mesh.dims.tp ?? 1)
    // Each tp rank's block of W: rows of the whole, drawn from the same seed so dp replicas agree.
    const w = on.randn([rows, IN], { seed: 11 }).place({ tp: shard(0) })
    return { w, m: on.zeros([rows, IN]).place({ tp: shard(0) }), v: on.zeros([rows, IN]).place({ tp: shard(0) }), step: 0 }
  })

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
    const next = yield* eager(() => {
      const m = s.m.mul(B1).add(g.mul(1 - B1)), v = s.v.mul(B2).add(g.mul(g).mul(1 - B2))
      const update = m.div(1 - B1 ** t).div(v.div(1 - B2 ** t).sqrt().add(EPS)).add(s.w.mul(WD))
      return { w: s.w.sub(update.mul(LR)).place({ tp: shard(0) }), m: m.place({ tp: shard(0) }), v: v.place({ tp: shard(0) }) }
    })
    Object.assign(s, next, { step: t })
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
