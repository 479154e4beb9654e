/**
 * Elementwise ops: unary, binary (tensor op tensor, tensor op number, number op tensor) and
 * their in-place forms, with numpy broadcasting and torch's type promotion (promotion.ts).
 * Comparisons (and logical_and/or) compute in the promoted dtype and give bool; div is true
 * division (integers give f32); unary float functions of an integer tensor give f32 (torch's exp(int) is float).
 */
import type { DType } from "../../protocol/values.ts"
import { bad, describe, type TensorMeta } from "../meta.ts"
import { arg, opt } from "../params.ts"
import { broadcastShapes, canCast, isFloating, resultType } from "../promotion.ts"
import { spec } from "../spec.ts"

/** What a binary op computes in and gives. */
export interface BinaryPlan {
  readonly compute: DType
  readonly result: TensorMeta
}

export type BinaryKind = "arithmetic" | "division" | "comparison"

export const planBinary = (op: string, kind: BinaryKind, a: TensorMeta | number, b: TensorMeta | number): BinaryPlan => {
  if (typeof a === "number" && typeof b === "number") bad(op, "needs a tensor operand, got two numbers")
  let compute = resultType([a, b])
  if (kind === "division" && !isFloating(compute)) compute = "f32"
  const shapes = [a, b].filter((x): x is TensorMeta => typeof x !== "number").map((x) => x.shape)
  const shape = shapes.length === 1 ? shapes[0]! : broadcastShapes(op, shapes)
  return { compute, result: { dtype: kind === "comparison" ? "bool" : compute, shape } }
}

/** neg, abs, relu keep the dtype; float functions of integers give f32. */
const unary = <const K extends "same" | "float">(dtype: K) => spec([arg("input", "tensor")], ({ input }) =>
  [{ dtype: dtype === "float" && !isFloating(input.dtype) ? "f32" : input.dtype, shape: input.shape }], { dtype })

const DTYPE_KIND = { arithmetic: "promote", division: "divide", comparison: "bool" } as const

const binary = <const B extends BinaryKind>(kind: B) =>
  spec([arg("input", "tensorOrScalar"), arg("other", "tensorOrScalar")], ({ input, other }, op) => [planBinary(op, kind, input, other).result], { dtype: DTYPE_KIND[kind] })

/** An in-place form: the result must keep the input's shape, and its dtype must cast into the input's. */
export const checkInPlace = (op: string, input: TensorMeta, result: TensorMeta): void => {
  if (result.shape.length !== input.shape.length || result.shape.some((d, i) => d !== input.shape[i]))
    bad(op, `the result ${describe(result)} does not fit in place in ${describe(input)}`)
  if (!canCast(result.dtype, input.dtype)) bad(op, `result type ${result.dtype} can't be cast to the input's ${input.dtype}`)
}

const binaryInPlace = (kind: BinaryKind) => spec([arg("input", "tensor"), arg("other", "tensorOrScalar")], ({ input, other }, op) => {
  checkInPlace(op, input, planBinary(op, kind, input, other).result)
  return []
}, { mutates: "input", dtype: "same" })

const arithmetic = binary("arithmetic"), comparison = binary("comparison")

/** torch's logical_and and logical_or take two tensors (numbers are refused). */
const logical = spec([arg("input", "tensor"), arg("other", "tensor")], ({ input, other }, op) => [planBinary(op, "comparison", input, other).result])

export const elementwise = {
  neg: unary("same"), abs: unary("same"), relu: unary("same"),
  exp: unary("float"), log: unary("float"), sqrt: unary("float"), tanh: unary("float"), sigmoid: unary("float"),
  add: arithmetic, sub: arithmetic, mul: arithmetic, div: binary("division"), maximum: arithmetic, minimum: arithmetic, pow: arithmetic,
  eq: comparison, ne: comparison, lt: comparison, le: comparison, gt: comparison, ge: comparison,
  /** Python's // and % (toward -inf), as torch 1.13's floor_divide and remainder. */
  floor_divide: arithmetic, remainder: arithmetic, floor_divide_: binaryInPlace("arithmetic"), remainder_: binaryInPlace("arithmetic"),
  logical_and: logical, logical_or: logical,
  add_: binaryInPlace("arithmetic"), sub_: binaryInPlace("arithmetic"), mul_: binaryInPlace("arithmetic"), div_: binaryInPlace("division"),
  clamp: spec([arg("input", "tensor"), opt("min", "scalar", null), opt("max", "scalar", null)], ({ input, min, max }) =>
    [{ dtype: resultType([input, ...(min === null ? [] : [min]), ...(max === null ? [] : [max])]), shape: input.shape }], { dtype: "promote" }),
}
