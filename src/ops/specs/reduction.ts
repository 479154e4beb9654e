/** Reductions over dims (an int, a list, or None for every dim), with keepdim. */
import type { DType } from "../../protocol/values.ts"
import { bad, describe, numelOf, type TensorMeta } from "../meta.ts"
import { type Backward, expandBack, type GradContext, type GradOps, NOT_DIFFERENTIABLE, reducedCount } from "../grad.ts"
import { arg, kw, opt, type Param } from "../params.ts"
import { isFloating } from "../promotion.ts"
import { castTo, composeDtype, normDim } from "../rules.ts"
import { fused, readsStrides, spec, withPlan } from "../spec.ts"

/** The dims a reduction covers, normalised, sorted and unique (None or [] is every dim). */
const reducedDims = (op: string, x: TensorMeta, dim: number | number[] | null): number[] => {
  const n = x.shape.length
  const dims = dim === null ? [] : typeof dim === "number" ? [dim] : dim
  if (dims.length === 0) return x.shape.map((_, i) => i)
  const out = [...new Set(dims.map((d) => normDim(op, d, n)))].sort((a, b) => a - b)
  if (out.length !== dims.length) bad(op, `dim [${dims}] repeats a dim`)
  return n === 0 ? [] : out
}

export const reducedShape = (x: TensorMeta, dims: ReadonlyArray<number>, keepdim: boolean): number[] =>
  keepdim ? x.shape.map((s, i) => (dims.includes(i) ? 1 : s)) : x.shape.filter((_, i) => !dims.includes(i))

const INTEGER_SUM: ReadonlySet<DType> = new Set(["bool", "u8", "i32"])

type Rule = "widen" | "floating" | "same"

const reductionParams = [arg("input", "tensor"), opt("dim", "dims", null), opt("keepdim", "bool", false)] as const

/** What a reduction's rule works with: the input's meta and reduced dims, and g and the result expanded back to the input's shape. */
interface Reduced<T> {
  readonly x: T
  readonly meta: TensorMeta
  readonly dims: number[]
  /** g as a tensor of the input's shape. */
  readonly g: T
  /** The result as a tensor of the input's shape. */
  out(): T
}

/** A reduction's rule from its input's gradient in terms of Reduced. */
const reducedRule = <P extends ReadonlyArray<Param>>(op: string, f: <T>(o: GradOps<T>, r: Reduced<T>) => T) =>
  <T>(c: GradContext<P, T> & { readonly args: { readonly input: T; readonly dim: number | number[] | null; readonly keepdim: boolean } }, o: GradOps<T>) => ({
    input: () => {
      const { input, dim, keepdim } = c.args, meta = c.meta(input), dims = reducedDims(op, meta, dim)
      return f(o, { x: input, meta, dims, g: expandBack(o, c.grad, meta, dims, keepdim), out: () => expandBack(o, c.out, meta, dims, keepdim) })
    },
  })

type ReductionRule = Backward<typeof reductionParams>

/** amax and friends (torch 1.13): the gradient is shared evenly among the elements equal to the extreme. */
const extremeRule = (op: string) => reducedRule<typeof reductionParams>(op, (o, r) => {
  const hit = o.to(o.eq(r.x, r.out()), r.meta.dtype)
  return o.div(o.mul(r.g, hit), o.sum(hit, r.dims, true))
})

/**
 * prod: the product of the others, out / x where x is not 0; where x is the one 0 of its
 * slice, the product of the rest; where a slice holds two zeros, 0 (torch's rule, without dividing by 0).
 */
const prodRule: ReductionRule = reducedRule("prod", (o, r) => {
  const zero = o.eq(r.x, 0)
  const zeros = o.sum(o.to(zero, r.meta.dtype), r.dims, true)
  const rest = o.prod(o.where(zero, 1, r.x), r.dims, true)
  return o.mul(r.g, o.where(zero, o.where(o.eq(zeros, 1), rest, 0), o.div(r.out(), r.x)))
})

