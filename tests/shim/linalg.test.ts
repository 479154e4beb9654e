// shim_matmul and shim_transpose on the cpu backend, against products and permutations
// computed here: floats in double (tolerance scaled by the sum of |a||b| terms), integers in
// BigInt with 64-bit wrap, bool as "any a and b".
import { afterEach, describe, expect, test } from "bun:test"
import * as ops from "../../ffi/ops.ts"
import type { Tensor } from "../../ffi/tensor.ts"
import {
  DTYPES, empty, expectClose, expectShimError, freeAll, isFloat, native, product, roundTo, sample, tensor, valuesOf, viewOf,
  wrapInt, type DType,
} from "./helpers.ts"

afterEach(freeAll)

/** a [..., m, k] @ b [..., k, n] (b possibly 2-D) with the expected values and error scales. */
const referenceMatmul = (
  dtype: DType,
  xs: ReadonlyArray<number>,
  aShape: ReadonlyArray<number>,
  ys: ReadonlyArray<number>,
  bShape: ReadonlyArray<number>,
): { values: number[]; scale: number[] } => {
  const nd = aShape.length
  const m = aShape[nd - 2]!, k = aShape[nd - 1]!, n = bShape[bShape.length - 1]!
  const batch = product(aShape.slice(0, -2)), bBatched = bShape.length > 2
  const values: number[] = [], scale: number[] = []
  for (let t = 0; t < batch; t++)
    for (let i = 0; i < m; i++)
      for (let j = 0; j < n; j++) {
        const terms = Array.from({ length: k }, (_, p) => [xs[(t * m + i) * k + p]!, ys[((bBatched ? t : 0) * k + p) * n + j]!] as const)
        if (isFloat(dtype)) {
          values.push(roundTo(dtype, terms.reduce((s, [x, y]) => s + x * y, 0)))
          scale.push(Math.sqrt(Math.max(k, 1)) * terms.reduce((s, [x, y]) => s + Math.abs(x * y), 0))
        } else if (dtype === "bool") {
          values.push(terms.some(([x, y]) => x && y) ? 1 : 0)
        } else {
          const sum = terms.reduce((s, [x, y]) => BigInt.asIntN(64, s + BigInt(x) * BigInt(y)), 0n)
          values.push(Number(wrapInt(dtype as "i32" | "i64" | "u8", sum)))
        }
      }
  return { values, scale }
}

const MATMUL_CASES: ReadonlyArray<readonly [number[], number[]]> = [
  [[7, 5], [5, 3]],
  [[1, 1], [1, 1]],
  [[2, 4, 3], [2, 3, 5]], // batched
  [[3, 4, 6], [6, 2]], // batched a, one b for every batch
  [[2, 2, 3, 4], [2, 2, 4, 3]], // two batch dims
  [[70, 130], [130, 150]], // crosses every block edge of the loop (64, 64, 128)
  [[0, 4], [4, 3]], // m = 0
  [[3, 4], [4, 0]], // n = 0
]

const outShapeOf = (aShape: number[], bShape: number[]): number[] => [...aShape.slice(0, -1), bShape[bShape.length - 1]!]

