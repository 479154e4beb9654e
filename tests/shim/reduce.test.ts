// shim_reduce on the cpu backend against reductions computed here: integer inputs summed
// in 64-bit BigInt (wrapping), floating inputs in double, then converted to out's dtype.
import { afterEach, describe, expect, test } from "bun:test"
import * as ops from "../../ffi/ops.ts"
import { ALL_DIMS, ReduceOp, type ReduceOpName } from "../../ffi/symbols.ts"
import type { Tensor } from "../../ffi/tensor.ts"
import {
  DTYPES, bigValuesOf, empty, expectClose, expectShimError, freeAll, isFloat, native, product, roundTo, sample, tensor,
  toIntSaturated, valuesOf, wrapInt, type DType,
} from "./helpers.ts"

afterEach(freeAll)

const OPS: ReadonlyArray<ReduceOpName> = ["sum", "mean", "max", "min", "prod"]

/** Reduces dim (undefined: everything) of a row-major shape; returns the output values. */
const referenceReduce = (
  op: ReduceOpName,
  inDtype: DType,
  outDtype: DType,
  xs: ReadonlyArray<number>,
  shape: ReadonlyArray<number>,
  dim: number | undefined,
): number[] => {
  const r = dim === undefined ? xs.length : shape[dim]!
  const inner = dim === undefined ? 1 : product(shape.slice(dim + 1))
  const outer = dim === undefined ? 1 : product(shape.slice(0, dim))
  const result: number[] = []
  for (let o = 0; o < outer; o++)
    for (let k = 0; k < inner; k++) {
      const run = Array.from({ length: r }, (_, j) => xs[(o * r + j) * inner + k]!)
      if (isFloat(inDtype)) {
        let v: number
        if (op === "sum" || op === "mean") v = run.reduce((s, x) => s + x, 0)
        else if (op === "prod") v = run.reduce((s, x) => s * x, 1)
        else v = run.some(Number.isNaN) ? NaN : op === "max" ? Math.max(...run) : Math.min(...run)
        if (op === "mean") v /= r
        result.push(roundTo(outDtype, v))
      } else {
        const big = run.map(BigInt)
        let v: bigint
        if (op === "sum" || op === "mean") v = big.reduce((s, x) => BigInt.asIntN(64, s + x), 0n)
        else if (op === "prod") v = big.reduce((s, x) => BigInt.asIntN(64, s * x), 1n)
        else v = big.reduce((s, x) => ((op === "max" ? x > s : x < s) ? x : s))
        if (op === "mean") result.push(roundTo(outDtype, Number(v) / r))
        else if (isFloat(outDtype)) result.push(roundTo(outDtype, Number(v)))
        else if (outDtype === "bool") result.push(v !== 0n ? 1 : 0)
        else result.push(Number(wrapInt(outDtype as "i32" | "i64" | "u8", v)))
      }
    }
  return result
}

const outShape = (shape: ReadonlyArray<number>, dim: number | undefined): number[] =>
  dim === undefined ? [] : shape.filter((_, i) => i !== dim)

const CASES: ReadonlyArray<readonly [ReadonlyArray<number>, number | undefined]> = [
  [[2, 3, 4], 0], [[2, 3, 4], 1], [[2, 3, 4], 2], [[2, 3, 4], undefined],
  [[5], 0], [[], undefined], [[1027], undefined], [[3, 1100], 0], [[7, 1, 3], 1],
]

describe("reductions against references", () => {
  for (const dtype of DTYPES)
    for (const op of OPS)
      test(`${dtype} ${op} over ${CASES.map(([s, d]) => `[${s}]/${d ?? "all"}`).join(" ")}`, () => {
        // small magnitudes so float products stay finite and u8 values stay in range
        const [lo, hi] = op === "prod" ? (isFloat(dtype) ? [0.9, 1.1] : [-2, 2]) : [-50, 50]
        for (const [shape, dim] of CASES) {
          const xs = sample(dtype, product(shape), dtype === "u8" ? Math.max(lo, 0) : lo, hi, 17)
          const a = tensor(dtype, shape, xs)
          const outDtype = op === "mean" && !isFloat(dtype) ? "f64" : dtype
          const out = empty(outDtype, outShape(shape, dim))
          ops.reduce(op, out, a, dim)
          const expected = referenceReduce(op, dtype, outDtype, xs, shape, dim)
          expectClose(outDtype, valuesOf(out), expected, `${op}([${shape}], ${dim})`)
        }
      })
})

