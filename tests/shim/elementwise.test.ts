// shim_unary, shim_binary and shim_binary_scalar on the cpu backend against references
// computed here: floats in double under the dtype's tolerance, integers exactly in BigInt
// with the wrap-around rules c/cpu/elementwise.c documents, bool by its or/and rules.
import { afterEach, describe, expect, test } from "bun:test"
import * as ops from "../../ffi/ops.ts"
import { BinaryOp, TernaryOp, UnaryOp, type BinaryOpName, type UnaryOpName } from "../../ffi/symbols.ts"
import type { Tensor } from "../../ffi/tensor.ts"
import {
  FLOATS, INTEGERS, bigValuesOf, empty, expectClose, expectShimError, freeAll, native, roundTo, sample, tensor, toIntSaturated,
  valuesOf, wrapInt, type DType,
} from "./helpers.ts"

afterEach(freeAll)

type IntDType = (typeof INTEGERS)[number]
const N = 37 // odd, and not a multiple of any vector width

/** The ops with a closed form in JS (the rest are checked against torch in tests/ops/parity.test.ts). */
const UNARY_FLOAT: Partial<Record<UnaryOpName, (x: number) => number>> = {
  neg: (x) => -x,
  abs: Math.abs,
  exp: Math.exp,
  log: Math.log,
  sqrt: Math.sqrt,
  relu: (x) => (x < 0 ? 0 : x),
  tanh: Math.tanh,
  sigmoid: (x) => 1 / (1 + Math.exp(-x)),
  log1p: Math.log1p,
  expm1: Math.expm1,
  rsqrt: (x) => 1 / Math.sqrt(x),
  reciprocal: (x) => 1 / x,
  sin: Math.sin,
  cos: Math.cos,
  silu: (x) => x / (1 + Math.exp(-x)),
  softplus: (x) => (x > 20 ? x : Math.log1p(Math.exp(x))),
  floor: Math.floor,
  ceil: Math.ceil,
  trunc: Math.trunc,
  sign: Math.sign,
}

const ARITHMETIC: ReadonlyArray<BinaryOpName> = ["add", "sub", "mul", "div", "maximum", "minimum", "pow"]
const COMPARISONS: ReadonlyArray<BinaryOpName> = ["eq", "ne", "lt", "le", "gt", "ge"]

const compare = (op: BinaryOpName, x: number | bigint, y: number | bigint): number => {
  switch (op) {
    case "eq": return x === y ? 1 : 0
    case "ne": return x !== y ? 1 : 0
    case "lt": return x < y ? 1 : 0
    case "le": return x <= y ? 1 : 0
    case "gt": return x > y ? 1 : 0
    default: return x >= y ? 1 : 0
  }
}

const floatRef = (op: BinaryOpName, x: number, y: number): number => {
  switch (op) {
    case "add": return x + y
    case "sub": return x - y
    case "mul": return x * y
    case "div": return x / y
    case "maximum": return Number.isNaN(x) || Number.isNaN(y) ? NaN : Math.max(x, y)
    case "minimum": return Number.isNaN(x) || Number.isNaN(y) ? NaN : Math.min(x, y)
    case "pow": return x ** y
    default: return compare(op, x, y)
  }
}

const intRef = (dtype: IntDType, op: BinaryOpName, x: bigint, y: bigint): bigint => {
  switch (op) {
    case "add": return wrapInt(dtype, x + y)
    case "sub": return wrapInt(dtype, x - y)
    case "mul": return wrapInt(dtype, x * y)
    case "div": return wrapInt(dtype, x / y) // BigInt division truncates toward zero
    case "maximum": return x > y ? x : y
    case "minimum": return x < y ? x : y
    case "pow": return wrapInt(dtype, x ** y)
    default: return BigInt(compare(op, x, y))
  }
}

