/**
 * The kernel table: each declared op bound to the shim calls that run it. `KERNELS` is typed
 * over every op name but the composite ones, so an op declared without a kernel does not
 * compile. Some kernels run several shim calls inside one command (linear, cross_entropy),
 * through temporaries of the command's arena (run.ts).
 */
import * as k from "../../../ffi/ops.ts"
import { OpFlag, UnaryOp, UnaryOpFlags } from "../../../ffi/abi.ts"
import type { BinaryOpName, LossReductionName, ReduceOpName, ScatterOpName, TernaryOpName, UnaryOpName } from "../../../ffi/symbols.ts"
import { Tensor } from "../../../ffi/tensor.ts"
import { HostTensor, type DType } from "../../protocol/values.ts"
import type { Draw } from "../../ops/generator.ts"
import { bad, numelOf, type TensorMeta } from "../../ops/meta.ts"
import { broadcastShapes, isFloating, isScalar, resultType, scalarValue, type Scalar } from "../../ops/promotion.ts"
import { opNamed, OPS, type Op } from "../../ops/registry.ts"
import { composeDtype, normDim } from "../../ops/rules.ts"
import type { OpSpec, Planned } from "../../ops/spec.ts"
import { linspaceValues } from "../../ops/specs/creation.ts"
import type { BinaryPlan } from "../../ops/specs/elementwise.ts"
import { UNARY_IN_PLACE } from "../../ops/specs/inplace.ts"
import { scatterSource } from "../../ops/specs/layout.ts"
import { EPSILON, REDUCTIONS } from "../../ops/specs/nn.ts"
import { type Kernel, type Kernels, type PlainUnary, type Planner, withPlanner } from "./kernel.ts"
import { contiguous, copyAnyRank, copyInto, isTensor, Run, stridesOf } from "./run.ts"

/** Fills the one result (zeros, ones and their *_like forms). */
const fill = (value: number) => (run: Run, [out]: ReadonlyArray<Tensor>): void => k.fill(out!, value, run.stream)

/** Where n random numbers come from: the explicit seed's stream (from offset, default 0), else the rank's generator. */
const drawOf = (run: Run, op: string, seed: number | null, offset: number | null, n: number): Draw => {
  if (seed !== null) return { seed: BigInt.asUintN(64, BigInt(seed)), offset: BigInt.asUintN(64, BigInt(offset ?? 0)) }
  if (offset !== null) bad(op, "offset needs a seed (without one, the rank's generator says where to draw)")
  return run.ctx.generator.draw(n)
}

/** What a random op's kernel reads of its arguments: an explicit seed and offset, or none (the rank's generator). */
interface Seeded { readonly seed: number | null; readonly offset: number | null }

const random = (normal: boolean) => (run: Run, [out]: ReadonlyArray<Tensor>, a: Seeded, op: string): void => {
  const d = drawOf(run, op, a.seed, a.offset, out!.numel)
  k.rand(out!, d.seed, d.offset, normal, run.stream)
}

/** linspace's ends as torch takes them: an integer dtype truncates them first (its values truncated after). */
const linspaceBounds = (start: number, end: number, dtype: DType): [number, number] =>
  isFloating(dtype) ? [start, end] : [Math.trunc(start), Math.trunc(end)]

/** A tensor holding host values (a temporary of the command). */
const upload = (run: Run, host: HostTensor): Tensor => {
  const t = Tensor.fromHost(run.ctx.native, host, run.stream)
  run.temps.push(t)
  return t
}

/** randint: floor(low + u * (high - low)) of uniform f64 draws u in [0, 1), which stays below high (its rule's plan: torch's two forms read). */
const randint = (run: Run, [out]: ReadonlyArray<Tensor>, a: Seeded, op: string, { plan }: Planned<{ readonly low: number; readonly high: number }>): void => {
  const u = run.temp("f64", out!.shape), d = drawOf(run, op, a.seed, a.offset, out!.numel)
  k.rand(u, d.seed, d.offset, false, run.stream)
  k.binaryScalar("mul", u, u, plan.high - plan.low, false, run.stream)
  k.binaryScalar("add", u, u, plan.low, false, run.stream)
  k.unary("floor", u, u, run.stream)
  k.binaryScalar("minimum", u, u, plan.high - 1, false, run.stream)
  k.cast(out!, u, run.stream)
}

/**
 * A view op's results, where its layout rule (the spec's `view`) places them in the input's
 * storage: headers over it (Tensor.asStrided), or a contiguous copy where the rule gives null.
 * Those made before a failure are freed.
 */
const views = (run: Run, _: ReadonlyArray<Tensor>, a: Readonly<Record<string, any>>, op: string, metas: ReadonlyArray<TensorMeta>): Tensor | Tensor[] => {
  const spec = opNamed(op) as OpSpec, input = (a.input ?? a.tensor) as Tensor, { strides, storageOffset } = input.layout()
  const made: Tensor[] = []
  try {
    spec.view!({ shape: input.shape, strides, offset: storageOffset }, a as never, metas, op).forEach((r, i) => {
      if (r !== null) return void made.push(input.asStrided(r.shape, r.strides, r.offset))
      const out = Tensor.owned(run.ctx.native, input.dtype, metas[i]!.shape)
      made.push(out)
      k.cast(run.view(out, input.shape), input, run.stream)
    })
  } catch (e) {
    for (const t of made) t.free()
    throw e
  }
  return spec.returns === "tensors" ? made : made[0]!
}

/**
 * t's distinct elements: an expanded dim (stride 0) read once, so a fill may write an expanded
 * tensor, as torch's fill_ and zero_ may (one value for every element that shares a location).
 */
const distinct = (run: Run, t: Tensor): Tensor => {
  const { strides, storageOffset } = t.layout()
  if (!strides.some((s, i) => s === 0 && t.shape[i]! > 1)) return t
  const v = t.asStrided(t.shape.map((n, i) => (strides[i] === 0 ? Math.min(n, 1) : n)), strides, storageOffset)
  run.temps.push(v)
  return v
}