describe("output dtypes and integer accumulation", () => {
  test("sum of bool, u8 and i32 into i64 accumulates in 64 bits", () => {
    const flags = tensor("bool", [300], sample("bool", 300, 0, 1, 3))
    const count = empty("i64", [])
    ops.reduce("sum", count, flags, undefined)
    expect(valuesOf(count)).toEqual([valuesOf(flags).filter((x) => x === 1).length])
    const bytes = tensor("u8", [1000], Array(1000).fill(255))
    ops.reduce("sum", count, bytes, undefined)
    expect(valuesOf(count)).toEqual([255_000])
    const ints = tensor("i32", [3, 2], [2 ** 31 - 1, 1, 2 ** 31 - 1, 2, 2 ** 31 - 1, 3])
    const sums = empty("i64", [2])
    ops.reduce("sum", sums, ints, 0)
    expect(bigValuesOf(sums)).toEqual([3n * (2n ** 31n - 1n), 6n])
  })

  test("i64 prod wraps; sum into a narrower dtype wraps; into bool is nonzero", () => {
    const a = tensor("i64", [3], [2n ** 40n, 2n ** 30n, 3n])
    const out = empty("i64", [])
    ops.reduce("prod", out, a, undefined)
    expect(bigValuesOf(out)).toEqual([BigInt.asIntN(64, 3n * 2n ** 70n)])
    const u = tensor("u8", [3], [200, 100, 1])
    const narrow = empty("u8", [])
    ops.reduce("sum", narrow, u, undefined)
    expect(valuesOf(narrow)).toEqual([301 - 256])
    const flag = empty("bool", [])
    ops.reduce("sum", flag, u, undefined)
    expect(valuesOf(flag)).toEqual([1])
  })

  test("f16 sums accumulate wider than f16 (1 + 2048 small terms)", () => {
    const xs = [2048, ...Array(2048).fill(1)]
    const a = tensor("f16", [xs.length], xs)
    const out = empty("f32", [])
    ops.reduce("sum", out, a, undefined)
    expect(valuesOf(out)).toEqual([4096]) // an f16 accumulator would stick at 2048
  })

  test("mean of integers into an integer dtype truncates", () => {
    const a = tensor("i32", [2, 2], [1, 2, -3, -4])
    const out = empty("i32", [2])
    ops.reduce("mean", out, a, 1)
    expect(valuesOf(out)).toEqual([1, -3])
  })

  test("over a leading dim (columns read row by row, in blocks of 256), at 1 and 2 threads: NaN kept per column, sums as the reference", () => {
    const [rows, cols] = [5, 600]
    const xs = sample("f32", rows * cols, -50, 50, 23)
    for (const [row, col] of [[0, 5], [3, 300], [4, 599]] as const) xs[row * cols + col] = NaN
    const a = tensor("f32", [rows, cols], xs)
    try {
      for (const threads of [1, 2]) {
        native.setThreads(threads)
        for (const op of ["max", "min", "sum", "mean"] as const) {
          const out = empty("f32", [cols])
          ops.reduce(op, out, a, 0)
          const got = valuesOf(out)
          expect([5, 300, 599].map((c) => got[c]), `${op} over dim 0 at ${threads} threads lost a column's NaN`).toEqual([NaN, NaN, NaN])
          expectClose("f32", got, referenceReduce(op, "f32", "f32", xs, [rows, cols], 0), `${op}([${rows}, ${cols}], 0) at ${threads} threads`)
        }
      }
    } finally {
      native.setThreads(1)
    }
  })

  test("max and min propagate NaN", () => {
    const a = tensor("f32", [2, 3], [1, NaN, 3, 4, 5, 6])
    const out = empty("f32", [2])
    ops.reduce("max", out, a, 1)
    expect(valuesOf(out)).toEqual([NaN, 6])
    ops.reduce("min", out, a, 1)
    expect(valuesOf(out)).toEqual([NaN, 4])
  })
})

describe("empty reductions", () => {
  test("sum is 0, prod is 1, mean is NaN over an empty dim", () => {
    const a = tensor("f32", [3, 0, 2], [])
    const out = empty("f32", [3, 2])
    ops.reduce("sum", out, a, 1)
    expect(valuesOf(out)).toEqual(Array(6).fill(0))
    ops.reduce("prod", out, a, 1)
    expect(valuesOf(out)).toEqual(Array(6).fill(1))
    ops.reduce("mean", out, a, 1)
    expect(valuesOf(out).every(Number.isNaN)).toBe(true)
    const ints = tensor("i64", [0], [])
    const total = empty("i64", [])
    ops.reduce("sum", total, ints, undefined)
    expect(valuesOf(total)).toEqual([0])
  })

  test("max and min over an empty dim fail; over a full dim of an empty tensor they do nothing", () => {
    const a = tensor("f32", [0, 3], [])
    expectShimError(() => ops.reduce("max", empty("f32", [3]), a, 0), "Invalid", /shim_reduce\(max\): the reduced dim of f32\[0, 3\] is empty and max has no identity/)
    expectShimError(() => ops.reduce("min", empty("f32", []), a, undefined), "Invalid", /shim_reduce\(min\): the reduced dim/)
    ops.reduce("max", empty("f32", [0]), a, 1)
  })
})

