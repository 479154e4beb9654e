/**
 * Training speed: steps of the GPT demo's model (examples/gpt/model.ts, its trainStep: forward,
 * backward with each gradient averaged over dp as soon as it is final, src/optim's fused AdamW)
 * on 4 CPU workers, against torch DDP (gloo, 4 processes, examples/gpt/twin.py's module) on the
 * same weights and batches, in the same run, one thread per process on both sides
 * (MONARCH_CPU_THREADS=1, torch.set_num_threads(1)); dp=4 and dp=2 x tp=2 (torch 1.13 has no
 * tensor-parallel peer), dp=4 with DDP's bucketing (one all_reduce of every gradient), and dp=4
 * with the step through compile (examples/gpt/model.ts's compiledTrainStep: recorded once, then
 * one CallRecording per worker per step; the warm-up steps include its op-by-op first call and
 * its trace, so the timed steps are replays).
 * Each run is WARMUP steps, then STEPS timed ones; the runs take turns for ROUNDS rounds (the
 * machine is shared, so the load drifts) and steps/s is each one's median over the rounds. Each
 * side's losses are printed beside the other's, to show both trained the same model.
 * Then one traced dp=4 pass says where a step's time goes: the controller's issuing, each
 * worker's time in op calls and in collectives, and its idle time (waiting for commands: the
 * wire and the controller), with the per-command cost of a no-op through the whole path.
 *
 *   bun run bench/train.ts [rounds] [steps] [small|large] [rows]
 *
 * rows: a comma-separated choice of torch, dp, bucketed, buckets (DDP's bucketing by size, 64 KiB),
 * tp, compiled (each with its gradients'
 * all-reduces overlapping backward, on the workers' communication thread), dp-blocking,
 * tp-blocking, compiled-blocking (the same with MONARCH_COMM_OVERLAP=0: every collective holds
 * its worker's loop until done, as before the thread), and breakdown (the traced passes, with
 * and without the overlap); default all.
 *
 * small is the demo's size (dim 64, 2 layers, 16 tokens: every op tiny, so per-command costs
 * show); large (dim 256, 4 layers, 32 tokens) is where kernels take over.
 */
import { Effect, ManagedRuntime } from "effect"
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs"
import { createServer } from "node:net"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { allReduce, Controller, type ControllerApi, type ControllerError, gradGenerator, type HostTensor, noGrad, ops, param, type RemoteTensor } from "../src/controller/index.ts"
import { AdamW } from "../src/optim/index.ts"
import { blockSize, makeBatches, VOCAB } from "../examples/gpt/data.ts"
import { compiledTrainStep, distributeBatch, GPT, trainStep } from "../examples/gpt/model.ts"
import { initialWeights, paramSpecs, type GPTConfig } from "../examples/gpt/weights.ts"
import { COMM_TRACK } from "../src/trace/writer.ts"

const ROOT = new URL("..", import.meta.url).pathname
const PYTHON = process.env.TORCH_PYTHON ?? "/usr/bin/python3"
const WORLD = 4, THREADS = 1, WARMUP = 3
const ROUNDS = Number(process.argv[2] ?? 3), STEPS = Number(process.argv[3] ?? 10)
const SIZES = {
  small: { digits: 8, dim: 64, layers: 2 },
  large: { digits: 16, dim: 256, layers: 4 },
} as const
const SIZE = SIZES[(process.argv[4] ?? "small") as keyof typeof SIZES]
if (SIZE === undefined) throw new Error(`size must be one of ${Object.keys(SIZES).join(", ")}`)
const ROWS_ALL = ["torch", "dp", "dp-blocking", "bucketed", "buckets", "tp", "tp-blocking", "compiled", "compiled-blocking", "breakdown"] as const
const CHOSEN = new Set(process.argv[5] === undefined ? ROWS_ALL : process.argv[5].split(","))
for (const r of CHOSEN) if (!(ROWS_ALL as ReadonlyArray<string>).includes(r)) throw new Error(`unknown row ${r}: choose from ${ROWS_ALL.join(", ")}`)
const chosen = (r: (typeof ROWS_ALL)[number]) => CHOSEN.has(r)
const DIGITS = SIZE.digits, ROWS = 32
const CONFIG: GPTConfig = { vocab: VOCAB, block: blockSize(DIGITS), dim: SIZE.dim, heads: 4, layers: SIZE.layers, tied: true }
const OPTIM = { lr: 3e-3, betas: [0.9, 0.99] as const, eps: 1e-8, weight_decay: 0.01 }

