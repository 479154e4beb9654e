/**
 * Sorting, scanning and sampling: sort, argsort, topk, kthvalue (one stable sort kernel,
 * shim_sort: topk and kthvalue take its first k or its kth entry), cumprod, cummax and cummin
 * (shim_cumulative), roll (strided copies), searchsorted (shim_searchsorted), bincount (a
 * scatter_add into minlength bins) and multinomial (the rank's generator through cumsum and
 * searchsorted, or an exponential race through sort). Orders are torch 1.13's: ascending puts
 * NaN after every number, descending (and topk's largest) before, and equal values keep their
 * order (torch's CPU sort is stable with or without `stable`). Where torch leaves the order of
 * ties to its selection algorithm (topk's and kthvalue's indices), ours are the stable sort's.
 */
import type { DType } from "../../protocol/values.ts"
import { bad, describe, numelOf, type TensorMeta } from "../meta.ts"
import { type GradOps, NOT_DIFFERENTIABLE } from "../grad.ts"
import { arg, kw, opt } from "../params.ts"
import { isFloating, isIntegral } from "../promotion.ts"
import { normDim } from "../rules.ts"
import { spec, withPlan } from "../spec.ts"

/** dim of x normalised (a 0-d x takes 0 and -1), and x's size along it (1 for a 0-d x). */
const lineOf = (op: string, x: TensorMeta, dim: number): { readonly d: number; readonly size: number } => {
  const d = normDim(op, dim, x.shape.length)
  return { d, size: x.shape.length === 0 ? 1 : x.shape[d]! }
}

/** g of values taken along d at `indices` (of g's shape), back at those places in zeros of the input's shape. */
const scatterBack = <T>(o: GradOps<T>, input: TensorMeta, g: T, d: number, indices: T, add = false): T => {
  if (input.shape.length === 0) return g
  const zeros = o.zeros([...input.shape], { dtype: input.dtype })
  return add ? o.scatter_add(zeros, d, indices, g) : o.scatter(zeros, d, indices, g)
}

const pair = (input: TensorMeta, shape: ReadonlyArray<number>): TensorMeta[] => [{ dtype: input.dtype, shape }, { dtype: "i64", shape }]

/** Results along one line of the input, with that line's dim as the kernel's plan. */
const along = (metas: TensorMeta[], d: number) => withPlan(metas, { d })

/** topk's k: 0..size (a 0-d input has one element). */
const topkCount = (op: string, x: TensorMeta, k: number, dim: number): number => {
  const { size } = lineOf(op, x, dim)
  if (k < 0 || k > size) bad(op, `k ${k} is out of range for dim ${dim} of ${describe(x)} (0..${size})`)
  return k
}

const sortParams = [arg("input", "tensor"), opt("dim", "int", -1), opt("descending", "bool", false), kw("stable", "bool", false)] as const

/** cumprod's gradient where x may hold zeros: per line, sum_{j >= k} g_j prod_{i <= j, i != k} x_i. */
const cumprodGrad = <T>(o: GradOps<T>, x: T, out: T, g: T, dim: number, meta: TensorMeta): T => {
  const revCumsum = (t: T) => o.flip(o.cumsum(o.flip(t, dim), dim), dim)
  const zero = o.eq(x, 0), zerosSoFar = o.cumsum(o.to(zero, "i64"), dim)
  // Before a line's first zero: (sum_{j >= k} g_j out_j) / x_k. At it: the same sum with that zero taken as 1
  // (later zeros still zero their terms). After it: 0, as every product then holds that zero.
  const first = o.logical_and(zero, o.eq(zerosSoFar, 1))
  const before = o.div(revCumsum(o.mul(g, out)), o.where(zero, 1, x))
  const atFirst = revCumsum(o.mul(g, o.cumprod(o.where(first, 1, x), dim)))
  return o.to(o.where(o.eq(zerosSoFar, 0), before, o.where(first, atFirst, 0)), meta.dtype)
}

/** roll's (shift, dim) pairs: dims None rolls the flattened input by one shift. */
const rollPairs = (op: string, x: TensorMeta, shifts: number | number[], dims: number | number[] | null): Array<[number, number]> => {
  const s = typeof shifts === "number" ? [shifts] : shifts
  if (dims === null) {
    if (s.length !== 1) bad(op, `without dims, shifts must be one number, got [${s}]`)
    return [[s[0]!, -1]]
  }
  const d = typeof dims === "number" ? [dims] : dims
  if (x.shape.length === 0) bad(op, `a 0-d tensor has no dims to roll (give no dims)`)
  if (s.length !== d.length || d.length === 0) bad(op, `shifts [${s}] and dims [${d}] must have one entry each`)
  return d.map((dim, i) => [s[i]!, normDim(op, dim, x.shape.length)])
}

