// The f32 transcendental functions the cpu backend computes without libm (c/cpu/vecmath.h),
// in ulps against double over a million inputs spread across every float bit pattern, their
// special values, and the vector row loops of softmax and the last-dim reductions at lengths
// that leave a tail after the vector lanes.
import { afterEach, expect, test } from "bun:test"
import * as ops from "../../ffi/ops.ts"
import type { UnaryOpName } from "../../ffi/symbols.ts"
import { empty, freeAll, native, tensor, valuesOf } from "./helpers.ts"
import { describeUnless } from "../skip.ts"

afterEach(freeAll)

const why = native.device !== "cpu" ? `cpu backend only (MONARCH_DEVICE=${native.device})` : undefined

/** Every 4093rd float bit pattern (both signs, NaNs included): about a million inputs. */
const INPUTS = (() => {
  const bits = new Uint32Array(Math.ceil(2 ** 32 / 4093))
  for (let i = 0; i < bits.length; i++) bits[i] = i * 4093
  return [...new Float32Array(bits.buffer)]
})()

/**
 * |got - want| in units of the last place of the f32 nearest want (subnormals: 2^-149). With
 * `tiny`, a result below 2^-100 only needs to be within 2^-120 of it (silu's x * sigmoid(x)
 * passes through a subnormal sigmoid below x = -87; torch's x / (1 + exp(-x)) gives 0 there).
 */
const ulps = (got: number, want: number, tiny = false): number => {
  if (Number.isNaN(want)) return Number.isNaN(got) ? 0 : Infinity
  const w = Math.fround(want)
  if (!Number.isFinite(w)) return got === w ? 0 : Infinity
  if (tiny && Math.abs(want) < 2 ** -100) return Math.abs(got - want) <= 2 ** -120 ? 0 : Infinity
  const a = Math.abs(w), ulp = a < 2 ** -126 ? 2 ** -149 : 2 ** (Math.floor(Math.log2(a)) - 23)
  return Math.abs(got - want) / ulp
}

const sigmoid = (x: number) => 1 / (1 + Math.exp(-x))

/** erfc(t) for t >= 2 in double: its continued fraction, 80 levels deep. */
const erfcTail = (t: number): number => {
  let k = t
  for (let n = 80; n >= 1; n--) k = t + n / 2 / k
  return Math.exp(-t * t) / Math.sqrt(Math.PI) / k
}
/** erf in double: the series 2/sqrt(pi) e^-x^2 sum 2^n x^(2n+1) / (2n+1)!! (no cancellation), 1 - erfc beyond 2. */
const erf = (x: number): number => {
  if (Number.isNaN(x)) return NaN
  const a = Math.abs(x)
  if (a >= 2) return Math.sign(x) * (1 - erfcTail(a))
  let term = a, sum = a
  for (let n = 1; term > 1e-18 * sum; n++) sum += term *= (2 * a * a) / (2 * n + 1)
  return Math.sign(x) * (2 / Math.sqrt(Math.PI)) * Math.exp(-a * a) * sum
}
/** x / 2 (1 + erf(x / sqrt 2)), through erfc in the negative tail. */
const gelu = (x: number): number => {
  const t = x / Math.SQRT2
  return t <= -2 ? 0.5 * x * erfcTail(-t) : 0.5 * x * (1 + erf(t))
}
const CASES: ReadonlyArray<readonly [UnaryOpName, (x: number) => number, number]> = [
  ["exp", Math.exp, 2],
  ["tanh", Math.tanh, 2],
  ["sigmoid", sigmoid, 4],
  ["silu", (x) => x * sigmoid(x), 5],
  ["erf", erf, 4],
  ["gelu", gelu, 4],
]