/** scaled_dot_product_attention: the batch dims broadcast and flattened to one, then one shim_attention. */
const attention: Kernel<"scaled_dot_product_attention"> = (run, [out], a, _, { plan: p }) => {
  const { query, key, value, attn_mask } = a, b = numelOf(p.batch)
  const flat = (t: Tensor, rows: number, cols: number) => run.view(run.expand(t, [...p.batch, rows, cols]), [b, rows, cols])
  let mask: Tensor | null = null
  if (attn_mask) {
    const padded = [...new Array<number>(Math.max(0, p.batch.length + 2 - attn_mask.shape.length)).fill(1), ...attn_mask.shape]
    mask = padded.slice(0, -2).every((x) => x === 1)
      ? run.view(run.expand(run.view(attn_mask, padded.slice(-2)), [p.l, p.s]), [1, p.l, p.s])
      : flat(attn_mask, p.l, p.s)
  }
  k.attention(run.view(out!, [b, p.l, p.ev]), flat(query, p.l, p.e), flat(key, p.s, p.e), flat(value, p.s, p.ev), mask, a.scale ?? 1 / Math.sqrt(p.e), a.is_causal, run.stream)
}

/** A loss's reduction by its shim name (its rule checked it: one of REDUCTIONS). */
const lossReduction = (op: string, reduction: string): LossReductionName =>
  REDUCTIONS.find((r) => r === reduction) ?? bad(op, `reduction must be one of ${REDUCTIONS.join(", ")}, got "${reduction}"`)

/** nll_loss: one fused shim_nll_loss ([C] with a 0-d target is one row). */
const nllLoss: Kernel<"nll_loss"> = (run, [out], a, op) =>
  k.nllLoss(out!, a.input, a.target, a.weight, a.ignore_index, lossReduction(op, a.reduction), run.stream)

/** mse_loss: one fused shim_mse_loss over the operands in the result's dtype, broadcast to its shape. */
const mseLoss: Kernel<"mse_loss"> = (run, [out], a, op, { plan }) => {
  const operand = (t: Tensor) => run.expand(run.cast(t, plan.compute), plan.shape)
  k.mseLoss(out!, operand(a.input), operand(a.target), lossReduction(op, a.reduction), run.stream)
}

const unary = (op: UnaryOpName): Kernel<"neg"> => (run, [out], a) => k.unary(op, out!, run.cast(a.input, out!.dtype), run.stream)
/** isnan, isinf, logical_not (the shim's table flags them writes_bool): bool out of any dtype, no cast. */
const predicate = (op: UnaryOpName): Kernel<"isnan"> => (run, [out], a) => k.unary(op, out!, a.input, run.stream)

/**
 * The plain unary ops (kernel.ts's PlainUnary: the shim's op of their name, their input their
 * only parameter), bound by name from c/shim.h's table: adding one takes no line here.
 */
const PLAIN_UNARY = Object.fromEntries((Object.keys(UnaryOp) as UnaryOpName[])
  .filter((name) => (opNamed(name) as OpSpec | undefined)?.params.length === 1)
  .map((name) => [name, UnaryOpFlags[name] & OpFlag.writes_bool ? predicate(name) : unary(name)])) as { readonly [N in PlainUnary]: Kernel<N> }

/**
 * Whether a tensor of `shape` broadcast to `to` is its own elements repeated (its shape, past
 * leading 1s, is the trailing dims of `to`, as a bias is): shim_binary takes it as it is.
 */
const repeatsTo = (shape: ReadonlyArray<number>, to: ReadonlyArray<number>): boolean => {
  if (numelOf(to) === 0) return false
  const own = shape.slice(Math.max(0, shape.findIndex((d) => d !== 1)))
  return own.length <= to.length && own.every((d, i) => d === to[to.length - own.length + i])
}

/** out = a (op) b over prepared operands: cast to the plan's compute dtype, broadcast to its result's shape unless it repeats. */
const binaryInto = (run: Run, op: BinaryOpName, plan: BinaryPlan, out: Tensor, a: Tensor | Scalar, b: Tensor | Scalar): void => {
  const prepare = (x: Tensor | Scalar) => {
    if (isScalar(x)) return scalarValue(x)
    const t = run.cast(x, plan.compute)
    return numelOf(x.shape) === 1 || repeatsTo(x.shape, plan.result.shape) ? t : run.expand(t, plan.result.shape)
  }
  // Of two operands that repeat, the longer has the result's count, as the shim needs.
  const x = prepare(a), y = prepare(b)
  if (typeof x !== "number" && typeof y !== "number") {
    // Two one-element operands of a result with more dims than either: the shim matches counts.
    k.binary(op, out, x, y, run.stream)
  } else if (typeof x !== "number") k.binaryScalar(op, out, run.expand(x, plan.result.shape), y as number, false, run.stream)
  else k.binaryScalar(op, out, run.expand(y as Tensor, plan.result.shape), x, true, run.stream)
}


/**
 * A tensor and a number whose result has the tensor's dtype (x.add(1), x.mul_(0.9); add and
 * sub with alpha 1): one shim_binary_scalar into the output (the input itself in place),
 * nothing cast, scaled or broadcast.
 */
const tensorAndNumber = (op: BinaryOpName): Planner => (a, plan) => {
  if (!(a.input instanceof Tensor) || typeof a.other !== "number" || (a.alpha !== undefined && a.alpha !== 1)) return undefined
  if (plan.compute !== a.input.dtype || plan.result.dtype !== a.input.dtype) return undefined
  return (run, [out], b) => k.binaryScalar(op, out ?? b.input as Tensor, b.input as Tensor, b.other as number, false, run.stream)
}



const binary = (op: BinaryOpName): Kernel<"mul"> =>
  withPlanner<Kernel<"mul">>((run, [out], a, _, { plan }) => binaryInto(run, op, plan, out!, a.input, a.other), tensorAndNumber(op))

/** In place: straight into the input when the result has its dtype, else through a temporary. */
const binaryInPlace = (op: BinaryOpName): Kernel<"mul_"> => withPlanner<Kernel<"mul_">>((run, _, a, __, { plan }) => {
  if (plan.result.dtype === a.input.dtype) return binaryInto(run, op, plan, a.input, a.input, a.other)
  const result = run.temp(plan.result.dtype, plan.result.shape)
  binaryInto(run, op, plan, result, a.input, a.other)
  k.cast(a.input, result, run.stream)
}, tensorAndNumber(op))