/** Operands suited to op: positive bases for float pow, nonzero divisors, shared values for comparisons. */
const operands = (dtype: DType, op: BinaryOpName, n: number, seed: number): [number[], number[]] => {
  const lo = dtype === "u8" ? 0 : -6, hi = dtype === "u8" ? 255 : 6
  if (op === "pow")
    return FLOATS.includes(dtype as never)
      ? [sample(dtype, n, 0.25, 3, seed), sample(dtype, n, -2, 2, seed + 1)]
      : [sample(dtype, n, dtype === "u8" ? 0 : -5, 5, seed), sample(dtype, n, 0, 5, seed + 1)]
  const a = sample(dtype, n, lo, hi, seed)
  let b = sample(dtype, n, lo, hi, seed + 1)
  if (op === "div") b = b.map((v) => (v === 0 ? 1 : v))
  if (COMPARISONS.includes(op)) b = b.map((v, i) => (i % 3 === 0 ? a[i]! : v))
  return [a, b]
}

/** The expected output of x (op) y for each i, by dtype. */
const reference = (dtype: DType, op: BinaryOpName, xs: number[], ys: number[]): number[] =>
  xs.map((x, i) => {
    const y = ys[i]!
    if (dtype === "bool") {
      if (op === "add" || op === "maximum") return x | y
      if (op === "mul" || op === "minimum") return x & y
      return compare(op, x, y)
    }
    if (FLOATS.includes(dtype as never)) {
      const v = floatRef(op, x, y)
      return COMPARISONS.includes(op) ? v : roundTo(dtype, v)
    }
    return Number(intRef(dtype as IntDType, op, BigInt(x), BigInt(y)))
  })

const outFor = (op: BinaryOpName, dtype: DType, shape: number[]): Tensor => empty(COMPARISONS.includes(op) ? "bool" : dtype, shape)

const check = (dtype: DType, op: BinaryOpName, out: Tensor, expected: number[], what: string): void => {
  if (COMPARISONS.includes(op) || !FLOATS.includes(dtype as never)) expect(valuesOf(out)).toEqual(expected)
  else expectClose(dtype, valuesOf(out), expected, what)
}

const BOOL_OPS: ReadonlyArray<BinaryOpName> = ["add", "mul", "maximum", "minimum", ...COMPARISONS]