const weights = initialWeights(CONFIG, 1)
const batches = makeBatches(2, WARMUP + STEPS, ROWS, DIGITS)
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!
const scalar = (v: unknown) => Number((v as HostTensor).toArray()[0])

interface Run {
  /** Steps/s over the timed steps. */
  readonly rate: number
  readonly losses: number[]
  /** CPU ms per timed step: every process's, summed, and the controller's alone (ours). */
  readonly cpuMs: number
  readonly controllerCpuMs?: number
}

/** A process's CPU time so far (user + system), in ms, from /proc (ticks of 10 ms). */
const processCpuMs = (pid: number): number => {
  const fields = readFileSync(`/proc/${pid}/stat`, "utf8").split(") ")[1]!.split(" ")
  return (Number(fields[11]) + Number(fields[12])) * 10
}
const ownCpuMs = () => {
  const u = process.cpuUsage()
  return (u.user + u.system) / 1000
}

/**
 * trainStep with DDP's bucketing: backward accumulates every `.grad`, then one all_reduce
 * averages them all over dp, flattened into one buffer (the model's gradients fit in one of
 * DDP's 25 MB buckets), and each gradient is cut back out of it.
 */
const bucketed = (model: GPT, opt: AdamW, x: RemoteTensor, y: RemoteTensor): Effect.Effect<RemoteTensor, ControllerError> => Effect.sync(() => {
  const loss = model.loss(x, y)
  loss.backward()
  const params = model.parameters
  noGrad(() => {
    const flat = ops.cat(params.map((p) => p.grad!.reshape([-1])))
    const avg = allReduce(flat, "dp", "avg")
    let at = 0
    for (const p of params) {
      const local = p.grad!, n = local.shape!.reduce((a, b) => a * b, 1)
      p.grad = avg.narrow(0, at, n).reshape([...local.shape!])
      local.release()
      at += n
    }
    flat.release()
    avg.release()
  })
  opt.step()
  opt.zeroGrad()
  return noGrad(() => allReduce(loss.detach(), "dp", "avg"))
})

/**
 * trainStep with DDP's bucketing by size: the gradients, in the order backward makes them
 * (the gradient generator), gather into a bucket until it holds `bytes`; each full bucket (and
 * the last) is flattened into one buffer and all-reduced at once, while backward goes on, and
 * each gradient is cut back out of it.
 */
const sizeBucketed = (bytes: number) => (model: GPT, opt: AdamW, x: RemoteTensor, y: RemoteTensor): Effect.Effect<RemoteTensor, ControllerError> => Effect.sync(() => {
  const loss = model.loss(x, y)
  let bucket: Array<readonly [RemoteTensor, RemoteTensor]> = [], held = 0
  const flush = () => noGrad(() => {
    if (bucket.length === 0) return
    const flat = ops.cat(bucket.map(([, g]) => g.reshape([-1])))
    const avg = allReduce(flat, "dp", "avg")
    let at = 0
    for (const [p, g] of bucket) {
      const n = g.shape!.reduce((a, b) => a * b, 1)
      p.grad = avg.narrow(0, at, n).reshape([...g.shape!])
      g.release()
      at += n
    }
    flat.release()
    avg.release()
    bucket = []
    held = 0
  })
  for (const [p, g] of gradGenerator(loss, model.parameters)) {
    bucket.push([p, g])
    held += g.shape!.reduce((a, b) => a * b, 1) * 4
    if (held >= bytes) flush()
  }
  flush()
  opt.step()
  opt.zeroGrad()
  return noGrad(() => allReduce(loss.detach(), "dp", "avg"))
})

