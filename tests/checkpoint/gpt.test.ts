// Resume is exact with the GPT demo's model (examples/gpt) and src/optim's AdamW on a dp=2 x tp=2
// mesh: N steps, save (every parameter's tp shard, AdamW's step and moments), stop; a new
// controller builds the model, loads the checkpoint into it and trains M more: the losses of
// steps N+1..N+M are bitwise those of one uninterrupted N+M run (CPU). And its consolidated
// export: the trained parameters gathered whole into one safetensors file, which the demo's torch
// twin (examples/gpt/twin.py) loads strictly and whose loss on a batch matches the mesh's.
import { afterAll, expect, test } from "bun:test"
import { Effect } from "effect"
import { mkdtempSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { allReduce, Controller, exportFile, type HostTensor, load, noGrad, restoreInto, type RemoteTensor, save, type State } from "../../src/controller/index.ts"
import { describeUnless } from "../skip.ts"
import { PYTHON, torchMissing } from "../torch.ts"
import { AdamW } from "../../src/optim/index.ts"
import { blockSize, makeBatches, VOCAB } from "../../examples/gpt/data.ts"
import { distributeBatch, GPT, trainStep } from "../../examples/gpt/model.ts"
import { type GPTConfig, initialWeights } from "../../examples/gpt/weights.ts"

const REPO = new URL("../..", import.meta.url).pathname
const ROOT = mkdtempSync(join(tmpdir(), "monarch-gpt-ckpt-"))
afterAll(() => rmSync(ROOT, { recursive: true, force: true }))
const N = 3, M = 3, ROWS = 8, DIGITS = 3
const CONFIG: GPTConfig = { vocab: VOCAB, block: blockSize(DIGITS), dim: 16, heads: 2, layers: 1, tied: false }
const BATCHES = makeBatches(5, N + M, ROWS, DIGITS)
const OPTIONS = { lr: 3e-3, betas: [0.9, 0.99] as const, weightDecay: 0.01 }

/** The model and optimizer as a checkpoint's tree: parameters by torch's names, AdamW's state per parameter, the step. */
const tree = (model: GPT, opt: AdamW, step: number): State => ({
  params: Object.fromEntries(model.params),
  adam: Object.fromEntries([...model.params].map(([name, p]) => {
    const s = opt.state.get(p)!
    return [name, { step: s.step, expAvg: s.expAvg, expAvgSq: s.expAvgSq }]
  })),
  step,
})

const onMesh = <A>(body: (mesh: import("../../src/controller/index.ts").Mesh) => Effect.Effect<A, unknown, Controller>) =>
  Effect.runPromise(Effect.gen(function* () {
    return yield* body(yield* (yield* Controller).mesh({ dp: 2, tp: 2 }))
  }).pipe(Effect.provide(Controller.local({ world: 4, checkpoints: ROOT, functionPath: [REPO], onWorkerLine: () => {} }))) as Effect.Effect<A>)

/** Trains on BATCHES[from, to); each loss as its f32 bits. */
const train = (model: GPT, opt: AdamW, from: number, to: number) =>
  Effect.gen(function* () {
    const bits: number[] = []
    for (let s = from; s < to; s++) {
      const [x, y] = yield* distributeBatch(model.mesh, BATCHES[s]!)
      const loss = (yield* model.mesh.fetch(yield* trainStep(model, opt, x, y, 1))) as HostTensor
      bits.push(new Uint32Array(loss.toArray().buffer as ArrayBuffer)[0]!)
    }
    return bits
  })

test(`GPT + AdamW: train ${N}, save, stop; load, train ${M}: the losses equal an uninterrupted run bit for bit`, async () => {
  const weights = initialWeights(CONFIG, 1)
  const whole = await onMesh((mesh) => Effect.gen(function* () {
    const model = yield* GPT.make(mesh, CONFIG, weights)
    return yield* train(model, new AdamW(model.parameters, OPTIONS), 0, N + M)
  }))
  const first = await onMesh((mesh) => Effect.gen(function* () {
    const model = yield* GPT.make(mesh, CONFIG, weights)
    const opt = new AdamW(model.parameters, OPTIONS)
    const bits = yield* train(model, opt, 0, N)
    yield* Effect.flatMap(save(mesh, tree(model, opt, N), "gpt"), (p) => p.durable)
    return bits
  }))
  const resumed = await onMesh((mesh) => Effect.gen(function* () {
    // A model from other weights, overwritten by the checkpoint: nothing of the first run survives but the files.
    const model = yield* GPT.make(mesh, CONFIG, initialWeights(CONFIG, 2))
    const loaded = yield* load(mesh, "gpt")
    const saved = loaded.state as { params: Record<string, RemoteTensor>; adam: Record<string, { step: number; expAvg: RemoteTensor; expAvgSq: RemoteTensor }>; step: number }
    expect(saved.step).toBe(N)
    expect(saved.params["h.0.attn.q.weight"]!.placement).toEqual(model.params.get("h.0.attn.q.weight")!.placement)
    yield* restoreInto(Object.fromEntries(model.params), saved.params)
    const opt = new AdamW(model.parameters, OPTIONS)
    for (const [name, p] of model.params) opt.state.set(p, { ...saved.adam[name]!, maxExpAvgSq: undefined })
    return yield* train(model, opt, N, N + M)
  }))
  expect(first).toEqual(whole.slice(0, N))
  expect(resumed).toEqual(whole.slice(N))
}, 120_000)

describeUnless(torchMissing())("the GPT's consolidated export (torch 1.13)", () => {
  test("trained on the mesh, exported whole: the torch twin loads every parameter and its loss on a batch matches", async () => {
    const file = join(ROOT, "gpt.safetensors")
    const held = makeBatches(9, 1, ROWS, DIGITS)[0]!
    const ours = await onMesh((mesh) => Effect.gen(function* () {
      const model = yield* GPT.make(mesh, CONFIG, initialWeights(CONFIG, 1))
      yield* train(model, new AdamW(model.parameters, OPTIONS), 0, N)
      yield* exportFile(mesh, { params: Object.fromEntries(model.params) }, file)
      const [x, y] = yield* distributeBatch(mesh, held)
      const loss = noGrad(() => allReduce(model.loss(x, y), "dp", "avg"))
      return ((yield* mesh.fetch(loss)) as HostTensor).toArray()[0] as number
    }))
    const r = Bun.spawnSync([PYTHON, join(import.meta.dir, "safetensors_torch.py"), "gpt", file], {
      stdin: new TextEncoder().encode(JSON.stringify({ config: CONFIG, ...held })), stderr: "pipe",
    })
    if (r.exitCode !== 0) throw new Error(r.stderr.toString())
    const torch = JSON.parse(r.stdout.toString()) as { loss: number }
    expect(Math.abs(torch.loss - ours) / Math.abs(ours)).toBeLessThan(1e-5)
  }, 120_000)
})
