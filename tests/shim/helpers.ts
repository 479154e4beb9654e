/**
 * What the shim op tests share: the cpu backend, dtype encoders and decoders written apart
 * from the C code (f16 through Bun's Float16Array, bf16 and the integer rules by plain
 * arithmetic), reference conversions, Philox-4x32-10 in BigInt, the tolerance table, and
 * matchers for values and for ShimError.
 */
import { expect } from "bun:test"
import { loadNative, ShimError, type ShimReason } from "../../ffi/native.ts"
import { Tensor } from "../../ffi/tensor.ts"
import { DTYPES, HostTensor, type DType } from "../../src/protocol/values.ts"

// MONARCH_DEVICE=cuda runs the same tests on the cuda backend (scripts/gpu/check.sh).
export const native = loadNative(process.env.MONARCH_DEVICE ?? "cpu")

export { DTYPES, type DType }
export const FLOATS = ["f32", "f64", "f16", "bf16"] as const satisfies ReadonlyArray<DType>
export const INTEGERS = ["i32", "i64", "u8"] as const satisfies ReadonlyArray<DType>
export const isFloat = (d: DType): boolean => (FLOATS as ReadonlyArray<DType>).includes(d)

/**
 * How close a floating result must be to the value computed here in double:
 * |actual - expected| <= abs + rel * |expected|. f16 and bf16 are computed in float and
 * rounded once (2^-11 and 2^-8 relative), f32 once from float libm. Integers and bool: exact.
 */
const TOLERANCE: Readonly<Record<DType, { readonly rel: number; readonly abs: number }>> = {
  f32: { rel: 1e-6, abs: 1e-7 },
  f64: { rel: 1e-12, abs: 1e-15 },
  f16: { rel: 1e-3, abs: 1e-4 },
  bf16: { rel: 1e-2, abs: 1e-3 },
  i32: { rel: 0, abs: 0 },
  i64: { rel: 0, abs: 0 },
  u8: { rel: 0, abs: 0 },
  bool: { rel: 0, abs: 0 },
}

// ---- conversions, independent of c/common/numeric.h -------------------------------------

const f16Scratch = new Float16Array(1)
const f16ScratchBits = new Uint16Array(f16Scratch.buffer)
const f32Scratch = new Float32Array(1)
const f32ScratchBits = new Uint32Array(f32Scratch.buffer)

/** The f16 nearest x (ties to even), as bits: the engine's own conversion. */
export const f16Bits = (x: number): number => {
  f16Scratch[0] = x
  return f16ScratchBits[0]!
}
export const f16Value = (bits: number): number => {
  f16ScratchBits[0] = bits
  return f16Scratch[0]!
}

export const f32Bits = (x: number): number => {
  f32Scratch[0] = x
  return f32ScratchBits[0]!
}
const f32Value = (bits: number): number => {
  f32ScratchBits[0] = bits >>> 0
  return f32Scratch[0]!
}

/**
 * x rounded to `digits` significant bits, ties to even, with spacing no finer than minUlp
 * (subnormals) and infinity from `overflow` up. Scaling by powers of two is exact in double,
 * so this rounds once, straight from x.
 */
const roundSignificand = (x: number, digits: number, minUlp: number, overflow: number): number => {
  if (!Number.isFinite(x) || x === 0) return x
  const ax = Math.abs(x)
  let e = Math.floor(Math.log2(ax))
  while (2 ** e > ax) e--
  while (2 ** (e + 1) <= ax) e++
  const ulp = Math.max(2 ** (e - digits + 1), minUlp)
  const q = ax / ulp
  let r = Math.floor(q)
  const frac = q - r
  if (frac > 0.5 || (frac === 0.5 && r % 2 === 1)) r += 1
  const v = r * ulp
  return (x < 0 ? -1 : 1) * (v >= overflow ? Infinity : v)
}

/** The bf16 nearest x: 8 significant bits, float's exponent range. */
export const roundBf16 = (x: number): number => (Number.isNaN(x) ? NaN : roundSignificand(x, 8, 2 ** -133, 2 ** 128))
export const bf16Bits = (x: number): number => (Number.isNaN(x) ? 0x7fc0 : f32Bits(roundBf16(x)) >>> 16)
export const bf16Value = (bits: number): number => f32Value(bits << 16)

const INT_RANGE: Readonly<Record<"i32" | "i64" | "u8", readonly [number, number]>> = {
  i32: [-(2 ** 31), 2 ** 31 - 1],
  i64: [-(2 ** 63), 2 ** 63],
  u8: [0, 255],
}

