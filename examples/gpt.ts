/**
 * `make demo`: a small GPT learns to reverse digit strings on a dp=2 x tp=2 mesh of local
 * workers (examples/gpt/model.ts: heads and MLP columns split over tp, the batch over dp), with
 * AdamW on a warmup-cosine schedule. Every training step runs through one recording
 * (compile): its first call op by op, its second traced, and the rest replayed with one message
 * per worker, the learning rate and step number as replay parameters (param()). It prints the loss per step, then the held-out accuracy (problems never trained on,
 * answered greedily) and a few samples, then its losses against the torch twin's
 * (examples/gpt/twin.py, handed the same weights and batches) when torch 1.13 is present. Last,
 * one rank fails on purpose: the fetch that depends on it fails with the remote error and the
 * call site, and the mesh goes on. `MONARCH_DEVICE=cuda bun run examples/gpt.ts` runs it on GPUs.
 *
 *   make demo        (or: bun run examples/gpt.ts)
 *
 * On workers someone else started (srun, torchrun across nodes: 4 of them), it attaches instead:
 * `--store HOST:PORT` (the store worker rank 0 hosts) or `--store-file PATH` (its
 * MONARCH_STORE_FILE), with `--host ADDR` the address its listener binds, which every worker must
 * reach (the store's host by default). `--losses` prints every step's loss as one JSON line;
 * `--no-torch` skips the torch twin.
 */
import { Effect } from "effect"
import { parseArgs } from "node:util"
import { allReduce, Controller, HostTensor, type Mesh, noGrad, param, RemoteError, shard } from "../src/controller/index.ts"
import { AdamW, warmupCosine } from "../src/optim/index.ts"
import { type Batch, blockSize, generator, makeBatch, makeBatches, SEP, show, VOCAB } from "./gpt/data.ts"
import { compiledTrainStep, distribute, distributeBatch, GPT } from "./gpt/model.ts"
import { adamw, torchLosses, torchMissing, type AdamWOptions } from "./gpt/twin.ts"
import { type GPTConfig, initialWeights, paramSpecs } from "./gpt/weights.ts"

const { values: flags } = parseArgs({
  options: { store: { type: "string" }, "store-file": { type: "string" }, host: { type: "string" }, losses: { type: "boolean" }, "no-torch": { type: "boolean" } },
})
const DIGITS = 5, ROWS = 32, HELD_OUT = 256
/** MONARCH_DEMO_STEPS shortens the run (tests/gpt/demo.test.ts). */
const STEPS = Number(process.env.MONARCH_DEMO_STEPS ?? 200)
const CONFIG: GPTConfig = { vocab: VOCAB, block: blockSize(DIGITS), dim: 48, heads: 4, layers: 2, tied: false }
const PEAK_LR = 3e-3
/** The lr of step t (0 for the first): a tenth of the steps' warmup, then a cosine down to a tenth. */
const schedule = warmupCosine({ lr: PEAK_LR, warmup: Math.floor(STEPS / 10), total: STEPS, minLr: PEAK_LR / 10 })
// One more step after the failure at the end: its lr too.
const OPTIM: AdamWOptions = { lr: PEAK_LR, betas: [0.9, 0.99], eps: 1e-8, weight_decay: 0.01, clip: 1, lrs: Array.from({ length: STEPS + 1 }, (_, t) => schedule(t)) }

const scalar = (v: unknown): number => (v as HostTensor).toArray()[0] as number
const bar = (done: number, total: number) => `[${"#".repeat(Math.round((20 * done) / total)).padEnd(20, ".")}]`
const i64 = (shape: ReadonlyArray<number>, data: ReadonlyArray<number>) => new HostTensor("i64", shape, new Uint8Array(BigInt64Array.from(data, BigInt).buffer))

/** `n` problems none of the training batches holds. */
const heldOut = (training: ReadonlyArray<Batch>, n: number): Batch => {
  const seen = new Set(training.flatMap((b) => Array.from({ length: b.rows }, (_, r) => show(b.x.slice(r * b.length, r * b.length + DIGITS)))))
  const random = generator(99), x: number[] = [], y: number[] = []
  let rows = 0
  while (rows < n) {
    const b = makeBatch(random, 1, DIGITS)
    if (seen.has(show(b.x.slice(0, DIGITS)))) continue
    x.push(...b.x), y.push(...b.y), rows++
  }
  return { rows, length: blockSize(DIGITS), x, y }
}

/** Greedy answers to `problems`: one forward pass per answer digit, each fed the digits chosen so far. */
const answer = (mesh: Mesh, model: GPT, problems: Batch) =>
  Effect.gen(function* () {
    const { rows, length } = problems, dp = mesh.dims.dp!, perRank = rows / dp
    const x = problems.x.map((t, i) => (i % length > DIGITS ? 0 : t))
    const answers: number[][] = Array.from({ length: rows }, () => [])
    for (let p = DIGITS; p < length; p++) {
      const input = yield* distribute(mesh, i64([rows, length], x), { dp: shard(0) })
      const next = noGrad(() => model.forward(input).select(1, p).argmax(-1))
      for (let d = 0; d < dp; d++) {
        const picked = ((yield* mesh.fetch(next, { dp: d, tp: 0 })) as HostTensor<"i64">).toArray()
        picked.forEach((v, r) => {
          const row = d * perRank + r
          answers[row]!.push(Number(v))
          if (p + 1 < length) x[row * length + p + 1] = Number(v)
        })
      }
    }
    return answers
  })

