/**
 * Elementwise ops: unary, binary (tensor op tensor, tensor op number, number op tensor) and
 * their in-place forms, with numpy broadcasting and torch's type promotion (promotion.ts).
 * Comparisons (and logical_and/or) compute in the promoted dtype and give bool; div is true
 * division (integers give f32); unary float functions of an integer tensor give f32 (torch's exp(int) is float).
 */
import type { DType } from "../../protocol/values.ts"
import { bad, describe, sameShape, type TensorMeta } from "../meta.ts"
import { type Backward, type GradOps, NOT_DIFFERENTIABLE, zeroGrad } from "../grad.ts"
import { arg, kw, opt } from "../params.ts"
import { broadcastShapes, canCast, isFloating, isScalar, resultType, scalarValue, type Scalar } from "../promotion.ts"
import { pointwiseFamily, spec, withPlan } from "../spec.ts"

/** What a binary op computes in and gives. */
export interface BinaryPlan {
  readonly compute: DType
  readonly result: TensorMeta
}

export type BinaryKind = "arithmetic" | "division" | "comparison"

export const planBinary = (op: string, kind: BinaryKind, a: TensorMeta | Scalar, b: TensorMeta | Scalar): BinaryPlan => {
  const numberA = isScalar(a), numberB = isScalar(b)
  if (numberA && numberB) bad(op, "needs a tensor operand, got two numbers")
  let compute = resultType([a, b])
  if (kind === "division" && !isFloating(compute)) compute = "f32"
  // (no filter and map: they were a tenth of a one-element command's time; equal shapes need no broadcast)
  const shape = numberA ? (b as TensorMeta).shape : numberB || sameShape((a as TensorMeta).shape, (b as TensorMeta).shape) ? (a as TensorMeta).shape
    : broadcastShapes(op, [(a as TensorMeta).shape, (b as TensorMeta).shape])
  return { compute, result: { dtype: kind === "comparison" ? "bool" : compute, shape } }
}

const unaryParams = [arg("input", "tensor")] as const

/** A unary op's rule: its input's gradient from the input x, the result y and the result's gradient g. */
export const unaryRule = (f: <T>(ops: GradOps<T>, x: T, y: T, g: T) => T): Backward<typeof unaryParams> =>
  (c, ops) => ({ input: () => f(ops, c.args.input, c.out, c.grad) })

/** neg, abs, relu keep the dtype; float functions of integers give f32. */
const unary = <const K extends "same" | "float">(dtype: K, backward: Backward<typeof unaryParams>) => spec(unaryParams, ({ input }) =>
  [{ dtype: dtype === "float" && !isFloating(input.dtype) ? "f32" : input.dtype, shape: input.shape }], backward, { dtype })

const DTYPE_KIND = { arithmetic: "promote", division: "divide", comparison: "bool" } as const

const binaryParams = [arg("input", "tensorOrScalar"), arg("other", "tensorOrScalar")] as const

/** A binary op's result, with its plan (the compute dtype and the broadcast result) for the kernel. */
const planned = (plan: BinaryPlan) => withPlan([plan.result], plan)

/** An in-place form's check, with the plan the kernel writes the input by. */
const inPlacePlanned = (op: string, input: TensorMeta, plan: BinaryPlan) => (checkInPlace(op, input, plan.result), withPlan([], plan))

const binary = <const B extends BinaryKind>(kind: B, backward: Backward<typeof binaryParams>) =>
  spec(binaryParams, ({ input, other }, op) => planned(planBinary(op, kind, input, other)), backward, { dtype: DTYPE_KIND[kind] })

/** An in-place form: the result must keep the input's shape, and its dtype must cast into the input's. */
export const checkInPlace = (op: string, input: TensorMeta, result: TensorMeta): void => {
  if (result.shape.length !== input.shape.length || result.shape.some((d, i) => d !== input.shape[i]))
    bad(op, `the result ${describe(result)} does not fit in place in ${describe(input)}`)
  if (!canCast(result.dtype, input.dtype)) bad(op, `result type ${result.dtype} can't be cast to the input's ${input.dtype}`)
}

export const binaryInPlace = (kind: BinaryKind) => spec([arg("input", "tensor"), arg("other", "tensorOrScalar")], ({ input, other }, op) =>
  inPlacePlanned(op, input, planBinary(op, kind, input, other)), NOT_DIFFERENTIABLE, { mutates: "input", dtype: "same" })

const arithmetic = (backward: Backward<typeof binaryParams>) => binary("arithmetic", backward)
const comparison = binary("comparison", NOT_DIFFERENTIABLE)

/** torch's logical_and and logical_or take two tensors (numbers are refused). */
const logical = spec([arg("input", "tensor"), arg("other", "tensor")], ({ input, other }, op) => planned(planBinary(op, "comparison", input, other)), NOT_DIFFERENTIABLE)

