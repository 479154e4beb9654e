/**
 * In-place writes checked against torch 1.13 (inplace_ref.py), on a real worker through the
 * controller. Used by inplace.test.ts and by the autograd area's RELIABILITY.md rows.
 *
 * - Random short programs (randomProgram): ops drawn from every kind of saved set, and in-place
 *   writes at random points (under noGrad, or through detach()) to leaves, intermediates, views,
 *   masks and indices; then backward of a sum. Torch either refuses ("modified by an
 *   inplace operation") or gives gradients: ours must refuse exactly then (a ControllerError
 *   with reason "modified-inplace"), and otherwise give torch's gradients.
 * - Random pairs of views of one storage (a leading-dim narrow, reshaped or not; disjoint,
 *   partly overlapping, or the same elements in the same or another layout), one written by
 *   add_, mul_, copy_, addcmul_, index_add_ or scatter_ with the other as input: ours must refuse exactly where torch
 *   does (reason "overlap", nothing sent), and where it runs leave the storage as torch's.
 */
import { Effect, ManagedRuntime } from "effect"
import { Controller, eager, noGrad, ops, opsOn, type Mesh, type RemoteTensor } from "../../src/controller/index.ts"
import { rng } from "../protocol/lookups.ts"
import { TorchServer } from "../torch.ts"
import { host } from "../worker/build.ts"

interface Leaf { readonly shape: number[]; readonly data: number[]; readonly dtype: "f64" | "i64" }
type Step =
  | { readonly op: string; readonly args: number[] }
  | { readonly op: "write"; readonly target: number; readonly how: "nograd" | "detach" }
export interface Program { readonly leaves: Leaf[]; readonly steps: Step[]; readonly loss: number[] }

type Kind = "f" | "i" | "b"
interface Value { readonly shape: number[]; readonly kind: Kind; readonly grad: boolean }

/** Unary float ops of any input, and of a positive one only (applied to abs(x) + 0.5). */
const UNARY = ["exp", "tanh", "sigmoid", "relu", "abs", "sin", "cos", "neg", "erf", "silu", "gelu", "softplus", "expm1"] as const
const POSITIVE = ["log", "sqrt", "reciprocal", "rsqrt"] as const
/** Over the last dim (or everything): each keeps or drops it. */
const LAST = ["sum_last", "mean_last", "amax_last", "softmax_last", "log_softmax_last", "cumsum_last", "logsumexp_last", "var_last", "std_last", "norm", "prod"] as const
const BINARY = ["add", "sub", "mul", "maximum", "minimum"] as const

/**
 * A random program of `length` steps (seeded: the same seed gives the same program), over two f64
 * leaves of [2, 3], one of [3] and an i64 index [1, 0]. Each op is one whose saved tensors torch
 * 1.13 measures the same as src/ops/saves.ts: none (add, sum, views), the input (log, erf, var),
 * the result (exp, softmax), the other operand (mul, matmul, linear), a mask or an index (where,
 * masked_fill, index_select, max's indices), or several (clamp, lerp, layer_norm, pow).
 */