describe("unary", () => {
  for (const dtype of FLOATS)
    for (const op of Object.keys(UNARY_FLOAT) as UnaryOpName[])
      test(`${dtype} ${op}`, () => {
        const positive = op === "log" || op === "sqrt" || op === "rsqrt" || op === "log1p"
        const xs = sample(dtype, N, positive ? 0.01 : -5, 5, 11)
        const a = tensor(dtype, [N], xs)
        const out = empty(dtype, [N])
        ops.unary(op, out, a)
        expectClose(dtype, valuesOf(out), xs.map((x) => roundTo(dtype, UNARY_FLOAT[op]!(x))), op)
        ops.unary(op, a, a) // in place
        expectClose(dtype, valuesOf(a), valuesOf(out), `${op} in place`)
      })

  test("f32 special values: relu keeps NaN, log(0) is -inf, sqrt(-1) is NaN, sigmoid saturates", () => {
    const a = tensor("f32", [4], [NaN, 0, -1, -200])
    const out = empty("f32", [4])
    ops.unary("relu", out, a)
    expect(valuesOf(out).slice(0, 3)).toEqual([NaN, 0, 0])
    ops.unary("log", out, a)
    expect(valuesOf(out)[1]).toBe(-Infinity)
    ops.unary("sqrt", out, a)
    expect(valuesOf(out)[2]).toBeNaN()
    ops.unary("sigmoid", out, a)
    expect(valuesOf(out)[3]).toBe(0)
  })

  for (const dtype of INTEGERS)
    test(`${dtype} neg, abs and relu wrap like two's complement`, () => {
      const xs = dtype === "u8" ? [0, 1, 2, 127, 128, 255] : dtype === "i32" ? [0, 1, -1, 7, -7, 2 ** 31 - 1, -(2 ** 31)] : [0, 1, -1, 7, -7, -(2 ** 53)]
      const a = tensor(dtype, [xs.length], xs)
      const out = empty(dtype, [xs.length])
      const wrap = (v: number) => Number(wrapInt(dtype, BigInt(v)))
      ops.unary("neg", out, a)
      expect(valuesOf(out)).toEqual(xs.map((x) => wrap(-x)))
      ops.unary("abs", out, a)
      expect(valuesOf(out)).toEqual(xs.map((x) => wrap(Math.abs(x))))
      ops.unary("relu", out, a)
      expect(valuesOf(out)).toEqual(xs.map((x) => (x < 0 ? 0 : x)))
    })

  test("i64 neg and abs of INT64_MIN wrap to itself", () => {
    const min = -(2n ** 63n)
    const a = tensor("i64", [2], [min, 5n])
    const out = empty("i64", [2])
    ops.unary("neg", out, a)
    expect(bigValuesOf(out)).toEqual([min, -5n])
    ops.unary("abs", out, a)
    expect(bigValuesOf(out)).toEqual([min, 5n])
  })

  test("bool abs and relu return the input; neg is unsupported", () => {
    const a = tensor("bool", [3], [1, 0, 1])
    const out = empty("bool", [3])
    ops.unary("abs", out, a)
    expect(valuesOf(out)).toEqual([1, 0, 1])
    ops.unary("relu", out, a)
    expect(valuesOf(out)).toEqual([1, 0, 1])
    expectShimError(() => ops.unary("neg", out, a), "Unsupported", /shim_unary\(neg\): not defined on bool/)
  })

  for (const dtype of [...INTEGERS, "bool"] as const)
    test(`${dtype}: exp, log, sqrt, tanh and sigmoid are unsupported, naming the fix`, () => {
      const a = tensor(dtype, [2], [1, 0])
      const out = empty(dtype, [2])
      for (const op of ["exp", "log", "sqrt", "tanh", "sigmoid", "erf", "sin", "silu", "gelu", "softplus", "reciprocal"] as const)
        expectShimError(() => ops.unary(op, out, a), "Unsupported", new RegExp(`shim_unary\\(${op}\\): not defined on ${dtype} \\(cast to a floating dtype first\\)`))
    })

  test("mismatched out and unknown op codes are rejected by the shim itself", () => {
    const a = tensor("f32", [3], [1, 2, 3])
    const wrongDtype = empty("f64", [3]), wrongSize = empty("f32", [4])
    const raw = (op: number, out: Tensor) => native.check(native.shim.shim_unary(op, out.handle, a.handle, null), "shim_unary")
    expectShimError(() => raw(0, wrongDtype), "Invalid", /shim_unary\(neg\): out is f64\[3\] but a is f32\[3\]/)
    expectShimError(() => raw(0, wrongSize), "Invalid", /shim_unary\(neg\): out is f32\[4\] but a is f32\[3\]/)
    const past = Object.keys(UnaryOp).length
    expectShimError(() => raw(past, wrongSize), "Invalid", new RegExp(`shim_unary: unknown op code ${past}`))
  })
})

