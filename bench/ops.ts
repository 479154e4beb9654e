/**
 * Op kernels against torch CPU in the same run, on shapes a small transformer uses: activations
 * [64, 128, 256] (flattened to [8192, 256] where an op wants 2-D) and [256, 1024] weights; at 1
 * thread and at 2 (ours: shim_set_threads, which sets OpenBLAS's count too; torch:
 * torch.set_num_threads). Columns:
 *   kernel-only: each built-in through its registry binding and kernels in this process (no worker, no wire);
 *   through a worker: the op issued through the controller to a local cpu worker (its
 *     MONARCH_CPU_THREADS set to the thread count), each result released as issued, and one
 *     element of the last fetched at the end of a round of WORKER_REPS times the case's calls
 *     (so the fetch's round trip, a few ms on a loaded machine, is spread as a program's would be);
 *     (and the worker's CPU time per op, from /proc, to tell its work from waiting for a core);
 *   torch: one torch 1.13 process (Debian's /usr/bin/python3) serving the cases, its thread
 *     count set with torch.set_num_threads and on its OpenBLAS (which that call leaves alone).
 * Rounds alternate ours, torch's and the worker's per case, so load on the machine hits them
 * alike; each op is called once untimed first. Ratios are torch's time over ours (>= 1: as
 * fast or faster), medians of the per-round ratios; beside the wall-time ratio, the ratio of
 * CPU time (each process's own), which a loaded machine disturbs less.
 *
 *   bun run bench/ops.ts [--quick] [--only <name part>[|<name part>...]] [--threads 1,2] [--no-worker]
 */
import { Effect, type Layer, ManagedRuntime } from "effect"
import { readFileSync } from "node:fs"
import type { Tensor as NativeTensor } from "../ffi/tensor.ts"
import { Controller, type Mesh, type RemoteTensor } from "../src/controller/index.ts"
import { Generator } from "../src/ops/generator.ts"

const { loadNative } = await import("../ffi/native.ts")
const { Stream } = await import("../ffi/stream.ts")
const { Tensor } = await import("../ffi/tensor.ts")
const { builtinFunction } = await import("../src/worker/kernels/dispatch.ts")

const argv = process.argv.slice(2)
const flag = (name: string) => (argv.includes(name) ? argv[argv.indexOf(name) + 1] : undefined)
const quick = argv.includes("--quick")
const THREADS = (flag("--threads") ?? "1,2").split(",").map(Number)
const WORKER = !argv.includes("--no-worker")
const native = loadNative("cpu")
const stream = Stream.default(native)
const ctx = { native, rank: 0, world: 1, device: "cpu" as const, stream, coords: {}, generator: new Generator(0), kwargs: {}, group: () => { throw new Error("no group") } }

/** A tensor argument (`transposed`: made of the shape with its last two dims swapped, then transposed: a strided view), or any other argument. */
type Arg = { t: "f32"; shape: number[]; transposed?: true } | { t: "i64"; shape: number[]; high: number } | number | number[] | string | boolean | null | Arg[]
interface Case { readonly name: string; readonly op: string; readonly args: Arg[]; readonly kwargs?: Record<string, unknown>; readonly reps: number }