/** A run's training step, made for its model and optimizer: step `i` (from 0) on a batch. */
type MakeStep = (model: GPT, opt: AdamW) => (x: RemoteTensor, y: RemoteTensor, i: number) => Effect.Effect<RemoteTensor, ControllerError, Controller>
const eagerStep: MakeStep = (model, opt) => (x, y) => trainStep(model, opt, x, y)
const bucketedStep: MakeStep = (model, opt) => (x, y) => bucketed(model, opt, x, y)
/** DDP's first bucket is 1 MB and the rest 25 MB; the small model's gradients (about 0.4 MB) fit in one, so a smaller threshold is the one that splits them. */
const BUCKET_BYTES = 64 * 1024
const sizeBucketedStep: MakeStep = (model, opt) => (x, y) => sizeBucketed(BUCKET_BYTES)(model, opt, x, y)
const compiledStep: MakeStep = (model, opt) => {
  const step = compiledTrainStep(model, opt)
  return (x, y, i) => step(x, y, param(OPTIM.lr), param(i + 1))
}

/** Controller time, commands and frames per step, and the layer's trace file when traced. */
interface Cost { readonly issueMs: number; readonly commands: number; readonly frames: number }

/** Our side: the model on a mesh of `dims` over WORLD local workers. */
const ours = (dims: Readonly<Record<string, number>>, makeStep: MakeStep = eagerStep, trace?: string, overlap = true): Promise<Run & { readonly cost: Cost }> => {
  const env = { MONARCH_CPU_THREADS: String(THREADS), MONARCH_COMM_OVERLAP: overlap ? "1" : "0" }
  const rt = ManagedRuntime.make(Controller.local({ world: WORLD, functionPath: [ROOT], trace, env, onWorkerLine: () => {} }))
  return rt.runPromise(Effect.gen(function* () {
    const ctl: ControllerApi = yield* Controller
    const mesh = yield* ctl.mesh(dims)
    const model = yield* GPT.make(mesh, CONFIG, weights)
    const opt = new AdamW(model.parameters, { lr: OPTIM.lr, betas: OPTIM.betas, eps: OPTIM.eps, weightDecay: OPTIM.weight_decay })
    const step = makeStep(model, opt)
    const losses: RemoteTensor[] = []
    let issueMs = 0, t0 = 0, workers0 = 0, own0 = 0
    const sent0 = { ...ctl.core.sent }
    const workersCpu = () => ctl.workers().reduce((a, w) => a + processCpuMs(w.pid), 0)
    for (const [i, b] of batches.entries()) {
      if (i === WARMUP) {
        yield* losses.at(-1)!.fetch()
        t0 = performance.now()
        Object.assign(sent0, ctl.core.sent)
        workers0 = workersCpu()
        own0 = ownCpuMs()
      }
      const [x, y] = yield* distributeBatch(mesh, b)
      const issued = performance.now()
      losses.push(yield* step(x, y, i))
      if (i >= WARMUP) issueMs += performance.now() - issued
      x.release()
      y.release()
    }
    yield* losses.at(-1)!.fetch()
    const rate = STEPS / ((performance.now() - t0) / 1000)
    const controllerCpuMs = (ownCpuMs() - own0) / STEPS, cpuMs = controllerCpuMs + (workersCpu() - workers0) / STEPS
    const cost = { issueMs: issueMs / STEPS, commands: (ctl.core.sent.commands - sent0.commands) / STEPS, frames: (ctl.core.sent.frames - sent0.frames) / STEPS }
    const values: number[] = []
    for (const l of losses) values.push(scalar(yield* l.fetch()))
    return { rate, losses: values, cost, cpuMs, controllerCpuMs }
  })).finally(() => rt.dispose())
}

const freePort = (): Promise<number> => new Promise((resolve) => {
  const s = createServer().listen(0, "127.0.0.1", () => {
    const port = (s.address() as { port: number }).port
    s.close(() => resolve(port))
  })
})

