/** Reductions over one dim (or every element when dim is None), with keepdim. */
import type { DType } from "../../protocol/values.ts"
import { arg, opt } from "../params.ts"
import { normDim } from "../rules.ts"
import { spec } from "../spec.ts"

const INTEGER_SUM: ReadonlySet<DType> = new Set(["bool", "u8", "i32"])

/** sum and prod of bool, u8 and i32 accumulate into i64 (as torch's do); the rest keep the dtype. */
const reduction = (widens: boolean) => spec(
  [arg("input", "tensor"), opt("dim", "int", null), opt("keepdim", "bool", false)],
  ({ input, dim, keepdim }, op) => {
    const dtype = widens && INTEGER_SUM.has(input.dtype) ? "i64" : input.dtype
    if (dim === null) return [{ dtype, shape: keepdim ? input.shape.map(() => 1) : [] }]
    const d = normDim(op, dim, input.shape.length)
    return [{ dtype, shape: keepdim ? input.shape.map((s, i) => (i === d ? 1 : s)) : input.shape.filter((_, i) => i !== d) }]
  },
)

export const reductions = {
  sum: reduction(true),
  prod: reduction(true),
  mean: reduction(false),
  max: reduction(false),
  min: reduction(false),
}
