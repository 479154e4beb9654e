/**
 * Inputs the communicator tests feed each rank, and the results every collective must give,
 * computed here in TypeScript from the same inputs (never by the shim). Values are chosen so
 * any reduction order gives the same bits: small integers for float sums and min/max, powers
 * of two for float products, and integer arithmetic that wraps like the hardware.
 */
import type { CommOpName } from "../../ffi/symbols.ts"
import type { DType } from "../../src/protocol/values.ts"

/** One element: a number, or a bigint for i64. */
export type Scalar = number | bigint

const FLOATS: ReadonlyArray<DType> = ["f32", "f64", "f16", "bf16"]
const isFloat = (d: DType) => FLOATS.includes(d)
const POWERS = [0.5, 1, -1, 2, -2]

/** Element i of rank r's input for a collective with op (seed varies it between cases). */
export const inputAt = (dtype: DType, op: CommOpName | "none", rank: number, i: number, seed: number): Scalar => {
  const k = rank * 7 + i * 3 + seed
  if (isFloat(dtype)) return op === "prod" ? POWERS[k % 5]! : (k % 11) - 5
  switch (dtype) {
    case "i32": return Math.imul(rank * 0x3779b9 + 1, i * 0x9e37 + seed + 1) // large: sums and products wrap
    case "i64": return BigInt.asIntN(64, BigInt(rank + 1) * 0x1234_5678_9abcn * BigInt(i + seed + 1) - (BigInt(i) << 40n))
    case "u8": return (rank * 37 + i * 11 + seed) & 255
    default: return ((i + seed) >> rank) & 1 // bool: every combination of ranks appears
  }
}

export const inputs = (dtype: DType, op: CommOpName | "none", rank: number, n: number, seed: number): Scalar[] =>
  Array.from({ length: n }, (_, i) => inputAt(dtype, op, rank, i, seed))

const combine = (dtype: DType, op: CommOpName, a: Scalar, b: Scalar): Scalar => {
  if (dtype === "i64") {
    const x = a as bigint, y = b as bigint
    if (op === "prod") return BigInt.asIntN(64, x * y)
    if (op === "min") return x < y ? x : y
    if (op === "max") return x > y ? x : y
    return BigInt.asIntN(64, x + y)
  }
  const x = a as number, y = b as number
  if (dtype === "bool") return op === "prod" || op === "min" ? x & y : x | y
  switch (op) {
    case "min": return Math.min(x, y)
    case "max": return Math.max(x, y)
    case "prod": return dtype === "i32" ? Math.imul(x, y) : dtype === "u8" ? (x * y) & 255 : x * y
    default: return dtype === "i32" ? (x + y) | 0 : dtype === "u8" ? (x + y) & 255 : x + y
  }
}

/** The reduction over the inputs of ranks, element by element (avg: sum, then divide). */
export const reduced = (dtype: DType, op: CommOpName, ranks: ReadonlyArray<number>, n: number, seed: number): Scalar[] =>
  Array.from({ length: n }, (_, i) => {
    let acc = inputAt(dtype, op, ranks[0]!, i, seed)
    for (const r of ranks.slice(1)) acc = combine(dtype, op, acc, inputAt(dtype, op, r, i, seed))
    if (op !== "avg") return acc
    if (dtype === "i64") return (acc as bigint) / BigInt(ranks.length)
    return isFloat(dtype) ? (acc as number) / ranks.length : Math.trunc((acc as number) / ranks.length)
  })

/** float -> bf16 bits, rounding to nearest even (through f32, as the shim does). */
const bf16Bits = (v: number): number => {
  const bits = new Uint32Array(new Float32Array([v]).buffer)[0]!
  return ((bits + 0x7fff + ((bits >>> 16) & 1)) >>> 16) & 0xffff
}

/** Little-endian bytes of values in dtype. */
export const encode = (dtype: DType, values: ReadonlyArray<Scalar>): Uint8Array => {
  const nums = () => values as ReadonlyArray<number>
  switch (dtype) {
    case "f32": return new Uint8Array(Float32Array.from(nums()).buffer)
    case "f64": return new Uint8Array(Float64Array.from(nums()).buffer)
    case "f16": return new Uint8Array(Float16Array.from(nums()).buffer)
    case "bf16": return new Uint8Array(Uint16Array.from(nums(), bf16Bits).buffer)
    case "i32": return new Uint8Array(Int32Array.from(nums()).buffer)
    case "i64": return new Uint8Array(BigInt64Array.from(values as ReadonlyArray<bigint>).buffer)
    default: return Uint8Array.from(nums())
  }
}