describe("errors", () => {
  const raw = (op: number, out: Tensor, a: Tensor, dim: number) =>
    native.check(native.shim.shim_reduce(op, out.handle, a.handle, dim, null), "shim_reduce")

  test("a bad dim is rejected by the wrapper and by the shim", () => {
    const a = tensor("f32", [2, 3, 4], Array(24).fill(1))
    const out = empty("f32", [6])
    expectShimError(() => ops.reduce("sum", out, a, 3), "Invalid", /^sum: dim 3 out of range/)
    expectShimError(() => raw(ReduceOp.sum, out, a, 3), "Invalid", /shim_reduce\(sum\): dim 3 is out of range for a f32\[2, 3, 4\]/)
    expectShimError(() => raw(ReduceOp.sum, out, a, -2), "Invalid", /dim -2 is out of range/)
  })

  test("a wrong out size and an unknown op are rejected", () => {
    const a = tensor("f32", [2, 3], Array(6).fill(1))
    expectShimError(() => raw(ReduceOp.mean, empty("f32", [3]), a, 1), "Invalid", /shim_reduce\(mean\): out is f32\[3\] but reducing dim 1 of f32\[2, 3\] leaves 2 elements/)
    expectShimError(() => raw(ReduceOp.sum, empty("f32", [2]), a, ALL_DIMS), "Invalid", /reducing all dims of f32\[2, 3\] leaves 1 elements/)
    const past = Object.keys(ReduceOp).length
    expectShimError(() => raw(past, empty("f32", []), a, ALL_DIMS), "Invalid", new RegExp(`shim_reduce: unknown op code ${past}`))
  })

  test("the integer mean into u8 saturates like a cast", () => {
    const a = tensor("i32", [2], [-10, -20])
    const out = empty("u8", [])
    ops.reduce("mean", out, a, undefined)
    expect(valuesOf(out)).toEqual([Number(toIntSaturated("u8", -15))])
  })
})

describe("argreduce and cumsum", () => {
  test("argmax and argmin take the first extreme, and the first NaN; along a dim or over all", () => {
    const a = tensor("f32", [2, 3], [1, 5, 5, NaN, -1, NaN]), idx = empty("i64", [2])
    ops.argreduce("max", idx, a, 1)
    expect(valuesOf(idx)).toEqual([1, 0])
    ops.argreduce("min", idx, tensor("i32", [2, 3], [4, -2, -2, 0, 0, 9]), 1)
    expect(valuesOf(idx)).toEqual([1, 0])
    const all = empty("i64", [])
    ops.argreduce("min", all, tensor("i64", [2, 2], [3, 1, -7, -7]), undefined)
    expect(valuesOf(all)).toEqual([2])
  })

  test("the shim refuses an empty dim, a non-i64 output, other ops, and cumsum into shared memory", () => {
    const a = tensor("f32", [2, 0], [])
    expectShimError(() => ops.argreduce("max", empty("i64", [2]), a, 1), "Invalid", /shim_argreduce\(max\): the reduced dim of f32\[2, 0\] is empty/)
    const b = tensor("f32", [3], [1, 2, 3])
    expectShimError(() => ops.argreduce("max", empty("i32", []), b, 0), "Invalid", /shim_argreduce: indices is i32\[\], not i64/)
    expectShimError(() => native.check(native.shim.shim_argreduce(ReduceOp.sum, empty("i64", []).handle, b.handle, 0, null), "shim_argreduce"), "Invalid", /op must be max or min/)
    expectShimError(() => ops.cumsum(b, b, 0), "Invalid", /shim_cumsum: out f32\[3\] shares memory with a/)
  })

  test("cumsum of i32 into i64 wraps in int64; of f16 accumulates in double, rounding each prefix", () => {
    const out = empty("i64", [3])
    ops.cumsum(out, tensor("i32", [3], [2 ** 31 - 1, 1, -5]), 0)
    expect(valuesOf(out)).toEqual([2 ** 31 - 1, 2 ** 31, 2 ** 31 - 5])
    const h = empty("f16", [3])
    ops.cumsum(h, tensor("f16", [3], [2048, 1, 1]), 0)
    expect(valuesOf(h)).toEqual([2048, 2048, 2050])
  })
})