const f = (...shape: number[]): Arg => ({ t: "f32", shape })
/** A [..., a, b] view: the transpose of a [..., b, a] tensor. */
const ft = (...shape: number[]): Arg => ({ t: "f32", shape, transposed: true })
const swapped = (shape: ReadonlyArray<number>): number[] => [...shape.slice(0, -2), shape.at(-1)!, shape.at(-2)!]
const X = f(64, 128, 256), X2 = f(8192, 256), G = f(8, 32, 256), G4 = f(8, 32, 1024)
const ALL_CASES: Case[] = [
  { name: "add [64,128,256] + same", op: "add", args: [X, X], reps: 5 },
  { name: "add [64,128,256] + [256] (broadcast)", op: "add", args: [X, f(256)], reps: 5 },
  { name: "mul [64,128,256] * 2", op: "mul", args: [X, 2], reps: 5 },
  { name: "relu [64,128,256]", op: "relu", args: [X], reps: 5 },
  { name: "exp [64,128,256]", op: "exp", args: [X], reps: 3 },
  { name: "tanh [64,128,256]", op: "tanh", args: [X], reps: 3 },
  { name: "sigmoid [64,128,256]", op: "sigmoid", args: [X], reps: 3 },
  { name: "gelu [64,128,256]", op: "gelu", args: [X], reps: 3 },
  { name: "gelu tanh form [64,128,256]", op: "gelu", args: [X], kwargs: { approximate: "tanh" }, reps: 3 },
  { name: "sum dim -1 [64,128,256]", op: "sum", args: [X, -1], reps: 5 },
  { name: "mean dim -1 [64,128,256]", op: "mean", args: [X, -1], reps: 5 },
  { name: "amax dim -1 [64,128,256]", op: "amax", args: [X, -1], reps: 5 },
  { name: "softmax dim -1 [64,128,256]", op: "softmax", args: [X, -1], reps: 3 },
  { name: "log_softmax dim -1 [64,128,256]", op: "log_softmax", args: [X, -1], reps: 3 },
  { name: "layer_norm [8192,256] over 256", op: "layer_norm", args: [X2, [256]], reps: 3 },
  { name: "matmul [8192,256] @ [256,1024]", op: "matmul", args: [X2, f(256, 1024)], reps: 1 },
  { name: "linear [8192,256] x [1024,256]^T + b", op: "linear", args: [X2, f(1024, 256), f(1024)], reps: 1 },
  { name: "matmul batched [64,128,256] @ [64,256,128]", op: "matmul", args: [X, f(64, 256, 128)], reps: 1 },
  // views, strided as torch's (O(1): no element moves)
  { name: "transpose(1, 2) [64,128,256] (view)", op: "transpose", args: [X, 1, 2], reps: 20 },
  { name: "permute [64,128,256] to (2, 0, 1) (view)", op: "permute", args: [X, [2, 0, 1]], reps: 20 },
  { name: "expand [64,1,256] to [64,128,256] (view)", op: "expand", args: [f(64, 1, 256), [64, 128, 256]], reps: 20 },
  { name: "slice dim 1 [64,128,256] every 2nd (view)", op: "slice", args: [X, 1, 0, null, 2], reps: 20 },
  { name: "t [1024,256] (view)", op: "t", args: [f(1024, 256)], reps: 20 },
  // strided operands read in place: a transposed weight through BLAS's flag, elementwise over a transposed input
  { name: "matmul [8192,256] @ w.t() ([1024,256] transposed)", op: "matmul", args: [X2, ft(256, 1024)], reps: 1 },
  { name: "add [8192,256] transposed + [8192,256]", op: "add", args: [ft(8192, 256), X2], reps: 3 },
  { name: "mul [8192,256] transposed * 2", op: "mul", args: [ft(8192, 256), 2], reps: 3 },
  { name: "cat dim -1 of two [64,128,256]", op: "cat", args: [[X, X], -1], reps: 3 },
  { name: "embedding [8192] ids into [1000,256]", op: "embedding", args: [{ t: "i64", shape: [8192], high: 1000 }, f(1000, 256)], reps: 5 },
  { name: "cross_entropy [2048,1000]", op: "cross_entropy", args: [f(2048, 1000), { t: "i64", shape: [2048], high: 1000 }], reps: 3 },
  // triangles, attention, normalisation, losses; torch 1.13 has no scaled_dot_product_attention or rms_norm: its side runs their math forms
  { name: "sdpa causal q,k,v [16,4,128,64]", op: "scaled_dot_product_attention", args: [f(16, 4, 128, 64), f(16, 4, 128, 64), f(16, 4, 128, 64)], kwargs: { is_causal: true }, reps: 1 },
  { name: "rms_norm [8192,256] over 256", op: "rms_norm", args: [X2, [256], f(256)], reps: 3 },
  { name: "tril [64,128,256]", op: "tril", args: [X], reps: 3 },
  { name: "nll_loss [2048,1000]", op: "nll_loss", args: [f(2048, 1000), { t: "i64", shape: [2048], high: 1000 }], reps: 3 },
  { name: "mse_loss [64,128,256]", op: "mse_loss", args: [X, X], reps: 3 },
  // baddbmm is composed (matmul, scale, scaled add); outer is one matmul with an inner dim of 1; repeat one strided copy
  { name: "baddbmm [128] + [64,128,256] @ [64,256,128], beta 0.5, alpha 2", op: "baddbmm", args: [f(128), X, f(64, 256, 128)], kwargs: { beta: 0.5, alpha: 2 }, reps: 1 },
  { name: "repeat [64,1,256] by [1,128,1]", op: "repeat", args: [f(64, 1, 256), [1, 128, 1]], reps: 3 },
  { name: "outer [2048] x [1024]", op: "outer", args: [f(2048), f(1024)], reps: 5 },
  // index_add is embedding's backward (one shim_scatter add of the rows, in index order)
  { name: "index_add [1000,256] dim 0 of [8192,256] rows", op: "index_add", args: [f(1000, 256), 0, { t: "i64", shape: [8192], high: 1000 }, X2], reps: 5 },
  { name: "narrow dim 0 [64,128,256] 16..48 (view)", op: "narrow", args: [X, 0, 16, 32], reps: 20 },
  { name: "select dim 0 [64,128,256] (view)", op: "select", args: [X, 0, 5], reps: 20 },
  { name: "select dim -1 [64,128,256] (view)", op: "select", args: [X, -1, 5], reps: 20 },
  { name: "split [64,128,256] in 4 along dim 0 (views)", op: "split", args: [X, 16, 0], reps: 20 },
  { name: "narrow dim -1 [64,128,256] 64..192 (view)", op: "narrow", args: [X, -1, 64, 128], reps: 20 },
  { name: "split [64,128,256] in 4 along dim -1 (views)", op: "split", args: [X, 64, -1], reps: 20 },
  // a backward's transposed product, dW = g^T x: read in place (_matmul_t), and matmul of the transposed view, which BLAS reads the same way
  { name: "_matmul_t [8192,1024]^T @ [8192,256] (dW, read in place)", op: "_matmul_t", args: [f(8192, 1024), X2, true, false], reps: 1 },
  { name: "matmul [8192,1024].t() @ [8192,256] (the view, read in place)", op: "matmul", args: [ft(1024, 8192), X2], reps: 1 },
  // the GPT's large size on one dp=4 rank (bench/train.ts: 8 rows of 32 tokens, dim 256): its linears, their backward products and the elementwise ops of its backward
  { name: "gpt linear [8,32,256] x [768,256]^T + b (qkv)", op: "linear", args: [G, f(768, 256), f(768)], reps: 40 },
  { name: "gpt linear [8,32,256] x [1024,256]^T + b (fc)", op: "linear", args: [G, f(1024, 256), f(1024)], reps: 40 },
  { name: "gpt linear [8,32,1024] x [256,1024]^T (proj)", op: "linear", args: [G4, f(256, 1024)], reps: 40 },
  { name: "gpt _matmul_t [256,1024]^T @ [256,256] (dW)", op: "_matmul_t", args: [f(256, 1024), f(256, 256), true, false], reps: 40 },
  { name: "gpt matmul [8,32,1024] @ [1024,256] (dX)", op: "matmul", args: [G4, f(1024, 256)], reps: 40 },
  { name: "gpt matmul [8,4,32,64] @ [8,4,64,32] (scores)", op: "matmul", args: [f(8, 4, 32, 64), f(8, 4, 64, 32)], reps: 100 },
  { name: "gpt mul [8,32,1024] * same", op: "mul", args: [G4, G4], reps: 200 },
  { name: "gpt add [8,32,256] + same", op: "add", args: [G, G], reps: 400 },
  { name: "gpt sum dim 0 [256,1024] (bias grad)", op: "sum", args: [f(256, 1024), 0], reps: 200 },
]
const only = flag("--only")
const CASES = only === undefined ? ALL_CASES : ALL_CASES.filter((c) => only.split("|").some((part) => c.name.includes(part)))
const ROUNDS = quick ? 3 : 7
const WORKER_REPS = 4

