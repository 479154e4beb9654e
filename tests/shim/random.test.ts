// shim_rand on the cpu backend: the Philox-4x32-10 core against the published Random123
// known answers (through a BigInt Philox written here), exact uniform bits, normals against
// Box-Muller computed here, determinism under seed and offset, and sample statistics.
import { afterEach, describe, expect, test } from "bun:test"
import * as ops from "../../ffi/ops.ts"
import {
  FLOATS, empty, expectClose, expectShimError, freeAll, normalRef, philox4x32, uniformRef, valuesOf,
} from "./helpers.ts"

afterEach(freeAll)

const hex = (words: ReadonlyArray<bigint>): string[] => words.map((w) => w.toString(16).padStart(8, "0"))

describe("Philox-4x32-10", () => {
  test("the BigInt reference reproduces the Random123 known answers", () => {
    expect(hex(philox4x32([0n, 0n, 0n, 0n], [0n, 0n]))).toEqual(["6627e8d5", "e169c58d", "bc57ac4c", "9b00dbd8"])
    const ones = 0xffffffffn
    expect(hex(philox4x32([ones, ones, ones, ones], [ones, ones]))).toEqual(["408f276d", "41c83b0e", "a20bc7c6", "6d5451fd"])
    expect(hex(philox4x32([0x243f6a88n, 0x85a308d3n, 0x13198a2en, 0x03707344n], [0xa4093822n, 0x299f31d0n]))).toEqual([
      "d16cfe09", "94fdcceb", "5001e420", "24126ea1",
    ])
  })

  test("the shim's first uniform of seed 0 carries the known answer's first 53 bits", () => {
    const out = empty("f64", [1])
    ops.rand(out, 0, 0, false)
    expect(BigInt(valuesOf(out)[0]! * 2 ** 53)).toBe((0x6627e8d5n << 21n) | (0xe169c58dn >> 11n))
  })

  test("f64 uniforms equal the reference bit for bit, across counter-word and 64-bit edges", () => {
    const seeds = [0n, 1n, 0xdeadbeefcafef00dn, 2n ** 64n - 1n]
    const offsets = [0n, 12_345n, 2n ** 32n - 3n, 2n ** 64n - 4n]
    for (const seed of seeds)
      for (const offset of offsets) {
        const out = empty("f64", [9])
        ops.rand(out, seed, offset, false)
        const expected = Array.from({ length: 9 }, (_, i) => uniformRef(seed, BigInt.asUintN(64, offset + BigInt(i))))
        expect(valuesOf(out)).toEqual(expected)
      }
  })
})

describe("rand", () => {
  test("normals equal Box-Muller on the same block (f64 and f32)", () => {
    const n = 101
    const expected = Array.from({ length: n }, (_, i) => normalRef(42n, 1000n + BigInt(i)))
    const f64 = empty("f64", [n]), f32 = empty("f32", [n])
    ops.rand(f64, 42, 1000, true)
    ops.rand(f32, 42, 1000, true)
    expectClose("f64", valuesOf(f64), expected, "f64 normal")
    expectClose("f32", valuesOf(f32), expected.map(Math.fround), "f32 normal")
  })

  for (const dtype of FLOATS)
    test(`${dtype}: same seed and offset give the same values; the offset shifts the sequence`, () => {
      const a = empty(dtype, [100]), b = empty(dtype, [100]), shifted = empty(dtype, [95]), other = empty(dtype, [100])
      for (const normal of [false, true]) {
        ops.rand(a, 7, 0, normal)
        ops.rand(b, 7, 0, normal)
        ops.rand(shifted, 7, 5, normal)
        ops.rand(other, 8, 0, normal)
        expect(valuesOf(b)).toEqual(valuesOf(a))
        expect(valuesOf(shifted)).toEqual(valuesOf(a).slice(5))
        expect(valuesOf(other)).not.toEqual(valuesOf(a))
      }
    })

  test("a big f32 normal sample has mean 0 and standard deviation 1; uniforms fill [0, 1)", () => {
    const n = 200_000
    const normal = empty("f32", [n]), uniform = empty("f32", [n])
    ops.rand(normal, 123, 0, true)
    ops.rand(uniform, 123, 0, false)
    const xs = valuesOf(normal)
    const mean = xs.reduce((s, x) => s + x, 0) / n
    const std = Math.sqrt(xs.reduce((s, x) => s + (x - mean) ** 2, 0) / n)
    expect(Math.abs(mean)).toBeLessThan(0.01) // standard error 0.0022
    expect(Math.abs(std - 1)).toBeLessThan(0.01)
    const us = valuesOf(uniform)
    const umean = us.reduce((s, x) => s + x, 0) / n
    expect(Math.abs(umean - 0.5)).toBeLessThan(0.005) // standard error 0.00065
    expect(Math.min(...us)).toBeGreaterThanOrEqual(0)
    expect(Math.max(...us)).toBeLessThan(1)
  })

  test("f16 and bf16 uniforms stay below 1 (draws that would round up to 1 take the largest value below it)", () => {
    const n = 100_000
    for (const [dtype, top] of [["f16", 1 - 2 ** -11], ["bf16", 1 - 2 ** -8]] as const) {
      const out = empty(dtype, [n])
      ops.rand(out, 9, 0, false)
      expect(Math.max(...valuesOf(out))).toBe(top)
    }
  })

  test("0-d and 0-element outputs", () => {
    const scalar = empty("f64", [])
    ops.rand(scalar, 3, 4, false)
    expect(valuesOf(scalar)).toEqual([uniformRef(3n, 4n)])
    ops.rand(empty("f32", [0, 5]), 3, 4, true)
  })

  test("integer and bool outputs are unsupported", () => {
    for (const dtype of ["i32", "i64", "u8", "bool"] as const)
      expectShimError(() => ops.rand(empty(dtype, [2]), 1, 0, false), "Unsupported", new RegExp(`shim_rand: out must have a floating dtype, not ${dtype}`))
  })
})
