/**
 * torch's type promotion and numpy broadcasting, the rules every elementwise and comparison
 * op shares. Categories order bool < integer < floating; within one, the wider type wins
 * (f16 with bf16 gives f32). A number does not promote a tensor's category: an integral
 * number keeps an integer tensor's dtype, a fractional one makes it f32 (torch's default
 * float); a bool tensor with an integral number gives i64.
 */
import type { DType } from "../protocol/values.ts"
import { bad, type TensorMeta } from "./meta.ts"

const CATEGORY: Readonly<Record<DType, number>> = { bool: 0, u8: 1, i32: 1, i64: 1, f16: 2, bf16: 2, f32: 2, f64: 2 }
const RANK: Readonly<Record<DType, number>> = { bool: 0, u8: 1, i32: 2, i64: 3, f16: 1, bf16: 1, f32: 2, f64: 3 }

export const isFloating = (d: DType): boolean => CATEGORY[d] === 2
export const isIntegral = (d: DType): boolean => CATEGORY[d] === 1

/** The dtype two tensors' dtypes compute in (torch.promote_types). */
export const promoteTypes = (a: DType, b: DType): DType => {
  if (a === b) return a
  if (CATEGORY[a] !== CATEGORY[b]) return CATEGORY[a] > CATEGORY[b] ? a : b
  if ((a === "f16" && b === "bf16") || (a === "bf16" && b === "f16")) return "f32"
  return RANK[a] >= RANK[b] ? a : b
}

/** A tensor's dtype with a number beside it. */
export const promoteWithNumber = (t: DType, n: number): DType => {
  if (isFloating(t)) return t
  if (!Number.isInteger(n)) return "f32"
  return t === "bool" ? "i64" : t
}

/** The dtype of operands that are tensors or numbers (at least one tensor). */
export const resultType = (operands: ReadonlyArray<TensorMeta | number>): DType => {
  let dtype: DType | undefined
  for (const o of operands) if (typeof o !== "number") dtype = dtype === undefined ? o.dtype : promoteTypes(dtype, o.dtype)
  if (dtype === undefined) throw new Error("resultType needs a tensor")
  for (const o of operands) if (typeof o === "number") dtype = promoteWithNumber(dtype, o)
  return dtype
}

/** Whether a value of dtype `from` can be written into `to` in place (torch's can_cast). */
export const canCast = (from: DType, to: DType): boolean => CATEGORY[from] <= CATEGORY[to]

/** numpy broadcasting of two shapes, right-aligned. */
export const broadcastShapes = (op: string, shapes: ReadonlyArray<ReadonlyArray<number>>): number[] => {
  const ndim = Math.max(0, ...shapes.map((s) => s.length))
  const out = new Array<number>(ndim).fill(1)
  for (const s of shapes)
    for (let i = 0; i < s.length; i++) {
      const j = ndim - s.length + i, d = s[i]!
      if (d === out[j]) continue
      if (out[j] === 1) out[j] = d
      else if (d !== 1) bad(op, `shapes do not broadcast: ${shapes.map((x) => `[${x.join(", ")}]`).join(" and ")} (dim ${j - ndim})`)
    }
  return out
}

