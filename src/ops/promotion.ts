/**
 * torch's type promotion and numpy broadcasting, the rules every elementwise and comparison
 * op shares. Categories order bool < integer < floating; within one, the wider type wins
 * (f16 with bf16 gives f32). Operands rank in three tiers, as torch.result_type's: tensors
 * with dims, then 0-d tensors, then numbers. Each tier promotes within itself; a lower tier
 * counts only where it is of a higher category than every tier above it (then the two
 * promote: i32[3] with a 0-d f64 gives f64, u8[3] with a 0-d i64 stays u8). A number is a
 * boolean (bool), an integer (i64) or a float (f32, torch's default): a float is a FloatNumber
 * (msgpack's float64, `float(2)`) or a number with a fraction (or not finite).
 */
import { FloatNumber, type DType } from "../protocol/values.ts"
import { bad, type TensorMeta } from "./meta.ts"

const CATEGORY: Readonly<Record<DType, number>> = { bool: 0, u8: 1, i32: 1, i64: 1, f16: 2, bf16: 2, f32: 2, f64: 2 }
const RANK: Readonly<Record<DType, number>> = { bool: 0, u8: 1, i32: 2, i64: 3, f16: 1, bf16: 1, f32: 2, f64: 3 }

export const isFloating = (d: DType): boolean => CATEGORY[d] === 2
export const isIntegral = (d: DType): boolean => CATEGORY[d] === 1

/** A number operand: a plain number, a boolean, or a FloatNumber (a float whose value may be integral). */
export type Scalar = number | boolean | FloatNumber

export const isScalar = (v: unknown): v is Scalar => typeof v === "number" || typeof v === "boolean" || v instanceof FloatNumber

/** A number operand's value (a boolean's is 0 or 1). */
export const scalarValue = (s: Scalar): number => (typeof s === "number" ? s : typeof s === "boolean" ? Number(s) : s.value)

/** Whether a number operand is a float: a FloatNumber, or a number that is not an integer. */
const isFloatScalar = (s: Scalar): boolean => (typeof s === "number" ? !Number.isInteger(s) : typeof s !== "boolean")

/** The dtype two tensors' dtypes compute in (torch.promote_types). */
export const promoteTypes = (a: DType, b: DType): DType => {
  if (a === b) return a
  if (CATEGORY[a] !== CATEGORY[b]) return CATEGORY[a] > CATEGORY[b] ? a : b
  if ((a === "f16" && b === "bf16") || (a === "bf16" && b === "f16")) return "f32"
  return RANK[a] >= RANK[b] ? a : b
}

/** The dtype a number takes among numbers: bool for a boolean, i64 for an integer, f32 for a float. */
const scalarType = (s: Scalar): DType => (typeof s === "boolean" ? "bool" : isFloatScalar(s) ? "f32" : "i64")

/** A higher tier's dtype with a lower tier's beside it (undefined: the tier is empty); torch's combine_categories. */
const combine = (higher: DType | undefined, lower: DType | undefined): DType | undefined => {
  if (higher === undefined) return lower
  if (lower === undefined || isFloating(higher)) return higher
  return higher === "bool" || isFloating(lower) ? promoteTypes(higher, lower) : higher
}

/** The dtype of operands that are tensors or numbers (torch.result_type; at least one operand). */
export const resultType = (operands: ReadonlyArray<TensorMeta | Scalar>): DType => {
  let dims: DType | undefined, zeroDim: DType | undefined, numbers: DType | undefined
  for (const o of operands) {
    if (isScalar(o)) {
      const d = scalarType(o)
      numbers = numbers === undefined ? d : promoteTypes(numbers, d)
    } else if (o.shape.length === 0) zeroDim = zeroDim === undefined ? o.dtype : promoteTypes(zeroDim, o.dtype)
    else dims = dims === undefined ? o.dtype : promoteTypes(dims, o.dtype)
  }
  const dtype = combine(dims, combine(zeroDim, numbers))
  if (dtype === undefined) throw new Error("resultType needs an operand")
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

