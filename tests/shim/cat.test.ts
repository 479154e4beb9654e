// shim_cat against concatenation computed here by index: along each dim of a 3-D shape, parts
// of different sizes (an empty one among them), elements of 1, 2, 4 and 8 bytes, one part, rows
// split across 2 threads, and the refusals.
import { afterEach, describe, expect, test } from "bun:test"
import * as ops from "../../ffi/ops.ts"
import { empty, expectShimError, freeAll, native, product, tensor, valuesOf, type DType } from "./helpers.ts"

afterEach(freeAll)

/** Values of the parts (each row-major, of shapes) concatenated along dim, by each output index. */
const catReference = (parts: ReadonlyArray<{ shape: number[]; values: number[] }>, dim: number): number[] => {
  const outShape = parts[0]!.shape.map((s, d) => (d === dim ? parts.reduce((n, p) => n + p.shape[d]!, 0) : s))
  const out: number[] = []
  const idx = outShape.map(() => 0)
  for (let e = 0; e < product(outShape); e++) {
    let rest = e
    for (let d = outShape.length - 1; d >= 0; d--) (idx[d] = rest % outShape[d]!), (rest = Math.floor(rest / outShape[d]!))
    let at = idx[dim]!, k = 0
    while (at >= parts[k]!.shape[dim]!) at -= parts[k++]!.shape[dim]!
    const p = parts[k]!, local = idx.map((i, d) => (d === dim ? at : i))
    out.push(p.values[local.reduce((off, i, d) => off * p.shape[d]! + i, 0)]!)
  }
  return out
}

describe("shim_cat", () => {
  for (const dtype of ["u8", "f16", "f32", "f64"] as const satisfies ReadonlyArray<DType>)
    test(`${dtype}: parts of sizes 2, 0 and 3 along each dim of a 3-D shape`, () => {
      for (let dim = 0; dim < 3; dim++) {
        let seed = 1
        const parts = [2, 0, 3].map((size) => {
          const shape = [4, 5, 6].map((s, d) => (d === dim ? size : s))
          return { shape, values: Array.from({ length: product(shape) }, () => (seed = (seed * 31 + 7) % 251)) }
        })
        const want = catReference(parts, dim)
        const out = empty(dtype, [4, 5, 6].map((s, d) => (d === dim ? 5 : s)))
        ops.cat(out, parts.map((p) => tensor(dtype, p.shape, p.values)), dim)
        expect(valuesOf(out)).toEqual(want)
      }
    })

  test("one part is a copy; many rows split over 2 threads give the same bytes", () => {
    const values = Array.from({ length: 24 }, (_, i) => i * 0.5)
    const one = empty("f32", [4, 6])
    ops.cat(one, [tensor("f32", [4, 6], values)], 1)
    expect(valuesOf(one)).toEqual(values)
    const rows = 5000, a = Array.from({ length: rows * 48 }, (_, i) => i % 1000), b = Array.from({ length: rows * 16 }, (_, i) => -(i % 777))
    const want = catReference([{ shape: [rows, 48], values: a }, { shape: [rows, 16], values: b }], 1)
    native.setThreads(2)
    const out = empty("f32", [rows, 64])
    ops.cat(out, [tensor("f32", [rows, 48], a), tensor("f32", [rows, 16], b)], 1)
    native.setThreads(1)
    expect(valuesOf(out)).toEqual(want)
  })

  test("parts that do not fit out are refused", () => {
    const a = tensor("f32", [2, 3], [1, 2, 3, 4, 5, 6])
    expectShimError(() => ops.cat(empty("f32", [2, 6]), [a, tensor("f64", [2, 3], [1, 2, 3, 4, 5, 6])], 1), "Invalid", /part 1 .* does not fit out/)
    expectShimError(() => ops.cat(empty("f32", [4, 3]), [a, tensor("f32", [2, 2], [1, 2, 3, 4])], 0), "Invalid", /part 1 .* does not fit out/)
    expectShimError(() => ops.cat(empty("f32", [2, 7]), [a, a], 1), "Invalid", /the parts hold 6 along dim 1 but out .* holds 7/)
    expectShimError(() => ops.cat(empty("f32", [2, 6]), [a, a], 2), "Invalid", /dim 2 is out of range/)
    expectShimError(() => ops.cat(empty("f32", [2, 3]), [], 0), "Invalid", /0 parts \(at least one is needed\)/)
  })
})
