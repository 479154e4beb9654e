/** Creation ops: tensors made from sizes and numbers, with a dtype keyword (default f32). */
import { bad } from "../meta.ts"
import { NOT_DIFFERENTIABLE } from "../grad.ts"
import { arg, kw, opt } from "../params.ts"
import { spec } from "../spec.ts"

const sized = spec([arg("size", "shape"), kw("dtype", "dtype", "f32")], ({ size, dtype }) => [{ dtype, shape: size }], NOT_DIFFERENTIABLE, { dtype: "created" })

const random = spec(
  [arg("size", "shape"), kw("dtype", "dtype", "f32"), kw("seed", "int", null), kw("offset", "int", null)],
  ({ size, dtype }) => [{ dtype, shape: size }],
  NOT_DIFFERENTIABLE,
  { dtype: "created" },
)

/** arange(end) or arange(start, end, step=1): start, step and the element count. */
export const arangeBounds = (a: { start: number; end: number | null; step: number }, op: string): [number, number, number] => {
  const [start, end] = a.end === null ? [0, a.start] : [a.start, a.end]
  if (![start, end, a.step].every(Number.isFinite)) bad(op, `bounds must be finite, got ${start}, ${end}, ${a.step}`)
  if (a.step === 0) bad(op, "step must not be 0")
  return [start, a.step, Math.max(0, Math.ceil((end - start) / a.step))]
}

export const creation = {
  zeros: sized,
  ones: sized,
  full: spec([arg("size", "shape"), arg("fill_value", "scalar"), kw("dtype", "dtype", "f32")], ({ size, dtype }) => [{ dtype, shape: size }], NOT_DIFFERENTIABLE, { dtype: "created" }),
  arange: spec(
    [arg("start", "scalar"), opt("end", "scalar", null), opt("step", "scalar", 1), kw("dtype", "dtype", null)],
    // Integral bounds give i64, as torch's do.
    (a, op) => [{ dtype: a.dtype ?? ([a.start, a.end ?? 0, a.step].every(Number.isInteger) ? "i64" : "f32"), shape: [arangeBounds(a, op)[2]] }],
    NOT_DIFFERENTIABLE,
    { dtype: "arange" },
  ),
  rand: random,
  randn: random,
}