/** sum and prod of bool, u8 and i32 accumulate into i64 (as torch's do); mean needs a floating input. */
/** A reduction's result, with the dims it reduces as its kernel's plan. */
const reduced = (meta: TensorMeta, dims: number[]) => withPlan([meta], { dims })

const reducedMeta = (rule: Rule, input: TensorMeta, dim: number | number[] | null, keepdim: boolean, op: string) => {
  if (rule === "floating" && !isFloating(input.dtype)) bad(op, `needs a floating input, got ${describe(input)} (cast with ops.to)`)
  const dims = reducedDims(op, input, dim)
  if ((op === "amax" || op === "amin") && dims.some((d) => input.shape[d] === 0))
    bad(op, `cannot reduce an empty dim of ${describe(input)}: ${op} has no identity`)
  const dtype = rule === "widen" && INTEGER_SUM.has(input.dtype) ? "i64" : input.dtype
  return reduced({ dtype, shape: reducedShape(input, dims, keepdim) }, dims)
}

const reduction = <const R extends Rule>(rule: R, backward: ReductionRule) => spec(
  reductionParams,
  ({ input, dim, keepdim }, op) => reducedMeta(rule, input, dim, keepdim, op),
  backward,
  { dtype: rule === "widen" ? "sum" : "same" } as { dtype: R extends "widen" ? "sum" : "same" },
)

const accumulatingParams = [...reductionParams, kw("dtype", "dtype", null)] as const

/**
 * sum, prod and mean with torch's `dtype` keyword: given, the input is cast to it first and the
 * result has it (mean's must be floating); else the rules above.
 */
const accumulating = <const R extends "widen" | "floating">(rule: R, backward: Backward<typeof accumulatingParams>) => spec(
  accumulatingParams,
  ({ input, dim, keepdim, dtype }, op) => {
    if (dtype === null) return reducedMeta(rule, input, dim, keepdim, op)
    if (rule === "floating" && !isFloating(dtype)) bad(op, `dtype must be floating, got ${dtype}`)
    const dims = reducedDims(op, input, dim)
    return reduced({ dtype, shape: reducedShape(input, dims, keepdim) }, dims)
  },
  backward,
  { dtype: rule === "widen" ? "sum" : "like" } as { dtype: R extends "widen" ? "sum" : "like" },
)

const logicalReduction = spec(reductionParams, ({ input, dim, keepdim }, op) => {
  const dims = reducedDims(op, input, dim)
  return reduced({ dtype: input.dtype === "u8" ? "u8" : "bool", shape: reducedShape(input, dims, keepdim) }, dims)
}, NOT_DIFFERENTIABLE)

/** argmax/argmin: i64 indices along one dim, or into the flattened input (dim None); not bool (as torch's). */
const argReduction = spec([arg("input", "tensor"), opt("dim", "int", null), opt("keepdim", "bool", false)], ({ input, dim, keepdim }, op) => {
  if (input.dtype === "bool") bad(op, `not defined on bool (${describe(input)})`)
  if (dim === null) {
    if (numelOf(input.shape) === 0) bad(op, `cannot reduce the empty ${describe(input)}`)
    return [{ dtype: "i64", shape: keepdim ? input.shape.map(() => 1) : [] }]
  }
  const d = normDim(op, dim, input.shape.length)
  if (input.shape[d] === 0) bad(op, `cannot reduce an empty dim of ${describe(input)}`)
  return [{ dtype: "i64", shape: reducedShape(input, input.shape.length === 0 ? [] : [d], keepdim) }]
}, NOT_DIFFERENTIABLE)

/**
 * max and min (torch's two forms): over every element, the value alone, its gradient shared
 * evenly among the elements equal to it; along one dim, (values, indices) with indices i64, the
 * first extreme of each line (a NaN counts as beyond every number: the first NaN wins), and the
 * values' gradient scattered back to those indices (torch 1.13's rules for both).
 */