/** alpha other for add and sub, in the compute dtype (other itself for alpha 1). */
const scaledOther = (run: Run, other: Tensor | Scalar, alpha: number, dtype: DType): Tensor | Scalar => {
  if (alpha === 1) return other
  if (isScalar(other)) return scalarValue(other) * alpha
  const scaled = run.temp(dtype, other.shape)
  k.binaryScalar("mul", scaled, run.cast(other, dtype), alpha, false, run.stream)
  return scaled
}

/** add and sub: input ± alpha other (alpha scales other first: one more shim call when it is not 1). */
const withAlpha = (op: "add" | "sub"): Kernel<"add"> => withPlanner<Kernel<"add">>((run, [out], a, _, { plan }) =>
  binaryInto(run, op, plan, out!, a.input, scaledOther(run, a.other, a.alpha, plan.compute)), tensorAndNumber(op))

const withAlphaInPlace = (op: "add" | "sub"): Kernel<"add_"> => {
  const inPlace = binaryInPlace(op)
  return withPlanner<Kernel<"add_">>((run, outs, a, name, metas) =>
    inPlace(run, outs, { input: a.input, other: scaledOther(run, a.other, a.alpha, metas.plan.compute) }, name, metas), tensorAndNumber(op))
}

/**
 * div with a rounding mode: floor is floor_divide; trunc the true quotient truncated, computed
 * in the result's dtype, or in f64 for integers (exact while |values| < 2^53), then cast back.
 */
const divInto = (run: Run, out: Tensor, x: Tensor | Scalar, y: Tensor | Scalar, mode: string | null, plan: BinaryPlan): void => {
  if (mode === null) return binaryInto(run, "div", plan, out, x, y)
  if (mode === "floor") return binaryInto(run, "floor_divide", plan, out, x, y)
  const dtype = isFloating(out.dtype) ? out.dtype : "f64", q = dtype === out.dtype ? out : run.temp(dtype, out.shape)
  const as = (v: Tensor | Scalar) => (isScalar(v) ? v : run.cast(v, dtype))
  // The operands in the quotient's floating dtype: it is the compute dtype and the result's.
  binaryInto(run, "div", inPlan(q), q, as(x), as(y))
  k.unary("trunc", q, q, run.stream)
  if (q !== out) k.cast(out, q, run.stream)
}

/**
 * softplus: the shim's form at torch's defaults (beta 1, threshold 20); else composed,
 * log1p(exp(beta x)) / beta where beta x <= threshold and x elsewhere (f16 and bf16 in f32,
 * rounded once).
 */
const softplus: Kernel<"softplus"> = (run, [out], a) => {
  if (a.beta === 1 && a.threshold === 20) return k.unary("softplus", out!, a.input, run.stream)
  const dtype = composeDtype(out!.dtype), x = run.cast(a.input, dtype), shape = out!.shape
  const bx = run.temp(dtype, shape), soft = run.temp(dtype, shape), over = run.temp("bool", shape)
  k.binaryScalar("mul", bx, x, a.beta, false, run.stream)
  k.unary("exp", soft, bx, run.stream)
  k.unary("log1p", soft, soft, run.stream)
  k.binaryScalar("div", soft, soft, a.beta, false, run.stream)
  k.binaryScalar("gt", over, bx, a.threshold, false, run.stream)
  const result = dtype === out!.dtype ? out! : run.temp(dtype, shape)
  k.ternary("where", result, over, x, soft, 0, run.stream)
  if (result !== out) k.cast(out!, result, run.stream)
}

/** A unary op's in-place form: its kernel into the input, or into a temporary cast back (logical_not_ of a float); its rule gave the base's result. */
const unaryInPlace = (base: (typeof UNARY_IN_PLACE)[keyof typeof UNARY_IN_PLACE]): Kernel<"neg_"> => (run, _, a, __, { plan }) => {
  const bound = (OPS[base] as Op).bind([a.input], {}, isTensor)
  intoInput(run, a.input, plan.result.dtype, (out) => (KERNELS[base] as Kernel<"neg">)(run, [out], bound as never, base, [plan.result]))
}

/** An operand of a ternary op in dtype over shape: a number as one element, a one-element tensor as it is. */
const operand = (run: Run, x: Tensor | Scalar, dtype: DType, shape: ReadonlyArray<number>): Tensor => {
  if (isScalar(x)) {
    const t = run.temp(dtype, [])
    k.fill(t, scalarValue(x), run.stream)
    return t
  }
  const t = run.cast(x, dtype)
  return t.numel === 1 ? t : run.expand(t, shape)
}

/** out = op(a, b, c), the operands prepared in out's dtype (where's condition a keeps its own). */
const ternaryInto = (run: Run, op: TernaryOpName, out: Tensor, a: Tensor | Scalar, b: Tensor | Scalar, c: Tensor | Scalar, value = 0): void => {
  const first = op === "where" ? operand(run, a, "bool", out.shape) : operand(run, a, out.dtype, out.shape)
  k.ternary(op, out, first, operand(run, b, out.dtype, out.shape), operand(run, c, out.dtype, out.shape), value, run.stream)
}

/** In place: into the input when the result has its dtype, else through a temporary cast back. */
const intoInput = (run: Run, input: Tensor, dtype: DType, compute: (out: Tensor) => void): void => {
  if (dtype === input.dtype) return compute(input)
  const result = run.temp(dtype, input.shape)
  compute(result)
  k.cast(input, result, run.stream)
}

/** The plan of a part computing into out in out's dtype, its operands cast to it (or numbers its dtype takes). */
const inPlan = (out: TensorMeta): BinaryPlan => ({ compute: out.dtype, result: out })

