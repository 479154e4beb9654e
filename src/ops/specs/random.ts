/**
 * The rank's random generator (src/ops/generator.ts) and the ops that draw from it besides
 * rand and randn: randint, dropout, manual_seed, and the state's get and set (a checkpoint
 * saves each rank's state as get_rng_state's tensor). An explicit seed (and offset) reads that
 * Philox stream instead and leaves the generator alone.
 */
import type { DType } from "../../protocol/values.ts"
import { bad, describe, type TensorMeta } from "../meta.ts"
import { NOT_DIFFERENTIABLE } from "../grad.ts"
import { arg, kw, opt } from "../params.ts"
import { isFloating, isIntegral } from "../promotion.ts"
import { spec, withPlan } from "../spec.ts"

/** get_rng_state's tensor: [key, offset] as i64 bit patterns. */
export const RNG_STATE_SHAPE = [2]

/** randint's result, with the range it draws from as its kernel's plan. */
const randintMeta = (op: string, low: number, high: number, shape: ReadonlyArray<number>, dtype: DType) => {
  if (!(low < high)) bad(op, `needs low < high, got ${low} and ${high}`)
  if (!isIntegral(dtype) && !isFloating(dtype)) bad(op, `dtype ${dtype} cannot hold integers in [${low}, ${high})`)
  if (high - low > 2 ** 53) bad(op, `the range [${low}, ${high}) is wider than 2^53`)
  return withPlan<{ readonly low: number; readonly high: number }, TensorMeta>([{ dtype, shape }], { low, high })
}

/** randint's bounds and size from either form: (low, high, size), or (high, size) with low 0. */
const randintForm = (op: string, a: { readonly low: number; readonly high: number | number[]; readonly size: number[] | null }): { low: number; high: number; size: number[] } => {
  if (a.size === null) {
    if (!Array.isArray(a.high)) bad(op, "needs a size: randint(high, size) or randint(low, high, size)")
    return { low: 0, high: a.low, size: a.high as number[] }
  }
  if (Array.isArray(a.high)) bad(op, `high must be an integer when size is given, got [${a.high}]`)
  return { low: a.low, high: a.high as number, size: a.size }
}

export const random = {
  /** torch's two forms: randint(low, high, size), and randint(high, size) from 0 (`randintForm`). */
  randint: spec(
    [arg("low", "int"), arg("high", "intOrShape"), opt("size", "shape", null), kw("dtype", "dtype", "i64"), kw("seed", "int", null), kw("offset", "int", null)],
    (a, op) => {
      const { low, high, size } = randintForm(op, a)
      return randintMeta(op, low, high, size, a.dtype)
    },
    NOT_DIFFERENTIABLE,
    { dtype: "created" },
  ),
  /** randint over another tensor's shape (its dtype, unless given one). */
  randint_like: spec(
    [arg("input", "tensor"), arg("low", "int"), arg("high", "int"), kw("dtype", "dtype", null), kw("seed", "int", null), kw("offset", "int", null)],
    ({ input, low, high, dtype }, op) => randintMeta(op, low, high, input.shape, dtype ?? input.dtype),
    NOT_DIFFERENTIABLE,
    { dtype: "like" },
  ),
  /**
   * Zeroes each element with probability p and scales the rest by 1 / (1 - p) when training;
   * else (or p = 0) the input unchanged. Its second result, the bool mask of kept elements (0-d
   * when nothing is dropped), is for its backward rule; the typed surface gives the first.
   */
  dropout: spec([arg("input", "tensor"), opt("p", "scalar", 0.5), opt("training", "bool", true)], ({ input, p, training }, op) => {
    if (!isFloating(input.dtype)) bad(op, `needs a floating input, got ${describe(input)}`)
    if (!(p >= 0 && p <= 1)) bad(op, `p must be in [0, 1], got ${p}`)
    return [input, { dtype: "bool", shape: training && p > 0 ? input.shape : [] }]
  }, (c, o) => ({
    // The kept elements' gradient, scaled as they were: g * mask / (1 - p) (the mask is the second result).
    input: () => (c.args.training && c.args.p > 0 ? o.mul(o.mul(c.grad, c.outs[1]!), c.args.p < 1 ? 1 / (1 - c.args.p) : 0) : c.grad),
  }), { dtype: "same", results: 2, returns: "first" }),
  /** Restarts this rank's stream at seed; distinct: each rank its own stream (else one shared). */
  manual_seed: spec([arg("seed", "int"), kw("distinct", "bool", true)], () => [], NOT_DIFFERENTIABLE, { results: 0, returns: "none" }),
  get_rng_state: spec([], () => [{ dtype: "i64", shape: RNG_STATE_SHAPE }], NOT_DIFFERENTIABLE),
  set_rng_state: spec([arg("state", "tensor")], ({ state }, op) => {
    if (state.dtype !== "i64" || state.shape.join() !== RNG_STATE_SHAPE.join()) bad(op, `state must be get_rng_state's i64[2], got ${describe(state)}`)
    return []
  }, NOT_DIFFERENTIABLE, { results: 0, returns: "none" }),
}
