/**
 * A small GPT on a dp x tp mesh, written like the PyTorch it mirrors (examples/gpt/twin.py is
 * that PyTorch): token and position embeddings, pre-norm blocks of causal multi-head attention
 * and a GELU MLP, a final layer norm, a tied or untied head, cross-entropy.
 *
 * Tensor parallelism is Megatron-LM's: q, k, v and the MLP's first layer are column-parallel
 * (each tp rank has whole heads, whole MLP columns); the two output projections are row-parallel,
 * their partial sums reduced over tp (`allReduce`, Megatron's g, whose backward is the identity)
 * before the bias; `copyTo` (Megatron's f) marks where the replicated activations enter the
 * column-parallel layers (forward the same values, backward an all-reduce). Data parallelism
 * splits the batch over dp; `trainStep` averages each gradient over dp as soon as backward has
 * it. Everything else is replicated.
 */
import { Effect } from "effect"
import { allReduce, autocast, blockOf, compile, type ControllerError, type LowDType, copyTo, gradGenerator, HostTensor, type Mesh, noGrad, opsOn, ops, type PlacementSpec, type RemoteTensor, shard, zeroGrad } from "../../src/controller/index.ts"
import { clipGradNorm, type StepAt } from "../../src/optim/index.ts"
import type { Batch } from "./data.ts"
import { type GPTConfig, paramSpecs, splitDim } from "./weights.ts"

const f32 = (shape: ReadonlyArray<number>, data: Float32Array) => new HostTensor("f32", shape, new Uint8Array(data.buffer, data.byteOffset, data.byteLength))
const i64 = (shape: ReadonlyArray<number>, data: ReadonlyArray<number>) => new HostTensor("i64", shape, new Uint8Array(BigInt64Array.from(data, BigInt).buffer))

/**
 * A whole host tensor put on the mesh as `placement` says: every rank is sent the whole and keeps
 * its own block (examples/gpt/shards.ts), so the values are exactly the host's.
 */
export const distribute = (mesh: Mesh, whole: HostTensor, placement: PlacementSpec): Effect.Effect<RemoteTensor, ControllerError> =>
  Effect.gen(function* () {
    const local = whole.shape.map((n, d) => {
      const parts = Object.entries(placement).reduce((p, [m, pl]) => (pl.kind === "shard" && pl.dim === d ? p * mesh.dims[m]! : p), 1)
      return n / parts
    })
    const offsets: number[][] = []
    for (const r of mesh.ranks) offsets[r] = blockOf({ ...Object.fromEntries(mesh.names.map((n) => [n, { kind: "replicate" as const }])), ...placement }, mesh, r, local).offsets
    const t = yield* mesh.call("examples/gpt/shards:block", [whole, offsets, local], {}, { results: [{ dtype: whole.dtype, shape: local }] })
    return t.place(placement)
  })

/** A step's batch on the mesh: its rows split over dp (inputs [B/dp, T], targets flattened [B/dp * T]). */
export const distributeBatch = (mesh: Mesh, b: Batch) =>
  Effect.all([
    distribute(mesh, i64([b.rows, b.length], b.x), { dp: shard(0) }),
    distribute(mesh, i64([b.rows * b.length], b.y), { dp: shard(0) }),
  ])

export class GPT {
  private constructor(
    readonly mesh: Mesh,
    readonly config: GPTConfig,
    /** By torch's names (`h.0.attn.q.weight`); each rank holds its tp shard. */
    readonly params: ReadonlyMap<string, RemoteTensor>,
    /** [block, block]: 0 on and below the diagonal, -inf above (a position sees only the past). */
    private readonly mask: RemoteTensor,
    private readonly positions: RemoteTensor,
  ) {}

  /** The model on `mesh` (dims dp and tp), from whole initial weights (weights.ts's names). */
  static make(mesh: Mesh, config: GPTConfig, weights: ReadonlyMap<string, Float32Array>): Effect.Effect<GPT, ControllerError> {
    return Effect.gen(function* () {
      const tp = mesh.dims.tp ?? 1
      if (config.heads % tp !== 0) return yield* Effect.die(new Error(`${config.heads} heads do not split over tp=${tp}`))
      const params = new Map<string, RemoteTensor>()
      for (const s of paramSpecs(config)) {
        const d = splitDim(s)
        const p = yield* distribute(mesh, f32(s.shape, weights.get(s.name)!), d === undefined ? {} : { tp: shard(d) })
        params.set(s.name, p.requiresGrad_())
      }
      const T = config.block
      const mask = new Float32Array(T * T).map((_, i) => (i % T > Math.floor(i / T) ? -Infinity : 0))
      const on = opsOn(mesh)
      return new GPT(mesh, config, params, yield* distribute(mesh, f32([T, T], mask), {}), on.arange(T))
    })
  }

  /** Every parameter, in torch's `model.parameters()` order. */
  get parameters(): RemoteTensor[] {
    return [...this.params.values()]
  }

  private p(name: string): RemoteTensor {
    return this.params.get(name)!
  }