/** torch DDP: WORLD processes of bench/torch_train_ddp.py. */
const torchDdp = async (dir: string): Promise<Run | string> => {
  const probe = Bun.spawnSync([PYTHON, "-c", "import torch"], { stderr: "pipe" })
  if (probe.exitCode !== 0) return `torch does not import in ${PYTHON}`
  const request = join(dir, "request.json")
  const shapes = new Map(paramSpecs(CONFIG).map((s) => [s.name, s.shape]))
  writeFileSync(request, JSON.stringify({
    config: CONFIG, threads: THREADS, warmup: WARMUP, optim: OPTIM, batches,
    weights: Object.fromEntries([...weights].map(([n, d]) => [n, { shape: shapes.get(n), data: Array.from(d) }])),
  }))
  const port = await freePort()
  const procs = Array.from({ length: WORLD }, (_, r) => Bun.spawn([PYTHON, new URL("./torch_train_ddp.py", import.meta.url).pathname, String(r), String(WORLD), String(port), request], {
    stdout: "pipe", stderr: "pipe", env: { ...process.env, OMP_NUM_THREADS: String(THREADS) },
  }))
  const [out, err, code] = await Promise.all([new Response(procs[0]!.stdout).text(), new Response(procs[0]!.stderr).text(), procs[0]!.exited])
  await Promise.all(procs.map((p) => p.exited))
  if (code !== 0) return `torch DDP failed (${code}): ${err.trim().split("\n").slice(-2).join(" | ")}`
  const r = JSON.parse(out) as { seconds: number[]; losses: number[]; cpu: number }
  return { rate: STEPS / r.seconds.reduce((a, b) => a + b, 0), losses: r.losses, cpuMs: (r.cpu * 1000) / STEPS }
}

/**
 * Where a traced pass's step time goes on each rank, per step over the timed steps: op calls
 * (less their waits), waits for collectives in flight, collectives run on the loop (blocking),
 * other commands, idle; and the communication thread's busy time, which overlaps the rest.
 */
const breakdown = (file: string) => {
  const { traceEvents } = JSON.parse(readFileSync(file, "utf8")) as { traceEvents: Array<{ ph: string; pid: number; tid: number; cat?: string; name: string; ts: number; dur: number }> }
  const spans = traceEvents.filter((e) => e.ph === "X")
  return Array.from({ length: WORLD }, (_, rank) => {
    const all = spans.filter((s) => s.pid === rank).sort((a, b) => a.ts - b.ts)
    const mine = all.filter((s) => s.tid !== COMM_TRACK && s.cat !== "wait")
    // The timed steps: the trace's last STEPS / (WARMUP + STEPS) of commands (every step issues the same ones).
    const start = mine[Math.floor(mine.length * WARMUP / (WARMUP + STEPS))]!.ts, end = mine.at(-1)!.ts + mine.at(-1)!.dur
    const timed = mine.filter((s) => s.ts >= start)
    const within = (f: (s: (typeof all)[number]) => boolean) => all.filter((s) => s.ts >= start && s.ts < end && f(s)).reduce((a, s) => a + s.dur, 0) / 1000
    const sum = (f: (s: (typeof timed)[number]) => boolean) => timed.filter(f).reduce((a, s) => a + s.dur, 0) / 1000
    const byOp = new Map<string, number>()
    for (const s of timed) if (s.cat === "call") byOp.set(s.name, (byOp.get(s.name) ?? 0) + s.dur / 1000)
    const waits = within((s) => s.cat === "wait"), commThread = within((s) => s.tid === COMM_TRACK)
    const wall = (end - start) / 1000, calls = sum((s) => s.cat === "call") - waits, collectives = sum((s) => s.cat === "collective")
    return { rank, wall, calls, waits, collectives, commThread, other: sum((s) => s.cat !== "call" && s.cat !== "collective"), idle: wall - sum(() => true), commands: timed.length, top: [...byOp].sort((a, b) => b[1] - a[1]).slice(0, 6) }
  })
}

