// shim_cast on the cpu backend: every (from, to) pair over values chosen to hit the rules
// (truncation, saturation, NaN, wrap-around, bool), and f16/bf16 conversions bit for bit
// against Bun's Float16Array and an independent bf16 rounding, including double-rounding traps.
import { afterEach, describe, expect, test } from "bun:test"
import * as ops from "../../ffi/ops.ts"
import { Tensor } from "../../ffi/tensor.ts"
import { HostTensor } from "../../src/protocol/values.ts"
import {
  DTYPES, bf16Bits, bf16Value, bigValuesOf, bitsOf, empty, expectShimError, f16Bits, f16Value, f32Bits, freeAll, generator,
  isFloat, native, roundBf16, roundTo, tensor, toIntSaturated, valuesOf, wrapInt, type DType,
} from "./helpers.ts"

afterEach(freeAll)

const SOURCES: Readonly<Record<DType, ReadonlyArray<number>>> = {
  f32: [0, -0, 1, -1, 2.5, -2.5, 0.1, 1 / 3, 255.5, 256, -129, 65504, 70000, 2 ** 31, -(2 ** 31) - 1e3, 1e10, -1e10, 1e-7, NaN, Infinity, -Infinity],
  f64: [0, -0, 1, -1, 2.5, -2.7, 0.1, 1 / 3, 255.9, 256, -129, 65519.99, 65520, 2 ** 63, -(2 ** 64), 1e300, 1e-7, 1 + 2 ** -11 + 2 ** -40, NaN, Infinity, -Infinity],
  f16: [0, -0, 1, -1, 2.5, -2.5, 0.1, 255.5, 256, -129, 65504, 2 ** -24, NaN, Infinity, -Infinity],
  bf16: [0, -0, 1, -1, 2.5, -2.5, 0.1, 255.5, 256, -129, 3e38, 2 ** 40, -(2 ** 33), NaN, Infinity, -Infinity],
  i32: [0, 1, -1, 127, 128, 255, 256, -129, 2 ** 31 - 1, -(2 ** 31), 65504, 65520, 16777217],
  i64: [0, 1, -1, 255, 256, -129, 2 ** 31, -(2 ** 31) - 1, 2 ** 40 + 1, -(2 ** 53), 16777217, 65519, 2 ** 24 + 2 ** 16 + 1],
  u8: [0, 1, 127, 128, 255],
  bool: [0, 1],
}

/** x of dtype `from` converted to `to` by the shim's rules, computed independently. */
const castRef = (from: DType, to: DType, x: number): number | bigint => {
  if (to === "bool") return x !== 0 ? 1 : 0 // NaN !== 0
  if (isFloat(to)) {
    if (to === "f16") return f16Value(f16Bits(x))
    if (to === "bf16") return roundBf16(x)
    return to === "f32" ? Math.fround(x) : x
  }
  const int = to as "i32" | "i64" | "u8"
  const v = isFloat(from) ? toIntSaturated(int, x) : wrapInt(int, BigInt(x))
  return int === "i64" ? v : Number(v)
}

describe("cast table", () => {
  for (const from of DTYPES)
    for (const to of DTYPES)
      test(`${from} -> ${to}`, () => {
        const xs = SOURCES[from].map((v) => roundTo(from, v))
        const a = tensor(from, [xs.length], xs)
        const out = empty(to, [xs.length])
        ops.cast(out, a)
        const expected = xs.map((x) => castRef(from, to, x))
        expect<ReadonlyArray<number | bigint>>(to === "i64" ? bigValuesOf(out) : valuesOf(out)).toEqual(expected)
      })

  test("casting to the same dtype copies, also in place", () => {
    const a = tensor("i64", [2], [2n ** 62n + 1n, -5n])
    const out = empty("i64", [2])
    ops.cast(out, a)
    expect(bigValuesOf(out)).toEqual([2n ** 62n + 1n, -5n])
    ops.cast(a, a)
    expect(bigValuesOf(a)).toEqual([2n ** 62n + 1n, -5n])
  })

  test("0-element and 0-d casts", () => {
    ops.cast(empty("f16", [0, 2]), tensor("i64", [0, 2], []))
    const out = empty("u8", [])
    ops.cast(out, tensor("f64", [], [-3.5]))
    expect(valuesOf(out)).toEqual([0])
  })

  test("a wrong element count is rejected by the shim", () => {
    const a = tensor("f32", [3], [1, 2, 3])
    expectShimError(
      () => native.check(native.shim.shim_cast(empty("f16", [2, 2]).handle, a.handle, null), "shim_cast"),
      "Invalid",
      /shim_cast: out f16\[2, 2\] does not hold a's 3 elements \(a is f32\[3\]\)/,
    )
    expectShimError(() => ops.cast(empty("f16", [2]), a), "Invalid", /^cast: output .* does not match input/)
  })
})

/** A tensor holding raw 16-bit patterns. */
const fromBits16 = (dtype: "f16" | "bf16", bits: Uint16Array): Tensor => {
  const t = Tensor.fromHost(native, new HostTensor(dtype, [bits.length], new Uint8Array(bits.buffer)))
  return t
}