const extremeParams = [arg("input", "tensor"), opt("dim", "int", null), opt("keepdim", "bool", false)] as const
const extremeWithIndices = (op: "max" | "min") => spec(extremeParams, ({ input, dim, keepdim }, op) => {
  const n = input.shape.length
  if (dim === null) {
    if (keepdim) bad(op, "keepdim needs a dim (without one, the result is one value)")
    if (numelOf(input.shape) === 0) bad(op, `cannot reduce the empty ${describe(input)}: ${op} has no identity`)
    return [{ dtype: input.dtype, shape: [] }]
  }
  const d = normDim(op, dim, n)
  if (n > 0 && input.shape[d] === 0) bad(op, `cannot reduce an empty dim of ${describe(input)}: ${op} has no identity`)
  const shape = reducedShape(input, n === 0 ? [] : [d], keepdim)
  return [{ dtype: input.dtype, shape }, { dtype: "i64", shape }]
}, (c, o) => {
  const { input, dim, keepdim } = c.args
  if (dim === null) return extremeRule(op)({ ...c, args: { input, dim: null, keepdim: false } }, o)
  return {
    input: () => {
      const m = c.meta(input), n = m.shape.length
      if (n === 0) return c.grad
      const d = normDim(op, dim, n), kept = (t: typeof input) => (keepdim ? t : o.unsqueeze(t, d))
      return o.scatter(o.zeros([...m.shape], { dtype: c.meta(c.grad).dtype }), d, kept(c.outs[1]!), kept(c.grad))
    },
  }
}, { dtype: "same", returns: "valuesIndices", results: ({ dim }) => (dim === null ? 1 : 2) })

const momentParams = [arg("input", "tensor"), opt("dim", "dims", null), kw("correction", "int", 1), kw("keepdim", "bool", false)] as const

/**
 * var and std: the sum of squared deviations over N - correction; floating inputs only.
 * Forward: the mean (kept dims), the squared deviations, their sum over N - correction (f16 and
 * bf16 in f32). d var / dx = 2 (x - mean) / (N - correction) and d std = d var / (2 std).
 */
const moments = (op: "var" | "std") => fused(momentParams, ({ input, dim, keepdim }, op) => {
  if (!isFloating(input.dtype)) bad(op, `needs a floating input, got ${describe(input)} (cast with ops.to)`)
  const dims = reducedDims(op, input, dim)
  return reduced({ dtype: input.dtype, shape: reducedShape(input, dims, keepdim) }, dims)
}, (c, o) => reducedRule(op, (o, r) => {
  const centred = o.sub(r.x, o.mean(r.x, r.dims, true)), n = reducedCount(r.meta, r.dims) - c.args.correction
  return op === "var" ? o.mul(r.g, o.mul(centred, 2 / n)) : o.div(o.mul(r.g, centred), o.mul(r.out(), n))
})(c, o), (a, o, meta, _, { plan: { dims } }) => {
  const m = meta(a.input), x = castTo(o, meta, a.input, composeDtype(m.dtype)), n = reducedCount(m, dims)
  const dev = o.sub(x, o.mean(x, dims, true))
  const v = o.div(o.sum(o.mul(dev, dev), dims, a.keepdim), Math.max(n - a.correction, 0))
  return op === "var" ? v : o.sqrt(v)
})

const NORM_ORDERS: ReadonlyArray<number> = [1, 2, Infinity]