/**
 * maximum and minimum (torch 1.13's rule): the larger (smaller) operand gets the gradient, and
 * a tie splits it in halves. `wins(a, b)` says where a is the chosen one.
 */
const extremum = (wins: <T>(ops: GradOps<T>, a: T | Scalar, b: T | Scalar) => T): Backward<typeof binaryParams> => (c, ops) => {
  const { input: x, other: y } = c.args
  const share = <T>(o: GradOps<T>, g: T, a: T | Scalar, b: T | Scalar) => o.where(o.eq(a, b), o.div(g, 2), o.where(wins(o, a, b), g, 0))
  return { input: () => share(ops, c.grad, x, y), other: () => share(ops, c.grad, y, x) }
}

/** add's and sub's alpha (input ± alpha other): an integer result takes an integral alpha only, as torch's. */
const alphaParams = [...binaryParams, kw("alpha", "scalar", 1)] as const
const alphaInPlaceParams = [arg("input", "tensor"), arg("other", "tensorOrScalar"), kw("alpha", "scalar", 1)] as const

const planAlpha = (op: string, input: TensorMeta | Scalar, other: TensorMeta | Scalar, alpha: number): BinaryPlan => {
  const plan = planBinary(op, "arithmetic", input, other)
  if (!isFloating(plan.compute) && !Number.isInteger(alpha)) bad(op, `alpha must be an integer for a ${plan.compute} result, got ${alpha}`)
  return plan
}

const withAlpha = (sign: 1 | -1) => spec(alphaParams, ({ input, other, alpha }, op) => planned(planAlpha(op, input, other, alpha)), (c, o) => ({
  input: () => c.grad,
  other: () => (sign * c.args.alpha === 1 ? c.grad : o.mul(c.grad, sign * c.args.alpha)),
}), { dtype: "promote" })

const withAlphaInPlace = spec(alphaInPlaceParams, ({ input, other, alpha }, op) => inPlacePlanned(op, input, planAlpha(op, input, other, alpha)), NOT_DIFFERENTIABLE, { mutates: "input", dtype: "same" })

/** div's rounding_mode: None (true division), "trunc" or "floor" (which keep integers integral). */
export const ROUNDING_MODES = ["trunc", "floor"] as const
const divParams = [...binaryParams, kw("rounding_mode", "string", null)] as const
const divInPlaceParams = [arg("input", "tensor"), arg("other", "tensorOrScalar"), kw("rounding_mode", "string", null)] as const

const planDiv = (op: string, input: TensorMeta | Scalar, other: TensorMeta | Scalar, mode: string | null): BinaryPlan => {
  if (mode !== null && !(ROUNDING_MODES as ReadonlyArray<string>).includes(mode)) bad(op, `rounding_mode must be None, 'trunc' or 'floor', got '${mode}'`)
  return planBinary(op, mode === null ? "division" : "arithmetic", input, other)
}

const clampParams = [arg("input", "tensor"), opt("min", "tensorOrScalar", null), opt("max", "tensorOrScalar", null)] as const

/**
 * clamp (torch 1.13's two forms, number or tensor bounds, which broadcast with the input):
 * max(input, min) then min(that, max), so min > max gives max and a NaN anywhere stays NaN; the
 * dtype is the promotion of all three; at least one bound.
 */
const clampMeta = (op: string, input: TensorMeta, min: TensorMeta | Scalar | null, max: TensorMeta | Scalar | null): TensorMeta => {
  if (min === null && max === null) bad(op, "needs min or max (at least one of them not None)")
  if (min !== null && max !== null && isScalar(min) !== isScalar(max)) bad(op, "min and max must be both tensors or both numbers (torch's two forms)")
  const operands = [input, ...(min === null ? [] : [min]), ...(max === null ? [] : [max])]
  return { dtype: resultType(operands), shape: broadcastShapes(op, operands.filter((x): x is TensorMeta => !isScalar(x)).map((x) => x.shape)) }
}

/**
 * torch 1.13's rules: the input's gradient passes where min <= x <= max (bounds included); a
 * tensor min gets it where x < min (and min < max), a tensor max where x > max (or max < min,
 * where the result is max).
 */
const clampRule: Backward<typeof clampParams> = (c, o) => {
  const { input: x, min, max } = c.args, g = c.grad
  const only = (cond: typeof g) => o.where(cond, g, 0)
  return {
    input: () => {
      const inside = min === null ? o.le(x, max!) : max === null ? o.ge(x, min) : o.logical_and(o.ge(x, min), o.le(x, max))
      return only(inside)
    },
    min: () => only(max === null ? o.lt(x, min!) : o.logical_and(o.lt(x, min!), o.lt(min!, max))),
    max: () => only(min === null ? o.gt(x, max!) : o.logical_or(o.gt(x, max!), o.lt(max!, min))),
  }
}

