// The fused losses (shim_nll_loss, shim_mse_loss) against the same losses computed here in
// double: each reduction, class weights, ignore_index (in range and out of it), the
// [N, C, d] layout, the half dtypes, block sums past one block and thread counts, and the
// refusals (a target out of range writes nothing).
import { afterEach, describe, expect, test } from "bun:test"
import * as ops from "../../ffi/ops.ts"
import type { LossReductionName } from "../../ffi/symbols.ts"
import { empty, expectClose, expectShimError, FLOATS, freeAll, native, roundTo, sample, tensor, valuesOf } from "./helpers.ts"

afterEach(freeAll)

const REDUCTIONS: ReadonlyArray<LossReductionName> = ["none", "sum", "mean"]

/** torch's nll_loss over input [n, c, inner] and targets [n, inner], in double. */
const nllReference = (x: ReadonlyArray<number>, t: ReadonlyArray<number>, n: number, c: number, inner: number, w: ReadonlyArray<number> | null, ignore: number) => {
  const losses: number[] = []
  let weights = 0
  for (let row = 0; row < n; row++)
    for (let k = 0; k < inner; k++) {
      const cls = t[row * inner + k]!
      const wt = cls === ignore ? 0 : w ? w[cls]! : 1
      losses.push(cls === ignore ? 0 : -wt * x[(row * c + cls) * inner + k]!)
      weights += wt
    }
  const sum = losses.reduce((s, v) => s + v, 0)
  return { none: losses, sum: [sum], mean: [sum / weights] }
}

describe("shim_nll_loss", () => {
  for (const dtype of FLOATS)
    test(`${dtype}: every reduction, with and without class weights, [N, C] and [N, C, d]`, () => {
      for (const [n, c, inner] of [[6, 5, 1], [2, 3, 4]] as const) {
        const x = sample(dtype, n * c * inner, -3, 3, 7), w = sample(dtype, c, 0.1, 2, 8)
        const t = Array.from({ length: n * inner }, (_, i) => (i * 7) % c)
        const input = tensor(dtype, inner === 1 ? [n, c] : [n, c, inner], x), target = tensor("i64", inner === 1 ? [n] : [n, inner], t)
        for (const weighted of [false, true])
          for (const reduction of REDUCTIONS) {
            const want = nllReference(x, t, n, c, inner, weighted ? w : null, -100)[reduction].map((v) => roundTo(dtype, v))
            const out = empty(dtype, reduction === "none" ? [n * inner] : [])
            ops.nllLoss(out, input, target, weighted ? tensor(dtype, [c], w) : null, -100, reduction)
            expectClose(dtype, valuesOf(out), want, `${reduction}${weighted ? ", weighted" : ""}`)
          }
      }
    })

  test("ignore_index: a class in range or any other value drops the element from the sum and the mean's weights", () => {
    const x = sample("f64", 4 * 3, -2, 2, 3), w = [0.5, 2, 1.5]
    for (const [t, ignore] of [[[0, -100, 2, 1], -100], [[1, 1, 2, 0], 1]] as const) {
      const want = nllReference(x, t, 4, 3, 1, w, ignore)
      for (const reduction of REDUCTIONS) {
        const out = empty("f64", reduction === "none" ? [4] : [])
        ops.nllLoss(out, tensor("f64", [4, 3], x), tensor("i64", [4], t), tensor("f64", [3], w), ignore, reduction)
        expectClose("f64", valuesOf(out), want[reduction], `ignore ${ignore}, ${reduction}`)
      }
    }
  })

  test("a [C] input with one target, and the mean of nothing (an empty batch, every target ignored) is NaN", () => {
    const one = empty("f32", [])
    ops.nllLoss(one, tensor("f32", [4], [1, 2, 3, 4]), tensor("i64", [], [2]), null, -100, "mean")
    expect(valuesOf(one)).toEqual([-3])
    const mean = empty("f32", [])
    ops.nllLoss(mean, empty("f32", [0, 3]), empty("i64", [0]), null, -100, "mean")
    expect(valuesOf(mean)).toEqual([NaN])
    ops.nllLoss(mean, tensor("f32", [2, 3], [1, 2, 3, 4, 5, 6]), tensor("i64", [2], [-100, -100]), null, -100, "mean")
    expect(valuesOf(mean)).toEqual([NaN])
  })

  test("a target outside the classes fails before anything is written; bad shapes and codes are refused", () => {
    const out = tensor("f32", [3], [7, 7, 7]), input = tensor("f32", [3, 4], sample("f32", 12, -1, 1, 1))
    for (const bad of [4, -1, -101]) // the cpu names the target and its element; cuda checks on the device
      expectShimError(() => ops.nllLoss(out, input, tensor("i64", [3], [0, bad, 1]), null, -100, "none"), "Invalid",
        /shim_nll_loss: .*is not a class of 0\.\.3 nor ignore_index -100/)
    expect(valuesOf(out)).toEqual([7, 7, 7])
    const sum = tensor("f32", [], [7])
    for (const reduction of ["sum", "mean"] as const)
      expectShimError(() => ops.nllLoss(sum, input, tensor("i64", [3], [0, 1, 4]), null, -100, reduction), "Invalid", /shim_nll_loss: .*is not a class of 0\.\.3/)
    expect(valuesOf(sum)).toEqual([7])
    expectShimError(() => ops.nllLoss(out, input, tensor("i64", [2], [0, 1]), null, -100, "none"), "Invalid", /shim_nll_loss: target .* does not fit input/)
    expectShimError(() => ops.nllLoss(out, input, tensor("i32", [3], [0, 1, 2]), null, -100, "none"), "Invalid", /must hold class indices \(i64\)/)
    expectShimError(() => ops.nllLoss(out, input, tensor("i64", [3], [0, 1, 2]), tensor("f32", [3], [1, 1, 1]), -100, "none"), "Invalid", /weight is .* but must be 4 elements of f32/)
    expectShimError(() => ops.nllLoss(empty("f32", [3]), input, tensor("i64", [3], [0, 1, 2]), null, -100, "sum"), "Invalid", /out is .* but must be 1 elements of f32/)
    expectShimError(() => native.check(native.shim.shim_nll_loss(out.handle, input.handle, tensor("i64", [3], [0, 1, 2]).handle, null, -100, 3, null), "shim_nll_loss"),
      "Invalid", /reduction 3 is not SHIM_LOSS_NONE, SUM or MEAN/)
  })
})

