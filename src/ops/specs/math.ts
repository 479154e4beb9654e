/**
 * Elementwise math beyond arithmetic: transcendental functions, activations, rounding and
 * predicates, each one shim_unary code. Their dtype rules are torch's: transcendental
 * functions of integers and bool give f32; the activations (silu, softplus, gelu) take
 * floating inputs only, as torch's do; floor, ceil, round and trunc keep integers and refuse
 * bool; sign keeps every dtype; isnan, isinf and logical_not give bool.
 */
import type { DType } from "../../protocol/values.ts"
import { bad, describe, type TensorMeta } from "../meta.ts"
import { type Backward, type GradOps, NOT_DIFFERENTIABLE, zeroGrad } from "../grad.ts"
import { arg, kw, opt } from "../params.ts"
import { isFloating } from "../promotion.ts"
import { pointwiseFamily, spec } from "../spec.ts"
import { unaryRule } from "./elementwise.ts"
import { floating } from "./nn.ts"

const input = [arg("input", "tensor")] as const

type Rule = Backward<typeof input>

const unaryWith = (dtype: (x: TensorMeta, op: string) => DType) => (backward: Rule) =>
  spec(input, ({ input }, op) => [{ dtype: dtype(input, op), shape: input.shape }], backward)

const toFloat = unaryWith((x) => (isFloating(x.dtype) ? x.dtype : "f32"))
const same = unaryWith((x) => x.dtype)
const predicate = unaryWith(() => "bool")(NOT_DIFFERENTIABLE)
/** Piecewise constant: torch's gradient is zeros. */
const flat: Rule = (c, o) => ({ input: () => zeroGrad(o, c.meta(c.args.input)) })
const rounding = unaryWith((x, op) => (x.dtype === "bool" ? bad(op, `not defined on bool (${describe(x)})`) : x.dtype))(flat)

/** torch's activations refuse integer inputs ("not implemented for 'Long'"). */
const floatingOnly = (op: string, x: TensorMeta): TensorMeta => (floating(op, x), x)

const APPROXIMATIONS = ["none", "tanh"] as const

/** gelu's derivative: exact, Φ(x) + x φ(x); tanh form, torch's formula for 0.5 x (1 + tanh(√(2/π) (x + 0.044715 x³))). */
const geluGrad = <T>(o: GradOps<T>, x: T, g: T, approximate: string): T => {
  if (approximate === "tanh") {
    const beta = Math.sqrt(2 / Math.PI), kappa = 0.044715, x2 = o.mul(x, x)
    const t = o.tanh(o.mul(o.add(x, o.mul(o.mul(x2, x), kappa)), beta))
    const left = o.mul(o.add(t, 1), 0.5)
    const right = o.mul(o.mul(o.mul(x, 0.5), o.sub(1, o.mul(t, t))), o.mul(o.add(o.mul(x2, 3 * kappa), 1), beta))
    return o.mul(g, o.add(left, right))
  }
  const cdf = o.mul(o.add(o.erf(o.mul(x, Math.SQRT1_2)), 1), 0.5)
  const pdf = o.mul(o.exp(o.mul(o.mul(x, x), -0.5)), 1 / Math.sqrt(2 * Math.PI))
  return o.mul(g, o.add(cdf, o.mul(x, pdf)))
}

export const math = pointwiseFamily({
  erf: toFloat(unaryRule((o, x, _y, g) => o.mul(g, o.mul(o.exp(o.neg(o.mul(x, x))), 2 / Math.sqrt(Math.PI))))),
  log1p: toFloat(unaryRule((o, x, _y, g) => o.div(g, o.add(x, 1)))),
  expm1: toFloat(unaryRule((o, _x, y, g) => o.mul(g, o.add(y, 1)))),
  rsqrt: toFloat(unaryRule((o, _x, y, g) => o.mul(g, o.mul(o.mul(o.mul(y, y), y), -0.5)))),
  reciprocal: toFloat(unaryRule((o, _x, y, g) => o.neg(o.mul(g, o.mul(y, y))))),
  sin: toFloat(unaryRule((o, x, _y, g) => o.mul(g, o.cos(x)))),
  cos: toFloat(unaryRule((o, x, _y, g) => o.neg(o.mul(g, o.sin(x))))),
  floor: rounding, ceil: rounding, trunc: rounding,
  /** Half to even; `decimals` rounds at 10^-decimals (of floating inputs, as torch 1.13's): round(x 10^d) / 10^d. */
  round: spec([...input, kw("decimals", "int", 0)], ({ input, decimals }, op) => {
    if (decimals !== 0 && !isFloating(input.dtype)) bad(op, `decimals needs a floating input, got ${describe(input)}`)
    return rounding.outputs({ input }, op)
  }, (c, o) => ({ input: () => zeroGrad(o, c.meta(c.args.input)) }), { dtype: "same" }),
  sign: same(flat),
  isnan: predicate, isinf: predicate, logical_not: predicate,
  silu: spec(input, ({ input }, op) => [floatingOnly(op, input)], unaryRule((o, x, _y, g) => {
    const s = o.sigmoid(x)
    return o.mul(g, o.mul(s, o.add(o.mul(x, o.sub(1, s)), 1)))
  })),
  /** torch's form: log1p(exp(beta x)) / beta, and x itself where beta x > threshold (where its gradient passes). */
  softplus: spec([...input, opt("beta", "scalar", 1), opt("threshold", "scalar", 20)], ({ input }, op) => [floatingOnly(op, input)], (c, o) => ({
    input: () => {
      const bx = c.args.beta === 1 ? c.args.input : o.mul(c.args.input, c.args.beta)
      return o.where(o.gt(bx, c.args.threshold), c.grad, o.mul(c.grad, o.sigmoid(bx)))
    },
  })),
  gelu: spec([...input, kw("approximate", "string", "none")], ({ input, approximate }, op) => {
    if (!(APPROXIMATIONS as ReadonlyArray<string>).includes(approximate)) bad(op, `approximate must be one of ${APPROXIMATIONS.join(", ")}, got '${approximate}'`)
    return [floatingOnly(op, input)]
  }, (c, o) => ({ input: () => geluGrad(o, c.args.input, c.grad, c.args.approximate) })),
})
