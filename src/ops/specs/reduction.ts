/** Reductions over dims (an int, a list, or None for every dim), with keepdim. */
import type { DType } from "../../protocol/values.ts"
import { bad, describe, numelOf, type TensorMeta } from "../meta.ts"
import { arg, kw, opt } from "../params.ts"
import { isFloating } from "../promotion.ts"
import { normDim } from "../rules.ts"
import { spec } from "../spec.ts"

/** The dims a reduction covers, normalised, sorted and unique (None or [] is every dim). */
export const reducedDims = (op: string, x: TensorMeta, dim: number | number[] | null): number[] => {
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

/** sum and prod of bool, u8 and i32 accumulate into i64 (as torch's do); mean needs a floating input. */
const reduction = <const R extends Rule>(rule: R) => spec(
  [arg("input", "tensor"), opt("dim", "dims", null), opt("keepdim", "bool", false)],
  ({ input, dim, keepdim }, op) => {
    if (rule === "floating" && !isFloating(input.dtype)) bad(op, `needs a floating input, got ${describe(input)} (cast with ops.to)`)
    const dims = reducedDims(op, input, dim)
    if ((op === "amax" || op === "amin" || op === "max" || op === "min") && dims.some((d) => input.shape[d] === 0))
      bad(op, `cannot reduce an empty dim of ${describe(input)}: ${op} has no identity`)
    const dtype = rule === "widen" && INTEGER_SUM.has(input.dtype) ? "i64" : input.dtype
    return [{ dtype, shape: reducedShape(input, dims, keepdim) }]
  },
  { dtype: rule === "widen" ? "sum" : "same" } as { dtype: R extends "widen" ? "sum" : "same" },
)

const logicalReduction = spec([arg("input", "tensor"), opt("dim", "dims", null), opt("keepdim", "bool", false)], ({ input, dim, keepdim }, op) =>
  [{ dtype: input.dtype === "u8" ? "u8" : "bool", shape: reducedShape(input, reducedDims(op, input, dim), keepdim) }])

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
})

/** var and std: the sum of squared deviations over N - correction; floating inputs only. */
const moments = spec([arg("input", "tensor"), opt("dim", "dims", null), kw("correction", "int", 1), kw("keepdim", "bool", false)], ({ input, dim, keepdim }, op) => {
  if (!isFloating(input.dtype)) bad(op, `needs a floating input, got ${describe(input)} (cast with ops.to)`)
  return [{ dtype: input.dtype, shape: reducedShape(input, reducedDims(op, input, dim), keepdim) }]
})

const NORM_ORDERS: ReadonlyArray<number> = [1, 2, Infinity]

export const reductions = {
  sum: reduction("widen"),
  prod: reduction("widen"),
  mean: reduction("floating"),
  amax: reduction("same"),
  amin: reduction("same"),
  /** Values only (torch's max(dim) also returns indices; not yet). */
  max: reduction("same"),
  min: reduction("same"),
  /** bool, but u8 stays u8 (torch 1.13's any and all). */
  any: logicalReduction, all: logicalReduction,
  argmax: argReduction, argmin: argReduction,
  var: moments, std: moments,
  /** Over dims that are not empty (torch needs dim); large values do not overflow. */
  logsumexp: spec([arg("input", "tensor"), arg("dim", "dims"), opt("keepdim", "bool", false)], ({ input, dim, keepdim }, op) => {
    if (!isFloating(input.dtype)) bad(op, `needs a floating input, got ${describe(input)} (cast with ops.to)`)
    const dims = reducedDims(op, input, dim)
    if (dims.some((d) => input.shape[d] === 0)) bad(op, `cannot reduce an empty dim of ${describe(input)}`)
    return [{ dtype: input.dtype, shape: reducedShape(input, dims, keepdim) }]
  }),
  /** Integers and bool accumulate into i64 (as sum does). */
  cumsum: spec([arg("input", "tensor"), arg("dim", "int")], ({ input, dim }, op) => {
    normDim(op, dim, input.shape.length)
    return [{ dtype: isFloating(input.dtype) ? input.dtype : "i64", shape: input.shape }]
  }),
  /** p = 1, 2 or inf over dims; floating inputs only. */
  norm: spec([arg("input", "tensor"), opt("p", "scalar", 2), opt("dim", "dims", null), opt("keepdim", "bool", false)], ({ input, p, dim, keepdim }, op) => {
    if (!isFloating(input.dtype)) bad(op, `needs a floating input, got ${describe(input)} (cast with ops.to)`)
    if (!NORM_ORDERS.includes(p)) bad(op, `p must be 1, 2 or inf, got ${p}`)
    return [{ dtype: input.dtype, shape: reducedShape(input, reducedDims(op, input, dim), keepdim) }]
  }),
}
