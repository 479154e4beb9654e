/**
 * Op kernels against torch CPU, same run, one thread each (OPENBLAS_NUM_THREADS=1 here,
 * torch.set_num_threads(1) there), on shapes a small transformer uses: activations
 * [64, 128, 256] (flattened to [8192, 256] where an op wants 2-D) and [256, 1024] weights.
 * "ours" runs each built-in through its registry binding and kernels in this process
 * (kernel-only: no worker, no wire); the ratio is torch's time over ours (>= 1: as fast or faster).
 *
 *   bun run bench/ops.ts [--quick]
 */
import type { Tensor as NativeTensor } from "../ffi/tensor.ts"
import { Generator } from "../src/ops/generator.ts"

// Before the shim (and OpenBLAS with it) loads: the imports below are dynamic for that.
process.env.OPENBLAS_NUM_THREADS = "1"
const { loadNative } = await import("../ffi/native.ts")
const { Stream } = await import("../ffi/stream.ts")
const { Tensor } = await import("../ffi/tensor.ts")
const { builtinFunction } = await import("../src/ops/kernels.ts")
const { HostTensor } = await import("../src/protocol/values.ts")

const quick = process.argv.includes("--quick")
const native = loadNative("cpu")
const stream = Stream.default(native)
const ctx = { native, rank: 0, world: 1, device: "cpu" as const, stream, coords: {}, generator: new Generator(0), kwargs: {} }

type Arg = { t: "f32"; shape: number[] } | { t: "i64"; shape: number[]; high: number } | number | number[] | string | Arg[]
interface Case { readonly name: string; readonly op: string; readonly args: Arg[]; readonly kwargs?: Record<string, unknown>; readonly reps: number }

const f = (...shape: number[]): Arg => ({ t: "f32", shape })
const X = f(64, 128, 256), X2 = f(8192, 256)
const ALL_CASES: Case[] = [
  { name: "add [64,128,256] + same", op: "add", args: [X, X], reps: 5 },
  { name: "add [64,128,256] + [256] (broadcast)", op: "add", args: [X, f(256)], reps: 5 },
  { name: "mul [64,128,256] * 2", op: "mul", args: [X, 2], reps: 5 },
  { name: "relu [64,128,256]", op: "relu", args: [X], reps: 5 },
  { name: "exp [64,128,256]", op: "exp", args: [X], reps: 3 },
  { name: "tanh [64,128,256]", op: "tanh", args: [X], reps: 3 },
  { name: "sigmoid [64,128,256]", op: "sigmoid", args: [X], reps: 3 },
  { name: "sum dim -1 [64,128,256]", op: "sum", args: [X, -1], reps: 5 },
  { name: "mean dim -1 [64,128,256]", op: "mean", args: [X, -1], reps: 5 },
  { name: "amax dim -1 [64,128,256]", op: "amax", args: [X, -1], reps: 5 },
  { name: "softmax dim -1 [64,128,256]", op: "softmax", args: [X, -1], reps: 3 },
  { name: "log_softmax dim -1 [64,128,256]", op: "log_softmax", args: [X, -1], reps: 3 },
  { name: "layer_norm [8192,256] over 256", op: "layer_norm", args: [X2, [256]], reps: 3 },
  { name: "matmul [8192,256] @ [256,1024]", op: "matmul", args: [X2, f(256, 1024)], reps: 1 },
  { name: "linear [8192,256] x [1024,256]^T + b", op: "linear", args: [X2, f(1024, 256), f(1024)], reps: 1 },
  { name: "matmul batched [64,128,256] @ [64,256,128]", op: "matmul", args: [X, f(64, 256, 128)], reps: 1 },
  { name: "transpose(1, 2) [64,128,256] (copy)", op: "transpose", args: [X, 1, 2], reps: 3 },
  { name: "cat dim -1 of two [64,128,256]", op: "cat", args: [[X, X], -1], reps: 3 },
  { name: "embedding [8192] ids into [1000,256]", op: "embedding", args: [{ t: "i64", shape: [8192], high: 1000 }, f(1000, 256)], reps: 5 },
  { name: "cross_entropy [2048,1000]", op: "cross_entropy", args: [f(2048, 1000), { t: "i64", shape: [2048], high: 1000 }], reps: 3 },
  // issue 11.2's ops; torch 1.13 has no scaled_dot_product_attention or rms_norm: its side runs their math forms
  { name: "sdpa causal q,k,v [16,4,128,64]", op: "scaled_dot_product_attention", args: [f(16, 4, 128, 64), f(16, 4, 128, 64), f(16, 4, 128, 64)], kwargs: { is_causal: true }, reps: 1 },
  { name: "rms_norm [8192,256] over 256", op: "rms_norm", args: [X2, [256], f(256)], reps: 3 },
  { name: "tril [64,128,256]", op: "tril", args: [X], reps: 3 },
  { name: "nll_loss [2048,1000]", op: "nll_loss", args: [f(2048, 1000), { t: "i64", shape: [2048], high: 1000 }], reps: 3 },
  { name: "mse_loss [64,128,256]", op: "mse_loss", args: [X, X], reps: 3 },
  { name: "split [64,128,768] in 3 along -1", op: "split", args: [f(64, 128, 768), 256, -1], reps: 3 },
]
const only = process.argv.indexOf("--only")
const CASES = only < 0 ? ALL_CASES : ALL_CASES.filter((c) => c.name.includes(process.argv[only + 1] ?? ""))
const ROUNDS = quick ? 3 : 7

