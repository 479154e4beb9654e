// shim_set_threads on the cpu: kernels large enough to split across threads give the same
// bits with 2 threads as with 1 (each part is a contiguous range the one-thread loop would
// also cover in order); bad counts are refused. Also the two row kernels the split uses,
// shim_layer_norm and shim_index_select, refusing bad arguments before writing anything.
import { afterAll, afterEach, expect, test } from "bun:test"
import * as ops from "../../ffi/ops.ts"
import type { Tensor } from "../../ffi/tensor.ts"
import { bitsOf, empty, expectShimError, freeAll, native, tensor, valuesOf } from "./helpers.ts"
import { describeUnless } from "../skip.ts"

afterEach(freeAll)
afterAll(() => native.setThreads(1))

const why = native.device !== "cpu" ? `cpu backend only (MONARCH_DEVICE=${native.device})` : undefined
const N = 300_000 // above a few parts' grain (2^16 elements)

const values = (n: number, seed: number) => Array.from({ length: n }, (_, i) => Math.sin(i * 0.001 + seed) * 4)

/** Each kernel's output bits at 1 thread and at 2. */
const atBoth = (run: () => Tensor): [unknown, unknown] => {
  native.setThreads(1)
  const one = bitsOf(run())
  native.setThreads(2)
  const two = bitsOf(run())
  return [one, two]
}

describeUnless(why)("cpu threads", () => {
  test("refuses a thread count outside 1 to 64", () => {
    for (const n of [0, -1, 65]) expectShimError(() => native.setThreads(n), "Invalid", /shim_set_threads: -?\d+ threads, not 1 to 64/)
  })

  test("unary, binary (full, scalar and repeating), reductions, softmax, layer_norm, index_select, tril/triu and strided copies give the same bits at 2 threads", () => {
    const x = tensor("f32", [N / 300, 300], values(N, 1)), y = tensor("f32", [N / 300, 300], values(N, 2)), bias = tensor("f32", [300], values(300, 3))
    const w = tensor("f32", [300], values(300, 4)), ids = tensor("i64", [5000], Array.from({ length: 5000 }, (_, i) => (i * 7) % 1000))
    // 7-row matrices: a thread's rows start inside one of them (1001 rows in two parts).
    const sevens = tensor("f32", [143, 7, 300], values(143 * 7 * 300, 5))
    const out = () => empty("f32", [N / 300, 300])
    const cases: Array<[string, () => Tensor]> = [
      ["exp", () => { const o = out(); ops.unary("exp", o, x); return o }],
      ["add", () => { const o = out(); ops.binary("add", o, x, y); return o }],
      ["sub bias", () => { const o = out(); ops.binary("sub", o, bias, x); return o }],
      ["mul scalar", () => { const o = out(); ops.binaryScalar("mul", o, x, 3, false); return o }],
      ["sum rows", () => { const o = empty("f32", [N / 300]); ops.reduce("sum", o, x, 1); return o }],
      ["max columns", () => { const o = empty("f32", [300]); ops.reduce("max", o, x, 0); return o }],
      ["log_softmax", () => { const o = out(); ops.softmax(o, x, 1, true); return o }],
      ["layer_norm", () => { const o = out(); ops.layerNorm(o, x, w, bias, 300, 1e-5); return o }],
      ["index_select", () => { const o = empty("f32", [5000, 300]); ops.indexSelect(o, x, 0, ids); return o }],
      ["tril", () => { const o = empty("f32", [143, 7, 300]); ops.triangle(o, sevens, 1, false); return o }],
      ["triu", () => { const o = empty("f32", [143, 7, 300]); ops.triangle(o, sevens, -2, true); return o }],
      // a transpose (a strided run per row) and one half of a cat (contiguous runs), from a row offset
      ["copy_strided transpose", () => { const o = empty("f32", [300, N / 300]); ops.copyStrided(o, { offset: 0, strides: [N / 300, 1] }, x, { offset: 0, strides: [1, 300] }, [300, N / 300]); return o }],
      ["copy_strided cat half", () => {
        const o = empty("f32", [N / 300, 600])
        ops.fill(o, 0)
        ops.copyStrided(o, { offset: 300, strides: [600, 1] }, x, { offset: 300, strides: [300, 1] }, [N / 300 - 1, 300])
        return o
      }],
    ]
    for (const [name, run] of cases) {
      const [one, two] = atBoth(run)
      expect({ name, same: Bun.deepEquals(one, two) }).toEqual({ name, same: true })
    }
  })

  test("a large kernel at 2 threads starts the pool's thread: the work really splits", () => {
    const child = Bun.spawnSync([process.execPath, new URL("./threads_child.ts", import.meta.url).pathname], { stdout: "pipe", stderr: "pipe" })
    expect(child.stderr.toString()).toBe("")
    const { before, after } = JSON.parse(child.stdout.toString()) as { before: number; after: number }
    expect(after).toBeGreaterThan(before)
  }, 30_000)
})