const isNaNBits16 = (dtype: "f16" | "bf16", b: number): boolean =>
  dtype === "f16" ? (b & 0x7c00) === 0x7c00 && (b & 0x3ff) !== 0 : (b & 0x7f80) === 0x7f80 && (b & 0x7f) !== 0

describe("f16 and bf16 conversions", () => {
  for (const dtype of ["f16", "bf16"] as const)
    test(`${dtype}: all 65536 patterns widen exactly to f32 and narrow back to themselves`, () => {
      const patterns = Uint16Array.from({ length: 65536 }, (_, i) => i)
      const half = fromBits16(dtype, patterns)
      const wide = Tensor.empty(native, "f32", [65536])
      const back = Tensor.empty(native, dtype, [65536])
      try {
        ops.cast(wide, half)
        const decoded = [...patterns].map(dtype === "f16" ? f16Value : bf16Value)
        expect(valuesOf(wide)).toEqual(decoded)
        ops.cast(back, wide)
        const bits = bitsOf(back) as number[]
        const bad = [...patterns].filter((p, i) => (isNaNBits16(dtype, p) ? !isNaNBits16(dtype, bits[i]!) : bits[i] !== p))
        expect(bad).toEqual([])
      } finally {
        half.free(), wide.free(), back.free()
      }
    })

  test("f32 -> f16 and f32 -> bf16 round to nearest even, over random and boundary bit patterns", () => {
    const next = generator(99)
    const patterns = new Uint32Array(200_000)
    for (let i = 0; i < patterns.length; i++) patterns[i] = Math.floor(next() * 2 ** 32)
    // ties and edges: f16 overflow threshold, subnormal edge, bf16 ties at both parities
    const edges = [65504, 65519.99, 65520, 2 ** -24, 2 ** -25, 1.5 * 2 ** -25, 1 + 2 ** -11, 1 + 3 * 2 ** -11, 1 + 2 ** -8, 1 + 3 * 2 ** -8, 3.4028234663852886e38]
    edges.forEach((e, i) => {
      patterns[2 * i] = f32Bits(e)
      patterns[2 * i + 1] = f32Bits(-e)
    })
    const values = [...new Float32Array(patterns.buffer)]
    const wide = Tensor.fromHost(native, new HostTensor("f32", [values.length], new Uint8Array(patterns.buffer)))
    const f16 = Tensor.empty(native, "f16", [values.length]), bf16 = Tensor.empty(native, "bf16", [values.length])
    try {
      ops.cast(f16, wide)
      ops.cast(bf16, wide)
      const got16 = bitsOf(f16) as number[], gotB = bitsOf(bf16) as number[]
      const bad: string[] = []
      values.forEach((v, i) => {
        const want16 = f16Bits(v), wantB = bf16Bits(v)
        if (Number.isNaN(v) ? !isNaNBits16("f16", got16[i]!) : got16[i] !== want16) bad.push(`f16(${v}) = ${got16[i]}, want ${want16}`)
        if (Number.isNaN(v) ? !isNaNBits16("bf16", gotB[i]!) : gotB[i] !== wantB) bad.push(`bf16(${v}) = ${gotB[i]}, want ${wantB}`)
      })
      expect(bad.slice(0, 10)).toEqual([])
    } finally {
      wide.free(), f16.free(), bf16.free()
    }
  })

  test("f64 and i64 -> f16/bf16 round once, straight from the source", () => {
    // Each trap rounds differently through an intermediate float: the float lands on a tie.
    const traps = [1 + 2 ** -11 + 2 ** -40, 1 + 2 ** -8 + 2 ** -40, -(1 + 2 ** -11 + 2 ** -45), 2049 + 2 ** -30]
    const next = generator(5)
    const randoms = Array.from({ length: 20_000 }, () => (next() - 0.5) * 2 ** Math.floor(next() * 80 - 40))
    const xs = [...traps, ...randoms]
    const a = tensor("f64", [xs.length], xs)
    const f16 = empty("f16", [xs.length]), bf16 = empty("bf16", [xs.length])
    ops.cast(f16, a)
    ops.cast(bf16, a)
    expect(bitsOf(f16)).toEqual(xs.map(f16Bits))
    expect(bitsOf(bf16)).toEqual(xs.map(bf16Bits))
    expect(valuesOf(f16)[0]).toBe(1 + 2 ** -10) // through a float: 1
    expect(valuesOf(bf16)[1]).toBe(1 + 2 ** -7) // through a float: 1

    const big = tensor("i64", [2], [2n ** 24n + 2n ** 16n + 1n, -(2n ** 24n + 2n ** 16n + 1n)])
    const out = empty("bf16", [2])
    ops.cast(out, big)
    expect(valuesOf(out)).toEqual([2 ** 24 + 2 ** 17, -(2 ** 24 + 2 ** 17)]) // through float: 2^24
  })
})
