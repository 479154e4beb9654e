/** Shape and dtype rules more than one op family shares. */
import { bad } from "./meta.ts"

/** dim in -ndim..ndim-1, normalised; a 0-dim tensor takes -1 and 0 (as torch does). */
export const normDim = (op: string, d: number, ndim: number): number => {
  const n = Math.max(ndim, 1)
  if (d < -n || d >= n) bad(op, `dim ${d} out of range for ${ndim} dims`)
  return d < 0 ? d + n : d
}
