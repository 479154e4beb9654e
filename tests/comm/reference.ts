/**
 * Inputs the communicator tests feed each rank, and the results every collective must give,
 * computed here in TypeScript from the same inputs (never by the shim). Values are chosen so
 * any reduction order gives the same bits: integers for float sums and min/max (small ones
 * where the dtype is narrow), powers of two for float products, and integer arithmetic that
 * wraps like the hardware. Wide dtypes get values that never repeat with a short period, so a
 * slice of a large result landing in the wrong place cannot match by chance.
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
  if (dtype === "f64" && op !== "prod") return (Math.imul(k, 0x9e3779b1) >> 12) // 20-bit integers: sums of a few stay exact
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

/** Element i of the reduction over the inputs of ranks (avg: sum, then divide). */
const reducedAt = (dtype: DType, op: CommOpName, ranks: ReadonlyArray<number>, i: number, seed: number): Scalar => {
  let acc = inputAt(dtype, op, ranks[0]!, i, seed)
  for (let j = 1; j < ranks.length; j++) acc = combine(dtype, op, acc, inputAt(dtype, op, ranks[j]!, i, seed))
  if (op !== "avg") return acc
  if (dtype === "i64") return (acc as bigint) / BigInt(ranks.length)
  return isFloat(dtype) ? (acc as number) / ranks.length : Math.trunc((acc as number) / ranks.length)
}

/** The reduction over the inputs of ranks, element by element. */
export const reduced = (dtype: DType, op: CommOpName, ranks: ReadonlyArray<number>, n: number, seed: number): Scalar[] =>
  Array.from({ length: n }, (_, i) => reducedAt(dtype, op, ranks, i, seed))

const f32Scratch = new Float32Array(1)
const f32Bits = new Uint32Array(f32Scratch.buffer)

/** float -> bf16 bits, rounding to nearest even (through f32, as the shim does). */
const bf16Bits = (v: number): number => {
  f32Scratch[0] = v
  const bits = f32Bits[0]!
  return ((bits + 0x7fff + ((bits >>> 16) & 1)) >>> 16) & 0xffff
}

interface Elements<T> {
  length: number
  [i: number]: T
  readonly buffer: ArrayBufferLike
}

const fill = <T>(array: Elements<T>, at: (i: number) => T): Uint8Array => {
  for (let i = 0; i < array.length; i++) array[i] = at(i)
  return new Uint8Array(array.buffer)
}

/** Little-endian bytes of n elements of dtype, element i being at(i); written straight into them, as large inputs need. */
const bytesFrom = (dtype: DType, n: number, at: (i: number) => Scalar): Uint8Array => {
  const num = at as (i: number) => number
  switch (dtype) {
    case "f32": return fill(new Float32Array(n), num)
    case "f64": return fill(new Float64Array(n), num)
    case "f16": return fill(new Float16Array(n), num)
    case "bf16": return fill(new Uint16Array(n), (i) => bf16Bits(num(i)))
    case "i32": return fill(new Int32Array(n), num)
    case "i64": return fill(new BigInt64Array(n), at as (i: number) => bigint)
    default: return fill(new Uint8Array(n), num)
  }
}

/** Little-endian bytes of values in dtype. */
export const encode = (dtype: DType, values: ReadonlyArray<Scalar>): Uint8Array => bytesFrom(dtype, values.length, (i) => values[i]!)

/** The bytes of inputs(dtype, op, rank, n, seed). */
export const inputBytes = (dtype: DType, op: CommOpName | "none", rank: number, n: number, seed: number): Uint8Array =>
  bytesFrom(dtype, n, (i) => inputAt(dtype, op, rank, i, seed))

/** The bytes of reduced(dtype, op, ranks, from + n, seed).slice(from). */
export const reducedBytes = (dtype: DType, op: CommOpName, ranks: ReadonlyArray<number>, n: number, seed: number, from = 0): Uint8Array =>
  bytesFrom(dtype, n, (i) => reducedAt(dtype, op, ranks, from + i, seed))