export const randomProgram = (seed: number, length = 8): Program => {
  const next = rng(seed), pick = <A>(xs: ReadonlyArray<A>): A => xs[Math.floor(next() * xs.length)]!
  const data = (n: number) => Array.from({ length: n }, () => Number((next() * 2 - 1).toFixed(3)))
  const leaves: Leaf[] = [{ shape: [2, 3], data: data(6), dtype: "f64" }, { shape: [2, 3], data: data(6), dtype: "f64" }, { shape: [3], data: data(3), dtype: "f64" }, { shape: [2], data: [1, 0], dtype: "i64" }]
  const vals: Value[] = leaves.map((l) => ({ shape: l.shape, kind: l.dtype === "f64" ? "f" : "i", grad: l.dtype === "f64" }))
  const steps: Step[] = []
  const push = (op: string, args: number[], shape: number[], kind: Kind = "f", grad = args.some((i) => vals[i]!.grad)): number => {
    steps.push({ op, args })
    vals.push({ shape, kind, grad: kind === "f" && grad })
    return vals.length - 1
  }
  const where = (pred: (v: Value) => boolean) => vals.flatMap((v, i) => (pred(v) ? [i] : []))
  const same = (shape: number[], kind: Kind = "f") => pick(where((v) => v.kind === kind && v.shape.join() === shape.join()))
  const positive = (i: number) => push("add_half", [push("abs", [i], vals[i]!.shape)], vals[i]!.shape)
  // The index leaf, [1, 0] (max's indices may be 2, too large for what they would index).
  const INDEX = 3
  const condOf = (shape: number[]) => (where((v) => v.kind === "b" && v.shape.join() === shape.join()).length > 0 && next() < 0.5 ? same(shape, "b") : push("gt", [same(shape)], shape, "b"))
  for (let s = 0; s < length; s++) {
    const kind = next()
    if (kind < 0.22) {
      steps.push({ op: "write", target: Math.floor(next() * vals.length), how: next() < 0.5 ? "nograd" : "detach" })
      continue
    }
    const i = pick(where((v) => v.kind === "f")), shape = vals[i]!.shape, n = shape.length, last = shape.at(-1) ?? 1
    if (kind < 0.34) push(pick(UNARY), [i], shape)
    else if (kind < 0.38) push(pick(POSITIVE), [positive(i)], shape)
    else if (kind < 0.46) push(pick(BINARY), [i, same(shape)], shape)
    else if (kind < 0.48) push("div", [i, positive(same(shape))], shape)
    else if (kind < 0.50) {
      if (next() < 0.5) push("square", [i], shape)
      else push("pow", [positive(i), same(shape)], shape)
    }
    else if (kind < 0.53) push("where", [condOf(shape), i, same(shape)], shape)
    else if (kind < 0.55) push("masked_fill", [i, condOf(shape)], shape)
    else if (kind < 0.58) push(pick(["clamp", "lerp", "addcmul"]), [i, same(shape), same(shape)], shape)
    else if (kind < 0.59) push("addcdiv", [i, same(shape), positive(same(shape))], shape)
    else if (kind < 0.64 && n > 0) {
      const op = pick(LAST)
      if ((op === "var_last" || op === "std_last") && last < 2) continue
      push(op, [i], op === "norm" || op === "prod" ? [] : op.endsWith("softmax_last") || op === "cumsum_last" ? shape : shape.slice(0, -1))
    } else if (kind < 0.67 && n > 0) {
      push("max_values", [i], shape.slice(0, -1))
      push("max_indices", [i], shape.slice(0, -1), "i")
    } else if (kind < 0.70 && n === 2 && where((v) => v.kind === "f" && v.shape.join() === `${shape[1]}`).length > 0) push("matmul", [i, same([shape[1]!])], [shape[0]!])
    else if (kind < 0.73 && n === 2) {
      const w = pick(where((v) => v.kind === "f" && v.shape.length === 2 && v.shape[1] === shape[1])), rows = vals[w]!.shape[0]!
      const bias = where((v) => v.kind === "f" && v.shape.join() === `${rows}`)
      push("linear", bias.length > 0 && next() < 0.5 ? [i, w, pick(bias)] : [i, w], [shape[0]!, rows])
    } else if (kind < 0.75) push("mse_loss", [i, same(shape)], [])
    else if (kind < 0.77 && n === 2 && where((v) => v.kind === "f" && v.shape.join() === `${last}`).length > 0) push("layer_norm", [i, same([last]), same([last])], shape)
    else if (kind < 0.80 && n > 0 && shape[0]! >= 2) push(n === 1 && next() < 0.5 ? "gather" : "index_select", [i, INDEX], [2, ...shape.slice(1)])
    else if (kind < 0.82 && n === 2 && shape[0]! >= 2) push("embedding", [INDEX, i], [2, shape[1]!])
    else if (kind < 0.85 && n > 0) {
      if (next() < 0.5) push("cat", [i, same(shape)], [2 * shape[0]!, ...shape.slice(1)])
      else push("stack", [i, same(shape)], [2, ...shape])
    }
    else if (kind < 0.89 && n > 0 && shape[0]! >= 2) {
      if (next() < 0.5) push("narrow", [i], [1, ...shape.slice(1)])
      else push("select", [i], shape.slice(1))
    } else if (kind < 0.92) {
      if (next() < 0.5) push("flat", [i], [shape.reduce((x, y) => x * y, 1)])
      else push("unsqueeze", [i], [1, ...shape])
    }
    else if (kind < 0.95) push("detach", [i], shape, "f", false)
    else push(pick(UNARY), [i], shape)
  }
  const withGrad = where((v) => v.grad)
  const loss = [...new Set([withGrad.at(-1)!, pick(withGrad), pick(withGrad)])]
  return { leaves, steps, loss }
}