/** Float to integer as the shim defines it: truncate toward zero, saturate, NaN -> 0. */
export const toIntSaturated = (dtype: "i32" | "i64" | "u8", x: number): bigint => {
  if (Number.isNaN(x)) return 0n
  const [lo, hi] = INT_RANGE[dtype]
  if (dtype === "i64" && x >= hi) return 2n ** 63n - 1n
  if (x >= hi) return BigInt(hi)
  if (x <= lo) return BigInt(lo)
  return BigInt(Math.trunc(x))
}

/** Integer to integer as the shim defines it: two's complement wrap-around. */
export const wrapInt = (dtype: "i32" | "i64" | "u8", v: bigint): bigint =>
  dtype === "i32" ? BigInt.asIntN(32, v) : dtype === "i64" ? BigInt.asIntN(64, v) : BigInt.asUintN(8, v)

/** The value x becomes when stored in dtype (the shim's double -> dtype rule). */
export const roundTo = (dtype: DType, x: number): number => {
  switch (dtype) {
    case "f32": return Math.fround(x)
    case "f64": return x
    case "f16": return f16Value(f16Bits(x))
    case "bf16": return roundBf16(x)
    case "bool": return x !== 0 ? 1 : 0
    default: return Number(toIntSaturated(dtype, x))
  }
}

// ---- host bytes -----------------------------------------------------------------------------

/** Little-endian bytes of values in dtype; values must already be representable. */
export const encode = (dtype: DType, values: ReadonlyArray<number | bigint>): Uint8Array => {
  const nums = () => values.map(Number)
  let array: ArrayBufferView
  switch (dtype) {
    case "f32": array = Float32Array.from(nums()); break
    case "f64": array = Float64Array.from(nums()); break
    case "f16": array = Uint16Array.from(nums().map(f16Bits)); break
    case "bf16": array = Uint16Array.from(nums().map(bf16Bits)); break
    case "i32": array = Int32Array.from(nums()); break
    case "i64": array = BigInt64Array.from(values.map((v) => BigInt(v))); break
    case "u8": case "bool": array = Uint8Array.from(nums()); break
  }
  return new Uint8Array(array.buffer, array.byteOffset, array.byteLength)
}

/** Values of host bytes as numbers (i64 through Number: exact up to 2^53). */
const decode = (dtype: DType, bytes: Uint8Array): number[] => {
  const copy = bytes.slice().buffer
  switch (dtype) {
    case "f32": return [...new Float32Array(copy)]
    case "f64": return [...new Float64Array(copy)]
    case "f16": return [...new Uint16Array(copy)].map(f16Value)
    case "bf16": return [...new Uint16Array(copy)].map(bf16Value)
    case "i32": return [...new Int32Array(copy)]
    case "i64": return [...new BigInt64Array(copy)].map(Number)
    case "u8": case "bool": return [...new Uint8Array(copy)]
  }
}

/** Raw element bits (u16 for f16/bf16, u32 for f32, ...), for exact comparisons. */
export const bitsOf = (t: Tensor): number[] | bigint[] => {
  const copy = t.toHost().data.slice().buffer
  switch (t.dtype) {
    case "f32": case "i32": return [...new Uint32Array(copy)]
    case "f64": case "i64": return [...new BigUint64Array(copy)]
    case "f16": case "bf16": return [...new Uint16Array(copy)]
    case "u8": case "bool": return [...new Uint8Array(copy)]
  }
}

// ---- tensors, freed after each test -------------------------------------------------------

const live: Tensor[] = []
const track = (t: Tensor): Tensor => {
  live.push(t)
  return t
}

/** Frees every tensor made through these helpers (call from afterEach). */
export const freeAll = (): void => {
  for (const t of live.splice(0)) t.free()
}

export const tensor = (dtype: DType, shape: ReadonlyArray<number>, values: ReadonlyArray<number | bigint>): Tensor =>
  track(Tensor.fromHost(native, new HostTensor(dtype, shape, encode(dtype, values))))

export const empty = (dtype: DType, shape: ReadonlyArray<number>): Tensor => track(Tensor.empty(native, dtype, shape))

export const viewOf = (t: Tensor, shape: ReadonlyArray<number>): Tensor => track(t.view(shape))

export const valuesOf = (t: Tensor): number[] => decode(t.dtype, t.toHost().data)

export const bigValuesOf = (t: Tensor): bigint[] => [...new BigInt64Array(t.toHost().data.slice().buffer)]

// ---- test data ------------------------------------------------------------------------------