export const reductions = {
  // The reductions read strides; max and min along a dim gather (flat), cumsum scans flat.
  sum: readsStrides(accumulating("widen", reducedRule("sum", (_o, r) => r.g))),
  prod: readsStrides(accumulating("widen", prodRule)),
  mean: readsStrides(accumulating("floating", reducedRule("mean", (o, r) => o.div(r.g, reducedCount(r.meta, r.dims))))),
  amax: readsStrides(reduction("same", extremeRule("amax"))),
  amin: readsStrides(reduction("same", extremeRule("amin"))),
  max: extremeWithIndices("max"),
  min: extremeWithIndices("min"),
  /** bool, but u8 stays u8 (torch 1.13's any and all). */
  any: readsStrides(logicalReduction), all: readsStrides(logicalReduction),
  argmax: readsStrides(argReduction), argmin: readsStrides(argReduction),
  var: moments("var"), std: moments("std"),
  /**
   * Over dims that are not empty (torch needs dim); large values do not overflow. Forward, as
   * torch's: the max over dims (an infinite one taken as 0, so inf - inf does not make NaN), log
   * of the sum of exp of the shifted input, plus the max (f16 and bf16 in f32).
   */
  logsumexp: fused([arg("input", "tensor"), arg("dim", "dims"), opt("keepdim", "bool", false)], ({ input, dim, keepdim }, op) => {
    if (!isFloating(input.dtype)) bad(op, `needs a floating input, got ${describe(input)} (cast with ops.to)`)
    const dims = reducedDims(op, input, dim)
    if (dims.some((d) => input.shape[d] === 0)) bad(op, `cannot reduce an empty dim of ${describe(input)}`)
    return reduced({ dtype: input.dtype, shape: reducedShape(input, dims, keepdim) }, dims)
  }, (c, o) => reducedRule("logsumexp", (o, r) => o.mul(r.g, o.exp(o.sub(r.x, r.out()))))(c, o), (a, o, meta, _, rule) => {
    const { dims } = rule.plan, x = castTo(o, meta, a.input, composeDtype(meta(a.input).dtype))
    const max = o.amax(x, dims, true), shift = o.where(o.isinf(max), 0, max)
    const total = o.log(o.sum(o.exp(o.sub(x, shift)), dims, a.keepdim))
    return o.add(total, a.keepdim ? shift : o.reshape(shift, [...rule[0]!.shape]))
  }),
  /** Integers and bool accumulate into i64 (as sum does). */
  cumsum: spec([arg("input", "tensor"), arg("dim", "int"), kw("dtype", "dtype", null)], ({ input, dim, dtype }, op) => {
    normDim(op, dim, input.shape.length)
    return [{ dtype: dtype ?? (isFloating(input.dtype) ? input.dtype : "i64"), shape: input.shape }]
  }, (c, o) => ({ input: () => o.flip(o.cumsum(o.flip(c.grad, c.args.dim), c.args.dim), c.args.dim) }), { dtype: "sum" }),
  /** p = 1, 2 or inf over dims; floating inputs only. */
  norm: readsStrides(spec([arg("input", "tensor"), opt("p", "scalar", 2), opt("dim", "dims", null), opt("keepdim", "bool", false)], ({ input, p, dim, keepdim }, op) => {
    if (!isFloating(input.dtype)) bad(op, `needs a floating input, got ${describe(input)} (cast with ops.to)`)
    if (!NORM_ORDERS.includes(p)) bad(op, `p must be 1, 2 or inf, got ${p}`)
    const dims = reducedDims(op, input, dim)
    return reduced({ dtype: input.dtype, shape: reducedShape(input, dims, keepdim) }, dims)
    // p=1: sign(x); p=2: x / norm (0 where the norm is 0); inf: sign(x) shared among the largest |x| (torch 1.13's rules).
  }, (c, o) => reducedRule("norm", (o, r) => {
    if (c.args.p === 1) return o.mul(r.g, o.sign(r.x))
    const out = r.out()
    if (c.args.p === 2) return o.where(o.eq(out, 0), 0, o.div(o.mul(r.g, r.x), out))
    const hit = o.to(o.eq(o.abs(r.x), out), r.meta.dtype)
    return o.div(o.mul(o.mul(r.g, o.sign(r.x)), hit), o.sum(hit, r.dims, true))
  })(c, o))),
}
