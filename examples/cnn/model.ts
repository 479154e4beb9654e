/**
 * A small CNN on a dp mesh, written like the PyTorch it mirrors (examples/cnn/twin.py): conv2d
 * (3x3, padding 1, no bias), batch_norm (training: each rank's own batch statistics and running
 * statistics, as DistributedDataParallel without SyncBatchNorm), relu, max_pool2d 2; conv2d
 * (groups 2, dilation 2, padding 2), group_norm (4 groups), relu, avg_pool2d 2; a linear head and
 * cross-entropy. Data parallelism splits the batch over dp; each gradient is averaged over dp as
 * soon as backward has it.
 */
import { Effect } from "effect"
import { allReduce, type ControllerError, gradGenerator, HostTensor, type Mesh, noGrad, ops, opsOn, type RemoteTensor, shard, zeroGrad } from "../../src/controller/index.ts"
import { AdamW } from "../../src/optim/index.ts"
import { distribute, type Stepper } from "../gpt/model.ts"
import { adamw, type AdamWOptions } from "../gpt/twin.ts"
import { CHANNELS, CNN_PARAMS, type ImageBatch, SIZE } from "./data.ts"

const f32 = (shape: ReadonlyArray<number>, data: Float32Array) => new HostTensor("f32", shape, new Uint8Array(data.buffer, data.byteOffset, data.byteLength))
const i64 = (shape: ReadonlyArray<number>, data: ReadonlyArray<number>) => new HostTensor("i64", shape, new Uint8Array(BigInt64Array.from(data, BigInt).buffer))

/** A batch on the mesh: its images [B/dp, 2, 8, 8] and classes [B/dp], rows split over dp. */
export const distributeImages = (mesh: Mesh, b: ImageBatch) =>
  Effect.all([
    distribute(mesh, f32([b.rows, CHANNELS, SIZE, SIZE], Float32Array.from(b.x)), { dp: shard(0) }),
    distribute(mesh, i64([b.rows], b.y), { dp: shard(0) }),
  ])

export class CNN {
  private constructor(
    readonly params: ReadonlyMap<string, RemoteTensor>,
    /** bn1's running statistics: each rank's own, moved by its own batches. */
    readonly runningMean: RemoteTensor,
    readonly runningVar: RemoteTensor,
  ) {}

  /** The model on `mesh` from whole initial weights (data.ts's names), every parameter replicated. */
  static make(mesh: Mesh, weights: ReadonlyMap<string, Float32Array>): Effect.Effect<CNN, ControllerError> {
    return Effect.gen(function* () {
      const params = new Map<string, RemoteTensor>()
      for (const p of CNN_PARAMS) params.set(p.name, (yield* distribute(mesh, f32(p.shape, weights.get(p.name)!), {})).requiresGrad_())
      const on = opsOn(mesh)
      return new CNN(params, on.zeros([8], { dtype: "f32" }), on.ones([8], { dtype: "f32" }))
    })
  }

  get parameters(): RemoteTensor[] {
    return [...this.params.values()]
  }

  private p(name: string): RemoteTensor {
    return this.params.get(name)!
  }

  /** Logits [B, 4] for images [B, 2, 8, 8]; `training` picks batch_norm's batch or running statistics. */
  forward(x: RemoteTensor, training: boolean): RemoteTensor {
    let h = ops.conv2d(x, this.p("conv1.weight"), null, 1, 1)
    h = ops.batch_norm(h, this.runningMean, this.runningVar, this.p("bn1.weight"), this.p("bn1.bias"), training, 0.1, 1e-5)
    h = ops.max_pool2d(ops.relu(h), 2)
    h = ops.conv2d(h, this.p("conv2.weight"), this.p("conv2.bias"), 1, 2, 2, 2)
    h = ops.avg_pool2d(ops.relu(ops.group_norm(h, 4, this.p("gn.weight"), this.p("gn.bias"))), 2)
    return ops.linear(h.reshape([h.shape![0]!, -1]), this.p("fc.weight"), this.p("fc.bias"))
  }

  loss(x: RemoteTensor, y: RemoteTensor, training: boolean): RemoteTensor {
    return ops.cross_entropy(this.forward(x, training), y)
  }
}

/** One training step: forward (batch statistics), backward with each gradient averaged over dp, the optimizer's step; the loss averaged over dp. */
export const cnnStep = (model: CNN, opt: Stepper, x: RemoteTensor, y: RemoteTensor): Effect.Effect<RemoteTensor, ControllerError> =>
  Effect.sync(() => {
    const loss = model.loss(x, y, true)
    for (const [p, g] of gradGenerator(loss, model.parameters)) {
      p.grad = noGrad(() => allReduce(g, "dp", "avg")).place(p.placement)
      g.release()
    }
    opt.step()
    zeroGrad(model.parameters)
    return noGrad(() => allReduce(loss.detach(), "dp", "avg"))
  })

/** The loss in eval mode (each rank's running statistics), averaged over dp. */
export const cnnEval = (model: CNN, x: RemoteTensor, y: RemoteTensor): RemoteTensor => noGrad(() => allReduce(model.loss(x, y, false), "dp", "avg"))

/** Trains from `weights` on `batches` (AdamW), then takes the eval loss on `heldOut`: each step's loss and that eval loss. */
export const trainCnn = (mesh: Mesh, weights: ReadonlyMap<string, Float32Array>, batches: ReadonlyArray<ImageBatch>, heldOut: ImageBatch, optim: AdamWOptions) =>
  Effect.gen(function* () {
    const model = yield* CNN.make(mesh, weights)
    const opt = new AdamW(model.parameters, adamw(optim))
    const losses: number[] = []
    for (const b of batches) {
      const [x, y] = yield* distributeImages(mesh, b)
      losses.push(((yield* mesh.fetch(yield* cnnStep(model, opt, x, y))) as HostTensor<"f32">).toArray()[0]!)
    }
    const [x, y] = yield* distributeImages(mesh, heldOut)
    const held = ((yield* mesh.fetch(cnnEval(model, x, y))) as HostTensor<"f32">).toArray()[0]!
    return { losses, eval: held }
  })