/** One value of ours for a step (the same op as inplace_ref.py's apply). */
const apply = (vals: RemoteTensor[], s: Extract<Step, { args: number[] }>): RemoteTensor => {
  const [a, b, c] = s.args.map((i) => vals[i]!) as [RemoteTensor, RemoteTensor, RemoteTensor]
  switch (s.op) {
    case "add_half": return a.add(0.5)
    case "square": return a.pow(2)
    case "gt": return a.gt(0)
    case "where": return ops.where(a, b, c)
    case "masked_fill": return a.masked_fill(b, 0.5)
    case "addcmul": return ops.addcmul(a, b, c, { value: 0.5 })
    case "addcdiv": return ops.addcdiv(a, b, c, { value: 0.5 })
    case "sum_last": return a.sum(-1)
    case "mean_last": return a.mean(-1)
    case "amax_last": return a.amax(-1)
    case "softmax_last": return a.softmax(-1)
    case "log_softmax_last": return a.log_softmax(-1)
    case "cumsum_last": return a.cumsum(-1)
    case "logsumexp_last": return a.logsumexp(-1)
    case "var_last": return a.var(-1)
    case "std_last": return a.std(-1)
    case "norm": return a.norm()
    case "prod": return a.prod()
    case "max_values": return (a.max(-1) as unknown as RemoteTensor[])[0]!
    case "max_indices": return (a.max(-1) as unknown as RemoteTensor[])[1]!
    case "linear": return ops.linear(a, b, c ?? null)
    case "layer_norm": return ops.layer_norm(a, [a.shape!.at(-1)!], b, c)
    case "index_select": return ops.index_select(a, 0, b)
    case "gather": return ops.gather(a, 0, b)
    case "embedding": return ops.embedding(a, b)
    case "cat": return ops.cat([a, b], 0)
    case "stack": return ops.stack([a, b], 0)
    case "narrow": return a.narrow(0, 1, 1)
    case "select": return a.select(0, 0)
    case "flat": return a.reshape([-1])
    case "unsqueeze": return a.unsqueeze(0)
    case "detach": return a.detach()
    default: return (ops as unknown as Record<string, (...x: RemoteTensor[]) => RemoteTensor>)[s.op]!(...s.args.map((i) => vals[i]!))
  }
}

export interface Outcome { readonly refused: boolean; readonly message: string; readonly grads?: number[][]; readonly base?: number[]; readonly error?: string }

const valuesOf = async (rt: ManagedRuntime.ManagedRuntime<Controller, unknown>, t: RemoteTensor): Promise<number[]> => [...(await rt.runPromise(t.fetch())).toArray()].map(Number)

/** The tries of one check: how many, how many held, and the first problem (with its seed). */
export interface Tally { tried: number; held: number; problems: string[]; refusals: number }

const close = (a: number[], b: number[]) => a.length === b.length && a.every((x, i) => (Number.isNaN(x) && Number.isNaN(b[i]!)) || Math.abs(x - b[i]!) <= 1e-9 * Math.max(1, Math.abs(b[i]!)))

