/**
 * Elementwise math beyond arithmetic: transcendental functions, activations, rounding and
 * predicates, each one shim_unary code. Their dtype rules are torch's: transcendental
 * functions of integers and bool give f32; the activations (silu, softplus, gelu) take
 * floating inputs only, as torch's do; floor, ceil, round and trunc keep integers and refuse
 * bool; sign keeps every dtype; isnan, isinf and logical_not give bool.
 */
import type { DType } from "../../protocol/values.ts"
import { bad, describe, type TensorMeta } from "../meta.ts"
import { arg, kw, opt } from "../params.ts"
import { isFloating } from "../promotion.ts"
import { spec } from "../spec.ts"
import { floating } from "./nn.ts"

const input = [arg("input", "tensor")] as const

const unaryWith = (dtype: (x: TensorMeta, op: string) => DType) => spec(input, ({ input }, op) => [{ dtype: dtype(input, op), shape: input.shape }])

const toFloat = unaryWith((x) => (isFloating(x.dtype) ? x.dtype : "f32"))
const same = unaryWith((x) => x.dtype)
const predicate = unaryWith(() => "bool")
const rounding = unaryWith((x, op) => (x.dtype === "bool" ? bad(op, `not defined on bool (${describe(x)})`) : x.dtype))

/** torch's activations refuse integer inputs ("not implemented for 'Long'"). */
const floatingOnly = (op: string, x: TensorMeta): TensorMeta => (floating(op, x), x)

const APPROXIMATIONS = ["none", "tanh"] as const

export const math = {
  erf: toFloat, log1p: toFloat, expm1: toFloat, rsqrt: toFloat, reciprocal: toFloat, sin: toFloat, cos: toFloat,
  floor: rounding, ceil: rounding, round: rounding, trunc: rounding,
  sign: same,
  isnan: predicate, isinf: predicate, logical_not: predicate,
  silu: spec(input, ({ input }, op) => [floatingOnly(op, input)]),
  /** beta and threshold at torch's defaults only (the kernel's fixed form). */
  softplus: spec([...input, opt("beta", "scalar", 1), opt("threshold", "scalar", 20)], ({ input, beta, threshold }, op) => {
    if (beta !== 1 || threshold !== 20) bad(op, `only beta=1 and threshold=20 are supported, got beta=${beta}, threshold=${threshold}`)
    return [floatingOnly(op, input)]
  }),
  gelu: spec([...input, kw("approximate", "string", "none")], ({ input, approximate }, op) => {
    if (!(APPROXIMATIONS as ReadonlyArray<string>).includes(approximate)) bad(op, `approximate must be one of ${APPROXIMATIONS.join(", ")}, got '${approximate}'`)
    return [floatingOnly(op, input)]
  }),
}
