/**
 * In-place writes checked against torch 1.13 (inplace_ref.py), on a real worker through the
 * controller. Used by inplace.test.ts and by the autograd area's RELIABILITY.md rows.
 *
 * - Random short programs: two f64 leaves of [2, 3] and one of [3], ops drawn from every kind of
 *   saved set (nothing, the input, the result, the other operand, a view of an input), and
 *   in-place writes at random points (under noGrad, or through detach()) to leaves,
 *   intermediates and views; then backward of a sum. Torch either refuses ("modified by an
 *   inplace operation") or gives gradients: ours must refuse exactly then (a ControllerError
 *   with reason "modified-inplace"), and otherwise give torch's gradients.
 * - Random pairs of views of one storage (a leading-dim narrow, reshaped or not; disjoint,
 *   partly overlapping, or the same elements in the same or another layout), one written by
 *   add_, mul_, copy_ or index_add_ with the other as input: ours must refuse exactly where torch
 *   does (reason "overlap", nothing sent), and where it runs leave the storage as torch's.
 */
import { Effect, ManagedRuntime } from "effect"
import { Controller, eager, noGrad, ops, opsOn, type Mesh, type RemoteTensor } from "../../src/controller/index.ts"
import { rng } from "../protocol/lookups.ts"
import { TorchServer } from "../torch.ts"
import { host } from "../worker/build.ts"

interface Leaf { readonly shape: number[]; readonly data: number[] }
type Step =
  | { readonly op: string; readonly args: number[]; readonly k?: number }
  | { readonly op: "write"; readonly target: number; readonly how: "nograd" | "detach" }
export interface Program { readonly leaves: Leaf[]; readonly steps: Step[]; readonly loss: number[] }

const UNARY = ["exp", "tanh", "sigmoid", "relu", "abs", "sin", "cos", "neg"] as const
/** Unary ops of a positive input only: applied to abs(x) + 0.5. */
const POSITIVE = ["log", "sqrt", "reciprocal"] as const
const BINARY = ["add", "sub", "mul", "maximum", "minimum"] as const

/** A random program of `length` steps (seeded: the same seed gives the same program). */
export const randomProgram = (seed: number, length = 8): Program => {
  const next = rng(seed), pick = <A>(xs: ReadonlyArray<A>): A => xs[Math.floor(next() * xs.length)]!
  const data = (n: number) => Array.from({ length: n }, () => Number((next() * 2 - 1).toFixed(3)))
  const leaves: Leaf[] = [{ shape: [2, 3], data: data(6) }, { shape: [2, 3], data: data(6) }, { shape: [3], data: data(3) }]
  // Each value's shape and whether it requires grad.
  const vals = leaves.map((l) => ({ shape: l.shape, grad: true }))
  const steps: Step[] = []
  const push = (op: string, args: number[], shape: number[], k?: number): number => {
    steps.push(k === undefined ? { op, args } : { op, args, k })
    vals.push({ shape, grad: op !== "detach" && args.some((i) => vals[i]!.grad) })
    return vals.length - 1
  }
  const of = (pred: (v: { shape: number[] }) => boolean) => vals.map((v, i) => [v, i] as const).filter(([v]) => pred(v)).map(([, i]) => i)
  const positive = (i: number) => push("add_scalar", [push("abs", [i], vals[i]!.shape)], vals[i]!.shape, 0.5)
  for (let s = 0; s < length; s++) {
    const i = pick(vals.map((_, j) => j)), shape = vals[i]!.shape, kind = next()
    if (kind < 0.25) {
      steps.push({ op: "write", target: i, how: next() < 0.5 ? "nograd" : "detach" })
      continue
    }
    if (kind < 0.45) push(pick(UNARY), [i], shape)
    else if (kind < 0.52) push(pick(POSITIVE), [positive(i)], shape)
    else if (kind < 0.68) push(pick(BINARY), [i, pick(of((v) => v.shape.join() === shape.join()))], shape)
    else if (kind < 0.72) push("div", [i, positive(pick(of((v) => v.shape.join() === shape.join())))], shape)
    else if (kind < 0.75) push("pow", [i], shape, 2)
    else if (kind < 0.79 && shape.length === 2) push("matmul", [i, pick(of((v) => v.shape.join() === "3"))], [2])
    else if (kind < 0.83 && shape.length > 0 && shape[0]! >= 2) {
      if (next() < 0.5) push("narrow", [i], [1, ...shape.slice(1)])
      else push("select", [i], shape.slice(1))
    }
    else if (kind < 0.86) push("flat", [i], [shape.reduce((a, b) => a * b, 1)])
    else if (kind < 0.89) push("detach", [i], shape)
    else if (kind < 0.92 && shape.length > 0) push(pick(["sum_last", "amax_last"]), [i], shape.slice(0, -1))
    else if (kind < 0.95 && shape.length > 0) push("softmax_last", [i], shape)
    else push("prod", [i], [])
  }
  const withGrad = vals.map((v, i) => [v, i] as const).filter(([v]) => v.grad).map(([, i]) => i)
  const last = withGrad.at(-1)!
  const loss = [...new Set([last, pick(withGrad), pick(withGrad)])]
  return { leaves, steps, loss }
}