/** A worker (one rank) and torch, for `f`; both closed after. */
export const withRig = async <A>(f: (rig: { rt: ManagedRuntime.ManagedRuntime<Controller, unknown>; mesh: Mesh; torch: TorchServer }) => Promise<A>): Promise<A> => {
  const rt = ManagedRuntime.make(Controller.local({ world: 1, functionPath: [new URL("../..", import.meta.url).pathname], onWorkerLine: () => {} }))
  const torch = new TorchServer(new URL("./inplace_ref.py", import.meta.url).pathname)
  try {
    const ctl = await rt.runPromise(Effect.service(Controller))
    const mesh = await rt.runPromise(ctl.mesh({ dp: 1 }))
    return await f({ rt, mesh, torch })
  } finally {
    torch.close()
    await rt.dispose()
  }
}

let asked = 0

/** Runs `count` random programs from `seed` on ours and torch's and compares. */
export const inPlacePrograms = (count: number, seed: number): Promise<Tally> => withRig(async ({ rt, mesh, torch }) => {
  const t: Tally = { tried: 0, held: 0, problems: [], refusals: 0 }
  for (let p = 0; p < count; p++) {
    const s = seed + p, prog = randomProgram(s)
    t.tried++
    const want = await torch.ask<Outcome>(asked++, { kind: "program", ...prog })
    const got = await runOurs(rt, mesh, prog)
    if (want.refused) t.refusals++
    const problem = want.error !== undefined ? `torch failed: ${want.error}`
      : got.refused !== want.refused ? `ours ${got.refused ? `refused (${got.message})` : "gave gradients"}, torch ${want.refused ? `refused (${want.message})` : "gave gradients"}`
      : !want.refused && !got.grads!.every((g, i) => close(g, want.grads![i]!)) ? `gradients differ: ours ${JSON.stringify(got.grads)}, torch ${JSON.stringify(want.grads)}`
      : undefined
    if (problem === undefined) t.held++
    else t.problems.push(`seed ${s}: ${problem}; program ${JSON.stringify(prog.steps)} loss ${prog.loss}`)
  }
  return t
})

/** Our outcome of one program. */
export const runOurs = async (rt: ManagedRuntime.ManagedRuntime<Controller, unknown>, mesh: Mesh, prog: Program): Promise<Outcome> => {
  const made = prog.leaves.map((l) => opsOn(mesh).clone(host(l.dtype, l.shape, l.data) as never) as RemoteTensor)
  const leaves = made.filter((t) => t.dtype === "f64").map((t) => t.requiresGrad_())
  const vals: RemoteTensor[] = [...made]
  for (const s of prog.steps) {
    if (s.op !== "write") vals.push(apply(vals, s as Extract<Step, { args: number[] }>))
    else {
      const w = s as Extract<Step, { target: number }>, v = vals[w.target]!
      // A float is scaled; an index keeps its values (its version still moves); a mask flips.
      const write = (t: RemoteTensor) => (t.dtype === "bool" ? t.logical_not_() : t.dtype === "i64" ? t.add_(0) : w.how === "nograd" ? t.mul_(1.5) : t.add_(0.25))
      if (w.how === "nograd") noGrad(() => write(v))
      else write(v.detach())
    }
  }
  const loss = prog.loss.map((i) => vals[i]!.sum()).reduce((a, b) => a.add(b))
  const refusal = await rt.runPromise(eager(() => loss.backward()).pipe(
    Effect.as(undefined),
    Effect.catchTag("ControllerError", (e) => Effect.succeed(e.reason === "modified-inplace" ? e.message : `another refusal: ${e.message}`)),
  ))
  if (refusal !== undefined) return { refused: true, message: refusal }
  const grads = await Promise.all(leaves.map((l) => (l.grad === undefined ? Promise.resolve(new Array<number>(l.shape!.reduce((a, b) => a * b, 1)).fill(0)) : valuesOf(rt, l.grad))))
  return { refused: false, message: "", grads }
}