describe("matmul", () => {
  for (const dtype of DTYPES)
    test(`${dtype}: ${MATMUL_CASES.map(([a, b]) => `[${a}]@[${b}]`).join(" ")}`, () => {
      for (const [aShape, bShape] of MATMUL_CASES) {
        const lo = dtype === "u8" ? 0 : isFloat(dtype) ? -2 : -5, hi = isFloat(dtype) ? 2 : 5
        const xs = sample(dtype, product(aShape), lo, hi, 41), ys = sample(dtype, product(bShape), lo, hi, 43)
        const out = empty(dtype, outShapeOf(aShape, bShape))
        ops.matmul(out, tensor(dtype, aShape, xs), tensor(dtype, bShape, ys))
        const { values, scale } = referenceMatmul(dtype, xs, aShape, ys, bShape)
        if (isFloat(dtype)) expectClose(dtype, valuesOf(out), values, `[${aShape}]@[${bShape}]`, scale)
        else expect(valuesOf(out)).toEqual(values)
      }
    })

  /** values of `shape` stored transposed in its last two dims, and that stored shape. */
  const transposedLast = <V>(values: ReadonlyArray<V>, shape: number[]): [V[], number[]] => {
    const [r, c] = shape.slice(-2) as [number, number], out: V[] = []
    for (let b = 0; b < values.length / (r * c); b++)
      for (let j = 0; j < c; j++) for (let i = 0; i < r; i++) out.push(values[b * r * c + i * c + j]!)
    return [out, [...shape.slice(0, -2), c, r]]
  }
  for (const dtype of DTYPES)
    test(`${dtype}: operands stored transposed (shim_matmul's flags) give the same products`, () => {
      for (const [aShape, bShape] of MATMUL_CASES)
        for (const [ta, tb] of [[true, false], [false, true], [true, true]] as const) {
          const lo = dtype === "u8" ? 0 : isFloat(dtype) ? -2 : -5, hi = isFloat(dtype) ? 2 : 5
          const xs = sample(dtype, product(aShape), lo, hi, 47), ys = sample(dtype, product(bShape), lo, hi, 53)
          const [xt, xShape] = ta ? transposedLast(xs, aShape) : [xs, aShape], [yt, yShape] = tb ? transposedLast(ys, bShape) : [ys, bShape]
          const out = empty(dtype, outShapeOf(aShape, bShape))
          ops.matmul(out, tensor(dtype, xShape, xt), tensor(dtype, yShape, yt), undefined, { a: ta, b: tb })
          const { values, scale } = referenceMatmul(dtype, xs, aShape, ys, bShape)
          const what = `[${aShape}]${ta ? "^T" : ""}@[${bShape}]${tb ? "^T" : ""}`
          if (isFloat(dtype)) expectClose(dtype, valuesOf(out), values, what, scale)
          else expect({ what, got: valuesOf(out) }).toEqual({ what, got: values })
        }
    })

  test("k = 0 gives zeros, whatever out held", () => {
    for (const dtype of ["f32", "f64", "bf16", "i32"] as const) {
      const out = empty(dtype, [3, 2])
      ops.fill(out, 7)
      ops.matmul(out, tensor(dtype, [3, 0], []), tensor(dtype, [0, 2], []))
      expect(valuesOf(out)).toEqual(Array(6).fill(0))
    }
  })

  test("integer products wrap in the output dtype", () => {
    const a = tensor("u8", [1, 2], [200, 100]), b = tensor("u8", [2, 1], [3, 1])
    const out = empty("u8", [1, 1])
    ops.matmul(out, a, b)
    expect(valuesOf(out)).toEqual([(600 + 100) % 256])
  })

  test("shape, dtype and aliasing errors name both operands", () => {
    const raw = (out: Tensor, a: Tensor, b: Tensor) => native.check(native.shim.shim_matmul(out.handle, a.handle, b.handle, 0, null), "shim_matmul")
    const a = tensor("f32", [2, 3, 4], Array(24).fill(1))
    expectShimError(() => raw(empty("f32", [2, 3, 5]), a, tensor("f32", [5, 5], Array(25).fill(1))), "Invalid", /shim_matmul: inner dims differ: f32\[2, 3, 4\] @ f32\[5, 5\]/)
    expectShimError(() => raw(empty("f32", [2, 3, 5]), a, tensor("f32", [3, 4, 5], Array(60).fill(1))), "Invalid", /shim_matmul: batch dim 0 differs: f32\[2, 3, 4\] @ f32\[3, 4, 5\]/)
    expectShimError(() => raw(empty("f32", [3, 5]), tensor("f32", [3, 4], Array(12).fill(1)), tensor("f32", [2, 4, 5], Array(40).fill(1))), "Invalid", /b must be 2-D or have a's 2 dims/)
    expectShimError(() => raw(empty("f32", [2, 3, 6]), a, tensor("f32", [4, 5], Array(20).fill(1))), "Invalid", /shim_matmul: out is f32\[2, 3, 6\] but f32\[2, 3, 4\] @ f32\[4, 5\] needs \[\.\.\., 3, 5\]/)
    expectShimError(() => raw(empty("f64", [2, 3, 5]), a, tensor("f32", [4, 5], Array(20).fill(1))), "Invalid", /shim_matmul: dtypes differ: f32\[2, 3, 4\] @ f32\[4, 5\] -> f64\[2, 3, 5\]/)
    expectShimError(() => raw(empty("f32", [4]), tensor("f32", [4], Array(4).fill(1)), tensor("f32", [4, 1], Array(4).fill(1))), "Invalid", /operands need at least 2 dims/)
    const square = tensor("f32", [3, 3], Array(9).fill(1))
    expectShimError(() => raw(viewOf(square, [3, 3]), square, square), "Invalid", /shim_matmul: out f32\[3, 3\] shares memory with an operand/)
    expectShimError(() => ops.matmul(empty("f64", [3, 3]), square, square), "Invalid", /^matmul: dtypes differ/)
    expectShimError(() => native.check(native.shim.shim_matmul(empty("f32", [3, 3]).handle, square.handle, square.handle, 4, null), "shim_matmul"), "Invalid", /shim_matmul: unknown transpose flags 0x4/)
    expectShimError(() => ops.matmul(empty("f32", [2, 3, 5]), a, tensor("f32", [4, 5], Array(20).fill(1)), undefined, { a: true }), "Invalid", /shim_matmul: inner dims differ: f32\[2, 3, 4\]\^T @ f32\[4, 5\]/)
  })
})

/** a's elements rearranged as a with dims d0 and d1 swapped, row-major. */
const referenceTranspose = (xs: ReadonlyArray<number>, shape: ReadonlyArray<number>, d0: number, d1: number): number[] => {
  const outShape = shape.map((_, i) => shape[i === d0 ? d1 : i === d1 ? d0 : i]!)
  const strides = shape.map((_, i) => product(shape.slice(i + 1)))
  return Array.from({ length: xs.length }, (_, flat) => {
    let rest = flat, src = 0
    for (let i = outShape.length - 1; i >= 0; i--) {
      const index = rest % outShape[i]!
      rest = Math.floor(rest / outShape[i]!)
      src += index * strides[i === d0 ? d1 : i === d1 ? d0 : i]!
    }
    return xs[src]!
  })
}

const TRANSPOSE_CASES: ReadonlyArray<readonly [number[], number, number]> = [
  [[2, 3, 4], 0, 1], [[2, 3, 4], 0, 2], [[2, 3, 4], 1, 2], [[2, 3, 4], 2, 0], [[2, 3, 4], 1, 1],
  [[2, 3, 5], 0, 1], // moves runs of 5 elements
  [[70, 45], 0, 1], // crosses 32-element tiles
  [[3, 1, 5], 0, 2], [[0, 3], 0, 1], [[6], 0, 0],
]

describe("transpose", () => {
  for (const dtype of DTYPES)
    test(`${dtype}: ${TRANSPOSE_CASES.map(([s, d0, d1]) => `[${s}](${d0},${d1})`).join(" ")}`, () => {
      for (const [shape, d0, d1] of TRANSPOSE_CASES) {
        const xs = Array.from({ length: product(shape) }, (_, i) => (dtype === "bool" ? (i % 3 === 0 ? 1 : 0) : i % 251))
        const outShape = shape.map((_, i) => shape[i === d0 ? d1 : i === d1 ? d0 : i]!)
        const out = empty(dtype, outShape)
        ops.transpose(out, tensor(dtype, shape, xs), d0, d1)
        expect(valuesOf(out)).toEqual(referenceTranspose(xs, shape, d0, d1))
      }
    })

  test("errors: dims out of range, wrong out shape or dtype, out sharing a's memory", () => {
    const raw = (out: Tensor, a: Tensor, d0: number, d1: number) => native.check(native.shim.shim_transpose(out.handle, a.handle, d0, d1, null), "shim_transpose")
    const a = tensor("f32", [2, 3], [0, 1, 2, 3, 4, 5])
    expectShimError(() => raw(empty("f32", [3, 2]), a, 0, 2), "Invalid", /shim_transpose: dims 0 and 2 are out of range for a f32\[2, 3\]/)
    expectShimError(() => raw(empty("f32", [3, 2]), a, -1, 0), "Invalid", /dims -1 and 0 are out of range/)
    expectShimError(() => raw(empty("f32", [2, 3]), a, 0, 1), "Invalid", /shim_transpose: out is f32\[2, 3\] but swapping dims 0 and 1 of f32\[2, 3\]/)
    expectShimError(() => raw(empty("f64", [3, 2]), a, 0, 1), "Invalid", /out is f64\[3, 2\] but swapping/)
    expectShimError(() => raw(viewOf(a, [3, 2]), a, 0, 1), "Invalid", /shim_transpose: out f32\[3, 2\] shares memory with a/)
    expectShimError(() => ops.transpose(empty("f32", [3, 2]), a, 0, 5), "Invalid", /^transpose: dims 0, 5 out of range/)
  })
})
