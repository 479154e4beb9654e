/**
 * The built-in functions, named `ops.<name>` on the wire: creation, elementwise, reductions,
 * linear algebra and layout over the shim, for both backends. Each is written once as a pair:
 * `outputs` gives the dtypes and shapes of its results from its arguments' (so the
 * controller can know a result's shape without running anything), and `run` computes them.
 * In-place variants (suffix `_`) have no outputs; the controller lists their first argument
 * in `mutates`.
 */
import { Data } from "effect"
import * as k from "../../ffi/ops.ts"
import type { BinaryOpName, ReduceOpName, UnaryOpName } from "../../ffi/symbols.ts"
import { Tensor, numelOf } from "../../ffi/tensor.ts"
import { DTYPES, type DType } from "../protocol/values.ts"
import type { FunctionContext, RemoteFunction } from "./function.ts"

/** A built-in called with arguments it cannot take. */
export class OpArgumentError extends Data.TaggedError("OpArgumentError")<{ readonly message: string }> {}

/** What is known of a tensor without its values. */
export interface TensorMeta {
  readonly dtype: DType
  readonly shape: ReadonlyArray<number>
}

type Kwargs = Readonly<Record<string, unknown>>

export interface Builtin {
  /** The results' metadata; tensor arguments may be Tensors or TensorMetas. Throws OpArgumentError. */
  readonly outputs: (args: ReadonlyArray<unknown>, kwargs: Kwargs) => ReadonlyArray<TensorMeta>
  /**
   * Computes into `outs`, allocated from `outputs`. A view op (reshape) allocates nothing
   * and returns its result instead.
   */
  readonly run: (ctx: FunctionContext, outs: ReadonlyArray<Tensor>, args: ReadonlyArray<any>) => Tensor | void
  readonly view?: true
}

const bad = (op: string, message: string): never => {
  throw new OpArgumentError({ message: `ops.${op}: ${message}` })
}

const isTensorLike = (v: unknown): v is TensorMeta =>
  typeof v === "object" && v !== null && "dtype" in v && "shape" in v && Array.isArray((v as TensorMeta).shape)

const describe = (v: unknown): string =>
  isTensorLike(v) ? `${v.dtype}[${v.shape.join(", ")}]` : v === null ? "null" : Array.isArray(v) ? "array" : typeof v

const tensor = (op: string, v: unknown, what: string): TensorMeta =>
  isTensorLike(v) ? v : bad(op, `${what} must be a tensor, got ${describe(v)}`)

const int = (op: string, v: unknown, what: string): number =>
  typeof v === "number" && Number.isSafeInteger(v) ? v : bad(op, `${what} must be an integer, got ${describe(v)}`)

const num = (op: string, v: unknown, what: string): number =>
  typeof v === "number" ? v : typeof v === "boolean" ? Number(v) : bad(op, `${what} must be a number, got ${describe(v)}`)

const shapeArg = (op: string, v: unknown): number[] =>
  Array.isArray(v) ? v.map((d, i) => {
    const n = int(op, d, `shape[${i}]`)
    return n >= 0 ? n : bad(op, `shape[${i}] is negative`)
  }) : typeof v === "number" ? [int(op, v, "shape")] : bad(op, `shape must be an array of sizes, got ${describe(v)}`)

const dtypeArg = (op: string, v: unknown, fallback: DType): DType =>
  v === undefined ? fallback : (DTYPES as ReadonlyArray<unknown>).includes(v) ? (v as DType) : bad(op, `dtype must be one of ${DTYPES.join(", ")}, got ${String(v)}`)

/** dim in -ndim..ndim-1, normalised; a 0-dim tensor takes -1 and 0 (as torch does). */
const dimArg = (op: string, v: unknown, ndim: number): number => {
  const d = int(op, v, "dim"), n = Math.max(ndim, 1)
  if (d < -n || d >= n) bad(op, `dim ${d} out of range for ${ndim} dims`)
  return d < 0 ? d + n : d
}

const creation = (op: string, value: (args: ReadonlyArray<unknown>) => number): Builtin => ({
  outputs: ([shape], kw) => [{ dtype: dtypeArg(op, kw.dtype, "f32"), shape: shapeArg(op, shape) }],
  run: (ctx, [out], args) => k.fill(out!, value(args), ctx.stream),
})