/** A view of one storage: its first element, its length, and its shape. */
type View = [start: number, length: number, shape: number[]]
const WRITES = ["add_", "mul_", "copy_", "addcmul_", "index_add_", "scatter_"] as const
export interface OverlapPair { readonly size: number; readonly a: View; readonly b: View; readonly op: (typeof WRITES)[number] }

/** A random pair of views of a storage of 8 (the same length, in shapes that broadcast a into b). */
export const randomPair = (seed: number): OverlapPair => {
  const next = rng(seed), int = (n: number) => Math.floor(next() * n)
  const size = 8, length = 1 + int(4), op = WRITES[int(WRITES.length)]!
  const start = () => int(size - length + 1)
  // [L] into [L] or [1, L]; [1, L] into [1, L]. index_add_ and scatter_ take the same shape only.
  const layouts: Array<[number[], number[]]> = op === "index_add_" || op === "scatter_" ? [[[length], [length]], [[1, length], [1, length]]] : [[[length], [length]], [[length], [1, length]], [[1, length], [1, length]]]
  const [sa, sb] = layouts[int(layouts.length)]!
  const a = start()
  // Often the same elements, to reach the full-overlap branch.
  const b = next() < 0.3 ? a : start()
  return { size, a: [a, length, sa], b: [b, length, sb], op }
}

/** Our outcome of one pair. */
export const runPair = async (rt: ManagedRuntime.ManagedRuntime<Controller, unknown>, mesh: Mesh, pair: OverlapPair): Promise<Outcome> => {
  const base = opsOn(mesh).arange(pair.size, { dtype: "f64" }) as RemoteTensor
  const view = ([start, length, shape]: View) => base.narrow(0, start, length).view(shape)
  const a = view(pair.a), b = view(pair.b)
  const refusal = await rt.runPromise(eager(() => {
    if (pair.op === "index_add_") ops.index_add_(b, 0, opsOn(mesh).zeros([a.shape![0]!], { dtype: "i64" }), a)
    // Each of a's elements to its own place of b: along dim 0 of [L] its index, of [1, L] row 0.
    else if (pair.op === "scatter_") ops.scatter_(b, 0, a.shape!.length === 1 ? opsOn(mesh).arange(a.shape![0]!) : opsOn(mesh).zeros([...a.shape!], { dtype: "i64" }), a)
    else if (pair.op === "addcmul_") ops.addcmul_(b, a, a, { value: 0.5 })
    else (b[pair.op] as (x: RemoteTensor) => unknown)(a)
  }).pipe(Effect.as(undefined), Effect.catchTag("ControllerError", (e) => Effect.succeed(e.reason === "overlap" ? e.message : `another refusal: ${e.message}`))))
  if (refusal !== undefined) return { refused: true, message: refusal, base: await valuesOf(rt, base) }
  return { refused: false, message: "", base: await valuesOf(rt, base) }
}

/** Runs `count` random view pairs from `seed` on ours and torch's and compares. */
export const overlapPairs = (count: number, seed: number): Promise<Tally> => withRig(async ({ rt, mesh, torch }) => {
  const t: Tally = { tried: 0, held: 0, problems: [], refusals: 0 }
  const untouched = Array.from({ length: 8 }, (_, i) => i)
  for (let p = 0; p < count; p++) {
    const s = seed + p, pair = randomPair(s)
    t.tried++
    const want = await torch.ask<Outcome>(asked++, { kind: "overlap", ...pair })
    const got = await runPair(rt, mesh, pair)
    if (want.refused) t.refusals++
    const problem = want.error !== undefined ? `torch failed: ${want.error}`
      : got.refused !== want.refused ? `ours ${got.refused ? `refused (${got.message})` : "ran it"}, torch ${want.refused ? "refused" : "ran it"}`
      : got.refused ? (close(got.base!, untouched) ? undefined : `refused, but the storage changed: ${got.base}`)
      : close(got.base!, want.base!) ? undefined : `the storage after: ours ${got.base}, torch ${want.base}`
    if (problem === undefined) t.held++
    else t.problems.push(`seed ${s}: ${problem}; pair ${JSON.stringify(pair)}`)
  }
  return t
})