describe("binary, tensor with tensor", () => {
  for (const dtype of [...FLOATS, ...INTEGERS, "bool"] as const)
    for (const op of dtype === "bool" ? BOOL_OPS : [...ARITHMETIC, ...COMPARISONS])
      test(`${dtype} ${op}: same shape, one-element a, one-element b, in place`, () => {
        const [xs, ys] = operands(dtype, op, N, 23)
        const a = tensor(dtype, [N], xs), b = tensor(dtype, [N], ys)
        const out = outFor(op, dtype, [N])
        ops.binary(op, out, a, b)
        check(dtype, op, out, reference(dtype, op, xs, ys), "same shape")

        const a1 = tensor(dtype, [1, 1], [xs[0]!])
        ops.binary(op, out, a1, b)
        check(dtype, op, out, reference(dtype, op, Array(N).fill(xs[0]), ys), "a broadcast")

        const b1 = tensor(dtype, [], [ys[1]!])
        ops.binary(op, out, a, b1)
        check(dtype, op, out, reference(dtype, op, xs, Array(N).fill(ys[1])), "b broadcast")

        if (!COMPARISONS.includes(op)) {
          ops.binary(op, a, a, b) // out is a
          check(dtype, op, a, reference(dtype, op, xs, ys), "in place")
        }
      })

  test("f16 crosses chunk boundaries with broadcast on either side", () => {
    const n = 2500
    const xs = sample("f16", n, -8, 8, 5)
    const a = tensor("f16", [n], xs), one = tensor("f16", [1], [1.5])
    const out = empty("f16", [n])
    ops.binary("mul", out, a, one)
    expectClose("f16", valuesOf(out), xs.map((x) => roundTo("f16", x * 1.5)), "a * 1.5")
    ops.binary("sub", out, one, a)
    expectClose("f16", valuesOf(out), xs.map((x) => roundTo("f16", 1.5 - x)), "1.5 - a")
  })

  test("an operand whose count divides the other's repeats along it, on either side, for every dtype path", () => {
    const rows = [1, 2, 3, 4, 5, 6, 7, 8], bias = [10, 20, 30, 40]
    for (const dtype of ["f32", "f64", "f16", "i32"] as const) {
      const a = tensor(dtype, [2, 4], rows), b = tensor(dtype, [4], bias), out = empty(dtype, [2, 4]), flags = empty("bool", [2, 4])
      ops.binary("sub", out, a, b)
      expect(valuesOf(out)).toEqual(rows.map((x, i) => x - bias[i % 4]!))
      ops.binary("sub", out, b, a)
      expect(valuesOf(out)).toEqual(rows.map((x, i) => bias[i % 4]! - x))
      ops.binary("lt", flags, tensor(dtype, [2], [3, 6]), a)
      expect(valuesOf(flags)).toEqual(rows.map((x, i) => Number([3, 6][i % 2]! < x)))
    }
  })

  test("0-element operands broadcast against one element", () => {
    const none = tensor("f32", [0], []), one = tensor("f32", [1], [2])
    const out = empty("f32", [0])
    ops.binary("add", out, none, one)
    ops.binary("add", out, one, none)
    expect(valuesOf(out)).toEqual([])
  })

  test("float maximum and minimum propagate NaN; comparisons follow IEEE", () => {
    const a = tensor("f64", [3], [NaN, 1, 2]), b = tensor("f64", [3], [0, NaN, 2])
    const out = empty("f64", [3]), flags = empty("bool", [3])
    ops.binary("maximum", out, a, b)
    expect(valuesOf(out)).toEqual([NaN, NaN, 2])
    ops.binary("minimum", out, a, b)
    expect(valuesOf(out)).toEqual([NaN, NaN, 2])
    ops.binary("ne", flags, a, b)
    expect(valuesOf(flags)).toEqual([1, 1, 0])
    ops.binary("eq", flags, a, a)
    expect(valuesOf(flags)).toEqual([0, 1, 1])
  })

  test("integer overflow wraps and INT_MIN / -1 is INT_MIN, with no trap", () => {
    const a = tensor("i32", [3], [2 ** 31 - 1, -(2 ** 31), 3]), b = tensor("i32", [3], [1, -1, 25])
    const out = empty("i32", [3])
    ops.binary("add", out, a, b)
    expect(valuesOf(out)).toEqual([-(2 ** 31), 2 ** 31 - 1, 28])
    ops.binary("div", out, a, b)
    expect(valuesOf(out)).toEqual([2 ** 31 - 1, -(2 ** 31), 0])
    ops.binary("pow", out, a, tensor("i32", [3], [1, 2, 25]))
    expect(valuesOf(out)).toEqual([2 ** 31 - 1, 0, Number(wrapInt("i32", 3n ** 25n))])
    const min = -(2n ** 63n)
    const c = tensor("i64", [2], [min, 2n ** 62n]), d = tensor("i64", [2], [-1n, 4n])
    const out64 = empty("i64", [2])
    ops.binary("div", out64, c, d)
    expect(bigValuesOf(out64)).toEqual([min, 2n ** 60n])
    ops.binary("mul", out64, c, d)
    expect(bigValuesOf(out64)).toEqual([min, 0n])
    const e = tensor("u8", [2], [200, 3]), f = tensor("u8", [2], [100, 5])
    const out8 = empty("u8", [2])
    ops.binary("add", out8, e, f)
    expect(valuesOf(out8)).toEqual([44, 8])
    ops.binary("sub", out8, f, e)
    expect(valuesOf(out8)).toEqual([156, 2])
    ops.binary("pow", out8, f, e)
    expect(valuesOf(out8)).toEqual([Number(wrapInt("u8", 100n ** 200n)), 125])
  })

  for (const dtype of INTEGERS)
    test(`${dtype}: division by zero fails before writing anything`, () => {
      const a = tensor(dtype, [3], [6, 7, 8]), b = tensor(dtype, [3], [1, 2, 0])
      expectShimError(() => ops.binary("div", a, a, b), "Invalid", /shim_binary\(div\): integer division by zero \(b has a zero element\)/)
      expect(valuesOf(a)).toEqual([6, 7, 8])
      expectShimError(() => ops.binaryScalar("div", a, a, 0, false), "Invalid", /shim_binary_scalar\(div\): integer division by zero \(the scalar/)
      expectShimError(() => ops.binaryScalar("div", a, b, 12, true), "Invalid", /shim_binary_scalar\(div\): integer division by zero \(a has/)
      expect(valuesOf(a)).toEqual([6, 7, 8])
    })

  test("integer pow with a negative exponent fails; 0 pow 0 is 1", () => {
    const a = tensor("i32", [2], [0, 2]), b = tensor("i32", [2], [0, -1])
    const out = empty("i32", [2])
    expectShimError(() => ops.binary("pow", out, a, b), "Invalid", /shim_binary\(pow\): i32 integer to a negative power/)
    ops.binaryScalar("pow", out, a, 0, false)
    expect(valuesOf(out)).toEqual([1, 1])
  })

  test("bool sub, div and pow are unsupported", () => {
    const a = tensor("bool", [2], [1, 0])
    const out = empty("bool", [2])
    for (const op of ["sub", "div", "pow"] as const)
      expectShimError(() => ops.binary(op, out, a, a), "Unsupported", new RegExp(`shim_binary\\(${op}\\): not defined on bool`))
  })

  test("the wrapper rejects mismatches before the shim", () => {
    const a = tensor("f32", [3], [1, 2, 3]), b = tensor("f64", [3], [1, 2, 3]), c = tensor("f32", [4], [1, 2, 3, 4])
    const out = empty("f32", [3])
    expectShimError(() => ops.binary("add", out, a, b), "Invalid", /^add: dtypes differ/)
    expectShimError(() => ops.binary("add", out, a, c), "Invalid", /^add: shapes do not broadcast/)
    expectShimError(() => ops.binary("add", empty("f32", [5]), a, a), "Invalid", /^add: output .* has the wrong size/)
  })

  test("the shim rejects mismatches itself, naming the op and both sides", () => {
    const a = tensor("f32", [3], [1, 2, 3]), b = tensor("f64", [3], [1, 2, 3]), c = tensor("f32", [2, 2], [1, 2, 3, 4])
    const raw = (op: number, out: Tensor, x: Tensor, y: Tensor) =>
      native.check(native.shim.shim_binary(op, out.handle, x.handle, y.handle, null), "shim_binary")
    const out = empty("f32", [3])
    expectShimError(() => raw(BinaryOp.add, out, a, b), "Invalid", /shim_binary\(add\): dtypes differ: a is f32\[3\], b is f64\[3\]/)
    expectShimError(() => raw(BinaryOp.mul, out, a, c), "Invalid", /shim_binary\(mul\): sizes differ and neither repeats to the other's: a is f32\[3\], b is f32\[2, 2\]/)
    expectShimError(() => raw(BinaryOp.add, empty("f32", [5]), a, a), "Invalid", /shim_binary\(add\): out is f32\[5\] but the result has 3 elements/)
    expectShimError(() => raw(BinaryOp.lt, out, a, a), "Invalid", /shim_binary\(lt\): out is f32\[3\] but must be bool/)
    expectShimError(() => raw(BinaryOp.add, empty("bool", [3]), a, a), "Invalid", /shim_binary\(add\): out is bool\[3\] but must be f32/)
    const past = Object.keys(BinaryOp).length
    expectShimError(() => raw(past, out, a, a), "Invalid", new RegExp(`shim_binary: unknown op code ${past}`))
    expectShimError(
      () => native.check(native.shim.shim_binary_scalar(BinaryOp.add, empty("f32", [2]).handle, a.handle, 1, 0, null), "shim_binary_scalar"),
      "Invalid",
      /shim_binary_scalar\(add\): out is f32\[2\] but the result has 3 elements/,
    )
  })
})

describe("binary with a scalar", () => {
  /** The scalar as the op sees it: float for f32/f16/bf16, double for f64, a's dtype otherwise. */
  const scalarIn = (dtype: DType, s: number): number =>
    dtype === "f64" ? s : FLOATS.includes(dtype as never) ? Math.fround(s) : dtype === "bool" ? (s !== 0 ? 1 : 0) : Number(toIntSaturated(dtype as IntDType, s))

  for (const dtype of [...FLOATS, ...INTEGERS, "bool"] as const)
    for (const op of dtype === "bool" ? BOOL_OPS : [...ARITHMETIC, ...COMPARISONS])
      test(`${dtype} ${op}: a (op) s and s (op) a`, () => {
        const [xs, ys] = operands(dtype, op, N, 31)
        const s = ys[4]!
        const a = tensor(dtype, [N], xs)
        const out = outFor(op, dtype, [N])
        ops.binaryScalar(op, out, a, s, false)
        check(dtype, op, out, reference(dtype, op, xs, Array(N).fill(scalarIn(dtype, s))), "a op s")
        const usable = op === "div" && !FLOATS.includes(dtype as never) ? xs.map((x) => (x === 0 ? 1 : x)) : op === "pow" ? ys : xs
        const b = tensor(dtype, [N], usable)
        const base = op === "pow" ? xs[2]! : s
        ops.binaryScalar(op, out, b, base, true)
        check(dtype, op, out, reference(dtype, op, Array(N).fill(scalarIn(dtype, base)), usable), "s op a")
      })

  test("f16 and bf16 keep the scalar in float: f16 5 * (1/3) rounds once", () => {
    const a = tensor("f16", [1], [5])
    const out = empty("f16", [1])
    ops.binaryScalar("mul", out, a, 1 / 3, false)
    // 5 * float(1/3) = 1.66666...7 -> f16 1.6669921875; an f16 scalar (0.33325...) would give 1.666015625
    expect(valuesOf(out)).toEqual([1.6669921875])
  })

  test("integer tensors take the scalar truncated and saturated", () => {
    const a = tensor("i32", [3], [1, 2, 3])
    const flags = empty("bool", [3])
    ops.binaryScalar("lt", flags, a, 2.5, false) // compares with 2
    expect(valuesOf(flags)).toEqual([1, 0, 0])
    const u = tensor("u8", [2], [10, 0])
    const out = empty("u8", [2])
    ops.binaryScalar("add", out, u, 300, false) // 300 saturates to 255, then the sum wraps
    expect(valuesOf(out)).toEqual([9, 255])
    ops.binaryScalar("sub", out, u, -4, true) // -4 saturates to 0
    expect(valuesOf(out)).toEqual([246, 0])
  })

  test("sub and div are not commutative: scalar_first swaps the operands", () => {
    const a = tensor("f64", [2], [2, 8])
    const out = empty("f64", [2])
    ops.binaryScalar("div", out, a, 16, true)
    expect(valuesOf(out)).toEqual([8, 2])
    ops.binaryScalar("div", out, a, 16, false)
    expect(valuesOf(out)).toEqual([0.125, 0.5])
    ops.binaryScalar("sub", out, a, 1, true)
    expect(valuesOf(out)).toEqual([-1, -7])
  })
})

describe("floor_divide, remainder and the ternary ops", () => {
  test("an integer zero divisor fails floor_divide, remainder and fmod, naming them, before writing", () => {
    const a = tensor("i64", [3], [7, -7, 1]), zero = tensor("i64", [3], [2, 0, 1]), out = tensor("i64", [3], [9, 9, 9])
    for (const op of ["floor_divide", "remainder", "fmod"] as const) {
      expectShimError(() => ops.binary(op, out, a, zero), "Invalid", new RegExp(`shim_binary\\(${op}\\): integer division by zero \\(b has a zero element\\)`))
      expectShimError(() => ops.binaryScalar(op, out, a, 0, false), "Invalid", new RegExp(`shim_binary_scalar\\(${op}\\): integer division by zero`))
    }
    expect(valuesOf(out)).toEqual([9, 9, 9])
  })

  test("i32 INT_MIN floor_divide -1 wraps and its remainder is 0; u8 divides as unsigned", () => {
    const min = -(2 ** 31), a = tensor("i32", [2], [min, -7]), b = tensor("i32", [2], [-1, 2]), out = empty("i32", [2])
    ops.binary("floor_divide", out, a, b)
    expect(valuesOf(out)).toEqual([min, -4])
    ops.binary("remainder", out, a, b)
    expect(valuesOf(out)).toEqual([0, 1])
    ops.binary("fmod", out, a, b)
    expect(valuesOf(out)).toEqual([0, -1])
  })

  test("where reads any condition dtype as nonzero (NaN is true) and takes one-element operands", () => {
    const cond = tensor("f32", [4], [0, NaN, -0, 2]), x = tensor("i64", [4], [1, 2, 3, 4]), y = tensor("i64", [], [-1]), out = empty("i64", [4])
    ops.ternary("where", out, cond, x, y, 0)
    expect(valuesOf(out)).toEqual([-1, 2, -1, 4])
  })

  test("the shim refuses operand counts, dtypes and unsupported dtypes itself", () => {
    const a = tensor("f32", [3], [1, 2, 3]), out = empty("f32", [3])
    expectShimError(() => native.check(native.shim.shim_ternary(TernaryOp.lerp, out.handle, a.handle, empty("f32", [2]).handle, a.handle, 0, null), "shim_ternary"),
      "Invalid", /shim_ternary\(lerp\): each operand needs out's 3 elements or one/)
    expectShimError(() => ops.ternary("addcmul", out, a, a, empty("f64", [3]), 1), "Invalid", /shim_ternary\(addcmul\): dtypes differ/)
    const i = tensor("i32", [3], [1, 2, 3])
    expectShimError(() => ops.ternary("addcdiv", empty("i32", [3]), i, i, i, 1), "Unsupported", /shim_ternary\(addcdiv\): not defined on i32/)
    const past = Object.keys(TernaryOp).length
    expectShimError(() => native.check(native.shim.shim_ternary(past, out.handle, a.handle, a.handle, a.handle, 0, null), "shim_ternary"), "Invalid", new RegExp(`shim_ternary: unknown op code ${past}`))
  })
})