const isTensorArg = (a: Arg): a is { t: "f32"; shape: number[] } | { t: "i64"; shape: number[]; high: number } =>
  typeof a === "object" && a !== null && !Array.isArray(a)
/** Index i of an i64 case tensor: (i * 7919) % high, the same on every side. */
const idAt = (i: number, high: number) => (i * 7919) % high

// ---- ours, kernel-only --------------------------------------------------------------------
const made: NativeTensor[] = []
const buildLocal = (a: Arg): unknown => {
  if (Array.isArray(a) && a.length > 0 && typeof a[0] === "object") return (a as Arg[]).map(buildLocal)
  if (!isTensorArg(a)) return a
  let t: NativeTensor
  if (a.t === "i64") {
    const n = a.shape.reduce((x, y) => x * y, 1), data = new BigInt64Array(n)
    for (let i = 0; i < n; i++) data[i] = BigInt(idAt(i, a.high))
    t = Tensor.fromHost(native, { dtype: "i64", shape: a.shape, data: new Uint8Array(data.buffer) } as never)
  } else if ("transposed" in a) {
    const base = builtinFunction("randn")!({ ...ctx, kwargs: { seed: 1 } }, swapped(a.shape)) as NativeTensor
    made.push(base)
    t = builtinFunction("transpose")!({ ...ctx, kwargs: {} }, base, -1, -2) as NativeTensor
  } else t = builtinFunction("randn")!({ ...ctx, kwargs: { seed: 1 } }, a.shape) as NativeTensor
  made.push(t)
  return t
}
const localArgs = CASES.map((c) => c.args.map(buildLocal))
/** Seconds per call, wall and CPU (this process's). */
const kernelRound = (i: number, threads: number, reps: number): [number, number] => {
  native.setThreads(threads)
  const c = CASES[i]!, fn = builtinFunction(c.op)!, args = localArgs[i]!
  const t0 = performance.now(), c0 = process.cpuUsage()
  for (let r = 0; r < reps; r++) for (const t of [fn({ ...ctx, kwargs: c.kwargs ?? {} }, ...args)].flat() as NativeTensor[]) t.free()
  const cpu = process.cpuUsage(c0)
  return [(performance.now() - t0) / 1000 / reps, (cpu.user + cpu.system) / 1e6 / reps]
}

