/**
 * Elementwise ops: unary, binary (tensor op tensor, tensor op number, number op tensor) and
 * their in-place forms. Operands have one dtype; a one-element operand broadcasts.
 */
import { bad, describe, numelOf, type TensorMeta } from "../meta.ts"
import { arg } from "../params.ts"
import { spec } from "../spec.ts"

const unary = spec([arg("input", "tensor")], ({ input }) => [input])

/** The result of a binary op: comparisons give bool, the rest the operands' dtype. */
const binaryOutput = (op: string, a: TensorMeta | number, b: TensorMeta | number, comparison: boolean): TensorMeta => {
  const dtypeOf = (t: TensorMeta): TensorMeta["dtype"] => (comparison ? "bool" : t.dtype)
  if (typeof a !== "number" && typeof b !== "number") {
    if (a.dtype !== b.dtype) bad(op, `dtypes differ: ${describe(a)} and ${describe(b)} (cast with ops.to)`)
    const na = numelOf(a.shape), nb = numelOf(b.shape)
    if (na !== nb && na !== 1 && nb !== 1) bad(op, `shapes do not broadcast: ${describe(a)} and ${describe(b)}`)
    if (na === nb && a.shape.join() !== b.shape.join()) bad(op, `shapes differ: ${describe(a)} and ${describe(b)}`)
    // A one-element operand takes the other's shape, even an empty one (as the shim computes).
    return { dtype: dtypeOf(a), shape: (na === 1 && nb !== 1 ? b : a).shape }
  }
  if (typeof a !== "number") return { dtype: dtypeOf(a), shape: a.shape }
  if (typeof b === "number") bad(op, "needs a tensor operand, got two numbers")
  return { dtype: dtypeOf(b as TensorMeta), shape: (b as TensorMeta).shape }
}

const binary = (comparison: boolean) =>
  spec([arg("input", "tensorOrScalar"), arg("other", "tensorOrScalar")], ({ input, other }, op) => [binaryOutput(op, input, other, comparison)])

const binaryInPlace = spec([arg("input", "tensor"), arg("other", "tensorOrScalar")], ({ input, other }, op) => {
  const o = binaryOutput(op, input, other, false)
  if (o.shape !== input.shape || o.dtype !== input.dtype) bad(op, `cannot write ${describe(o)} into ${describe(input)}`)
  return []
}, { mutates: "input" })

const arithmetic = binary(false), comparison = binary(true)

export const elementwise = {
  neg: unary, abs: unary, exp: unary, log: unary, sqrt: unary, relu: unary, tanh: unary, sigmoid: unary,
  add: arithmetic, sub: arithmetic, mul: arithmetic, div: arithmetic, maximum: arithmetic, minimum: arithmetic, pow: arithmetic,
  eq: comparison, ne: comparison, lt: comparison, le: comparison, gt: comparison, ge: comparison,
  add_: binaryInPlace, sub_: binaryInPlace, mul_: binaryInPlace, div_: binaryInPlace,
}