describe("shim_mse_loss", () => {
  for (const dtype of FLOATS)
    test(`${dtype}: each square in the compute type, their sum and mean in double`, () => {
      const n = 37, a = sample(dtype, n, -4, 4, 11), b = sample(dtype, n, -4, 4, 12)
      const compute = (x: number) => (dtype === "f64" ? x : Math.fround(x))
      const squares = a.map((x, i) => { const d = compute(x - b[i]!); return compute(d * d) })
      const sum = squares.reduce((s, v) => s + v, 0)
      const want: Record<LossReductionName, number[]> = { none: squares, sum: [sum], mean: [sum / n] }
      for (const reduction of REDUCTIONS) {
        const out = empty(dtype, reduction === "none" ? [n] : [])
        ops.mseLoss(out, tensor(dtype, [n], a), tensor(dtype, [n], b), reduction)
        expectClose(dtype, valuesOf(out), want[reduction].map((v) => roundTo(dtype, v)), reduction)
      }
    })

  test("many blocks: the same sum at 1 and 2 threads, and the mean of nothing is NaN", () => {
    const n = 100_003, a = sample("f32", n, -1, 1, 5), b = sample("f32", n, -1, 1, 6)
    const sum = a.reduce((s, x, i) => { const d = Math.fround(x - b[i]!); return s + Math.fround(d * d) }, 0)
    const results = [1, 2].map((threads) => {
      native.setThreads(threads)
      const out = empty("f32", [])
      ops.mseLoss(out, tensor("f32", [n], a), tensor("f32", [n], b), "sum")
      return valuesOf(out)[0]!
    })
    native.setThreads(1)
    expect(results[1]).toBe(results[0]!)
    expectClose("f32", [results[0]!], [Math.fround(sum)], "sum")
    const mean = empty("f32", [])
    ops.mseLoss(mean, empty("f32", [0]), empty("f32", [0]), "mean")
    expect(valuesOf(mean)).toEqual([NaN])
  })

  test("operands of two dtypes or counts, integers, and a wrong out are refused", () => {
    const a = tensor("f32", [4], [1, 2, 3, 4])
    expectShimError(() => ops.mseLoss(empty("f32", []), a, tensor("f64", [4], [1, 2, 3, 4]), "mean"), "Invalid", /need one dtype and element count/)
    expectShimError(() => ops.mseLoss(empty("f32", []), a, tensor("f32", [3], [1, 2, 3]), "mean"), "Invalid", /need one dtype and element count/)
    expectShimError(() => ops.mseLoss(empty("i32", []), tensor("i32", [2], [1, 2]), tensor("i32", [2], [1, 2]), "mean"), "Unsupported", /is not floating/)
    expectShimError(() => ops.mseLoss(empty("f32", [3]), a, a, "none"), "Invalid", /out is .* but must be 4 elements of f32/)
  })
})