/** out = min(max(input, min), max), each bound (a number, or a tensor broadcast) in out's dtype; out may be input itself. */
const clampInto = (run: Run, name: string, out: Tensor, input: Tensor, min: Tensor | Scalar | null, max: Tensor | Scalar | null): void => {
  if (out !== input) k.cast(out, run.expand(input, out.shape), run.stream)
  const bound = (b: Tensor | Scalar) => (isScalar(b) ? b : run.cast(b, out.dtype))
  if (min !== null) binaryInto(run, "maximum", inPlan(out), out, out, bound(min))
  if (max !== null) binaryInto(run, "minimum", inPlan(out), out, out, bound(max))
}

/** Reduces `dims` of input into out, one dim at a time from the last (every dim: one call). */
const reduceInto = (run: Run, op: ReduceOpName, out: Tensor, input: Tensor, dims: ReadonlyArray<number>): void => {
  if (dims.length === input.shape.length) return k.reduce(op, out, input, undefined, run.stream)
  let cur = input
  for (let i = dims.length - 1; i >= 0; i--) {
    const d = dims[i]!
    const next = i === 0 ? out : run.temp(out.dtype, cur.shape.filter((_, j) => j !== d))
    k.reduce(op, next, cur, d, run.stream)
    cur = next
  }
}

const reduce = (op: ReduceOpName): Kernel<"amax"> => (run, [out], a, _, { plan }) => reduceInto(run, op, out!, a.input, plan.dims)

/** sum, prod and mean: the input cast to the dtype keyword first, when given. */
const accumulate = (op: ReduceOpName): Kernel<"sum"> => (run, [out], a, _, { plan }) =>
  reduceInto(run, op, out!, a.dtype === null ? a.input : run.cast(a.input, a.dtype), plan.dims)


/** argmax/argmin: along dim, or over every element (dim None, or a 0-d input). */
const argReduce = (op: "max" | "min"): Kernel<"argmax"> => (run, [out], a, name) =>
  k.argreduce(op, out!, a.input, a.dim === null || a.input.shape.length === 0 ? undefined : normDim(name, a.dim, a.input.shape.length), run.stream)

/**
 * max and min: over every element, the value (shim_reduce); along a dim, the indices
 * (shim_argreduce: the first extreme, a NaN first) and the values gathered at them, so the two
 * always agree. A 0-d input is its own value, at index 0.
 */
const extreme = (op: "max" | "min"): Kernel<"max"> => (run, [values, indices], a, name) => {
  if (a.dim === null) return k.reduce(op, values!, a.input, undefined, run.stream)
  const n = a.input.shape.length
  if (n === 0) return (k.cast(values!, a.input, run.stream), k.fill(indices!, 0, run.stream))
  const d = normDim(name, a.dim, n), kept = a.input.shape.map((s, i) => (i === d ? 1 : s))
  k.argreduce(op, indices!, a.input, d, run.stream)
  k.gather(run.view(values!, kept), a.input, d, run.view(indices!, kept), run.stream)
}

/** t read as [1] when it is 0-d (shim_scatter takes operands of one rank, as torch reads a 0-d one). */
const atLeast1 = (run: Run, t: Tensor): Tensor => (t.shape.length === 0 ? run.view(t, [1]) : t)

/** out[.., index, ..] (op)= src along dim (a number: filled in at index's shape); an empty index writes nothing. */
const scatterInto = (run: Run, op: ScatterOpName, out: Tensor, dim: number, index: Tensor, src: Tensor | number, name: string): void => {
  if (index.numel === 0) return
  let from: Tensor
  if (typeof src === "number") {
    from = run.temp(out.dtype, index.shape)
    k.fill(from, src, run.stream)
  } else from = src
  k.scatter(op, atLeast1(run, out), normDim(name, dim, out.shape.length), atLeast1(run, index), atLeast1(run, from), run.stream)
}

/** index_add: one shim_index_add, source broadcast to the input's slices first (as torch's). */
const indexAddInto = (run: Run, out: Tensor, dim: number, index: Tensor, source: Tensor, alpha: number, name: string): void => {
  const d = normDim(name, dim, out.shape.length)
  const sliced = (out.shape.length === 0 ? [1] : out.shape).map((s, i) => (i === d ? index.numel : s))
  k.indexAdd(out, d, index, run.expand(atLeast1(run, source), sliced), alpha, run.stream)
}

/** torch's matmul over views and broadcast batches: 1-D operands gain a dim, then drop it. */
const matmulInto = (run: Run, out: Tensor, x: Tensor, y: Tensor): void => {
  const xs = x.shape.length === 1 ? [1, x.shape[0]!] : [...x.shape], ys = y.shape.length === 1 ? [y.shape[0]!, 1] : [...y.shape]
  const batch = broadcastShapes("matmul", [xs.slice(0, -2), ys.slice(0, -2)])
  const xv = run.expand(x.shape.length === 1 ? run.view(x, xs) : x, [...batch, ...xs.slice(-2)])
  const yBatched = ys.length > 2
  const yv0 = y.shape.length === 1 ? run.view(y, ys) : y
  const yv = yBatched ? run.expand(yv0, [...batch, ...ys.slice(-2)]) : yv0
  k.matmul(run.view(out, [...batch, xs.at(-2)!, ys.at(-1)!]), xv, yv, run.stream)
}



/**
 * repeat as one strided copy: the result read as [r0, s0, r1, s1, ...] (tile, then the input's
 * dim) gets the input with stride 0 along each tile dim; dims of size 1 are left out.
 */
const repeatInto = (run: Run, out: Tensor, input: Tensor, repeats: ReadonlyArray<number>, padded: ReadonlyArray<number>): void => {
  const own = contiguous(padded)
  const shape = padded.flatMap((s, i) => [repeats[i]!, s]), outStrides = contiguous(shape)
  const keep = shape.map((_, j) => j).filter((j) => shape[j] !== 1)
  copyAnyRank(run, out, { offset: 0, strides: keep.map((j) => outStrides[j]!) }, input,
    { offset: 0, strides: keep.map((j) => (j % 2 === 0 ? 0 : own[j >> 1]!)) }, keep.map((j) => shape[j]!))
}