describeUnless(why)("vectorised f32 math", () => {
  for (const [op, reference, bound] of CASES)
    test(`${op}: within ${bound} ulps of double over a million inputs`, () => {
      const x = tensor("f32", [INPUTS.length], INPUTS), out = empty("f32", [INPUTS.length])
      ops.unary(op, out, x)
      const got = valuesOf(out)
      let worst = 0, at = 0
      got.forEach((g, i) => {
        const x = INPUTS[i]!
        if (op === "gelu" && x < -1) return // the negative tail: held to an absolute error below
        const e = ulps(g, reference(x), op === "silu")
        if (e > worst) (worst = e), (at = x)
      })
      expect({ op, worst: worst <= bound ? "ok" : worst, at: worst <= bound ? 0 : at }).toEqual({ op, worst: "ok", at: 0 })
    })

  // (exp(-z^2)'s argument rounds there: a few ulps of results under 0.16, where torch's
  // x / 2 (1 + erf) loses a hundred by cancelling.)
  test("gelu below x = -1 is within 1e-7 of double", () => {
    const xs = INPUTS.filter((x) => x < -1), out = empty("f32", [xs.length])
    ops.unary("gelu", out, tensor("f32", [xs.length], xs))
    const worst = valuesOf(out).reduce((w, g, i) => Math.max(w, Math.abs(g - gelu(Math.fround(xs[i]!)))), 0)
    expect(worst).toBeLessThan(1e-7)
  })

  test("special values: NaN, infinities, overflow, subnormal results, signed zero", () => {
    const xs = [NaN, Infinity, -Infinity, 89, -89, -100, -0, 0, 88.72, -87.5]
    const run = (op: UnaryOpName) => {
      const out = empty("f32", [xs.length])
      ops.unary(op, out, tensor("f32", [xs.length], xs))
      return valuesOf(out)
    }
    const exp = run("exp")
    expect(exp.slice(0, 5)).toEqual([NaN, Infinity, 0, Infinity, Math.fround(Math.exp(-89))])
    expect(exp[5]).toBeGreaterThan(0) // a subnormal, not flushed to zero
    expect(ulps(exp[5]!, Math.exp(-100))).toBeLessThanOrEqual(1)
    expect(ulps(exp[8]!, Math.exp(Math.fround(88.72)))).toBeLessThanOrEqual(2)
    const tanh = run("tanh")
    expect(tanh.slice(0, 8)).toEqual([NaN, 1, -1, 1, -1, -1, -0, 0])
    expect(Object.is(tanh[6], -0)).toBe(true)
    expect(run("erf").slice(0, 3)).toEqual([NaN, 1, -1])
    expect(run("gelu").slice(0, 3)).toEqual([NaN, Infinity, NaN]) // -inf * 0, as torch's
    const sig = run("sigmoid")
    expect(sig.slice(0, 3)).toEqual([NaN, 1, 0])
    expect(ulps(sig[9]!, sigmoid(-87.5))).toBeLessThanOrEqual(4)
  })

  test("softmax and log-softmax rows of odd lengths match double, and a NaN makes its row NaN", () => {
    for (const r of [1, 15, 16, 37, 1000]) {
      const values = Array.from({ length: 3 * r }, (_, i) => Math.sin(i * 1.7) * 30)
      values[r + (r >> 1)] = NaN // row 1 only
      const x = tensor("f32", [3, r], values)
      for (const log of [false, true]) {
        const out = empty("f32", [3, r])
        ops.softmax(out, x, 1, log)
        const got = valuesOf(out)
        for (let row = 0; row < 3; row++) {
          const xs = values.slice(row * r, row * r + r).map(Math.fround)
          const m = Math.max(...xs), sum = xs.reduce((s, v) => s + Math.exp(v - m), 0)
          xs.forEach((v, j) => {
            const want = log ? v - m - Math.log(sum) : Math.exp(v - m) / sum, g = got[row * r + j]!
            if (row === 1) expect(g).toBeNaN()
            else expect(Math.abs(g - want)).toBeLessThanOrEqual(2e-6 * Math.abs(want) + (log ? 1e-5 : 1e-7))
          })
        }
      }
    }
  })

  test("sum, mean, amax and amin over the last dim of odd lengths, NaN in the vector part and in the tail", () => {
    for (const r of [5, 16, 37, 256]) {
      const values = Array.from({ length: 4 * r }, (_, i) => Math.fround(Math.cos(i * 0.37) * 1e3))
      values[r + 3] = NaN // row 1: in the lanes (or the tail when r < 16)
      values[3 * r - 1] = NaN // row 2: the last element
      const x = tensor("f32", [4, r], values)
      for (const op of ["sum", "mean", "max", "min"] as const) {
        const out = empty("f32", [4])
        ops.reduce(op, out, x, 1)
        const got = valuesOf(out)
        for (const row of [0, 3]) {
          const xs = values.slice(row * r, row * r + r)
          const sum = xs.reduce((s, v) => s + v, 0)
          const want = op === "sum" ? sum : op === "mean" ? sum / r : op === "max" ? Math.max(...xs) : Math.min(...xs)
          expect(got[row]).toBe(Math.fround(want))
        }
        expect([got[1], got[2]]).toEqual([NaN, NaN])
      }
    }
  })
})