  private attention(i: number, x: RemoteTensor): RemoteTensor {
    const [B, T, C] = x.shape! as [number, number, number]
    const w = (n: string) => this.p(`h.${i}.attn.${n}`)
    const headDim = C / this.config.heads, heads = this.config.heads / (this.mesh.dims.tp ?? 1)
    const h = copyTo(x, "tp")
    const split = (t: RemoteTensor) => t.reshape([B, T, heads, headDim]).transpose(1, 2)
    const [q, k, v] = ["q", "k", "v"].map((n) => split(ops.linear(h, w(`${n}.weight`), w(`${n}.bias`))))
    const mask = T === this.config.block ? this.mask : this.mask.narrow(0, 0, T).narrow(1, 0, T)
    const scores = q!.matmul(k!.transpose(-2, -1)).mul(1 / Math.sqrt(headDim)).add(mask)
    const y = scores.softmax(-1).matmul(v!).transpose(1, 2).reshape([B, T, heads * headDim])
    return allReduce(ops.linear(y, w("proj.weight")), "tp").add(w("proj.bias"))
  }

  private mlp(i: number, x: RemoteTensor): RemoteTensor {
    const w = (n: string) => this.p(`h.${i}.mlp.${n}`)
    const h = ops.gelu(ops.linear(copyTo(x, "tp"), w("fc.weight"), w("fc.bias")))
    return allReduce(ops.linear(h, w("proj.weight")), "tp").add(w("proj.bias"))
  }

  /** Logits [B, T, vocab] for token ids [B, T]. */
  forward(idx: RemoteTensor): RemoteTensor {
    const { dim, layers, tied } = this.config
    const T = idx.shape![1]!
    const norm = (x: RemoteTensor, name: string) => ops.layer_norm(x, [dim], this.p(`${name}.weight`), this.p(`${name}.bias`))
    let x = ops.embedding(idx, this.p("wte.weight")).add(ops.embedding(this.positions.narrow(0, 0, T), this.p("wpe.weight")))
    for (let i = 0; i < layers; i++) {
      x = x.add(this.attention(i, norm(x, `h.${i}.ln1`)))
      x = x.add(this.mlp(i, norm(x, `h.${i}.ln2`)))
    }
    x = norm(x, "ln_f")
    return tied ? x.matmul(this.p("wte.weight").t()) : ops.linear(x, this.p("head.weight"))
  }

  /** Mean cross-entropy over the scored positions of this rank's rows (targets [B * T], IGNORE elsewhere). */
  loss(idx: RemoteTensor, targets: RemoteTensor): RemoteTensor {
    return ops.cross_entropy(this.forward(idx).reshape([-1, this.config.vocab]), targets)
  }
}

/** Anything that steps parameters from their `.grad` (src/optim's AdamW, SGD), at a learning rate. */
export interface Stepper {
  lr: number
  step(grads?: undefined, at?: StepAt): void
}

/** Where a step is in a schedule: its learning rate, and its number (1 for the first). */
export interface Scheduled {
  readonly lr: number
  readonly step: number
}

/**
 * One training step: forward, backward with each gradient averaged over dp as soon as it is
 * final (the gradient generator), clipping by global norm across the dp and tp shards (when
 * `clip` is given), the optimizer's step (at `at`'s learning rate and step number, when given).
 * With `precision`, forward and the loss run under autocast to that low type (the parameters
 * stay f32: the optimizer steps those masters).
 * Returns the loss averaged over dp, a handle (fetch it to wait for the step).
 */
export const trainStep = (model: GPT, opt: Stepper, x: RemoteTensor, y: RemoteTensor, clip?: number, at?: Scheduled, precision?: LowDType): Effect.Effect<RemoteTensor, ControllerError> =>
  Effect.gen(function* () {
    if (at !== undefined) opt.lr = at.lr
    const loss = precision === undefined ? model.loss(x, y) : autocast(precision, () => model.loss(x, y))
    for (const [p, g] of gradGenerator(loss, model.parameters)) {
      p.grad = noGrad(() => allReduce(g, "dp", "avg")).place(p.placement)
      g.release()
    }
    if (clip !== undefined) (yield* clipGradNorm(model.parameters.map((p) => p.grad!), clip)).release()
    opt.step(undefined, at && { step: at.step })
    zeroGrad(model.parameters)
    return noGrad(() => allReduce(loss.detach(), "dp", "avg"))
  })

/**
 * trainStep recorded once (compile) and replayed with one message per worker: the learning
 * rate and the step number are arguments, given as replay parameters (`step(x, y, param(lr),
 * param(t))`), so a schedule replays without tracing again. Its first call runs op by op (warmup), so that AdamW's moments exist
 * before the step is recorded.
 */
export const compiledTrainStep = (model: GPT, opt: Stepper, clip?: number) =>
  compile((x: RemoteTensor, y: RemoteTensor, lr: number, step: number) => trainStep(model, opt, x, y, clip, { lr, step }), { name: "trainStep", warmup: 1 })