/** outer as a matmul of a column by a row (an inner dim of 1), in the promoted dtype: one pass over the result. */
const outerInto = (run: Run, out: Tensor, x: Tensor, y: Tensor): void =>
  k.matmul(out, run.view(run.cast(x, out.dtype), [x.numel, 1]), run.view(run.cast(y, out.dtype), [1, y.numel]), run.stream)

/** t read as [1] when it is 0-d (the sort kernels take a 0-d tensor as one line of one). */
const asLine = (run: Run, t: Tensor): Tensor => (t.shape.length === 0 ? run.view(t, [1]) : t)

/** input sorted along d into temporaries: (values, indices). */
const sorted = (run: Run, input: Tensor, d: number, descending: boolean): [Tensor, Tensor] => {
  const values = run.temp(input.dtype, input.shape), indices = run.temp("i64", input.shape)
  k.sort(asLine(run, values), asLine(run, indices), asLine(run, input), d, descending, run.stream)
  return [values, indices]
}

/** out (contiguous) = entries [start, start + out's size) along d of src (of src's shape but along d). */
const narrowInto = (run: Run, out: Tensor, src: Tensor, d: number, start: number): void => {
  const s = stridesOf(src)
  copyAnyRank(run, out, { offset: 0, strides: contiguous(out.shape) }, src, { offset: start * s[d]!, strides: s }, out.shape)
}

/** out = input rolled by shift along d: two strided copies (the tail to the front, the rest after it). */
const rollInto = (run: Run, out: Tensor, input: Tensor, shift: number, d: number): void => {
  const n = input.shape[d]!, s = ((shift % n) + n) % n, strides = stridesOf(input)
  const part = (from: number, to: number, length: number) => {
    if (length === 0) return
    const shape = input.shape.map((x, i) => (i === d ? length : x))
    copyAnyRank(run, out, { offset: to * strides[d]!, strides }, input, { offset: from * strides[d]!, strides }, shape)
  }
  part(n - s, 0, s)
  part(0, s, n - s)
}

/** roll: each (shift, dim) pair in turn through temporaries, the last into out; dims None rolls the flattened input. */
const roll: Kernel<"roll"> = (run, [out], a, _, { plan: { pairs } }) => {
  if (a.input.numel === 0) return
  const flat = a.dims === null, shape = flat ? [a.input.numel] : a.input.shape
  let cur = run.view(a.input, shape)
  pairs.forEach(([shift, dim], i) => {
    const next = i === pairs.length - 1 ? run.view(out!, shape) : run.temp(a.input.dtype, shape)
    rollInto(run, next, cur, shift, flat ? 0 : dim)
    cur = next
  })
}

/** One value of a 1-element tensor on the host (a check that needs the values: a sync on cuda). */
const hostValue = (run: Run, t: Tensor): number => Number((t.toHost(run.stream).toArray() as ArrayLike<number | bigint>)[0]!)

/** bincount: the values checked to lie in [0, minlength) (read back), then ones (or the weights) added into their bins. */
const bincount: Kernel<"bincount"> = (run, [out], a, op) => {
  k.fill(out!, 0, run.stream)
  if (a.input.numel === 0) return
  const index = run.cast(a.input, "i64"), extreme = run.temp("i64", [])
  k.reduce("min", extreme, index, undefined, run.stream)
  const low = hostValue(run, extreme)
  if (low < 0) bad(op, `input holds the negative value ${low}; bincount counts non-negative values`)
  k.reduce("max", extreme, index, undefined, run.stream)
  const high = hostValue(run, extreme)
  if (high >= a.minlength) bad(op, `input holds the value ${high}, past minlength ${a.minlength} (the result's size): give a minlength above every value`)
  let src: Tensor
  if (a.weights === null) {
    src = run.temp("i64", index.shape)
    k.fill(src, 1, run.stream)
  } else src = run.cast(a.weights, out!.dtype)
  k.scatter("add", out!, 0, index, src, run.stream)
}

/**
 * multinomial: the weights checked (read back: non-negative, finite, each row's sum positive,
 * enough nonzero ones without replacement), then uniform draws u from the rank's generator, in
 * f64. With replacement: each sample is the first category whose cumulative sum exceeds u times
 * the row's total. Without: the categories of the num_samples smallest E / p, E = -log(1 - u).
 */
const multinomial: Kernel<"multinomial"> = (run, [out], a, op, { plan }) => {
  const rows = a.input.shape.length === 1 ? 1 : a.input.shape[0]!, c = a.input.shape.at(-1)!, s = a.num_samples
  if (rows === 0) return
  const p = run.view(run.cast(a.input, "f64"), [rows, c]), one = run.temp("f64", []), rowSums = run.temp("f64", [rows])
  k.reduce("min", one, p, undefined, run.stream)
  const low = hostValue(run, one)
  k.reduce("max", one, p, undefined, run.stream)
  if (!(low >= 0) || !Number.isFinite(hostValue(run, one))) bad(op, "weights must be finite and non-negative (they hold a NaN, an infinity or a negative value)")
  k.reduce("sum", rowSums, p, 1, run.stream)
  k.reduce("min", one, rowSums, undefined, run.stream)
  if (!(hostValue(run, one) > 0)) bad(op, "every row of weights needs a positive sum")
  const { draws } = plan, u = run.temp("f64", [rows, draws / rows]), d = run.ctx.generator.draw(draws)
  k.rand(u, d.seed, d.offset, false, run.stream)
  const samples = run.view(out!, [rows, s])
  if (a.replacement) {
    const cdf = run.temp("f64", [rows, c]), total = run.temp("f64", [rows, 1])
    k.cumsum(cdf, p, 1, run.stream)
    narrowInto(run, total, cdf, 1, c - 1)
    k.binary("mul", u, u, run.expand(total, [rows, s]), run.stream)
    k.searchsorted(samples, cdf, u, true, run.stream)
    k.binaryScalar("minimum", samples, samples, c - 1, false, run.stream)
    return
  }
  const nonzero = run.temp("bool", [rows, c]), counts = run.temp("i64", [rows]), fewest = run.temp("i64", [])
  k.binaryScalar("gt", nonzero, p, 0, false, run.stream)
  k.reduce("sum", counts, nonzero, 1, run.stream)
  k.reduce("min", fewest, counts, undefined, run.stream)
  if (hostValue(run, fewest) < s) bad(op, `a row of weights has fewer than ${s} nonzero categories to draw without replacement`)
  // E / p, E = -log(1 - u): a zero weight's key is inf, drawn last.
  k.binaryScalar("sub", u, u, 1, true, run.stream)
  k.unary("log", u, u, run.stream)
  k.unary("neg", u, u, run.stream)
  k.binary("div", u, u, p, run.stream)
  const [, order] = sorted(run, u, 1, false)
  narrowInto(run, samples, order, 1, 0)
}