/** The per-command cost of ops.noop through the controller, the wire and a worker's dispatch, on this mesh. */
const noopCost = (): Promise<number> => {
  const rt = ManagedRuntime.make(Controller.local({ world: WORLD, onWorkerLine: () => {} }))
  return rt.runPromise(Effect.gen(function* () {
    const ctl = yield* Controller
    const mesh = yield* ctl.mesh({ dp: WORLD })
    const x = yield* mesh.call("ops.zeros", [[1]])
    const n = 4000
    for (let i = 0; i < 500; i++) yield* mesh.run("ops.noop", [])
    yield* x.fetch()
    const t0 = performance.now()
    for (let i = 0; i < n; i++) yield* mesh.run("ops.noop", [])
    yield* mesh.call("ops.neg", [x]).pipe(Effect.flatMap((y) => y.fetch()))
    return (performance.now() - t0) / n
  })).finally(() => rt.dispose())
}

const dir = mkdtempSync(join(tmpdir(), "monarch-bench-train-"))
try {
  const runs = {
    torch: [] as Run[], dp: [] as Run[], dpBlocking: [] as Run[], bucketed: [] as Run[], buckets: [] as Run[], tp: [] as Run[], tpBlocking: [] as Run[], compiled: [] as Run[], compiledBlocking: [] as Run[],
  }
  let peerProblem: string | undefined
  for (let r = 0; r < ROUNDS; r++) {
    if (chosen("torch")) {
      const peer = await torchDdp(dir)
      if (typeof peer === "string") peerProblem = peer
      else runs.torch.push(peer)
    }
    if (chosen("dp")) runs.dp.push(await ours({ dp: WORLD, tp: 1 }))
    if (chosen("dp-blocking")) runs.dpBlocking.push(await ours({ dp: WORLD, tp: 1 }, eagerStep, undefined, false))
    if (chosen("bucketed")) runs.bucketed.push(await ours({ dp: WORLD, tp: 1 }, bucketedStep))
    if (chosen("buckets")) runs.buckets.push(await ours({ dp: WORLD, tp: 1 }, sizeBucketedStep))
    if (chosen("tp")) runs.tp.push(await ours({ dp: 2, tp: 2 }))
    if (chosen("tp-blocking")) runs.tpBlocking.push(await ours({ dp: 2, tp: 2 }, eagerStep, undefined, false))
    if (chosen("compiled")) runs.compiled.push(await ours({ dp: WORLD, tp: 1 }, compiledStep))
    if (chosen("compiled-blocking")) runs.compiledBlocking.push(await ours({ dp: WORLD, tp: 1 }, compiledStep, undefined, false))
  }
  const rate = (rs: Run[]) => median(rs.map((r) => r.rate))
  const fmt = (x: number) => x.toFixed(2)
  const torchRate = runs.torch.length > 0 ? rate(runs.torch) : undefined
  console.log(`GPT ${JSON.stringify(CONFIG)}, ${ROWS} rows of ${CONFIG.block} tokens per step split over dp, AdamW; ${WORLD} CPU processes, ${THREADS} thread each`)
  console.log(`steps/s over ${STEPS} steps after ${WARMUP} warm-up steps; median of ${ROUNDS} rounds, the runs taking turns in each, same run`)
  console.log("| run | steps/s | min | max | ratio to torch DDP | CPU ms per step, all processes (controller) |")
  console.log("|---|---:|---:|---:|---:|---:|")
  const row = (name: string, rs: Run[]) => {
    if (rs.length === 0) return
    const xs = rs.map((r) => r.rate), cpu = median(rs.map((r) => r.cpuMs)), ctl = rs[0]!.controllerCpuMs === undefined ? "" : ` (${median(rs.map((r) => r.controllerCpuMs!)).toFixed(0)})`
    console.log(`| ${name} | ${fmt(rate(rs))} | ${fmt(Math.min(...xs))} | ${fmt(Math.max(...xs))} | ${torchRate ? fmt(rate(rs) / torchRate) : "-"} | ${cpu.toFixed(0)}${ctl} |`)
  }
  if (peerProblem !== undefined) console.log(`| torch DDP (gloo) | skipped: ${peerProblem} | | | |`)
  else row("torch 1.13 DDP, gloo, 4 processes", runs.torch)
  row("monarch-bun dp=4 (trainStep: each gradient all-reduced when ready, overlapping backward)", runs.dp)
  row("monarch-bun dp=4, collectives blocking the loop (MONARCH_COMM_OVERLAP=0)", runs.dpBlocking)
  row("monarch-bun dp=4, gradients in one bucket after backward", runs.bucketed)
  row(`monarch-bun dp=4, gradients in buckets of ${BUCKET_BYTES / 1024} KiB as backward makes them`, runs.buckets)
  row("monarch-bun dp=2 x tp=2", runs.tp)
  row("monarch-bun dp=2 x tp=2, collectives blocking the loop", runs.tpBlocking)
  row("monarch-bun dp=4, the step through compile (replays)", runs.compiled)
  row("monarch-bun dp=4, through compile, collectives blocking the loop", runs.compiledBlocking)
  const show = (xs: number[]) => xs.slice(0, 5).map((x) => x.toFixed(5)).join(" ")
  const peer = runs.torch[0]
  const ourRuns = Object.entries(runs).filter(([k, rs]) => k !== "torch" && rs.length > 0) as Array<[string, Run[]]>
  if (ourRuns.length > 0) console.log(`\nlosses, first steps: ${ourRuns.map(([k, rs]) => `${k} ${show(rs[0]!.losses)}`).join("; ")}${peer ? `; torch DDP ${show(peer.losses)}` : ""}`)
  const worst = (a: number[], b: number[]) => Math.max(...a.map((l, i) => Math.abs(l - b[i]!) / Math.abs(b[i]!))).toExponential(1)
  if (peer && ourRuns.length > 0) console.log(`largest relative loss difference to torch DDP over ${WARMUP + STEPS} steps: ${ourRuns.map(([k, rs]) => `${k} ${worst(rs[0]!.losses, peer.losses)}`).join(", ")}`)

  // Where the time goes: traced dp=4 passes (with and without the overlap), and the no-op path's cost.
  if (chosen("breakdown")) {
    const noop = await noopCost()
    for (const overlap of [true, false]) {
      const traceFile = join(dir, `train-${overlap}.json`)
      const traced = await ours({ dp: WORLD, tp: 1 }, undefined, traceFile, overlap)
      console.log(`\nwhere a dp=4 step's time goes, ${overlap ? "gradients' all-reduces on the communication thread" : "collectives blocking the loop"} (traced pass ${(1000 / traced.rate).toFixed(1)} ms per step):`)
      console.log(`controller: ${traced.cost.issueMs.toFixed(1)} ms issuing ${traced.cost.commands.toFixed(0)} commands per step (all ranks' in ${traced.cost.frames.toFixed(1)} frames); a no-op's whole path (controller, wire, dispatch) costs ${(noop * 1000).toFixed(0)} us`)
      console.log("| rank | ms per step | op calls | waits for collectives in flight | collectives on the loop | other commands | idle (waiting for commands) | communication thread busy | heaviest ops (ms per step, waits included) |")
      console.log("|---|---:|---:|---:|---:|---:|---:|---:|---|")
      const timed = STEPS
      for (const b of breakdown(traceFile))
        console.log(`| ${b.rank} | ${(b.wall / timed).toFixed(1)} | ${(b.calls / timed).toFixed(1)} | ${(b.waits / timed).toFixed(1)} | ${(b.collectives / timed).toFixed(1)} | ${(b.other / timed).toFixed(1)} | ${(b.idle / timed).toFixed(1)} | ${(b.commThread / timed).toFixed(1)} | ${b.top.map(([n, ms]) => `${n.replace(/^ops\./, "")} ${(ms / timed).toFixed(1)}`).join(", ")} |`)
    }
  }
} finally {
  rmSync(dir, { recursive: true, force: true })
}
