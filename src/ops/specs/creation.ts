/**
 * Creation ops: tensors made from sizes and numbers, with a dtype keyword (default f32), and
 * the `*_like` forms, which take another tensor's shape and (unless given a dtype) its dtype.
 */
import { bad, describe, type TensorMeta } from "../meta.ts"
import { NOT_DIFFERENTIABLE } from "../grad.ts"
import { arg, kw, opt } from "../params.ts"
import { isFloating } from "../promotion.ts"
import { spec, withPlan } from "../spec.ts"

const sized = spec([arg("size", "shape"), kw("dtype", "dtype", "f32")], ({ size, dtype }) => [{ dtype, shape: size }], NOT_DIFFERENTIABLE, { dtype: "created" })

/** rand, randn and their *_like forms draw floating values only, as torch's uniform and normal. */
const floatingDraw = (op: string, out: TensorMeta): TensorMeta => {
  if (!isFloating(out.dtype)) bad(op, `needs a floating dtype, got ${describe(out)} (torch's uniform and normal draws are floating)`)
  return out
}

const random = spec(
  [arg("size", "shape"), kw("dtype", "dtype", "f32"), kw("seed", "int", null), kw("offset", "int", null)],
  ({ size, dtype }, op) => [floatingDraw(op, { dtype, shape: size })],
  NOT_DIFFERENTIABLE,
  { dtype: "created" },
)

/** arange(end) or arange(start, end, step=1): start, step and the element count. */
const arangeBounds = (a: { start: number; end: number | null; step: number }, op: string): [number, number, number] => {
  const [start, end] = a.end === null ? [0, a.start] : [a.start, a.end]
  if (![start, end, a.step].every(Number.isFinite)) bad(op, `bounds must be finite, got ${start}, ${end}, ${a.step}`)
  if (a.step === 0) bad(op, "step must not be 0")
  return [start, a.step, Math.max(0, Math.ceil((end - start) / a.step))]
}

/** linspace's values in f64, as torch computes them: from start for the first half, back from end for the rest (so both ends are exact). */
export const linspaceValues = (start: number, end: number, steps: number): Float64Array => {
  const out = new Float64Array(steps), step = steps > 1 ? (end - start) / (steps - 1) : 0, half = Math.floor(steps / 2)
  // One step is start alone.
  for (let i = 0; i < steps; i++) out[i] = i < half || steps === 1 ? start + step * i : end - step * (steps - 1 - i)
  return out
}

/** A `*_like` op's result: the input's shape, the dtype keyword's dtype or the input's. */
const like = (input: TensorMeta, dtype: TensorMeta["dtype"] | null): TensorMeta => ({ dtype: dtype ?? input.dtype, shape: input.shape })

const likeParams = [arg("input", "tensor"), kw("dtype", "dtype", null)] as const
const sizedLike = spec(likeParams, ({ input, dtype }) => [like(input, dtype)], NOT_DIFFERENTIABLE, { dtype: "like" })
const randomLike = spec([...likeParams, kw("seed", "int", null), kw("offset", "int", null)], ({ input, dtype }, op) => [floatingDraw(op, like(input, dtype))], NOT_DIFFERENTIABLE, { dtype: "like" })

export const creation = {
  zeros: sized,
  ones: sized,
  full: spec([arg("size", "shape"), arg("fill_value", "scalar"), kw("dtype", "dtype", "f32")], ({ size, dtype }) => [{ dtype, shape: size }], NOT_DIFFERENTIABLE, { dtype: "created" }),
  arange: spec(
    [arg("start", "scalar"), opt("end", "scalar", null), opt("step", "scalar", 1), kw("dtype", "dtype", null)],
    // Integral bounds give i64, as torch's do.
    (a, op) => {
      const [start, step, length] = arangeBounds(a, op)
      return withPlan([{ dtype: a.dtype ?? ([a.start, a.end ?? 0, a.step].every(Number.isInteger) ? "i64" : "f32"), shape: [length] }], { start, step })
    },
    NOT_DIFFERENTIABLE,
    { dtype: "arange" },
  ),
  rand: random,
  randn: random,
  // empty, linspace, eye and the *_like forms
  /** Its values are whatever the memory held, as torch's. */
  empty: sized,
  linspace: spec([arg("start", "scalar"), arg("end", "scalar"), arg("steps", "int"), kw("dtype", "dtype", null)], ({ start, end, steps, dtype }, op) => {
    if (steps < 0) bad(op, `steps must be non-negative, got ${steps}`)
    if (!Number.isFinite(start) || !Number.isFinite(end)) bad(op, `start and end must be finite, got ${start} and ${end}`)
    return [{ dtype: dtype ?? "f32", shape: [steps] }]
  }, NOT_DIFFERENTIABLE, { dtype: "created" }),
  eye: spec([arg("n", "int"), opt("m", "int", null), kw("dtype", "dtype", "f32")], ({ n, m, dtype }, op) => {
    if (n < 0 || (m ?? 0) < 0) bad(op, `n and m must be non-negative, got ${n} and ${m}`)
    return [{ dtype, shape: [n, m ?? n] }]
  }, NOT_DIFFERENTIABLE, { dtype: "created" }),
  zeros_like: sizedLike,
  ones_like: sizedLike,
  empty_like: sizedLike,
  full_like: spec([arg("input", "tensor"), arg("fill_value", "scalar"), kw("dtype", "dtype", null)], ({ input, dtype }) => [like(input, dtype)], NOT_DIFFERENTIABLE, { dtype: "like" }),
  rand_like: randomLike,
  randn_like: randomLike,
}