export const KERNELS: Kernels = {
  ...PLAIN_UNARY,
  zeros: fill(0),
  ones: fill(1),
  full: (run, [out], a) => k.fill(out!, a.fill_value, run.stream),
  arange: (run, [out], _, __, { plan }) => {
    const { start, step } = plan
    k.arange(out!, start, step, run.stream)
  },
  rand: random(false),
  randn: random(true),
  // empty, linspace, eye and the *_like forms
  empty: () => undefined,
  linspace: (run, [out], a) => k.cast(out!, upload(run, new HostTensor("f64", [a.steps], new Uint8Array(linspaceValues(...linspaceBounds(a.start, a.end, out!.dtype), a.steps).buffer))), run.stream),
  eye: (run, [out]) => {
    const [n, m] = out!.shape as [number, number], one = run.temp(out!.dtype, [])
    k.fill(out!, 0, run.stream)
    k.fill(one, 1, run.stream)
    // The diagonal: every (m + 1)th element, from the one 1 read with stride 0.
    k.copyStrided(out!, { offset: 0, strides: [m + 1] }, one, { offset: 0, strides: [0] }, [Math.min(n, m)], run.stream)
  },
  zeros_like: fill(0),
  ones_like: fill(1),
  empty_like: () => undefined,
  full_like: (run, [out], a) => k.fill(out!, a.fill_value, run.stream),
  rand_like: random(false),
  randn_like: random(true),
  randint_like: randint,
  round: (run, [out], a) => {
    if (a.decimals === 0) return k.unary("round", out!, run.cast(a.input, out!.dtype), run.stream)
    // f16 and bf16 in f32, rounded once; a negative decimals divides first, as torch's.
    const dtype = composeDtype(out!.dtype), x = run.cast(a.input, dtype), y = dtype === out!.dtype ? out! : run.temp(dtype, out!.shape), ten = 10 ** Math.abs(a.decimals)
    k.binaryScalar(a.decimals > 0 ? "mul" : "div", y, x, ten, false, run.stream)
    k.unary("round", y, y, run.stream)
    k.binaryScalar(a.decimals > 0 ? "div" : "mul", y, y, ten, false, run.stream)
    if (y !== out) k.cast(out!, y, run.stream)
  },
  softplus,
  gelu: (run, [out], a) => k.unary(a.approximate === "tanh" ? "gelu_tanh" : "gelu", out!, a.input, run.stream),
  add: withAlpha("add"), sub: withAlpha("sub"), mul: binary("mul"),
  div: (run, [out], a, _, { plan }) => divInto(run, out!, a.input, a.other, a.rounding_mode, plan),
  maximum: binary("maximum"), minimum: binary("minimum"), pow: binary("pow"),
  eq: binary("eq"), ne: binary("ne"), lt: binary("lt"),
  le: binary("le"), gt: binary("gt"), ge: binary("ge"),
  floor_divide: binary("floor_divide"), remainder: binary("remainder"),
  floor_divide_: binaryInPlace("floor_divide"), remainder_: binaryInPlace("remainder"),
  fmod: binary("fmod"),
  logical_and: binary("logical_and"), logical_or: binary("logical_or"),
  where: (run, [out], a) => ternaryInto(run, "where", out!, a.condition, a.input, a.other),
  masked_fill: (run, [out], a) => ternaryInto(run, "where", out!, a.mask, a.value, a.input),
  masked_fill_: (run, _, a) => ternaryInto(run, "where", a.input, a.mask, a.value, a.input),
  lerp: (run, [out], a) => ternaryInto(run, "lerp", out!, a.input, a.end, a.weight),
  lerp_: (run, _, a) => ternaryInto(run, "lerp", a.input, a.input, a.end, a.weight),
  addcmul: (run, [out], a) => ternaryInto(run, "addcmul", out!, a.input, a.tensor1, a.tensor2, a.value),
  addcdiv: (run, [out], a) => ternaryInto(run, "addcdiv", out!, a.input, a.tensor1, a.tensor2, a.value),
  addcmul_: (run, _, a) => intoInput(run, a.input, resultType([a.input, a.tensor1, a.tensor2]), (out) => ternaryInto(run, "addcmul", out, a.input, a.tensor1, a.tensor2, a.value)),
  addcdiv_: (run, _, a) => intoInput(run, a.input, resultType([a.input, a.tensor1, a.tensor2]), (out) => ternaryInto(run, "addcdiv", out, a.input, a.tensor1, a.tensor2, a.value)),
  add_: withAlphaInPlace("add"), sub_: withAlphaInPlace("sub"), mul_: binaryInPlace("mul"),
  div_: (run, _, a, __, { plan }) => intoInput(run, a.input, plan.result.dtype, (out) => divInto(run, out, a.input, a.other, a.rounding_mode, plan)),
  clamp: (run, [out], a, op) => clampInto(run, op, out!, a.input, a.min, a.max),
  clamp_: (run, _, a, op) => intoInput(run, a.input, resultType([a.input, ...[a.min, a.max].filter((b) => b !== null)]), (out) => clampInto(run, op, out, a.input, a.min, a.max)),
  sum: accumulate("sum"), prod: accumulate("prod"), mean: accumulate("mean"),
  amax: reduce("max"), amin: reduce("min"), max: extreme("max"), min: extreme("min"),
  any: reduce("any"), all: reduce("all"),
  argmax: argReduce("max"), argmin: argReduce("min"),
  sort: (run, [values, indices], a, _, { plan }) => k.sort(asLine(run, values!), asLine(run, indices!), asLine(run, a.input), plan.d, a.descending, run.stream),
  argsort: (run, [out], a, _, { plan }) => {
    const values = run.temp(a.input.dtype, a.input.shape)
    k.sort(asLine(run, values), asLine(run, out!), asLine(run, a.input), plan.d, a.descending, run.stream)
  },
  topk: (run, [values, indices], a, _, { plan }) => {
    const { d } = plan, [v, i] = sorted(run, a.input, d, a.largest)
    narrowInto(run, asLine(run, values!), asLine(run, v), d, 0)
    narrowInto(run, asLine(run, indices!), asLine(run, i), d, 0)
  },
  kthvalue: (run, [values, indices], a, _, { plan }) => {
    const { d } = plan, [v, i] = sorted(run, a.input, d, false), kept = asLine(run, v).shape.map((s, j) => (j === d ? 1 : s))
    narrowInto(run, run.view(values!, kept), asLine(run, v), d, a.k - 1)
    narrowInto(run, run.view(indices!, kept), asLine(run, i), d, a.k - 1)
  },
  cumprod: (run, [out], a, _, { plan }) => k.cumulative("prod", asLine(run, out!), undefined, asLine(run, a.dtype === null ? a.input : run.cast(a.input, a.dtype)), plan.d, run.stream),
  cummax: (run, [values, indices], a, _, { plan }) => k.cumulative("max", asLine(run, values!), asLine(run, indices!), asLine(run, a.input), plan.d, run.stream),
  cummin: (run, [values, indices], a, _, { plan }) => k.cumulative("min", asLine(run, values!), asLine(run, indices!), asLine(run, a.input), plan.d, run.stream),
  roll,
  searchsorted: (run, [out], a) => k.searchsorted(out!, a.sorted_sequence, a.input, a.right || a.side === "right", run.stream),
  bincount,
  multinomial,
  cumsum: (run, [out], a, op) => k.cumsum(out!, a.dtype === null ? a.input : run.cast(a.input, a.dtype), normDim(op, a.dim, a.input.shape.length), run.stream),
  norm: (run, [out], a, _, { plan }) => reduceInto(run, a.p === 1 ? "norm1" : a.p === 2 ? "norm2" : "norm_inf", out!, a.input, plan.dims),
  matmul: (run, [out], a) => matmulInto(run, out!, a.input, a.other),
  mm: (run, [out], a) => k.matmul(out!, a.input, a.mat2, run.stream),
  bmm: (run, [out], a) => k.matmul(out!, a.input, a.mat2, run.stream),
  _matmul_t: (run, [out], a) => k.matmul(out!, a.input, a.other, run.stream, { a: a.transpose_input, b: a.transpose_other }),
  transpose: views,
  t: views,
  permute: views,
  reshape: views,
  view: views,
  flatten: views,
  squeeze: views,
  unsqueeze: views,
  expand: views,
  broadcast_to: views,
  contiguous: views,
  alias: views,
  diagonal: views,
  unfold: views,
  as_strided: views,
  clone: (run, [out], a) => k.cast(out!, a.input, run.stream),
  to: (run, [out], a) => k.cast(out!, a.input, run.stream),
  narrow: views,
  select: views,
  slice: views,
  flip: (run, [out], a, op) => {
    const s = stridesOf(a.input), n = a.input.shape.length
    const dims = (typeof a.dims === "number" ? [a.dims] : a.dims).map((d) => normDim(op, d, n))
    let offset = 0
    const strides = s.map((x, i) => (dims.includes(i) ? ((offset += (a.input.shape[i]! - 1) * x), -x) : x))
    copyInto(run, out!, a.input, { offset, strides })
  },
  cat: (run, [out], a, op) => k.cat(out!, a.tensors.map((t) => run.cast(t, out!.dtype)), normDim(op, a.dim, out!.shape.length), run.stream),
  // Each part viewed with a 1 inserted at dim, then one cat.
  stack: (run, [out], a, op) => {
    const d = normDim(op, a.dim, out!.shape.length)
    k.cat(out!, a.tensors.map((t) => run.view(run.cast(t, out!.dtype), [...t.shape.slice(0, d), 1, ...t.shape.slice(d)])), d, run.stream)
  },
  index_select: (run, [out], a, op) =>
    k.indexSelect(out!, a.input, a.input.shape.length === 0 ? 0 : normDim(op, a.dim, a.input.shape.length), a.index, run.stream),
  gather: (run, [out], a, op) => k.gather(out!, a.input, normDim(op, a.dim, a.input.shape.length), a.index, run.stream),
  scatter: (run, [out], a, op) => (k.cast(out!, a.input, run.stream), scatterInto(run, "assign", out!, a.dim, a.index, scatterSource(op, a.src, a.value), op)),
  scatter_: (run, _, a, op) => scatterInto(run, "assign", a.input, a.dim, a.index, scatterSource(op, a.src, a.value), op),
  scatter_add: (run, [out], a, op) => (k.cast(out!, a.input, run.stream), scatterInto(run, "add", out!, a.dim, a.index, a.src, op)),
  scatter_add_: (run, _, a, op) => scatterInto(run, "add", a.input, a.dim, a.index, a.src, op),
  index_add: (run, [out], a, op) => (k.cast(out!, a.input, run.stream), indexAddInto(run, out!, a.dim, a.index, a.source, a.alpha, op)),
  index_add_: (run, _, a, op) => indexAddInto(run, a.input, a.dim, a.index, a.source, a.alpha, op),
  copy_: (run, _, a) => k.cast(a.input, run.expand(a.src, a.input.shape), run.stream),
  fill_: (run, _, a) => k.fill(distinct(run, a.input), a.value, run.stream),
  noop: () => undefined,
  tril: (run, [out], a) => k.triangle(out!, a.input, a.diagonal, false, run.stream),
  triu: (run, [out], a) => k.triangle(out!, a.input, a.diagonal, true, run.stream),
  split: views,
  chunk: views,
  unbind: views,
  randint,
  dropout: (run, [out, mask], a) => {
    if (!a.training || a.p === 0) return (k.cast(out!, a.input, run.stream), k.fill(mask!, 1, run.stream))
    const d = run.ctx.generator.draw(a.input.numel)
    k.dropout(out!, mask!, a.input, a.p, d.seed, d.offset, run.stream)
  },
  manual_seed: (run, _, a) => run.ctx.generator.manualSeed(a.seed, a.distinct),
  get_rng_state: (run, [out]) => k.cast(out!, upload(run, new HostTensor("i64", [2], new Uint8Array(BigInt64Array.from(run.ctx.generator.state()).buffer))), run.stream),
  set_rng_state: (run, _, a) => {
    const [key, offset] = a.state.toHost(run.stream).toArray() as BigInt64Array
    run.ctx.generator.setState(key!, offset!)
  },
  softmax: (run, [out], a, op) => k.softmax(out!, run.cast(a.input, out!.dtype), normDim(op, a.dim, a.input.shape.length), false, run.stream),
  log_softmax: (run, [out], a, op) => k.softmax(out!, run.cast(a.input, out!.dtype), normDim(op, a.dim, a.input.shape.length), true, run.stream),
  // x w^T over x's rows, w read transposed where it lies; the bias repeats over the rows (shim_binary).
  linear: (run, [out], a) => {
    const [o, i] = a.weight.shape as [number, number], rows = numelOf(a.input.shape.slice(0, -1))
    k.matmul(run.view(out!, [rows, o]), run.view(a.input, [rows, i]), a.weight, run.stream, { b: true })
    if (a.bias && out!.numel > 0) k.binary("add", out!, out!, a.bias, run.stream)
  },
  layer_norm: (run, [out], a) => k.layerNorm(out!, a.input, a.weight, a.bias, numelOf(a.normalized_shape), a.eps, run.stream),
  scaled_dot_product_attention: attention,
  rms_norm: (run, [out], a) => k.rmsNorm(out!, a.input, a.weight, numelOf(a.normalized_shape), a.eps ?? EPSILON[a.input.dtype]!, run.stream),
  nll_loss: nllLoss,
  mse_loss: mseLoss,
  one_hot: (run, [out], a) => {
    const index = [...a.tensor.shape, 1], ones = run.temp("i64", index)
    k.fill(out!, 0, run.stream)
    k.fill(ones, 1, run.stream)
    k.scatter("assign", out!, index.length - 1, run.view(a.tensor, index), ones, run.stream)
  },
  _fused_sgd_: (run, _, a) => a.params.forEach((p, i) =>
    k.sgd(p, a.grads[i]!, a.momentum_buffers[i], {
      lr: a.lr, momentum: a.momentum, dampening: a.dampening, weightDecay: a.weight_decay, nesterov: a.nesterov, maximize: a.maximize, first: a.is_first_step,
    }, run.stream)),
  _fused_adamw_: (run, _, a) => a.params.forEach((p, i) =>
    k.adamw(p, a.grads[i]!, a.exp_avgs[i]!, a.exp_avg_sqs[i]!, a.max_exp_avg_sqs[i], {
      lr: a.lr, beta1: a.beta1, beta2: a.beta2, eps: a.eps, weightDecay: a.weight_decay, step: a.step, amsgrad: a.amsgrad, maximize: a.maximize,
    }, run.stream)),
  _sum_of_squares: (run, [out], a) => sumOfSquares(run, out!, a.tensors),
  _clip_by_total_norm_: (run, _, a) => clipByTotalNorm(run, a.tensors, a.total_norm, a.max_norm),
  embedding: (run, [out], a) => {
    const n = numelOf(a.input.shape)
    k.indexSelect(run.view(out!, [n, a.weight.shape[1]!]), a.weight, 0, run.view(a.input, [n]), run.stream)
  },
  ...(Object.fromEntries(Object.entries(UNARY_IN_PLACE).map(([name, base]) => [name, unaryInPlace(base)])) as { readonly [N in keyof typeof UNARY_IN_PLACE]: Kernel<"neg_"> }),
  pow_: binaryInPlace("pow"),
  eq_: binaryInPlace("eq"), ne_: binaryInPlace("ne"), lt_: binaryInPlace("lt"),
  le_: binaryInPlace("le"), gt_: binaryInPlace("gt"), ge_: binaryInPlace("ge"),
  logical_and_: binaryInPlace("logical_and"), logical_or_: binaryInPlace("logical_or"),
  zero_: (run, _, a) => k.fill(distinct(run, a.input), 0, run.stream),
  // repeat, baddbmm, outer
  repeat: (run, [out], a, _, { plan }) => repeatInto(run, out!, a.input, a.repeats, plan.padded),
  outer: (run, [out], a) => outerInto(run, out!, a.input, a.vec2),
  ger: (run, [out], a) => outerInto(run, out!, a.input, a.vec2),
}