/** bincount's result dtype: i64 counts, or the weights' sums (f32 stays f32, others f64, as torch's). */
const bincountDtype = (weights: TensorMeta | null): DType => (weights === null ? "i64" : weights.dtype === "f32" ? "f32" : "f64")

export const sorting = {
  /** (values, indices) along dim; the values' gradient goes back to where each came from. */
  sort: spec(sortParams, ({ input, dim }, op) => along(pair(input, input.shape), lineOf(op, input, dim).d), (c, o) => ({
    input: () => scatterBack(o, c.meta(c.args.input), c.grad, lineOf("sort", c.meta(c.args.input), c.args.dim).d, c.outs[1]!),
  }), { dtype: "same", results: 2, returns: "pair" }),
  argsort: spec(sortParams, ({ input, dim }, op) => along([{ dtype: "i64", shape: input.shape }], lineOf(op, input, dim).d), NOT_DIFFERENTIABLE, { dtype: "index" }),
  /** The k largest (smallest) along dim, in order whatever `sorted` says (torch leaves the unsorted order open). */
  topk: spec([arg("input", "tensor"), arg("k", "int"), opt("dim", "int", -1), opt("largest", "bool", true), opt("sorted", "bool", true)], ({ input, k, dim }, op) => {
    const n = topkCount(op, input, k, dim), { d } = lineOf(op, input, dim)
    return along(pair(input, input.shape.map((s, i) => (i === d ? n : s))), d)
  }, (c, o) => ({
    input: () => scatterBack(o, c.meta(c.args.input), c.grad, lineOf("topk", c.meta(c.args.input), c.args.dim).d, c.outs[1]!),
  }), { dtype: "same", results: 2, returns: "pair" }),
  /** The kth smallest (k from 1) along dim, NaN counting as the largest; keepdim keeps dim as 1. */
  kthvalue: spec([arg("input", "tensor"), arg("k", "int"), opt("dim", "int", -1), opt("keepdim", "bool", false)], ({ input, k, dim, keepdim }, op) => {
    const { d, size } = lineOf(op, input, dim)
    if (k < 1 || k > size) bad(op, `k ${k} is out of range for dim ${dim} of ${describe(input)} (1..${size})`)
    return along(pair(input, input.shape.length === 0 ? [] : keepdim ? input.shape.map((s, i) => (i === d ? 1 : s)) : input.shape.filter((_, i) => i !== d)), d)
  }, (c, o) => ({
    input: () => {
      const m = c.meta(c.args.input), { d } = lineOf("kthvalue", m, c.args.dim), kept = (t: typeof c.grad) => (c.args.keepdim || m.shape.length === 0 ? t : o.unsqueeze(t, d))
      return scatterBack(o, m, kept(c.grad), d, kept(c.outs[1]!))
    },
  }), { dtype: "same", results: 2, returns: "pair" }),
  /** Integers and bool multiply into i64 (as cumsum adds); the gradient holds where x has zeros (torch's rule). */
  cumprod: spec([arg("input", "tensor"), arg("dim", "int"), kw("dtype", "dtype", null)], ({ input, dim, dtype }, op) => {
    return along([{ dtype: dtype ?? (isFloating(input.dtype) ? input.dtype : "i64"), shape: input.shape }], lineOf(op, input, dim).d)
  }, (c, o) => ({
    input: () => {
      const m = c.meta(c.args.input)
      if (m.shape.length === 0) return c.grad
      return cumprodGrad(o, o.to(c.args.input, c.meta(c.out).dtype), c.out, c.grad, lineOf("cumprod", m, c.args.dim).d, m)
    },
  }), { dtype: "sum" }),
  /** (values, indices): each prefix's extreme, a tie moving to the later element, NaN staying once seen; the gradient added back at the indices. */
  cummax: spec([arg("input", "tensor"), arg("dim", "int")], ({ input, dim }, op) => along(pair(input, input.shape), lineOf(op, input, dim).d), (c, o) => ({
    input: () => scatterBack(o, c.meta(c.args.input), c.grad, lineOf("cummax", c.meta(c.args.input), c.args.dim).d, c.outs[1]!, true),
  }), { dtype: "same", results: 2, returns: "pair" }),
  cummin: spec([arg("input", "tensor"), arg("dim", "int")], ({ input, dim }, op) => along(pair(input, input.shape), lineOf(op, input, dim).d), (c, o) => ({
    input: () => scatterBack(o, c.meta(c.args.input), c.grad, lineOf("cummin", c.meta(c.args.input), c.args.dim).d, c.outs[1]!, true),
  }), { dtype: "same", results: 2, returns: "pair" }),
  /** Each (shift, dim) in turn, elements leaving one end coming in at the other; dims None rolls the flattened input. */
  roll: spec([arg("input", "tensor"), arg("shifts", "dims"), opt("dims", "dims", null)], ({ input, shifts, dims }, op) => withPlan([input], { pairs: rollPairs(op, input, shifts, dims) }), (c, o) => ({
    input: () => o.roll(c.grad, (typeof c.args.shifts === "number" ? [c.args.shifts] : c.args.shifts).map((s) => -s), c.args.dims),
  }), { dtype: "same" }),
  /**
   * Where each element of input goes in its row of sorted_sequence (the last dim; a 1-D one
   * serves every row): before the first element not below it, or with right (side "right")
   * not at or below it. One dtype for both; torch's sorter is not taken.
   */
  searchsorted: spec([arg("sorted_sequence", "tensor"), arg("input", "tensor"), kw("out_int32", "bool", false), kw("right", "bool", false), kw("side", "string", null)],
    ({ sorted_sequence: s, input, out_int32, right, side }, op) => {
      if (side !== null && side !== "left" && side !== "right") bad(op, `side must be "left" or "right", got "${side}"`)
      if (side === "left" && right) bad(op, `side "left" contradicts right=True`)
      if (s.dtype !== input.dtype) bad(op, `sorted_sequence ${describe(s)} and input ${describe(input)} need one dtype`)
      if (s.shape.length === 0) bad(op, `sorted_sequence must have at least 1 dim, got ${describe(s)}`)
      if (s.shape.length > 1 && (s.shape.length !== input.shape.length || s.shape.slice(0, -1).some((n, i) => n !== input.shape[i])))
        bad(op, `sorted_sequence ${describe(s)} must be 1-D or have input ${describe(input)}'s leading dims`)
      return [{ dtype: out_int32 ? "i32" : "i64", shape: input.shape }]
    }, NOT_DIFFERENTIABLE),
  /**
   * Counts of each value of a 1-D integral input (or sums of their weights) in `minlength`
   * bins: the result's size must be known before the values are, so minlength is its size, and
   * a value past it (or a negative one) fails the call on the worker, naming it.
   */
  bincount: spec([arg("input", "tensor"), opt("weights", "tensor", null), opt("minlength", "int", 0)], ({ input, weights, minlength }, op) => {
    if (input.shape.length !== 1 || !(isIntegral(input.dtype) || input.dtype === "bool")) bad(op, `needs a 1-D integral input, got ${describe(input)}`)
    if (weights !== null && (weights.shape.length !== 1 || weights.shape[0] !== input.shape[0])) bad(op, `weights ${describe(weights)} must be 1-D with input ${describe(input)}'s length`)
    if (minlength < 0) bad(op, `minlength must be non-negative, got ${minlength}`)
    return [{ dtype: bincountDtype(weights), shape: [minlength] }]
  }, NOT_DIFFERENTIABLE),
  /**
   * num_samples category indices per row of input's weights (1-D or 2-D, non-negative, finite,
   * each row's sum positive), drawn from the rank's generator: with replacement, each by the
   * inverse of the row's cumulative sum; without, the num_samples smallest of E_i / p_i with E_i
   * exponential draws (an exponential race, which gives torch's sequential distribution).
   * Values that break those rules fail the call on the worker.
   */
  multinomial: spec([arg("input", "tensor"), arg("num_samples", "int"), opt("replacement", "bool", false)], ({ input, num_samples, replacement }, op) => {
    if (!isFloating(input.dtype)) bad(op, `needs floating weights, got ${describe(input)}`)
    if (input.shape.length < 1 || input.shape.length > 2) bad(op, `weights must be 1-D or 2-D, got ${describe(input)}`)
    const categories = input.shape.at(-1)!
    if (num_samples <= 0) bad(op, `num_samples must be positive, got ${num_samples}`)
    if (categories === 0) bad(op, `weights ${describe(input)} have no categories`)
    if (!replacement && num_samples > categories) bad(op, `cannot draw ${num_samples} samples of ${categories} categories without replacement`)
    // The plan: how many numbers it draws from the generator (one per sample, or one per category without replacement).
    const draws = numelOf(input.shape.slice(0, -1)) * (replacement ? num_samples : categories)
    return withPlan([{ dtype: "i64", shape: [...input.shape.slice(0, -1), num_samples] }], { draws })
  }, NOT_DIFFERENTIABLE, { dtype: "index" }),
}