describeUnless(why)("layer_norm and index_select", () => {
  test("layer_norm matches double, with and without weight and bias", () => {
    const xs = [1, 2, 3, 4, 10, 0, -10, 4], x = tensor("f32", [2, 4], xs), w = tensor("f32", [4], [1, 2, 3, 4]), b = tensor("f32", [4], [0, 1, 0, -1])
    for (const [wt, bt] of [[null, null], [w, b], [w, null], [null, b]] as const) {
      const out = empty("f32", [2, 4])
      ops.layerNorm(out, x, wt, bt, 4, 1e-5)
      const got = valuesOf(out)
      for (let r = 0; r < 2; r++) {
        const row = xs.slice(r * 4, r * 4 + 4), mean = row.reduce((s, v) => s + v, 0) / 4
        const rstd = 1 / Math.sqrt(row.reduce((s, v) => s + (v - mean) ** 2, 0) / 4 + 1e-5)
        row.forEach((v, j) => {
          const want = (v - mean) * rstd * (wt ? [1, 2, 3, 4][j]! : 1) + (bt ? [0, 1, 0, -1][j]! : 0)
          expect(Math.abs(got[r * 4 + j]! - want)).toBeLessThan(1e-5)
        })
      }
    }
  })

  test("refusals name the argument at fault and leave out untouched", () => {
    const x = tensor("f32", [2, 4], [1, 2, 3, 4, 5, 6, 7, 8]), out = tensor("f32", [2, 4], [9, 9, 9, 9, 9, 9, 9, 9])
    expectShimError(() => ops.layerNorm(out, x, null, null, 3, 1e-5), "Invalid", /shim_layer_norm: 3 elements per row do not divide f32\[2, 4\]/)
    expectShimError(() => ops.layerNorm(out, x, tensor("f32", [3], [1, 1, 1]), null, 4, 1e-5), "Invalid", /weight is f32\[3\] but must be 4 elements of f32/)
    expectShimError(() => ops.layerNorm(empty("i32", [2, 4]), tensor("i32", [2, 4], [1, 2, 3, 4, 5, 6, 7, 8]), null, null, 4, 1e-5), "Unsupported", /not defined on i32/)
    expectShimError(() => ops.indexSelect(out, x, 0, tensor("i64", [2], [1, 2])), "Invalid", /index 2 is out of range for dim 0 of size 2/)
    expectShimError(() => ops.indexSelect(out, x, 0, tensor("i64", [2], [-1, 0])), "Invalid", /index -1 is out of range/)
    expectShimError(() => ops.indexSelect(out, x, 0, tensor("i64", [1, 2], [0, 1])), "Invalid", /index is i64\[1, 2\], not 0-D or 1-D i64/)
    expectShimError(() => ops.indexSelect(empty("f32", [3, 4]), x, 0, tensor("i64", [2], [0, 1])), "Invalid", /out is f32\[3, 4\] but must be f32 with 2 entries along dim 0/)
    expect(valuesOf(out)).toEqual([9, 9, 9, 9, 9, 9, 9, 9])
  })

  test("index_select picks slabs along a middle dim, repeats allowed", () => {
    const x = tensor("i32", [2, 3, 2], [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11]), out = empty("i32", [2, 4, 2])
    ops.indexSelect(out, x, 1, tensor("i64", [4], [2, 0, 2, 1]))
    expect(valuesOf(out)).toEqual([4, 5, 0, 1, 4, 5, 2, 3, 10, 11, 6, 7, 10, 11, 8, 9])
  })
})