const made: NativeTensor[] = []

/** A tensor of normal values (f32), or of indices below `high` (i64). */
const fill = (t: NativeTensor, high?: number) => {
  const n = t.numel
  if (t.dtype === "i64") {
    const data = new BigInt64Array(n)
    for (let i = 0; i < n; i++) data[i] = BigInt((i * 7919) % high!)
    return Tensor.fromHost(native, { dtype: "i64", shape: t.shape, data: new Uint8Array(data.buffer) } as never)
  }
  return builtinFunction("randn")!({ ...ctx, kwargs: { seed: 1 } }, t.shape) as NativeTensor
}
const build = (a: Arg): unknown => {
  if (Array.isArray(a) && a.length > 0 && typeof a[0] === "object") return (a as Arg[]).map(build)
  if (typeof a !== "object" || Array.isArray(a)) return a
  const t = fill(Tensor.empty(native, a.t, a.shape), a.t === "i64" ? a.high : undefined)
  made.push(t)
  return t
}

/** Frees what a built-in returned: one tensor, or several (split). */
const freeResult = (r: unknown) => (Array.isArray(r) ? r : [r]).forEach((t) => (t as NativeTensor).free())

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!

const ours = CASES.map((c) => {
  const fn = builtinFunction(c.op)!, args = c.args.map(build), times: number[] = []
  for (let r = 0; r < ROUNDS; r++) {
    const t0 = performance.now()
    for (let i = 0; i < c.reps; i++) freeResult(fn({ ...ctx, kwargs: c.kwargs ?? {} }, ...args))
    times.push((performance.now() - t0) / 1000 / c.reps)
  }
  return median(times)
})
for (const t of made) t.free()

const torchRun = Bun.spawnSync(["/usr/bin/python3", new URL("./torch_ops.py", import.meta.url).pathname], {
  stdin: new TextEncoder().encode(JSON.stringify(CASES.map((c) => ({ op: c.op, args: c.args, kwargs: c.kwargs ?? {}, reps: c.reps, rounds: ROUNDS })))),
  env: { ...process.env, OMP_NUM_THREADS: "1" },
  stderr: "pipe",
})
const torch: number[] | undefined = torchRun.exitCode === 0 ? JSON.parse(torchRun.stdout.toString()) : undefined
if (!torch) console.log(`torch did not run (${torchRun.stderr.toString().trim().split("\n").at(-1)}): ours only`)

const ms = (s: number) => (s * 1000).toFixed(2).padStart(9)
console.log(`ops, kernel-only, 1 thread, median of ${ROUNDS} rounds (ms per call)`)
console.log(`${"op".padEnd(46)} ${"ours".padStart(9)} ${"torch".padStart(9)}  torch/ours`)
CASES.forEach((c, i) => {
  const t = torch?.[i]
  console.log(`${c.name.padEnd(46)} ${ms(ours[i]!)} ${t === undefined ? "        -" : ms(t)}  ${t === undefined ? "-" : (t / ours[i]!).toFixed(2).padStart(9) + "x"}`)
})

// The fused attention against the same attention composed from our own ops (what a user had
// before it): transpose, matmul, scale, causal masked_fill, softmax, matmul.
{
  const call = (op: string, args: unknown[], kwargs: Record<string, unknown> = {}) => builtinFunction(op)!({ ...ctx, kwargs }, ...args) as NativeTensor
  const shape = [16, 4, 128, 64]
  const [q, k, v] = [0, 1, 2].map((seed) => call("randn", [shape], { seed }))
  const mask = call("logical_not", [call("tril", [call("ones", [[128, 128]], { dtype: "bool" })])])
  const composed = () => {
    const kt = call("transpose", [k, -2, -1]), s = call("matmul", [q, kt]), scaled = call("mul", [s, 1 / 8])
    const masked = call("masked_fill", [scaled, mask, -Infinity]), p = call("softmax", [masked, -1]), o = call("matmul", [p, v])
    for (const t of [kt, s, scaled, masked, p, o]) t.free()
  }
  const fused = () => call("scaled_dot_product_attention", [q, k, v], { is_causal: true }).free()
  const time = (f: () => void) => median(Array.from({ length: ROUNDS }, () => {
    const t0 = performance.now()
    f()
    return (performance.now() - t0) / 1000
  }))
  const [tf, tc] = [time(fused), time(composed)]
  console.log(`\nscaled_dot_product_attention, causal, q,k,v [16,4,128,64]: fused ${ms(tf)} ms, composed of our ops ${ms(tc)} ms, composed/fused ${(tc / tf).toFixed(2)}x`)
  for (const t of [q, k, v, mask]) t!.free()
}