/** One value of ours for a step (the same op as inplace_ref.py's apply). */
const apply = (vals: RemoteTensor[], s: Extract<Step, { args: number[] }>): RemoteTensor => {
  const [a, b] = s.args.map((i) => vals[i]!) as [RemoteTensor, RemoteTensor]
  switch (s.op) {
    case "add_scalar": return a.add(s.k!)
    case "pow": return a.pow(s.k!)
    case "narrow": return a.narrow(0, 1, 1)
    case "select": return a.select(0, 0)
    case "flat": return a.reshape([-1])
    case "detach": return a.detach()
    case "sum_last": return a.sum(-1)
    case "prod": return a.prod()
    case "amax_last": return a.amax(-1)
    case "softmax_last": return a.softmax(-1)
    default: return (ops as unknown as Record<string, (...x: RemoteTensor[]) => RemoteTensor>)[s.op]!(...(s.args.length === 1 ? [a] : [a, b]))
  }
}

export interface Outcome { readonly refused: boolean; readonly message: string; readonly grads?: number[][]; readonly base?: number[] }

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
    const problem = got.refused !== want.refused ? `ours ${got.refused ? `refused (${got.message})` : "gave gradients"}, torch ${want.refused ? `refused (${want.message})` : "gave gradients"}`
      : !want.refused && !got.grads!.every((g, i) => close(g, want.grads![i]!)) ? `gradients differ: ours ${JSON.stringify(got.grads)}, torch ${JSON.stringify(want.grads)}`
      : undefined
    if (problem === undefined) t.held++
    else t.problems.push(`seed ${s}: ${problem}; program ${JSON.stringify(prog.steps)} loss ${prog.loss}`)
  }
  return t
})

/** Our outcome of one program. */
export const runOurs = async (rt: ManagedRuntime.ManagedRuntime<Controller, unknown>, mesh: Mesh, prog: Program): Promise<Outcome> => {
  const leaves = prog.leaves.map((l) => (opsOn(mesh).clone(host("f64", l.shape, l.data) as never) as RemoteTensor).requiresGrad_())
  const vals: RemoteTensor[] = [...leaves]
  for (const s of prog.steps) {
    if (s.op !== "write") vals.push(apply(vals, s as Extract<Step, { args: number[] }>))
    else {
      const w = s as Extract<Step, { target: number }>, v = vals[w.target]!
      if (w.how === "nograd") noGrad(() => v.mul_(1.5))
      else v.detach().add_(0.25)
    }
  }
  const loss = prog.loss.map((i) => vals[i]!.sum()).reduce((a, b) => a.add(b))
  const refusal = await rt.runPromise(eager(() => loss.backward()).pipe(
    Effect.as(undefined),
    Effect.catchTag("ControllerError", (e) => Effect.succeed(e.reason === "modified-inplace" ? e.message : `another refusal: ${e.message}`)),
  ))
  if (refusal !== undefined) return { refused: true, message: refusal }
  const grads = await Promise.all(leaves.map((l) => (l.grad === undefined ? Promise.resolve(l.shape!.length === 1 ? [0, 0, 0] : [0, 0, 0, 0, 0, 0]) : valuesOf(rt, l.grad))))
  return { refused: false, message: "", grads }
}

/** A view of one storage: its first element, its length, and its shape. */
type View = [start: number, length: number, shape: number[]]
export interface OverlapPair { readonly size: number; readonly a: View; readonly b: View; readonly op: "add_" | "mul_" | "copy_" | "index_add_" }

/** A random pair of views of a storage of 8 (the same length, in shapes that broadcast a into b). */
export const randomPair = (seed: number): OverlapPair => {
  const next = rng(seed), int = (n: number) => Math.floor(next() * n)
  const size = 8, length = 1 + int(4), op = (["add_", "mul_", "copy_", "index_add_"] as const)[int(4)]!
  const start = () => int(size - length + 1)
  // [L] into [L] or [1, L]; [1, L] into [1, L]. index_add_ takes the same shape only.
  const layouts: Array<[number[], number[]]> = op === "index_add_" ? [[[length], [length]], [[1, length], [1, length]]] : [[[length], [length]], [[length], [1, length]], [[1, length], [1, length]]]
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
    const problem = got.refused !== want.refused ? `ours ${got.refused ? `refused (${got.message})` : "ran it"}, torch ${want.refused ? "refused" : "ran it"}`
      : got.refused ? (close(got.base!, untouched) ? undefined : `refused, but the storage changed: ${got.base}`)
      : close(got.base!, want.base!) ? undefined : `the storage after: ours ${got.base}, torch ${want.base}`
    if (problem === undefined) t.held++
    else t.problems.push(`seed ${s}: ${problem}; pair ${JSON.stringify(pair)}`)
  }
  return t
})