/** The sum of the tensors' squared elements, accumulated in double: each one's 2-norm squared. */
const sumOfSquares = (run: Run, out: Tensor, tensors: ReadonlyArray<Tensor>): void => {
  const acc = run.temp("f64", []), norm = run.temp("f64", [])
  k.fill(acc, 0, run.stream)
  for (const t of tensors) {
    k.reduce("norm2", norm, t, undefined, run.stream)
    k.binary("mul", norm, norm, norm, run.stream)
    k.binary("add", acc, acc, norm, run.stream)
  }
  k.cast(out, acc, run.stream)
}

/** torch's clip_grad_norm_ coefficient, min(max_norm / (total_norm + 1e-6), 1) in total_norm's dtype, applied to each tensor. */
const clipByTotalNorm = (run: Run, tensors: ReadonlyArray<Tensor>, totalNorm: Tensor, maxNorm: number): void => {
  const coef = run.temp(totalNorm.dtype, [])
  k.binaryScalar("add", coef, run.view(totalNorm, []), 1e-6, false, run.stream)
  k.binaryScalar("div", coef, coef, maxNorm, true, run.stream)
  k.binaryScalar("minimum", coef, coef, 1, false, run.stream)
  for (const t of tensors) k.binary("mul", t, t, run.cast(coef, t.dtype), run.stream)
}