// ---- torch ------------------------------------------------------------------------------
const torch = Bun.spawn(["/usr/bin/python3", new URL("./torch_ops.py", import.meta.url).pathname], {
  stdin: "pipe", stdout: "pipe", stderr: "inherit", env: { ...process.env, OMP_NUM_THREADS: "2" },
})
const torchLines = (async function* () {
  let text = ""
  for await (const chunk of torch.stdout) {
    text += new TextDecoder().decode(chunk)
    for (let nl = text.indexOf("\n"); nl >= 0; nl = text.indexOf("\n")) {
      yield text.slice(0, nl)
      text = text.slice(nl + 1)
    }
  }
})()
const torchLine = async (): Promise<string | undefined> => (await torchLines.next()).value ?? undefined
torch.stdin.write(JSON.stringify(CASES.map((c) => ({ op: c.op, args: c.args, kwargs: c.kwargs ?? {} }))) + "\n")
torch.stdin.flush()
const torchReady = (await torchLine()) === "ready"
if (!torchReady) console.log("torch did not start (is python3-torch at /usr/bin/python3?): ours only")
/** Seconds per call, wall and CPU, or undefined when torch did not answer. */
const torchRound = async (i: number, threads: number, reps: number): Promise<[number, number] | undefined> => {
  if (!torchReady) return undefined
  torch.stdin.write(`${i} ${threads} ${reps}\n`)
  torch.stdin.flush()
  const [wall, cpu] = ((await torchLine()) ?? "").split(" ").map(Number)
  return Number.isFinite(wall) && Number.isFinite(cpu) ? [wall!, cpu!] : undefined
}

// ---- ours, through a worker ---------------------------------------------------------------
const buildRemote = (mesh: Mesh, a: Arg): Effect.Effect<unknown, unknown> => {
  if (Array.isArray(a) && a.length > 0 && typeof a[0] === "object") return Effect.all((a as Arg[]).map((x) => buildRemote(mesh, x)))
  if (!isTensorArg(a)) return Effect.succeed(a)
  if (a.t === "f32" && "transposed" in a) return Effect.flatMap(mesh.call("ops.randn", [swapped(a.shape)], { seed: 1 }), (base) => mesh.call("ops.transpose", [base, -1, -2]))
  if (a.t === "f32") return mesh.call("ops.randn", [a.shape], { seed: 1 })
  const high = a.high, n = a.shape.reduce((x, y) => x * y, 1)
  return Effect.gen(function* () {
    const i = yield* mesh.call("ops.arange", [n])
    const m = yield* mesh.call("ops.mul", [i, 7919])
    const ids = yield* mesh.call("ops.remainder", [m, high])
    return yield* mesh.call("ops.reshape", [ids, a.shape])
  })
}
const workerRound = (mesh: Mesh, i: number, args: ReadonlyArray<unknown>, reps: number) =>
  Effect.gen(function* () {
    const c = CASES[i]!
    const t0 = performance.now()
    let last: RemoteTensor[] = []
    for (let r = 0; r < reps; r++) {
      for (const t of last) t.release()
      last = yield* mesh.callMany(`ops.${c.op}`, args, c.kwargs ?? {})
    }
    const flat = yield* mesh.call("ops.reshape", [last[0]!, [-1]])
    const one = yield* mesh.call("ops.narrow", [flat, 0, 0, 1])
    yield* mesh.fetch(one)
    const dt = (performance.now() - t0) / 1000 / reps
    for (const t of [...last, flat, one]) t.release()
    return dt
  })

