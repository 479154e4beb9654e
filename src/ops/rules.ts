/** Shape and dtype rules more than one op family shares. */
import type { DType } from "../protocol/values.ts"
import type { GradOps } from "./grad.ts"
import { bad, type TensorMeta } from "./meta.ts"

/** dim in -ndim..ndim-1, normalised; a 0-dim tensor takes -1 and 0 (as torch does). */
export const normDim = (op: string, d: number, ndim: number): number => {
  const n = Math.max(ndim, 1)
  if (d < -n || d >= n) bad(op, `dim ${d} out of range for ${ndim} dims`)
  return d < 0 ? d + n : d
}

/** The dtype a composed forward computes in: f16 and bf16 in f32 (rounded once at the end, as torch's kernels accumulate), the others their own. */
export const composeDtype = (d: DType): DType => (d === "f16" || d === "bf16" ? "f32" : d)

/** t in dtype (t itself when it has it): a composition's operand. */
export const castTo = <T>(o: GradOps<T>, meta: (t: T) => TensorMeta, t: T, dtype: DType): T => (meta(t).dtype === dtype ? t : o.to(t, dtype))