const program = Effect.gen(function* () {
  const ctl = yield* Controller
  const mesh = yield* ctl.mesh({ dp: 2, tp: 2 })
  const count = paramSpecs(CONFIG).reduce((n, s) => n + s.shape.reduce((a, b) => a * b, 1), 0)
  console.log(`a GPT on ${mesh} (${ctl.world} workers, ${ctl.device}): ${CONFIG.layers} layers, ${CONFIG.heads} heads (${CONFIG.heads / 2} per tp rank), dim ${CONFIG.dim}, ${count} parameters`)
  console.log(`task: reverse ${DIGITS} digits (12345=54321), ${ROWS / 2} problems per dp rank per step, AdamW lr up to ${PEAK_LR} (warmup, cosine), gradients clipped to norm ${OPTIM.clip}`)

  const weights = initialWeights(CONFIG, 1)
  const batches = makeBatches(2, STEPS, ROWS, DIGITS)
  // The torch twin trains from the same weights on the same batches meanwhile (another process).
  const missing = flags["no-torch"] ? "--no-torch" : torchMissing()
  const twin = missing === undefined ? torchLosses(CONFIG, weights, new Map(paramSpecs(CONFIG).map((s) => [s.name, s.shape])), batches, OPTIM) : undefined

  const model = yield* GPT.make(mesh, CONFIG, weights)
  const opt = new AdamW(model.parameters, adamw(OPTIM))
  const trainStep = compiledTrainStep(model, opt, OPTIM.clip)
  const losses: number[] = []
  const started = performance.now()
  for (const [s, b] of batches.entries()) {
    const [x, y] = yield* distributeBatch(mesh, b)
    losses.push(scalar(yield* mesh.fetch(yield* trainStep(x, y, param(schedule(s)), param(s + 1)))))
    const line = `step ${String(s + 1).padStart(3)}/${STEPS} ${bar(s + 1, STEPS)} loss ${losses.at(-1)!.toFixed(4)}`
    if (process.stdout.isTTY) process.stdout.write(`\r${line}`)
    if ((s + 1) % 20 === 0 || s === 0) process.stdout.write(process.stdout.isTTY ? "\n" : `${line}\n`)
  }
  console.log(`${STEPS} steps in ${((performance.now() - started) / 1000).toFixed(1)} s, through compile(trainStep): ${trainStep.traces} trace, the rest replays`)
  if (flags.losses) console.log(`losses ${JSON.stringify(losses)}`)

  const test = heldOut(batches, HELD_OUT)
  const answers = yield* answer(mesh, model, test)
  const truth = (r: number) => test.x.slice(r * test.length, r * test.length + DIGITS).toReversed()
  const right = answers.filter((a, r) => a.join() === truth(r).join()).length
  console.log(`\nheld-out accuracy: ${((100 * right) / HELD_OUT).toFixed(1)}% of ${HELD_OUT} problems never trained on, reversed exactly (greedy)`)
  for (let r = 0; r < 5; r++) console.log(`  ${show(test.x.slice(r * test.length, r * test.length + DIGITS))}${show([SEP])}${show(answers[r]!)} ${answers[r]!.join() === truth(r).join() ? "right" : "wrong"}`)

  if (twin === undefined) console.log(`\nno comparison with torch: ${missing}`)
  else {
    const theirs = yield* Effect.promise(() => twin)
    const worst = losses.reduce((w, l, i) => Math.max(w, Math.abs(l - theirs[i]!) / Math.abs(theirs[i]!)), 0)
    console.log(`\nagainst torch 1.13 (the same weights, batches and AdamW): the largest relative difference of ${STEPS} losses is ${worst.toExponential(1)}; last loss ${losses.at(-1)!.toFixed(6)} here, ${theirs.at(-1)!.toFixed(6)} in torch`)
  }

  console.log("\nnow rank 3 fails on purpose while checking its rows of a batch:")
  const [x, y] = yield* distributeBatch(mesh, batches[0]!)
  const checked = yield* mesh.call("examples/gpt/shards:checkRows", [x, 3], {}, { results: [x.meta!] })
  const heldLoss = noGrad(() => allReduce(model.loss(checked, y), "dp", "avg"))
  const failure = yield* mesh.fetch(heldLoss, { dp: 0, tp: 1 }).pipe(Effect.match({ onSuccess: () => "a value", onFailure: (e) => e }))
  if (!(failure instanceof RemoteError)) return yield* Effect.fail(new Error(`expected the fetch to fail with a RemoteError, got ${String(failure)}`))
  console.log(`  fetching a loss that depends on it (rank 1 averages over dp with rank 3) fails with:\n  ${failure.message.replaceAll("\n", "\n  ")}`)
  console.log(`the mesh goes on: one more step, loss ${scalar(yield* mesh.fetch(yield* trainStep(x, y, param(schedule(STEPS)), param(STEPS + 1)))).toFixed(4)}`)
})

/** The workers: four local ones, or those of a job started elsewhere, through its store. */
const controller = () => {
  if (flags.store === undefined && flags["store-file"] === undefined) return Controller.local({ world: 4, functionPath: [new URL("..", import.meta.url).pathname] })
  const at = flags.store === undefined ? undefined : /^(.+):(\d+)$/.exec(flags.store)
  if (flags.store !== undefined && !at) throw new Error(`--store ${flags.store} is not HOST:PORT`)
  const host = flags.host ?? at?.[1]
  return Controller.attach({ world: 4, store: at ? { host: at[1]!, port: Number(at[2]) } : { file: flags["store-file"]! }, ...(host === undefined ? {} : { host }), startTimeoutMs: 120_000 })
}

const started = performance.now()
Effect.runPromise(program.pipe(Effect.provide(controller()))).then(
  () => console.log(`done in ${((performance.now() - started) / 1000).toFixed(1)} s`),
  (e) => {
    console.error(`demo failed: ${e instanceof Error ? e.message : String(e)}`)
    process.exit(1)
  },
)