const unary = (op: UnaryOpName): Builtin => ({
  outputs: ([a]) => [tensor(op, a, "argument 0")],
  run: (ctx, [out], [a]) => k.unary(op, out!, a, ctx.stream),
})

/** tensor op tensor (one-element operands broadcast), tensor op number, number op tensor. */
const binaryOutput = (op: BinaryOpName, a: unknown, b: unknown): TensorMeta => {
  const dtypeOf = (t: TensorMeta): DType => (k.isComparison(op) ? "bool" : t.dtype)
  if (isTensorLike(a) && isTensorLike(b)) {
    if (a.dtype !== b.dtype) bad(op, `dtypes differ: ${describe(a)} and ${describe(b)} (cast with ops.to)`)
    const na = numelOf(a.shape), nb = numelOf(b.shape)
    if (na !== nb && na !== 1 && nb !== 1) bad(op, `shapes do not broadcast: ${describe(a)} and ${describe(b)}`)
    if (na === nb && a.shape.join() !== b.shape.join()) bad(op, `shapes differ: ${describe(a)} and ${describe(b)}`)
    // A one-element operand takes the other's shape, even an empty one (as the shim computes).
    return { dtype: dtypeOf(a), shape: (na === 1 && nb !== 1 ? b : a).shape }
  }
  if (isTensorLike(a)) return num(op, b, "argument 1"), { dtype: dtypeOf(a), shape: a.shape }
  const t = tensor(op, b, "one argument")
  num(op, a, "argument 0")
  return { dtype: dtypeOf(t), shape: t.shape }
}

const binaryRun = (op: BinaryOpName, ctx: FunctionContext, out: Tensor, a: unknown, b: unknown): void => {
  if (a instanceof Tensor && b instanceof Tensor) k.binary(op, out, a, b, ctx.stream)
  else if (a instanceof Tensor) k.binaryScalar(op, out, a, Number(b), false, ctx.stream)
  else k.binaryScalar(op, out, b as Tensor, Number(a), true, ctx.stream)
}

const binary = (op: BinaryOpName): Builtin => ({
  outputs: ([a, b]) => [binaryOutput(op, a, b)],
  run: (ctx, [out], [a, b]) => binaryRun(op, ctx, out!, a, b),
})

const binaryInPlace = (op: BinaryOpName): Builtin => ({
  outputs: ([a, b]) => {
    const x = tensor(`${op}_`, a, "argument 0"), o = binaryOutput(op, x, b)
    if (o.shape !== x.shape || o.dtype !== x.dtype) bad(`${op}_`, `cannot write ${describe(o)} into ${describe(x)}`)
    return []
  },
  run: (ctx, _, [a, b]) => binaryRun(op, ctx, a, a, b),
})

const INTEGER_SUM: ReadonlySet<DType> = new Set(["bool", "u8", "i32"])

/** Reduces one dim (kwargs.dim) or every element; kwargs.keepdim keeps a size-1 dim. */
const reduction = (op: ReduceOpName): Builtin => ({
  outputs: ([a], kw) => {
    const x = tensor(op, a, "argument 0")
    const dtype = (op === "sum" || op === "prod") && INTEGER_SUM.has(x.dtype) ? "i64" : x.dtype
    if (kw.dim === undefined || kw.dim === null) return [{ dtype, shape: kw.keepdim ? x.shape.map(() => 1) : [] }]
    const d = dimArg(op, kw.dim, x.shape.length)
    return [{ dtype, shape: kw.keepdim ? x.shape.map((s, i) => (i === d ? 1 : s)) : x.shape.filter((_, i) => i !== d) }]
  },
  run: (ctx, [out], [a]) => {
    const dim = ctx.kwargs.dim
    // A 0-dim tensor's one element is all of its dim 0.
    const whole = dim === undefined || dim === null || a.shape.length === 0
    k.reduce(op, out!, a, whole ? undefined : dimArg(op, dim, a.shape.length), ctx.stream)
  },
})

