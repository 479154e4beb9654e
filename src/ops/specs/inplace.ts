/**
 * The in-place `_` forms of the elementwise ops that torch's Tensor has (neg_, exp_, eq_, ...),
 * derived from the out-of-place ops: the same parameters and rule, whose one result must fit
 * in the input (its shape, and a dtype that casts to the input's: exp_ of an i64 is refused, as
 * torch's is), which the op then writes. Not differentiable, as every in-place form here.
 * add_, sub_, mul_, div_ and the ternary forms are declared beside their ops.
 */
import type { TensorMeta } from "../meta.ts"
import { NOT_DIFFERENTIABLE } from "../grad.ts"
import { arg } from "../params.ts"
import { readingStrides, spec, withPlan, type OpSpec } from "../spec.ts"
import { binaryInPlace, checkInPlace, elementwise } from "./elementwise.ts"
import { math } from "./math.ts"

const UNARY = {
  neg: elementwise.neg, abs: elementwise.abs, sign: math.sign, exp: elementwise.exp, log: elementwise.log, log1p: math.log1p, expm1: math.expm1,
  sqrt: elementwise.sqrt, rsqrt: math.rsqrt, reciprocal: math.reciprocal, sin: math.sin, cos: math.cos, tanh: elementwise.tanh,
  sigmoid: elementwise.sigmoid, relu: elementwise.relu, erf: math.erf, floor: math.floor, ceil: math.ceil, round: math.round,
  trunc: math.trunc, logical_not: math.logical_not,
} as const

/** The op each unary in-place form computes (`exp_`: exp). */
export const UNARY_IN_PLACE: { readonly [N in keyof typeof UNARY as `${N}_`]: N } =
  Object.fromEntries(Object.keys(UNARY).map((n) => [`${n}_`, n])) as never

const unaryParams = [arg("input", "tensor")] as const

/** The base op's rule at its defaults for every parameter but input (round's decimals); its result is the kernel's plan. */
const unaryInPlace = (base: OpSpec) => spec(unaryParams, ({ input }, op) => {
  const bound = { ...Object.fromEntries(base.params.map((p) => [p.name, p.default])), input }
  const result = (base.outputs(bound as never, op) as ReadonlyArray<TensorMeta>)[0]!
  checkInPlace(op, input, result)
  return withPlan([], { result })
}, NOT_DIFFERENTIABLE, { mutates: "input", dtype: "same" })

type UnaryInPlace = ReturnType<typeof unaryInPlace>

/** torch's logical_and_ and logical_or_ take a tensor only, as their out-of-place forms. */
const logicalInPlace = (base: typeof elementwise.logical_and) => spec([arg("input", "tensor"), arg("other", "tensor")], ({ input, other }, op) => {
  const rule = base.outputs({ input, other }, op)
  checkInPlace(op, input, rule[0]!)
  return withPlan([], rule.plan)
}, NOT_DIFFERENTIABLE, { mutates: "input", dtype: "same" })

export const inPlace = readingStrides({
  ...(Object.fromEntries(Object.entries(UNARY).map(([n, s]) => [`${n}_`, unaryInPlace(s as OpSpec)])) as { readonly [N in keyof typeof UNARY as `${N}_`]: UnaryInPlace }),
  pow_: binaryInPlace("arithmetic"),
  eq_: binaryInPlace("comparison"), ne_: binaryInPlace("comparison"), lt_: binaryInPlace("comparison"),
  le_: binaryInPlace("comparison"), gt_: binaryInPlace("comparison"), ge_: binaryInPlace("comparison"),
  logical_and_: logicalInPlace(elementwise.logical_and), logical_or_: logicalInPlace(elementwise.logical_or),
  zero_: spec(unaryParams, () => [], NOT_DIFFERENTIABLE, { mutates: "input", dtype: "same", strided: true }),
})
