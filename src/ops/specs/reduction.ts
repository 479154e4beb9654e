/** Reductions over dims (an int, a list, or None for every dim), with keepdim. */
import type { DType } from "../../protocol/values.ts"
import { bad, describe, type TensorMeta } from "../meta.ts"
import { arg, opt } from "../params.ts"
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

export const reductions = {
  sum: reduction("widen"),
  prod: reduction("widen"),
  mean: reduction("floating"),
  amax: reduction("same"),
  amin: reduction("same"),
  /** Values only (torch's max(dim) also returns indices; not yet). */
  max: reduction("same"),
  min: reduction("same"),
}