export const elementwise = pointwiseFamily({
  neg: unary("same", unaryRule((o, _x, _y, g) => o.neg(g))),
  abs: unary("same", unaryRule((o, x, _y, g) => o.mul(g, o.sign(x)))),
  relu: unary("same", unaryRule((o, _x, y, g) => o.where(o.gt(y, 0), g, 0))),
  exp: unary("float", unaryRule((o, _x, y, g) => o.mul(g, y))),
  log: unary("float", unaryRule((o, x, _y, g) => o.div(g, x))),
  sqrt: unary("float", unaryRule((o, _x, y, g) => o.div(g, o.mul(y, 2)))),
  tanh: unary("float", unaryRule((o, _x, y, g) => o.mul(g, o.sub(1, o.mul(y, y))))),
  sigmoid: unary("float", unaryRule((o, _x, y, g) => o.mul(g, o.mul(y, o.sub(1, y))))),
  add: withAlpha(1),
  sub: withAlpha(-1),
  mul: arithmetic((c, o) => ({ input: () => o.mul(c.grad, c.args.other), other: () => o.mul(c.grad, c.args.input) })),
  // d(x/y)/dy = -x/y^2 (from x and y, what torch saves, not the result).
  // A rounded quotient is piecewise constant: torch's gradient is zeros.
  div: spec(divParams, ({ input, other, rounding_mode }, op) => planned(planDiv(op, input, other, rounding_mode)), (c, o) => c.args.rounding_mode !== null
    ? { input: () => zeroGrad(o, c.meta(c.out)), other: () => zeroGrad(o, c.meta(c.out)) }
    : { input: () => o.div(c.grad, c.args.other), other: () => o.neg(o.div(o.mul(c.grad, c.args.input), o.mul(c.args.other, c.args.other))) }, { dtype: "divide" }),
  maximum: arithmetic(extremum((o, a, b) => o.gt(a, b))),
  minimum: arithmetic(extremum((o, a, b) => o.lt(a, b))),
  // torch 1.13: an exponent of 0 gives the base no gradient, and a zero base with a non-negative exponent gives the exponent none.
  pow: arithmetic((c, o) => {
    const { input: x, other: e } = c.args, g = c.grad
    return {
      input: () => isScalar(e) ? (scalarValue(e) === 0 ? o.mul(g, 0) : o.mul(g, o.mul(o.pow(x, scalarValue(e) - 1), scalarValue(e)))) : o.where(o.eq(e, 0), 0, o.mul(g, o.mul(e, o.pow(x, o.sub(e, 1))))),
      other: () => isScalar(x) ? o.mul(g, o.mul(c.out, Math.log(scalarValue(x)))) : o.where(o.logical_and(o.eq(x, 0), o.ge(e, 0)), 0, o.mul(g, o.mul(c.out, o.log(x)))),
    }
  }),
  eq: comparison, ne: comparison, lt: comparison, le: comparison, gt: comparison, ge: comparison,
  /** Python's // and % (toward -inf), as torch 1.13's floor_divide and remainder. floor_divide has no derivative in torch 1.13. */
  floor_divide: arithmetic(NOT_DIFFERENTIABLE),
  remainder: arithmetic((c, o) => ({ input: () => c.grad, other: () => o.neg(o.mul(c.grad, o.floor_divide(c.args.input, c.args.other))) })),
  floor_divide_: binaryInPlace("arithmetic"), remainder_: binaryInPlace("arithmetic"),
  /** C's fmod, as torch's: the dividend's sign; an integer divisor of 0 fails the call. d/d other = -trunc(input / other). */
  fmod: arithmetic((c, o) => ({ input: () => c.grad, other: () => o.neg(o.mul(c.grad, o.trunc(o.div(c.args.input, c.args.other)))) })),
  logical_and: logical, logical_or: logical,
  add_: withAlphaInPlace, sub_: withAlphaInPlace, mul_: binaryInPlace("arithmetic"),
  div_: spec(divInPlaceParams, ({ input, other, rounding_mode }, op) => inPlacePlanned(op, input, planDiv(op, input, other, rounding_mode)), NOT_DIFFERENTIABLE, { mutates: "input", dtype: "same" }),
  clamp: spec(clampParams, ({ input, min, max }, op) => [clampMeta(op, input, min, max)], clampRule, { dtype: "promote" }),
  clamp_: spec(clampParams, ({ input, min, max }, op) => (checkInPlace(op, input, clampMeta(op, input, min, max)), []), NOT_DIFFERENTIABLE, { mutates: "input", dtype: "same" }),
})