// ---- the run --------------------------------------------------------------------------------
const median = (xs: ReadonlyArray<number>) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!
interface Row { kernel: number[]; torch: number[]; worker: number[]; ratio: number[]; workerRatio: number[]; cpuRatio: number[]; workerCpu: number }

/** User plus system CPU seconds of a process (/proc ticks of 10 ms: summed over all rounds). */
const cpuOf = (pid: number): number => {
  const stat = readFileSync(`/proc/${pid}/stat`, "utf8"), fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ")
  return (Number(fields[11]) + Number(fields[12])) / 100
}

const measure = async (threads: number): Promise<Row[]> => {
  const rows: Row[] = CASES.map(() => ({ kernel: [], torch: [], worker: [], ratio: [], workerRatio: [], cpuRatio: [], workerCpu: NaN }))
  let rt: ManagedRuntime.ManagedRuntime<Controller, unknown> | undefined
  let mesh: Mesh | undefined, remoteArgs: unknown[][] = [], pid = 0
  if (WORKER) {
    const layer = Controller.local({ world: 1, env: { MONARCH_CPU_THREADS: String(threads) }, onWorkerLine: () => {} })
    rt = ManagedRuntime.make(layer as Layer.Layer<Controller, unknown>)
    mesh = await rt.runPromise(Effect.gen(function* () {
      const ctl = yield* Controller
      pid = ctl.workers()[0]!.pid
      return yield* ctl.mesh({ all: 1 })
    }))
    remoteArgs = await rt.runPromise(Effect.all(CASES.map((c) => Effect.all(c.args.map((a) => buildRemote(mesh!, a)))))) as unknown[][]
  }
  try {
    for (let i = 0; i < CASES.length; i++) {
      const reps = CASES[i]!.reps
      kernelRound(i, threads, 1) // warm-up
      if (rt) await rt.runPromise(workerRound(mesh!, i, remoteArgs[i]!, 1))
      let cpu = 0
      for (let r = 0; r < ROUNDS; r++) {
        const [k, kCpu] = kernelRound(i, threads, reps), torchTimes = await torchRound(i, threads, reps), t = torchTimes?.[0]
        rows[i]!.kernel.push(k)
        if (torchTimes !== undefined) rows[i]!.torch.push(torchTimes[0]), rows[i]!.ratio.push(torchTimes[0] / k), rows[i]!.cpuRatio.push(torchTimes[1] / kCpu)
        if (rt) {
          const c0 = cpuOf(pid), w = await rt.runPromise(workerRound(mesh!, i, remoteArgs[i]!, reps * WORKER_REPS))
          cpu += cpuOf(pid) - c0
          rows[i]!.worker.push(w)
          if (t !== undefined) rows[i]!.workerRatio.push(t / w)
        }
      }
      rows[i]!.workerCpu = cpu / (ROUNDS * reps * WORKER_REPS)
    }
  } finally {
    await rt?.dispose()
  }
  return rows
}

