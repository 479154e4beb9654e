/**
 * The first run: linear regression trained on a 2x2 mesh of local workers.
 *
 *   dp (data parallel): each dp row holds its own samples; gradients are averaged over dp.
 *   tp (feature parallel): each tp column owns half the features and half the weights; the
 *   predictions are summed over tp.
 *
 * Loss is fetched every step; the final weights are checked against the true ones computed
 * here; then one rank fails on purpose, the failure comes back as a readable RemoteError, and
 * the run goes on. `MONARCH_DEVICE=cuda bun run examples/demo.ts` runs it on GPUs.
 *
 *   make demo        (or: bun run examples/demo.ts)
 */
import { Effect } from "effect"
import { Controller, HostTensor, RemoteError, type Mesh, type RemoteTensor } from "../src/controller/index.ts"
import { trueWeight } from "./linreg.ts"

const SAMPLES = 64, FEATURES_PER_TP = 4, STEPS = 40, LR = 0.1

const scalar = (v: unknown): number => (v as HostTensor).toArray()[0] as number
const bar = (done: number, total: number) => `[${"#".repeat(Math.round((20 * done) / total)).padEnd(20, ".")}]`

/** One step of gradient descent; returns the loss averaged over dp (a handle, not fetched). */
const step = (mesh: Mesh, x: RemoteTensor, y: RemoteTensor, w: RemoteTensor) =>
  Effect.gen(function* () {
    const partial = yield* mesh.call("ops.matmul", [x, w])
    const prediction = yield* mesh.reduce(partial, "tp", "sum")
    const error = yield* mesh.call("ops.sub", [prediction, y])
    const xt = yield* mesh.call("ops.t", [x])
    const gradient = yield* mesh.call("ops.mul", [yield* mesh.call("ops.matmul", [xt, error]), 2 / SAMPLES])
    const averaged = yield* mesh.reduce(gradient, "dp", "avg")
    yield* mesh.run("ops.sub_", [w, yield* mesh.call("ops.mul", [averaged, LR])], {}, { mutates: [w] })
    const loss = yield* mesh.call("ops.mean", [yield* mesh.call("ops.mul", [error, error])])
    return yield* mesh.reduce(loss, "dp", "avg")
  })

const program = Effect.gen(function* () {
  const ctl = yield* Controller
  const mesh = yield* ctl.mesh({ dp: 2, tp: 2 })
  console.log(`training on ${mesh} (${ctl.world} workers, ${ctl.device}): ${SAMPLES} samples per dp rank, ${2 * FEATURES_PER_TP} features`)

  const [x, yPart] = yield* mesh.callMany("examples/linreg:makeShard", [SAMPLES, FEATURES_PER_TP], {}, {
    results: [{ dtype: "f32", shape: [SAMPLES, FEATURES_PER_TP] }, { dtype: "f32", shape: [SAMPLES, 1] }],
  })
  const y = yield* mesh.reduce(yPart!, "tp", "sum")
  const w = yield* mesh.call("ops.zeros", [[FEATURES_PER_TP, 1]])

  for (let s = 1; s <= STEPS; s++) {
    const loss = yield* step(mesh, x!, y, w)
    const value = scalar(yield* mesh.fetch(loss))
    console.log(`step ${String(s).padStart(2)}/${STEPS} ${bar(s, STEPS)} loss ${value.toFixed(6)}`)
  }

  // Each tp column holds its half of the weights; fetch both and compare with the truth.
  const halves = yield* Effect.all([mesh.fetch(w, { dp: 0, tp: 0 }), mesh.fetch(w, { dp: 0, tp: 1 })])
  const learned = halves.flatMap((h) => [...(h as HostTensor).toArray()] as number[])
  const truth = learned.map((_, k) => trueWeight(k))
  const maxError = Math.max(...learned.map((v, k) => Math.abs(v - truth[k]!)))
  console.log(`learned weights ${learned.map((v) => v.toFixed(3)).join(" ")}`)
  console.log(`true weights    ${truth.map((v) => v.toFixed(3)).join(" ")}`)
  if (maxError > 1e-2) return yield* Effect.fail(new Error(`weights are off by ${maxError}`))
  console.log(`max error ${maxError.toExponential(2)}: the fetched weights match the ones computed here`)

  console.log("\nnow rank 3 fails on purpose while checking its shard:")
  const checked = yield* mesh.call("examples/linreg:checkShard", [x, 3], {}, { results: [{ dtype: "f32", shape: [SAMPLES, FEATURES_PER_TP] }] })
  const downstream = yield* mesh.reduce(checked, "dp", "sum")
  const failure = yield* Effect.flip(mesh.fetch(downstream, { dp: 0, tp: 1 }))
  if (!(failure instanceof RemoteError)) return yield* Effect.fail(new Error(`expected a RemoteError, got ${String(failure)}`))
  console.log(`  fetching a result that depends on it (rank 1 reduces over dp with rank 3) fails with:\n  ${failure.message.replaceAll("\n", "\n  ")}`)

  const loss = yield* step(mesh, x!, y, w)
  console.log(`the mesh goes on: one more step, loss ${scalar(yield* mesh.fetch(loss)).toFixed(6)}`)
})

const started = performance.now()
Effect.runPromise(program.pipe(Effect.provide(Controller.local({ world: 4, functionPath: [new URL("..", import.meta.url).pathname] })))).then(
  () => console.log(`done in ${((performance.now() - started) / 1000).toFixed(1)} s`),
  (e) => {
    console.error(`demo failed: ${e instanceof Error ? e.message : String(e)}`)
    process.exit(1)
  },
)