/** A small seeded generator (mulberry32), so failures reproduce. */
export const generator = (seed: number): (() => number) => {
  let s = seed >>> 0
  return () => {
    s = (s + 0x6d2b79f5) >>> 0
    let t = s
    t = Math.imul(t ^ (t >>> 15), t | 1)
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61)
    return ((t ^ (t >>> 14)) >>> 0) / 2 ** 32
  }
}

/** n values representable in dtype: floats uniform in [lo, hi), integers in [lo, hi]. */
export const sample = (dtype: DType, n: number, lo: number, hi: number, seed: number): number[] => {
  const next = generator(seed)
  return Array.from({ length: n }, () =>
    isFloat(dtype) ? roundTo(dtype, lo + (hi - lo) * next()) : dtype === "bool" ? (next() < 0.5 ? 1 : 0) : Math.floor(lo + (hi - lo + 1) * next()),
  )
}

export const product = (shape: ReadonlyArray<number>): number => shape.reduce((a, b) => a * b, 1)

// ---- matchers -------------------------------------------------------------------------------

/**
 * Element-by-element comparison under dtype's tolerance (NaN matches NaN, infinities must be
 * equal). `scale`, when given, replaces |expected| in the relative term (for sums whose
 * terms cancel). Lists every mismatch on failure.
 */
export const expectClose = (
  dtype: DType,
  actual: ReadonlyArray<number>,
  expected: ReadonlyArray<number>,
  what = "",
  scale?: ReadonlyArray<number>,
): void => {
  expect(actual.length).toBe(expected.length)
  const { rel, abs } = TOLERANCE[dtype]
  const bad: string[] = []
  for (let i = 0; i < expected.length; i++) {
    const a = actual[i]!, e = expected[i]!
    const ok = Number.isNaN(e)
      ? Number.isNaN(a)
      : !Number.isFinite(e)
        ? a === e
        : Math.abs(a - e) <= abs + rel * (scale ? scale[i]! : Math.abs(e))
    if (!ok) bad.push(`${what}[${i}]: got ${a}, expected ${e}`)
  }
  expect(bad).toEqual([])
}

/** Runs fn, expecting a ShimError with this reason and a message matching `message`. */
export const expectShimError = (fn: () => unknown, reason: ShimReason, message: RegExp): ShimError => {
  let caught: unknown
  try {
    fn()
  } catch (e) {
    caught = e
  }
  expect(caught).toBeInstanceOf(ShimError)
  const error = caught as ShimError
  expect(error.reason).toBe(reason)
  expect(error.message).toMatch(message)
  return error
}

// ---- Philox-4x32-10 (Salmon et al. 2011), written from the paper's definition --------------

const MASK = 0xffffffffn

/** One Philox-4x32-10 block: counter words c, key words k -> four 32-bit outputs. */
export const philox4x32 = (c: readonly [bigint, bigint, bigint, bigint], k: readonly [bigint, bigint]): bigint[] => {
  let [c0, c1, c2, c3] = c
  let [k0, k1] = k
  for (let round = 0; round < 10; round++) {
    const p0 = 0xd2511f53n * c0, p1 = 0xcd9e8d57n * c2
    ;[c0, c1, c2, c3] = [((p1 >> 32n) ^ c1 ^ k0) & MASK, p1 & MASK, ((p0 >> 32n) ^ c3 ^ k1) & MASK, p0 & MASK]
    k0 = (k0 + 0x9e3779b9n) & MASK
    k1 = (k1 + 0xbb67ae85n) & MASK
  }
  return [c0, c1, c2, c3]
}

/** The block the shim draws element `index` of stream `seed` from (counter = index, key = seed). */
const shimBlock = (seed: bigint, index: bigint): bigint[] =>
  philox4x32([index & MASK, (index >> 32n) & MASK, 0n, 0n], [seed & MASK, (seed >> 32n) & MASK])

/** The 53-bit integer behind a uniform draw: the top 53 bits of r0:r1. */
const uniformBits = (r: ReadonlyArray<bigint>): bigint => ((r[0]! << 32n) | r[1]!) >> 11n

export const uniformRef = (seed: bigint, index: bigint): number => Number(uniformBits(shimBlock(seed, index))) * 2 ** -53

export const normalRef = (seed: bigint, index: bigint): number => {
  const r = shimBlock(seed, index)
  const u1 = (Number(uniformBits(r)) + 1) * 2 ** -53
  const u2 = Number(((r[2]! << 32n) | r[3]!) >> 11n) * 2 ** -53
  return Math.sqrt(-2 * Math.log(u1)) * Math.cos(2 * Math.PI * u2)
}