const ms = (xs: number[]) => (xs.length ? (median(xs) * 1000).toFixed(2) : "-")
const x = (xs: number[]) => (xs.length ? `${median(xs).toFixed(2)}x` : "-")
console.log(`bench/ops: median of ${ROUNDS} rounds, ms per call; load ${readFileSync("/proc/loadavg", "utf8").split(" ").slice(0, 3).join(" ")}`)
for (const threads of THREADS) {
  const rows = await measure(threads)
  console.log("")
  console.log(`| op (${threads} thread${threads > 1 ? "s" : ""}) | ours kernel-only | torch | torch / ours | CPU time, torch / ours | ours through a worker | torch / worker | worker CPU per op |`)
  console.log("|---|---:|---:|---:|---:|---:|---:|---:|")
  CASES.forEach((c, i) => {
    const r = rows[i]!
    console.log(`| ${c.name} | ${ms(r.kernel)} | ${ms(r.torch)} | ${x(r.ratio)} | ${x(r.cpuRatio)} | ${ms(r.worker)} | ${x(r.workerRatio)} | ${Number.isNaN(r.workerCpu) ? "-" : (r.workerCpu * 1000).toFixed(2)} |`)
  })
}
torch.stdin.end()
torch.kill()
for (const t of made) t.free()

// The fused attention against the same attention composed of our own ops (what a user had
// before it): transpose, matmul, scale, causal masked_fill, softmax, matmul; kernel-only, 1 thread.
if (only === undefined || "sdpa".includes(only)) {
  const call = (op: string, args: unknown[], kwargs: Record<string, unknown> = {}) => builtinFunction(op)!({ ...ctx, kwargs }, ...args) as NativeTensor
  const [q, k, v] = [0, 1, 2].map((seed) => call("randn", [[16, 4, 128, 64]], { seed }))
  const mask = call("logical_not", [call("tril", [call("ones", [[128, 128]], { dtype: "bool" })])])
  const composed = () => {
    const kt = call("transpose", [k, -2, -1]), s = call("matmul", [q, kt]), scaled = call("mul", [s, 1 / 8])
    const masked = call("masked_fill", [scaled, mask, -Infinity]), p = call("softmax", [masked, -1]), o = call("matmul", [p, v])
    for (const t of [kt, s, scaled, masked, p, o]) t.free()
  }
  const fused = () => call("scaled_dot_product_attention", [q, k, v], { is_causal: true }).free()
  const time = (f: () => void) => Array.from({ length: ROUNDS }, () => {
    const t0 = performance.now()
    f()
    return (performance.now() - t0) / 1000
  })
  const [tf, tc] = [time(fused), time(composed)]
  console.log(`\nscaled_dot_product_attention, causal, q,k,v [16,4,128,64], kernel-only: fused ${ms(tf)} ms, composed of our ops ${ms(tc)} ms, composed / fused ${(median(tc) / median(tf)).toFixed(2)}x`)
  for (const t of [q!, k!, v!, mask]) t.free()
}

// embedding's backward as it is now (index_add of g's rows into zeros) against what it was (a
// one-hot [N, V] matrix, transposed, @ g): the same gradient, kernel-only, 1 thread.
if (only === undefined || "embedding backward".includes(only)) {
  native.setThreads(1)
  const call = (op: string, args: unknown[], kwargs: Record<string, unknown> = {}) => builtinFunction(op)!({ ...ctx, kwargs }, ...args) as NativeTensor
  const [n, rows, width] = [8192, 1000, 256]
  const ids = call("remainder", [call("mul", [call("arange", [n]), 7919]), rows]), g = call("randn", [[n, width]], { seed: 1 })
  const viaIndexAdd = () => {
    const z = call("zeros", [[rows, width]]), w = call("index_add", [z, 0, ids, g])
    for (const t of [z, w]) t.free()
  }
  const viaOneHot = () => {
    const col = call("reshape", [ids, [n, 1]]), range = call("arange", [rows]), eq = call("eq", [col, range]), hot = call("to", [eq, "f32"])
    const ht = call("transpose", [hot, 0, 1]), w = call("matmul", [ht, g])
    for (const t of [eq, hot, ht, w, range]) t.free()
  }
  const time = (f: () => void) => Array.from({ length: ROUNDS }, () => {
    const t0 = performance.now()
    f()
    return (performance.now() - t0) / 1000
  })
  viaIndexAdd(), viaOneHot()
  const [ti, to] = [time(viaIndexAdd), time(viaOneHot)]
  console.log(`\nembedding backward, [${n}] ids into [${rows},${width}], kernel-only: index_add ${ms(ti)} ms, one-hot product (before) ${ms(to)} ms, one-hot / index_add ${(median(to) / median(ti)).toFixed(1)}x`)
}
