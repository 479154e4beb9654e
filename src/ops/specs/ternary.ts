/**
 * Ternary elementwise ops (one shim_ternary code each): where and masked_fill select, lerp,
 * addcmul and addcdiv combine three operands; all broadcast numpy's way. Their dtype rules are
 * torch 1.13's: where promotes its two values (numbers included) and needs a bool condition;
 * masked_fill keeps the input's dtype; lerp needs floating operands of one dtype; addcmul and
 * addcdiv promote the three tensors, and addcdiv refuses integer division.
 */
import { bad, describe, type TensorMeta } from "../meta.ts"
import { NOT_DIFFERENTIABLE } from "../grad.ts"
import { arg, kw } from "../params.ts"
import { broadcastShapes, isFloating, isIntegral, isScalar, resultType, scalarValue, type Scalar } from "../promotion.ts"
import { pointwiseFamily, spec } from "../spec.ts"
import { checkInPlace } from "./elementwise.ts"

const shapeOf = (op: string, xs: ReadonlyArray<TensorMeta | Scalar>): number[] =>
  broadcastShapes(op, xs.filter((x): x is TensorMeta => !isScalar(x)).map((x) => x.shape))

const boolMask = (op: string, name: string, m: TensorMeta): void => {
  if (m.dtype !== "bool") bad(op, `${name} must be a bool tensor, got ${describe(m)}`)
}

const where = spec([arg("condition", "tensor"), arg("input", "tensorOrScalar"), arg("other", "tensorOrScalar")], ({ condition, input, other }, op) => {
  boolMask(op, "condition", condition)
  return [{ dtype: resultType([input, other]), shape: shapeOf(op, [condition, input, other]) }]
}, (c, o) => ({ input: () => o.where(c.args.condition, c.grad, 0), other: () => o.where(c.args.condition, 0, c.grad) }))

/** The mask broadcasts to the input's shape (the result has it). */
const maskedFill = (op: string, input: TensorMeta, mask: TensorMeta): TensorMeta => {
  boolMask(op, "mask", mask)
  const shape = shapeOf(op, [input, mask])
  if (shape.length !== input.shape.length || shape.some((d, i) => d !== input.shape[i])) bad(op, `mask ${describe(mask)} does not broadcast to the input ${describe(input)}`)
  return input
}

const lerpMeta = (op: string, input: TensorMeta, end: TensorMeta, weight: TensorMeta | Scalar): TensorMeta => {
  if (!isFloating(input.dtype)) bad(op, `needs a floating input, got ${describe(input)}`)
  for (const [name, x] of [["end", end], ["weight", weight]] as const)
    if (!isScalar(x) && x.dtype !== input.dtype) bad(op, `expected dtype ${input.dtype} for ${name} but got ${describe(x)}`)
  return { dtype: input.dtype, shape: shapeOf(op, [input, end, weight]) }
}

const addcMeta = (op: string, input: TensorMeta, tensor1: TensorMeta, tensor2: TensorMeta): TensorMeta => {
  const dtype = resultType([input, tensor1, tensor2])
  if (op.startsWith("addcdiv") && isIntegral(tensor1.dtype) && isIntegral(tensor2.dtype)) bad(op, `integer division is not supported (tensor1 ${describe(tensor1)}, tensor2 ${describe(tensor2)})`)
  if (dtype === "bool") bad(op, "not defined on bool")
  return { dtype, shape: shapeOf(op, [input, tensor1, tensor2]) }
}

/** An in-place form defines nothing; its result must fit the input. */
const inPlace = (op: string, input: TensorMeta, result: TensorMeta): TensorMeta[] => (checkInPlace(op, input, result), [])

const lerpParams = [arg("input", "tensor"), arg("end", "tensor"), arg("weight", "tensorOrScalar")] as const
const addcParams = [arg("input", "tensor"), arg("tensor1", "tensor"), arg("tensor2", "tensor"), kw("value", "scalar", 1)] as const
const maskedParams = [arg("input", "tensor"), arg("mask", "tensor"), arg("value", "scalar")] as const

export const ternary = pointwiseFamily({
  where,
  masked_fill: spec(maskedParams, ({ input, mask }, op) => [maskedFill(op, input, mask)], (c, o) => ({ input: () => o.masked_fill(c.grad, c.args.mask, 0) })),
  masked_fill_: spec(maskedParams, ({ input, mask }, op) => inPlace(op, input, maskedFill(op, input, mask)), NOT_DIFFERENTIABLE, { mutates: "input" }),
  // input + weight (end - input)
  lerp: spec(lerpParams, ({ input, end, weight }, op) => [lerpMeta(op, input, end, weight)], (c, o) => ({
    input: () => { const w = c.args.weight; return o.mul(c.grad, isScalar(w) ? 1 - scalarValue(w) : o.sub(1, w)) },
    end: () => o.mul(c.grad, c.args.weight),
    weight: () => o.mul(c.grad, o.sub(c.args.end, c.args.input)),
  })),
  lerp_: spec(lerpParams, ({ input, end, weight }, op) => inPlace(op, input, lerpMeta(op, input, end, weight)), NOT_DIFFERENTIABLE, { mutates: "input" }),
  // input + value tensor1 tensor2
  addcmul: spec(addcParams, ({ input, tensor1, tensor2 }, op) => [addcMeta(op, input, tensor1, tensor2)], (c, o) => ({
    input: () => c.grad,
    tensor1: () => o.mul(o.mul(c.grad, c.args.tensor2), c.args.value),
    tensor2: () => o.mul(o.mul(c.grad, c.args.tensor1), c.args.value),
  })),
  addcmul_: spec(addcParams, ({ input, tensor1, tensor2 }, op) => inPlace(op, input, addcMeta(op, input, tensor1, tensor2)), NOT_DIFFERENTIABLE, { mutates: "input" }),
  // input + value tensor1 / tensor2
  addcdiv: spec(addcParams, ({ input, tensor1, tensor2 }, op) => [addcMeta(op, input, tensor1, tensor2)], (c, o) => ({
    input: () => c.grad,
    tensor1: () => o.div(o.mul(c.grad, c.args.value), c.args.tensor2),
    tensor2: () => o.neg(o.div(o.mul(o.mul(c.grad, c.args.value), c.args.tensor1), o.mul(c.args.tensor2, c.args.tensor2))),
  })),
  addcdiv_: spec(addcParams, ({ input, tensor1, tensor2 }, op) => inPlace(op, input, addcMeta(op, input, tensor1, tensor2)), NOT_DIFFERENTIABLE, { mutates: "input" }),
}, ["masked_fill"])