const matmul: Builtin = {
  outputs: ([a, b]) => {
    const x = tensor("matmul", a, "argument 0"), y = tensor("matmul", b, "argument 1")
    if (x.dtype !== y.dtype) bad("matmul", `dtypes differ: ${describe(x)} @ ${describe(y)}`)
    if (x.shape.length < 2 || y.shape.length < 2) bad("matmul", `needs 2-D or batched operands: ${describe(x)} @ ${describe(y)}`)
    if (x.shape.at(-1) !== y.shape.at(-2)) bad("matmul", `inner dims differ: ${describe(x)} @ ${describe(y)}`)
    const batch = x.shape.slice(0, -2)
    if (y.shape.length > 2 && y.shape.slice(0, -2).join() !== batch.join()) bad("matmul", `batch dims differ: ${describe(x)} @ ${describe(y)}`)
    return [{ dtype: x.dtype, shape: [...batch, x.shape.at(-2)!, y.shape.at(-1)!] }]
  },
  run: (ctx, [out], [a, b]) => k.matmul(out!, a, b, ctx.stream),
}

const transposeDims = (x: TensorMeta, d0: unknown, d1: unknown): [number, number] =>
  [dimArg("transpose", d0, x.shape.length), dimArg("transpose", d1, x.shape.length)]

const transpose: Builtin = {
  outputs: ([a, d0, d1]) => {
    const x = tensor("transpose", a, "argument 0"), [i, j] = transposeDims(x, d0, d1), shape = [...x.shape]
    if (shape.length > 0) [shape[i], shape[j]] = [shape[j]!, shape[i]!]
    return [{ dtype: x.dtype, shape }]
  },
  // A 0-dim tensor transposed is itself (a copy).
  run: (ctx, [out], [a, d0, d1]) => (a.shape.length === 0 ? k.cast(out!, a, ctx.stream) : k.transpose(out!, a, ...transposeDims(a, d0, d1), ctx.stream)),
}

/** The new shape of a reshape; one size may be -1 (inferred). */
const reshapeShape = (x: TensorMeta, shape: unknown): number[] => {
  const dims = Array.isArray(shape) ? shape.map((d, i) => int("reshape", d, `shape[${i}]`)) : bad("reshape", "shape must be an array")
  const numel = numelOf(x.shape), unknown = dims.indexOf(-1)
  if (unknown >= 0) {
    const known = numelOf(dims.filter((_, i) => i !== unknown))
    if (known === 0 || numel % known !== 0) bad("reshape", `cannot infer -1 reshaping ${describe(x)} to [${dims}]`)
    dims[unknown] = numel / known
  }
  if (dims.some((d) => d < 0) || numelOf(dims) !== numel) bad("reshape", `cannot reshape ${describe(x)} to [${dims}]`)
  return dims
}

const reshape: Builtin = {
  outputs: ([a, shape]) => {
    const x = tensor("reshape", a, "argument 0")
    return [{ dtype: x.dtype, shape: reshapeShape(x, shape) }]
  },
  run: (_, __, [a, shape]) => (a as Tensor).view(reshapeShape(a, shape)),
  view: true,
}

const cast: Builtin = {
  outputs: ([a, dtype]) => {
    const x = tensor("to", a, "argument 0")
    return [{ dtype: dtypeArg("to", dtype, x.dtype), shape: x.shape }]
  },
  run: (ctx, [out], [a]) => k.cast(out!, a, ctx.stream),
}

const arangeBounds = (bounds: ReadonlyArray<unknown>): [number, number, number] => {
  const [start, end, step] = bounds.length === 1 ? [0, num("arange", bounds[0], "end"), 1]
    : [num("arange", bounds[0], "start"), num("arange", bounds[1], "end"), bounds[2] === undefined ? 1 : num("arange", bounds[2], "step")]
  if (![start, end, step].every(Number.isFinite)) bad("arange", `bounds must be finite, got ${start}, ${end}, ${step}`)
  return step === 0 ? bad("arange", "step must not be 0") : [start, end, step]
}

const arange: Builtin = {
  outputs: (bounds, kw) => {
    const [start, end, step] = arangeBounds(bounds)
    return [{ dtype: dtypeArg("arange", kw.dtype, "f32"), shape: [Math.max(0, Math.ceil((end - start) / step))] }]
  },
  run: (ctx, [out], bounds) => {
    const [start, , step] = arangeBounds(bounds)
    k.arange(out!, start, step, ctx.stream)
  },
}

const random = (normal: boolean): Builtin => ({
  outputs: ([shape], kw) => [{ dtype: dtypeArg(normal ? "randn" : "rand", kw.dtype, "f32"), shape: shapeArg(normal ? "randn" : "rand", shape) }],
  run: (ctx, [out]) => {
    const op = normal ? "randn" : "rand", { seed = 0, offset = 0 } = ctx.kwargs
    k.rand(out!, int(op, seed, "seed"), int(op, offset, "offset"), normal, ctx.stream)
  },
})

const inPlace = (check: (args: ReadonlyArray<unknown>) => void, run: Builtin["run"]): Builtin => ({
  outputs: (args) => (check(args), []),
  run,
})

const UNARY: ReadonlyArray<UnaryOpName> = ["neg", "abs", "exp", "log", "sqrt", "relu", "tanh", "sigmoid"]
const BINARY: ReadonlyArray<BinaryOpName> = ["add", "sub", "mul", "div", "maximum", "minimum", "pow", "eq", "ne", "lt", "le", "gt", "ge"]
const REDUCTIONS: ReadonlyArray<ReduceOpName> = ["sum", "mean", "max", "min", "prod"]

/** Every built-in, by the name after `ops.`. */
export const builtins: Readonly<Record<string, Builtin>> = {
  noop: { outputs: () => [], run: () => undefined },
  zeros: creation("zeros", () => 0),
  ones: creation("ones", () => 1),
  full: creation("full", ([, value]) => num("full", value, "value")),
  arange,
  rand: random(false),
  randn: random(true),
  ...Object.fromEntries(UNARY.map((op) => [op, unary(op)])),
  ...Object.fromEntries(BINARY.map((op) => [op, binary(op)])),
  ...Object.fromEntries(REDUCTIONS.map((op) => [op, reduction(op)])),
  add_: binaryInPlace("add"),
  sub_: binaryInPlace("sub"),
  mul_: binaryInPlace("mul"),
  div_: binaryInPlace("div"),
  matmul,
  transpose,
  t: { outputs: ([a]) => transpose.outputs([a, 0, 1], {}), run: (ctx, outs, [a]) => transpose.run(ctx, outs, [a, 0, 1]) },
  reshape,
  to: cast,
  clone: { outputs: ([a]) => cast.outputs([a], {}), run: cast.run },
  copy_: inPlace(([dst, src]) => {
    const d = tensor("copy_", dst, "argument 0"), s = tensor("copy_", src, "argument 1")
    if (numelOf(d.shape) !== numelOf(s.shape)) bad("copy_", `cannot copy ${describe(s)} into ${describe(d)}`)
  }, (ctx, _, [dst, src]) => k.cast(dst, src, ctx.stream)),
  fill_: inPlace(([dst, value]) => {
    tensor("fill_", dst, "argument 0")
    num("fill_", value, "value")
  }, (ctx, _, [dst, value]) => k.fill(dst, Number(value), ctx.stream)),
}

/** A built-in as a RemoteFunction: checks, allocates its outputs, runs; one output is returned bare. */
export const asRemoteFunction = (op: Builtin): RemoteFunction => (ctx, ...args) => {
  const metas = op.outputs(args, ctx.kwargs)
  if (op.view) return op.run(ctx, [], args)
  const outs: Tensor[] = []
  try {
    for (const m of metas) outs.push(Tensor.empty(ctx.native, m.dtype, m.shape))
    op.run(ctx, outs, args)
  } catch (e) {
    for (const t of outs) t.free()
    throw e
  }
  return outs.length === 1 ? outs[0] : outs.length === 0 ? undefined : outs
}

/**
 * Runs a built-in from code on a worker (a user function) and returns its one output, e.g.
 * `op(ctx, "matmul", [x, w])` or `op(ctx, "randn", [[4, 4]], { seed: 1 })`.
 */
export const op = (ctx: FunctionContext, name: string, args: ReadonlyArray<unknown>, kwargs: Readonly<Record<string, unknown>> = {}): Tensor => {
  const builtin = Object.hasOwn(builtins, name) ? builtins[name] : undefined
  if (!builtin) throw new OpArgumentError({ message: `no built-in ops.${name}` })
  const out = asRemoteFunction(builtin)({ ...ctx, kwargs }, ...args)
  if (!(out instanceof Tensor)) throw new OpArgumentError({ message: `ops.${name} does not return one tensor` })
  return out
}
