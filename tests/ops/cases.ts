// The table of op cases the numerics are checked on: each a built-in call with its tensors
// drawn from a seeded generator, which tests/ops/parity.test.ts runs against torch 1.13 and
// tests/worker/strided.test.ts runs again on strided views of the same elements.
import type { WorkerMessage } from "../../src/protocol/messages.ts"
import { float, type DType } from "../../src/protocol/values.ts"
import { call, host, ref } from "../worker/build.ts"

/** |ours - torch| <= atol + rtol * |torch|, per result dtype; integers and bool exactly. */
export const TOLERANCE: Readonly<Record<DType, { rtol: number; atol: number }>> = {
  f64: { rtol: 1e-12, atol: 1e-12 }, f32: { rtol: 2e-6, atol: 1e-6 }, f16: { rtol: 2e-3, atol: 1e-3 }, bf16: { rtol: 1.6e-2, atol: 1e-2 },
  i64: { rtol: 0, atol: 0 }, i32: { rtol: 0, atol: 0 }, u8: { rtol: 0, atol: 0 }, bool: { rtol: 0, atol: 0 },
}

/** A seeded tensor: values from a small LCG, integers in [-5, 5) (bool 0/1, u8 [0, 10)); casesOf sets the seed. */
let seed = 0
const rnd = () => ((seed = (seed * 1103515245 + 12345) % 2 ** 31) / 2 ** 31)
/** x rounded to a floating dtype, to nearest even (bf16: from its f32 bits), so both sides start from one value. */
const representable = (t: DType, x: number): number => {
  if (t === "f64") return x
  if (t === "f16") return Math.f16round(x)
  const f = Math.fround(x)
  if (t !== "bf16") return f
  const u = new Uint32Array(Float32Array.of(f).buffer)[0]!
  return new Float32Array(Uint32Array.of(((u + 0x7fff + ((u >>> 16) & 1)) >>> 16) << 16).buffer)[0]!
}
/** nc: the tensor is used transposed in its last two dims (non-contiguous in torch; on the worker, the result of an ops.transpose). */
export interface T { readonly t: DType; readonly shape: number[]; readonly data: number[]; readonly nc?: true }
export const tensor = (t: DType, shape: number[], scale = 3): T => {
  const n = shape.reduce((a, b) => a * b, 1)
  const data = Array.from({ length: n }, () => t === "bool" ? Math.floor(rnd() * 2) : t === "u8" ? Math.floor(rnd() * 10)
    : t === "i32" || t === "i64" ? Math.floor(rnd() * 10) - 5 : representable(t, (rnd() * 2 - 1) * scale))
  return { t, shape, data }
}
const ints = (t: "i64", shape: number[], values: number[]): T => ({ t, shape, data: values })
export const isT = (v: unknown): v is T => typeof v === "object" && v !== null && "t" in v && "data" in v
/** A float number in a case (`{ float: 2 }`): float(2) on the worker, Python's 2.0 in torch. */
export const isFloatNumber = (v: unknown): v is { float: number } => typeof v === "object" && v !== null && "float" in v
/** x as the transpose of its last two dims (x's data holds the swapped shape). */
const nc = (x: T): T => ({ ...x, nc: true })
/** A case's arguments for the wire; each nc tensor becomes a ref defined by the command pushed to `pre`. */
export const toWire = (v: unknown, pre: Array<(ident: number) => WorkerMessage> = [], refBase = 0): unknown => {
  if (isT(v)) {
    if (!v.nc) return host(v.t, v.shape, v.data)
    const id = refBase + pre.length
    pre.push((ident) => call(ident, [id], "ops.transpose", [host(v.t, v.shape, v.data), -1, -2]))
    return ref(id)
  }
  if (Array.isArray(v)) return v.map((x) => toWire(x, pre, refBase))
  if (isFloatNumber(v)) return float(v.float)
  // keyword arguments (a tensor among them: clamp's bounds)
  return typeof v === "object" && v !== null ? Object.fromEntries(Object.entries(v).map(([k, x]) => [k, toWire(x, pre, refBase)])) : v
}

/** results: how many tensors the op defines (torch answers a tuple of as many). */
export interface Case { readonly name: string; readonly op: string; readonly args: unknown[]; readonly kwargs?: Record<string, unknown>; readonly results?: number }
export const c = (name: string, op: string, args: unknown[], kwargs: Record<string, unknown> = {}, results = 1): Case => ({ name, op, args, kwargs, results })

export const f = (...s: number[]) => tensor("f32", s)
const FLOATS = ["f32", "f64", "f16", "bf16"] as const
const ALL = [...FLOATS, "i64", "i32", "u8", "bool"] as const
/** A divisor without zeros (|x| + 0.5). */
const nonzero = (x: T): T => ({ ...x, data: x.data.map((v) => representable(x.t, Math.abs(v) + 0.5)) })
const isFloat = (t: DType): boolean => (FLOATS as ReadonlyArray<DType>).includes(t)
const FLOAT_OF_INT = ["erf", "log1p", "expm1", "rsqrt", "reciprocal", "sin", "cos"]
const MATH = [...FLOAT_OF_INT, "floor", "ceil", "round", "trunc", "sign", "silu", "softplus", "gelu"]
const PREDICATES = ["isnan", "isinf", "logical_not"]
/** The unary ops torch's Tensor has an in-place `_` form of (logical_not_ is tested with the predicates' inputs). */
const IN_PLACE_UNARY = ["neg", "abs", "sign", "exp", "log", "log1p", "expm1", "sqrt", "rsqrt", "reciprocal", "sin", "cos", "tanh", "sigmoid", "relu", "erf", "floor", "ceil", "round", "trunc"]
/** log1p and rsqrt of values where they are defined (their NaNs are tested through isnan). */
const positive = (op: string, x: T): T =>
  op === "rsqrt" || op === "log1p" ? { ...x, data: x.data.map((v) => Math.abs(v) + (isFloat(x.t) ? 0.25 : 0)) } : x
/** NaN, infinities and zeros among ordinary values (integers and bool: their own zeros). */
const special = (t: DType): T => {
  const x = tensor(t, [7])
  return isFloat(t) ? { ...x, data: [NaN, Infinity, -Infinity, 0, -0, 1.5, -2] } : x
}
/**
 * `count` cases, chosen by their own seeded generator (at the table's end, so the older cases' inputs stay as they were):
 * add, mul, div, pow, eq, lt, where and clamp with tensor bounds, each operand a tensor of any
 * dtype with dims or 0-d, or a number (an integer, a float: `{ float: v }`, sent as float64).
 */
function promotionCases(promotionSeed: number, count: number): Case[] {
  let state = promotionSeed
  const next = () => ((state = (state * 1103515245 + 12345) % 2 ** 31) / 2 ** 31)
  const pick = <A,>(xs: ReadonlyArray<A>): A => xs[Math.floor(next() * xs.length)]!
  const nonBool = ALL.filter((t) => t !== "bool")
  const text = (v: unknown) => (isT(v) ? `${v.t}[${v.shape}]` : typeof v === "object" ? `float(${(v as { float: number }).float})` : String(v))
  /** A tensor operand of dtype t: with dims broadcasting against [2, 3], or 0-d; values nonzero when it divides. */
  const operand = (t: DType, divides = false): T => {
    const x = tensor(t, next() < 0.5 ? [] : pick([[3], [2, 3], [2, 1]]))
    if (!divides || t === "bool") return x
    return isFloat(t) ? nonzero(x) : { ...x, data: x.data.map((v) => Math.abs(v) + 1) }
  }
  const number = (): unknown => pick([2, 3, { float: 2 }, { float: 1 }, 0.5])
  const other = (types: ReadonlyArray<DType>, divides = false) => (next() < 0.3 ? number() : operand(pick(types), divides))
  const cases: Case[] = []
  while (cases.length < count) {
    const op = pick(["add", "mul", "div", "pow", "eq", "lt", "where", "clamp"] as const)
    let args: unknown[]
    if (op === "where") args = [tensor("bool", [2, 3]), other(ALL), other(ALL)]
    else if (op === "clamp") {
      // Tensor bounds, the lower below the upper; torch 1.13 has no f16 clamp on CPU.
      const types = nonBool.filter((t) => t !== "f16"), low = operand(pick(types)), high = operand(pick(types))
      args = [tensor(pick(types), [2, 3]), { ...low, data: low.data.map((v) => (low.t === "u8" ? 0 : Math.min(v, 0))) }, { ...high, data: high.data.map((v) => (high.t === "u8" ? v : Math.abs(v))) }]
    } else if (op === "pow") {
      // Integer bases to non-negative powers only (torch refuses negative integer powers).
      const base = operand(pick(nonBool)), exponent = other(nonBool)
      args = [base, isT(exponent) ? { ...exponent, data: exponent.data.map((v) => Math.abs(v) % 3) } : exponent]
    } else args = [operand(pick(op === "add" || op === "mul" ? nonBool : ALL)), other(ALL, op === "div")]
    cases.push(c(`promotion ${cases.length} (seed ${promotionSeed}): ${op}(${args.map(text).join(", ")})`, op, args))
  }
  return cases
}

/** x + by, rounded to x's dtype: rows far from 0 (log_softmax's precision at large logits). */
const offset = (x: T, by: number): T => ({ ...x, data: x.data.map((v) => representable(x.t, v + by)) })
/** The table, its tensors drawn from `start` on (the same cases in the same order for every seed). */
export const casesOf = (start: number): Case[] => (seed = start, [
  // broadcasting and promotion
  c("add [3,4] + [4]", "add", [f(3, 4), f(4)]),
  c("mul [2,1,3] * [4,1]", "mul", [f(2, 1, 3), f(4, 1)]),
  c("sub [1] - [2,3]", "sub", [f(1), f(2, 3)]),
  c("add i64 + f32 promotes", "add", [tensor("i64", [3]), f(3)]),
  c("add i32 + i64", "add", [tensor("i32", [2, 3]), tensor("i64", [3])]),
  c("add f32 + f64", "add", [f(2, 2), tensor("f64", [2, 2])]),
  c("div i64 / i64 is true division", "div", [tensor("i64", [4]), ints("i64", [4], [1, 2, -3, 4])]),
  c("add bool + 2 is i64", "add", [tensor("bool", [3]), 2]),
  c("add i64 + 2.5 is f32", "add", [tensor("i64", [3]), 2.5]),
  c("mul f32 * 3 keeps f32", "mul", [f(2, 3), 3]),
  c("sub 1 - f32 (number first)", "sub", [1, f(3)]),
  c("maximum broadcast", "maximum", [f(3, 1), f(1, 4)]),
  c("pow f32 ^ 2", "pow", [f(4), 2]),
  c("lt [3,1] < [4]", "lt", [f(3, 1), f(4)]),
  c("eq i64 == f32", "eq", [tensor("i64", [3]), ints("i64", [3], [1, -2, 0])]),
  c("ge f32 >= 0.5", "ge", [f(5), 0.5]),
  c("empty broadcast [0,3] + [3]", "add", [f(0, 3), f(3)]),
  c("0-d + [2]", "add", [f(), f(2)]),
  // unary
  ...["neg", "abs", "exp", "tanh", "sigmoid", "relu"].map((op) => c(`${op} f32`, op, [f(2, 3)])),
  c("exp of i64 is f32", "exp", [tensor("i64", [4])]),
  c("sqrt f64", "sqrt", [{ ...tensor("f64", [4]), data: [0, 1, 2, 9] }]),
  c("log f32", "log", [{ ...f(3), data: [0.5, 1, 4] }]),
  c("clamp", "clamp", [f(6)], { min: -1, max: 0.5 }),
  // math: every floating dtype, integer and bool inputs, 0-d, empty, special values
  ...MATH.flatMap((op) => FLOATS.map((t) => c(`${op} ${t}`, op, [positive(op, tensor(t, [2, 3]))]))),
  ...FLOAT_OF_INT.flatMap((op) => (["i64", "i32", "u8", "bool"] as const).map((t) => c(`${op} of ${t} is f32`, op, [positive(op, tensor(t, [5]))]))),
  ...MATH.map((op) => c(`${op} 0-d`, op, [positive(op, f())])),
  ...MATH.map((op) => c(`${op} empty`, op, [f(0, 3)])),
  ...["floor", "ceil", "round", "trunc", "sign"].flatMap((op) => (["i64", "i32", "u8"] as const).map((t) => c(`${op} keeps ${t}`, op, [tensor(t, [5])]))),
  c("sign of bool", "sign", [tensor("bool", [4])]),
  c("round half to even", "round", [{ ...f(8), data: [0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 3.5000002, -0.49999997] }]),
  c("round half to even f64", "round", [{ ...tensor("f64", [4]), data: [0.5, 1.5, 2.5, -3.5] }]),
  c("sign of NaN, inf, -0", "sign", [{ ...f(5), data: [NaN, Infinity, -Infinity, -0, 0] }]),
  c("softplus past its threshold", "softplus", [{ ...f(4), data: [19.5, 20, 20.5, 100] }]),
  c("expm1 and log1p near 0 keep precision", "expm1", [{ ...tensor("f64", [3]), data: [1e-10, -1e-12, 1e-5] }]),
  c("log1p near 0", "log1p", [{ ...tensor("f64", [3]), data: [1e-10, -1e-12, 1e-5] }]),
  c("gelu tanh form", "gelu", [f(3, 4)], { approximate: "tanh" }),
  c("gelu tanh form bf16", "gelu", [tensor("bf16", [6])], { approximate: "tanh" }),
  c("gelu tanh form f16", "gelu", [tensor("f16", [6])], { approximate: "tanh" }),
  c("gelu tanh form f64", "gelu", [tensor("f64", [6])], { approximate: "tanh" }),
  ...PREDICATES.flatMap((op) => [...FLOATS, "i64", "i32", "u8", "bool"].map((t) => c(`${op} ${t}`, op, [special(t as DType)]))),
  ...PREDICATES.map((op) => c(`${op} 0-d`, op, [f()])),
  ...PREDICATES.map((op) => c(`${op} empty`, op, [f(0)])),
  // floor_divide, remainder (toward -inf, the divisor's sign), logical_and/or
  ...["floor_divide", "remainder"].flatMap((op) => [
    c(`${op} f32 broadcast`, op, [f(3, 4), nonzero(f(4))]),
    c(`${op} f64 mixed signs`, op, [{ ...tensor("f64", [6]), data: [7, -7, 7, -7, 5.5, -0.5] }, { ...tensor("f64", [6]), data: [2, 2, -2, -2, -1.5, 3] }]),
    c(`${op} f16`, op, [tensor("f16", [5]), nonzero(tensor("f16", [5]))]),
    c(`${op} bf16`, op, [tensor("bf16", [5]), nonzero(tensor("bf16", [5]))]),
    c(`${op} i64 mixed signs`, op, [ints("i64", [6], [7, -7, 7, -7, 0, -1]), ints("i64", [6], [2, 2, -2, -2, 3, 5])]),
    c(`${op} i32 by a number`, op, [tensor("i32", [6]), 3]),
    c(`${op} u8`, op, [tensor("u8", [5]), { ...tensor("u8", [5]), data: [1, 2, 3, 4, 7] }]),
    c(`${op} number by i64`, op, [5, ints("i64", [2], [3, -3])]),
    c(`${op} i64 by f32 promotes`, op, [tensor("i64", [4]), nonzero(f(4))]),
    c(`${op} 0-d`, op, [f(), 1.5]),
    c(`${op} empty`, op, [f(0, 2), f(2)]),
  ]),
  c("floor_divide f32 by 0 is IEEE", "floor_divide", [{ ...f(3), data: [1, -1, 0] }, 0]),
  ...["logical_and", "logical_or"].flatMap((op) => [
    c(`${op} bool`, op, [tensor("bool", [6]), tensor("bool", [6])]),
    c(`${op} f32 with NaN and zeros, broadcast`, op, [{ ...f(2, 3), data: [NaN, 0, 1, -0, 2, 0] }, { ...tensor("i64", [3]), data: [0, 1, 3] }]),
    c(`${op} i32 with i64`, op, [tensor("i32", [5]), tensor("i64", [5])]),
    c(`${op} 0-d and empty`, op, [tensor("u8", []), tensor("bf16", [0])]),
  ]),
  // where, masked_fill, lerp, addcmul, addcdiv
  c("floor_divide_ i64 in place", "floor_divide_", [ints("i64", [4], [7, -7, 3, -1]), ints("i64", [4], [2, 2, -2, 3])]),
  c("remainder_ f32 in place, broadcast", "remainder_", [f(2, 3), nonzero(f(3))]),
  c("masked_fill_ in place", "masked_fill_", [f(2, 3), tensor("bool", [2, 3]), 7]),
  c("lerp_ in place", "lerp_", [f(4), f(4), 0.75]),
  c("addcmul_ in place", "addcmul_", [f(2, 2), f(2), f(2, 1)], { value: 2 }),
  c("addcmul_ i64 in place", "addcmul_", [tensor("i64", [3]), tensor("i64", [3]), tensor("i64", [3])], { value: -1 }),
  c("addcdiv_ in place", "addcdiv_", [tensor("f64", [3]), tensor("f64", [3]), nonzero(tensor("f64", [3]))], { value: 0.25 }),
  c("where broadcast, promotes", "where", [tensor("bool", [3, 1]), f(4), tensor("f64", [3, 4])]),
  c("where with numbers", "where", [tensor("bool", [5]), tensor("i64", [5]), 0.5]),
  c("where two integers", "where", [tensor("bool", [4]), 1, 0]),
  ...(["f16", "bf16", "i32", "u8", "bool"] as const).map((t) => c(`where ${t}`, "where", [tensor("bool", [2, 3]), tensor(t, [2, 3]), tensor(t, [3])])),
  c("where 0-d condition", "where", [tensor("bool", []), f(3), f(3)]),
  c("where empty", "where", [tensor("bool", [0]), f(0), f(1)]),
  c("masked_fill broadcast mask", "masked_fill", [f(2, 3), tensor("bool", [3]), -1e9]),
  c("masked_fill i64 truncates the value", "masked_fill", [tensor("i64", [2, 2]), tensor("bool", [2, 2]), 2.7]),
  c("masked_fill bf16", "masked_fill", [tensor("bf16", [4]), tensor("bool", [4]), 0.3]),
  c("masked_fill 0-d mask", "masked_fill", [f(3), tensor("bool", []), 5]),
  ...FLOATS.map((t) => c(`lerp ${t} scalar weight`, "lerp", [tensor(t, [2, 3]), tensor(t, [3]), 0.3])),
  c("lerp tensor weight, both sides of 0.5", "lerp", [f(2, 3), f(2, 3), { ...f(3), data: [0.2, 0.5, 0.9] }]),
  c("lerp f64 broadcast weight", "lerp", [tensor("f64", [4]), tensor("f64", [4]), { ...tensor("f64", [2, 1]), data: [-0.7, 1.3] }]),
  c("lerp 0-d and empty", "lerp", [f(), f(0), 0.5]),
  ...FLOATS.map((t) => c(`addcmul ${t}`, "addcmul", [tensor(t, [2, 3]), tensor(t, [3]), tensor(t, [2, 1])], { value: 0.5 })),
  c("addcmul i64", "addcmul", [tensor("i64", [4]), tensor("i64", [4]), tensor("i64", [4])], { value: 3 }),
  c("addcmul promotes i32 with f32", "addcmul", [tensor("i32", [3]), f(3), f(3)], { value: -2 }),
  c("addcmul u8", "addcmul", [tensor("u8", [3]), tensor("u8", [3]), tensor("u8", [3])]),
  ...FLOATS.map((t) => c(`addcdiv ${t}`, "addcdiv", [tensor(t, [2, 3]), tensor(t, [3]), nonzero(tensor(t, [2, 1]))], { value: 0.5 })),
  c("addcdiv f32 default value, broadcast", "addcdiv", [f(3, 1), f(1, 4), nonzero(f(4))]),
  c("addcdiv 0-d", "addcdiv", [f(), f(), nonzero(f())], { value: 2 }),
  // creation
  c("arange(5) is i64", "arange", [5]),
  c("arange(0, 1, 0.25) is f32", "arange", [0, 1, 0.25]),
  c("arange(2, 11, 3)", "arange", [2, 11, 3]),
  // reductions
  c("sum dim list keepdim", "sum", [f(2, 3, 4)], { dim: [0, 2], keepdim: true }),
  c("sum negative dim", "sum", [f(2, 3)], { dim: -1 }),
  c("sum of bool is i64", "sum", [tensor("bool", [5])]),
  c("sum of i32 is i64", "sum", [tensor("i32", [2, 3])], { dim: 1 }),
  c("mean all", "mean", [f(3, 4)]),
  c("mean dims", "mean", [f(2, 3, 4)], { dim: [1, 2] }),
  c("amax dim 0", "amax", [f(3, 4)], { dim: 0 }),
  c("amin dims keepdim", "amin", [f(2, 3, 4)], { dim: [-1, 0], keepdim: true }),
  c("prod dim", "prod", [f(3, 2)], { dim: 1 }),
  ...["any", "all"].flatMap((op) => [
    ...([...FLOATS, "i64", "i32", "u8", "bool"] as const).map((t) => c(`${op} ${t} dim`, op, [t === "bool" || t === "u8" || t === "i64" || t === "i32" ? tensor(t, [3, 4]) : special(t)], t === "bool" || t === "u8" || t === "i64" || t === "i32" ? { dim: 1 } : {})),
    c(`${op} dims keepdim`, op, [tensor("bool", [2, 3, 4])], { dim: [0, -1], keepdim: true }),
    c(`${op} 0-d`, op, [tensor("i64", [])]),
    c(`${op} empty dim`, op, [f(0, 3)], { dim: 0 }),
  ]),
  ...[1, 2, Infinity].flatMap((p) => [
    ...FLOATS.map((t) => c(`norm p=${p} ${t}`, "norm", [tensor(t, [3, 4])], { p })),
    c(`norm p=${p} dim -1 keepdim`, "norm", [f(2, 3, 4)], { p, dim: -1, keepdim: true }),
    c(`norm p=${p} dims`, "norm", [tensor("f64", [2, 3, 4])], { p, dim: [0, 2] }),
  ]),
  ...["argmax", "argmin"].flatMap((op) => [
    ...([...FLOATS, "i64", "i32", "u8"] as const).map((t) => c(`${op} ${t} dim 1`, op, [tensor(t, [3, 5])], { dim: 1 })),
    c(`${op} dim 0 keepdim`, op, [f(4, 3)], { dim: 0, keepdim: true }),
    c(`${op} negative dim, 3-D`, op, [tensor("f64", [2, 3, 4])], { dim: -2 }),
    c(`${op} over everything`, op, [f(3, 4)]),
    c(`${op} ties give the first`, op, [ints("i64", [6], [1, 3, 3, -2, -2, 3])]),
    c(`${op} NaN wins, the first one`, op, [{ ...f(2, 3), data: [1, NaN, NaN, 5, -1, NaN] }], { dim: 1 }),
    c(`${op} 0-d`, op, [f()]),
  ]),
  ...([...FLOATS, "i64", "i32", "u8", "bool"] as const).map((t) => c(`cumsum ${t}`, "cumsum", [tensor(t, [3, 4]), 1])),
  c("cumsum dim 0", "cumsum", [f(4, 3), 0]),
  c("cumsum negative dim, 3-D", "cumsum", [tensor("f64", [2, 3, 4]), -2]),
  c("cumsum 0-d", "cumsum", [f(), 0]),
  c("cumsum empty", "cumsum", [f(0, 3), 1]),
  ...["var", "std"].flatMap((op) => [
    ...FLOATS.map((t) => c(`${op} ${t} dim 1`, op, [tensor(t, [3, 5])], { dim: 1 })),
    c(`${op} over everything`, op, [f(4, 5)]),
    c(`${op} correction 0, dims keepdim`, op, [tensor("f64", [2, 3, 4])], { dim: [0, -1], correction: 0, keepdim: true }),
    c(`${op} correction 2`, op, [f(6)], { dim: 0, correction: 2 }),
    c(`${op} one element, correction 1: NaN or inf as torch`, op, [f(1)], { dim: 0 }),
  ]),
  ...FLOATS.map((t) => c(`logsumexp ${t}`, "logsumexp", [tensor(t, [3, 4]), 1])),
  c("logsumexp large values", "logsumexp", [tensor("f32", [2, 4], 1000), -1]),
  c("logsumexp dims keepdim", "logsumexp", [tensor("f64", [2, 3, 4]), [0, 2], true]),
  c("logsumexp with infinities", "logsumexp", [{ ...f(3, 2), data: [Infinity, 1, -Infinity, -Infinity, NaN, 2] }, 1]),
  c("logsumexp 0-d", "logsumexp", [f(), 0]),
  c("norm default p over every dim", "norm", [f(5, 2)]),
  c("norm empty", "norm", [f(2, 0)], { dim: 1 }),
  c("norm 0-d", "norm", [f()]),
  c("norm inf with NaN", "norm", [special("f32")], { p: Infinity }),
  // nn
  c("softmax last dim", "softmax", [f(3, 5)], { dim: -1 }),
  c("softmax dim 0", "softmax", [f(4, 3)], { dim: 0 }),
  c("softmax large values", "softmax", [tensor("f32", [2, 4], 1000)], { dim: 1 }),
  c("log_softmax large values", "log_softmax", [tensor("f32", [3, 4], 1000)], { dim: 1 }),
  c("log_softmax f64 3-D middle dim", "log_softmax", [tensor("f64", [2, 3, 4])], { dim: 1 }),
  c("linear with bias", "linear", [f(4, 3), f(5, 3), f(5)]),
  c("linear 3-D input, no bias", "linear", [f(2, 4, 3), f(5, 3)]),
  c("cross_entropy mean", "cross_entropy", [f(4, 5), ints("i64", [4], [0, 4, 2, 1])]),
  c("cross_entropy sum, ignore_index", "cross_entropy", [f(4, 5), ints("i64", [4], [0, -100, 2, 1])], { reduction: "sum" }),
  c("cross_entropy none", "cross_entropy", [f(3, 4), ints("i64", [3], [3, 0, 1])], { reduction: "none" }),
  c("cross_entropy mean, ignored, label_smoothing", "cross_entropy", [f(4, 5), ints("i64", [4], [0, 7, 2, 1])], { ignore_index: 7, label_smoothing: 0.1 }),
  c("layer_norm with weight and bias", "layer_norm", [f(2, 3, 4), [4], f(4), f(4)]),
  c("layer_norm over two dims", "layer_norm", [f(2, 3, 4), [3, 4]]),
  c("embedding", "embedding", [ints("i64", [2, 3], [0, 4, 1, 1, 3, 2]), f(5, 3)]),
  // the cpu's vector row paths: rows longer than the lanes with a tail, each floating dtype
  ...FLOATS.map((t) => c(`layer_norm ${t} rows of 37, weight and bias`, "layer_norm", [tensor(t, [5, 37]), [37], tensor(t, [37]), tensor(t, [37])])),
  c("layer_norm weight only, rows of 300", "layer_norm", [f(3, 300), [300], f(300)], { eps: 1e-3 }),
  c("layer_norm bias only", "layer_norm", [f(4, 20), [20], null, f(20)]),
  c("softmax rows of 70", "softmax", [tensor("f32", [3, 70], 20), -1]),
  c("log_softmax rows of 70", "log_softmax", [tensor("f32", [3, 70], 20), -1]),
  ...(["sum", "mean", "amax", "amin"] as const).map((op) => c(`${op} rows of 70`, op, [f(3, 70), -1])),
  c("embedding of 0-d ids", "embedding", [ints("i64", [], [2]), f(4, 3)]),
  c("add a bias [3] to [2, 4, 3] (repeats)", "add", [f(2, 4, 3), f(3)]),
  c("sub [4, 1] from [4, 3] (not a repeat)", "sub", [f(4, 3), f(4, 1)]),
  c("mul [1, 3] (repeats, on the left) by [4, 2, 3]", "mul", [f(1, 3), tensor("f32", [4, 2, 3])]),
  // layout and indexing
  c("cat dim 1", "cat", [[f(2, 3), f(2, 1)]], { dim: 1 }),
  c("cat dim -1 promotes", "cat", [[f(2, 2), tensor("f64", [2, 3])]], { dim: -1 }),
  c("cat dim 0", "cat", [[f(1, 3), f(2, 3), f(0, 3)]]),
  c("stack dim 1", "stack", [[f(2, 3), f(2, 3)]], { dim: 1 }),
  c("expand", "expand", [f(3, 1), [2, 3, 4]]),
  c("permute", "permute", [f(2, 3, 4), [2, 0, 1]]),
  c("transpose negative dims", "transpose", [f(2, 3, 4), -1, 0]),
  c("t", "t", [f(2, 3)]),
  c("narrow", "narrow", [f(4, 5), 1, 1, 3]),
  c("select negative index", "select", [f(3, 4), 0, -1]),
  c("slice with a step", "slice", [f(3, 8), 1, 1, 7, 2]),
  c("slice negative start", "slice", [f(6)], { start: -4 }),
  c("flip two dims", "flip", [f(2, 3, 2), [0, 2]]),
  c("index_select", "index_select", [f(4, 3), 0, ints("i64", [3], [3, 0, 3])]),
  c("index_select dim 1", "index_select", [f(2, 4), 1, ints("i64", [2], [1, 2])]),
  c("gather", "gather", [f(3, 4), 1, ints("i64", [3, 2], [0, 3, 1, 1, 2, 0])]),
  c("reshape -1", "reshape", [f(2, 6), [3, -1]]),
  c("flatten", "flatten", [f(2, 3, 4)], { start_dim: 1 }),
  c("squeeze", "squeeze", [f(2, 1, 3, 1)], { dim: 1 }),
  c("unsqueeze -1", "unsqueeze", [f(2, 3), -1]),
  c("to f64", "to", [f(3)], { dtype: "f64" }),
  // matmul rules
  c("matmul 2-D", "matmul", [f(3, 4), f(4, 2)]),
  c("matmul 1-D @ 2-D", "matmul", [f(4), f(4, 2)]),
  c("matmul 2-D @ 1-D", "matmul", [f(3, 4), f(4)]),
  c("matmul 1-D @ 1-D", "matmul", [f(4), f(4)]),
  c("matmul batched @ 2-D", "matmul", [f(2, 3, 4), f(4, 5)]),
  c("matmul broadcast batch", "matmul", [f(2, 1, 3, 4), f(3, 4, 2)]),
  c("matmul 2-D @ batched", "matmul", [f(3, 4), f(2, 4, 2)]),
  c("bmm", "bmm", [f(2, 3, 4), f(2, 4, 2)]),
  // triangles, pieces, attention, normalisation, losses, one_hot
  ...(["tril", "triu"] as const).flatMap((op) => [
    ...ALL.map((t) => c(`${op} ${t}`, op, [tensor(t, [3, 4])])),
    c(`${op} diagonal 1, batched`, op, [f(2, 3, 4)], { diagonal: 1 }),
    c(`${op} diagonal -2`, op, [tensor("f64", [4, 3]), -2]),
    c(`${op} diagonal past the matrix`, op, [f(3, 3)], { diagonal: 5 }),
    c(`${op} diagonal before the matrix`, op, [f(3, 4)], { diagonal: -5 }),
    c(`${op} empty`, op, [f(0, 3)]),
    c(`${op} non-contiguous`, op, [nc(f(4, 3))]),
  ]),
  c("split by size, the last smaller", "split", [f(5, 2), 2], {}, 3),
  c("split by sections, negative dim", "split", [tensor("i64", [2, 6]), [1, 2, 3], -1], {}, 3),
  c("split bf16 along dim 1", "split", [tensor("bf16", [2, 4]), 2, 1], {}, 2),
  c("split one piece", "split", [tensor("bool", [3]), 4], {}, 1),
  c("split empty dim", "split", [f(0, 2), 2], {}, 1),
  c("split with an empty section", "split", [f(3, 2), [0, 3]], {}, 2),
  c("split non-contiguous", "split", [nc(f(3, 4)), 2, -1], {}, 2),
  c("chunk evenly", "chunk", [f(6, 2), 3], {}, 3),
  c("chunk unevenly", "chunk", [tensor("f16", [5]), 3], {}, 3),
  c("chunk more chunks than elements", "chunk", [tensor("i32", [2, 3]), 4, 1], {}, 3),
  c("chunk empty dim", "chunk", [f(0), 2], {}, 2),
  ...FLOATS.map((t) => c(`scaled_dot_product_attention ${t}`, "scaled_dot_product_attention", [tensor(t, [2, 3, 4]), tensor(t, [2, 5, 4]), tensor(t, [2, 5, 3])])),
  ...FLOATS.map((t) => c(`scaled_dot_product_attention causal ${t}`, "scaled_dot_product_attention", [tensor(t, [2, 2, 4, 8]), tensor(t, [2, 2, 4, 8]), tensor(t, [2, 2, 4, 8])], { is_causal: true })),
  c("scaled_dot_product_attention bool mask, broadcast", "scaled_dot_product_attention", [f(2, 3, 4), f(2, 5, 4), f(2, 5, 2), { ...tensor("bool", [3, 5]), data: [1, 0, 1, 1, 0, 0, 1, 1, 1, 1, 1, 1, 0, 0, 1] }]),
  c("scaled_dot_product_attention bool mask per batch", "scaled_dot_product_attention", [f(2, 2, 3, 4), f(2, 2, 3, 4), f(2, 2, 3, 4), tensor("bool", [2, 1, 3, 3])]),
  c("scaled_dot_product_attention a row fully masked is NaN", "scaled_dot_product_attention", [f(1, 2, 4), f(1, 3, 4), f(1, 3, 2), { ...tensor("bool", [2, 3]), data: [0, 0, 0, 1, 0, 1] }]),
  c("scaled_dot_product_attention float mask", "scaled_dot_product_attention", [tensor("f64", [2, 3, 4]), tensor("f64", [2, 3, 4]), tensor("f64", [2, 3, 4]), tensor("f64", [3, 3])]),
  c("scaled_dot_product_attention scale, causal, L < S", "scaled_dot_product_attention", [f(2, 3, 4), f(2, 5, 4), f(2, 5, 6)], { is_causal: true, scale: 0.3 }),
  c("scaled_dot_product_attention broadcast batch", "scaled_dot_product_attention", [f(2, 3, 4, 8), f(3, 4, 8), f(1, 4, 8)]),
  c("scaled_dot_product_attention 2-D", "scaled_dot_product_attention", [f(3, 4), f(5, 4), f(5, 2)]),
  c("scaled_dot_product_attention large scores", "scaled_dot_product_attention", [tensor("f32", [1, 3, 4], 100), tensor("f32", [1, 3, 4], 100), f(1, 3, 4)]),
  c("scaled_dot_product_attention non-contiguous query and key", "scaled_dot_product_attention", [nc(f(2, 4, 3)), nc(f(2, 4, 5)), f(2, 5, 3)]),
  c("scaled_dot_product_attention empty batch", "scaled_dot_product_attention", [f(0, 3, 4), f(0, 5, 4), f(0, 5, 2)]),
  ...FLOATS.map((t) => c(`rms_norm ${t} with weight`, "rms_norm", [tensor(t, [3, 8]), [8], tensor(t, [8])])),
  c("rms_norm over two dims, eps", "rms_norm", [f(2, 3, 4), [3, 4]], { eps: 1e-3 }),
  c("rms_norm f64 default eps", "rms_norm", [tensor("f64", [4, 5]), [5]]),
  c("rms_norm 1-D", "rms_norm", [f(6), [6], f(6)]),
  c("rms_norm empty rows", "rms_norm", [f(0, 4), [4]]),
  c("rms_norm non-contiguous", "rms_norm", [nc(f(4, 3)), [4]]),
  ...(["f32", "f64", "bf16", "f16"] as const).map((t) => c(`nll_loss ${t}`, "nll_loss", [tensor(t, [4, 5]), ints("i64", [4], [0, 4, 2, 1])])),
  c("nll_loss weight, mean", "nll_loss", [f(4, 3), ints("i64", [4], [0, 2, 2, 1]), { ...f(3), data: [0.5, 2, 1] }]),
  c("nll_loss weight, ignore_index, sum", "nll_loss", [f(4, 3), ints("i64", [4], [0, -100, 2, 1]), f(3)], { reduction: "sum" }),
  c("nll_loss ignore_index in range, none", "nll_loss", [f(3, 4), ints("i64", [3], [3, 1, 1])], { ignore_index: 1, reduction: "none" }),
  c("nll_loss [N, C, d]", "nll_loss", [tensor("f64", [2, 3, 4]), ints("i64", [2, 4], [0, 1, 2, 0, 2, 2, 1, 0])]),
  c("nll_loss [C] with a 0-d target", "nll_loss", [f(5), ints("i64", [], [3])]),
  c("nll_loss empty batch, mean is NaN", "nll_loss", [f(0, 3), ints("i64", [0], [])]),
  c("nll_loss non-contiguous", "nll_loss", [nc(f(3, 4)), ints("i64", [4], [0, 2, 1, 1])]),
  ...FLOATS.map((t) => c(`mse_loss ${t}`, "mse_loss", [tensor(t, [3, 4]), tensor(t, [3, 4])])),
  c("mse_loss broadcast, sum", "mse_loss", [f(2, 3), f(3)], { reduction: "sum" }),
  c("mse_loss promotes f32 and f64, none", "mse_loss", [f(4), tensor("f64", [4])], { reduction: "none" }),
  c("mse_loss 0-d", "mse_loss", [f(), f()]),
  c("mse_loss empty, mean is NaN", "mse_loss", [f(0), f(0)]),
  c("mse_loss non-contiguous", "mse_loss", [nc(f(3, 2)), f(2, 3)]),
  c("one_hot", "one_hot", [ints("i64", [5], [0, 3, 1, 5, 3]), 6]),
  c("one_hot 2-D", "one_hot", [ints("i64", [2, 2], [1, 0, 2, 2]), 3]),
  c("one_hot 0-d", "one_hot", [ints("i64", [], [2]), 4]),
  c("one_hot empty", "one_hot", [ints("i64", [0], []), 4]),
  // repeat, baddbmm, outer (ger)
  ...ALL.map((t) => c(`repeat ${t}, new leading dim`, "repeat", [tensor(t, [2, 3]), [2, 1, 3]])),
  c("repeat 0-d", "repeat", [f(), [2, 3]]),
  c("repeat empty input", "repeat", [f(0, 3), [2, 2]]),
  c("repeat zero times", "repeat", [f(2, 3), [0, 2]]),
  c("repeat no repeats of a 0-d", "repeat", [f(), []]),
  c("repeat non-contiguous", "repeat", [nc(f(3, 2)), [2, 2]]),
  c("repeat past the shim's 8 dims", "repeat", [tensor("i64", [2, 2, 2, 2, 2]), [2, 1, 2, 3, 2]]),
  ...([...FLOATS, "i64", "i32", "u8"] as const).map((t) => c(`baddbmm ${t}`, "baddbmm", [tensor(t, [2, 3, 5]), tensor(t, [2, 3, 4]), tensor(t, [2, 4, 5])])),
  c("baddbmm beta and alpha", "baddbmm", [tensor("f64", [2, 3, 5]), tensor("f64", [2, 3, 4]), tensor("f64", [2, 4, 5])], { beta: 0.5, alpha: -2 }),
  c("baddbmm integer beta and alpha", "baddbmm", [tensor("i64", [3, 5]), tensor("i64", [2, 3, 4]), tensor("i64", [2, 4, 5])], { beta: 3, alpha: 2 }),
  c("baddbmm broadcast input [5]", "baddbmm", [f(5), f(2, 3, 4), f(2, 4, 5)], { beta: 2 }),
  c("baddbmm 0-d input", "baddbmm", [f(), f(2, 3, 4), f(2, 4, 5)], { alpha: 0.25 }),
  c("baddbmm beta 0 ignores a NaN input", "baddbmm", [{ ...f(1, 5), data: [NaN, Infinity, 1, 2, 3] }, f(2, 3, 4), f(2, 4, 5)], { beta: 0 }),
  c("baddbmm input f64 cast to f32 batches", "baddbmm", [tensor("f64", [3, 5]), f(2, 3, 4), f(2, 4, 5)], { beta: 1.5 }),
  c("baddbmm empty inner dim", "baddbmm", [f(2, 3, 5), f(2, 3, 0), f(2, 0, 5)], { beta: 0.5 }),
  c("baddbmm empty batch", "baddbmm", [f(3, 5), f(0, 3, 4), f(0, 4, 5)]),
  c("baddbmm non-contiguous", "baddbmm", [nc(f(2, 5, 3)), nc(f(2, 4, 3)), f(2, 4, 5)], { alpha: 3 }),
  ...ALL.map((t) => c(`outer ${t}`, "outer", [tensor(t, [4]), tensor(t, [3])])),
  c("outer promotes i32 with f32", "outer", [tensor("i32", [3]), f(2)]),
  c("outer empty", "outer", [f(0), f(3)]),
  c("ger (outer's alias)", "ger", [tensor("f64", [3]), tensor("f64", [5])]),
  // max and min with (values, indices), the scatter family
  ...(["max", "min"] as const).flatMap((op) => [
    ...ALL.map((t) => c(`${op} ${t} dim 1 (ties: the first)`, op, [tensor(t, [3, 5])], { dim: 1 }, 2)),
    ...ALL.map((t) => c(`${op} ${t} over everything`, op, [tensor(t, [3, 4])])),
    c(`${op} dim 0 keepdim, by position`, op, [f(4, 3), 0, true], {}, 2),
    c(`${op} negative dim, 3-D`, op, [tensor("f64", [2, 3, 4])], { dim: -2 }, 2),
    c(`${op} NaN propagates, at the first NaN`, op, [{ ...f(2, 3), data: [1, NaN, NaN, 5, -1, NaN] }], { dim: 1 }, 2),
    c(`${op} NaN over everything`, op, [special("f32")]),
    c(`${op} 0-d along dim 0`, op, [f(), 0], {}, 2),
    c(`${op} 0-d along dim -1, keepdim`, op, [f(), -1, true], {}, 2),
    c(`${op} 0-d`, op, [f()]),
    c(`${op} empty, along a dim that is not`, op, [f(0, 3), 1], {}, 2),
    c(`${op} non-contiguous`, op, [nc(f(4, 3)), -1], {}, 2),
  ]),
  ...ALL.map((t) => c(`scatter ${t}`, "scatter", [tensor(t, [3, 4]), 0, ints("i64", [2, 4], [2, 0, 1, 2, 0, 1, 2, 1]), tensor(t, [2, 4])])),
  c("scatter dim -1, index smaller than src and input", "scatter", [f(3, 5), -1, ints("i64", [2, 2], [4, 0, 1, 3]), f(3, 4)]),
  c("scatter a repeated index: the last write stays", "scatter", [f(2, 3), 1, ints("i64", [2, 3], [1, 1, 1, 0, 2, 0]), f(2, 3)]),
  c("scatter a number, by position", "scatter", [f(3, 4), 1, ints("i64", [3, 1], [3, 0, 2]), 2.5]),
  c("scatter value keyword", "scatter", [tensor("f64", [4]), 0, ints("i64", [2], [3, 1])], { value: -1.25 }),
  c("scatter value into i64 truncates", "scatter", [tensor("i64", [2, 3]), 1, ints("i64", [2, 1], [2, 0]), 2.7]),
  c("scatter value into bool", "scatter", [tensor("bool", [2, 3]), 1, ints("i64", [2, 2], [2, 0, 1, 1]), 1]),
  c("scatter 3-D dim 1", "scatter", [tensor("f64", [2, 3, 2]), 1, ints("i64", [2, 2, 2], [2, 0, 1, 1, 0, 2, 2, 1]), tensor("f64", [2, 2, 2])]),
  c("scatter 0-d", "scatter", [f(), 0, ints("i64", [], [0]), f()]),
  c("scatter a 0-d index into 1-D", "scatter", [f(4), 0, ints("i64", [], [2]), f()]),
  c("scatter empty index", "scatter", [f(3, 2), 0, ints("i64", [0, 2], []), f(0, 2)]),
  c("scatter into a non-contiguous input", "scatter", [nc(f(4, 3)), 1, ints("i64", [3, 2], [3, 0, 1, 2, 0, 0]), f(3, 2)]),
  ...ALL.map((t) => c(`scatter_add ${t}, repeated indices add up`, "scatter_add", [tensor(t, [3, 4]), 0, ints("i64", [3, 4], [2, 0, 2, 2, 0, 0, 1, 2, 2, 0, 1, 2]), tensor(t, [3, 4])])),
  c("scatter_add dim 1, index smaller than src", "scatter_add", [f(2, 3), 1, ints("i64", [2, 2], [0, 0, 2, 1]), f(2, 4)]),
  c("scatter_add f16 rounds at each step", "scatter_add", [tensor("f16", [2]), 0, ints("i64", [6], [0, 0, 0, 1, 1, 0]), tensor("f16", [6], 300)]),
  c("scatter_add negative dim, 3-D", "scatter_add", [tensor("f64", [2, 2, 3]), -1, ints("i64", [2, 2, 2], [2, 2, 0, 1, 1, 1, 0, 0]), tensor("f64", [2, 2, 2])]),
  c("scatter_add 0-d", "scatter_add", [f(), 0, ints("i64", [], [0]), f()]),
  c("scatter_add empty index", "scatter_add", [f(3), 0, ints("i64", [0], []), f(0)]),
  c("scatter_add non-contiguous src", "scatter_add", [f(2, 4), 1, ints("i64", [2, 3], [3, 3, 0, 1, 2, 1]), nc(f(3, 2))]),
  ...ALL.map((t) => c(`index_add ${t}, repeated indices`, "index_add", [tensor(t, [4, 3]), 0, ints("i64", [5], [3, 0, 3, 1, 3]), tensor(t, [5, 3])])),
  c("index_add dim 1, alpha", "index_add", [f(2, 4), 1, ints("i64", [3], [0, 0, 2]), f(2, 3)], { alpha: -2.5 }),
  c("index_add f64 alpha, negative dim", "index_add", [tensor("f64", [2, 3, 4]), -2, ints("i64", [2], [2, 0]), tensor("f64", [2, 2, 4])], { alpha: 0.3 }),
  c("index_add i32 integer alpha", "index_add", [tensor("i32", [3]), 0, ints("i64", [4], [0, 0, 2, 0]), tensor("i32", [4])], { alpha: 3 }),
  c("index_add f16 alpha, its product rounded as torch's", "index_add", [tensor("f16", [2, 3]), 0, ints("i64", [4], [1, 1, 1, 0]), tensor("f16", [4, 3], 100)], { alpha: 0.3 }),
  c("index_add u8 wraps, alpha 3", "index_add", [tensor("u8", [2]), 0, ints("i64", [3], [1, 1, 0]), { ...tensor("u8", [3]), data: [200, 9, 90] }], { alpha: 3 }),
  c("index_add bf16 alpha", "index_add", [tensor("bf16", [3, 2]), 0, ints("i64", [3], [1, 1, 0]), tensor("bf16", [3, 2])], { alpha: 0.5 }),
  c("index_add source broadcast along a size-1 dim", "index_add", [f(3, 4), 0, ints("i64", [2], [2, 2]), f(2, 1)]),
  c("index_add 0-d index", "index_add", [f(4, 2), 0, ints("i64", [], [3]), f(1, 2)]),
  c("index_add 0-d input, index and source", "index_add", [f(), 0, ints("i64", [], [0]), f()]),
  c("index_add empty index", "index_add", [f(3, 2), 1, ints("i64", [0], []), f(3, 0)]),
  c("index_add non-contiguous input and source", "index_add", [nc(f(2, 3)), 1, ints("i64", [3], [1, 0, 1]), nc(f(3, 3))]),
  c("scatter_ in place", "scatter_", [f(3, 4), 0, ints("i64", [2, 4], [2, 0, 1, 2, 0, 1, 2, 1]), f(2, 4)]),
  c("scatter_ in place, a number", "scatter_", [tensor("i64", [2, 3]), 1, ints("i64", [2, 1], [2, 0])], { value: 9 }),
  c("scatter_add_ in place", "scatter_add_", [tensor("f64", [3]), 0, ints("i64", [4], [1, 1, 2, 1]), tensor("f64", [4])]),
  c("index_add_ in place, alpha", "index_add_", [f(4, 3), 0, ints("i64", [2], [3, 3]), f(2, 3)], { alpha: 2 }),
  // clamp with tensor bounds (torch's clamp(Tensor min, Tensor max)): broadcast, promotion, NaN, min > max
  ...ALL.filter((t) => t !== "bool").map((t) => c(`clamp ${t} tensor bounds`, "clamp", [tensor(t, [3, 4]), tensor(t, [4]), tensor(t, [3, 1])])),
  c("clamp min tensor only, broadcast to a larger shape", "clamp", [f(4), tensor("f32", [2, 1])]),
  c("clamp max tensor only, by keyword", "clamp", [f(2, 3)], { max: f(3) }),
  c("clamp i64 by f32 bounds promotes", "clamp", [tensor("i64", [4]), f(4), f(4)]),
  c("clamp f32 by an f64 bound promotes", "clamp", [f(3), tensor("f64", [3])]),
  c("clamp NaN in the input or a bound stays NaN", "clamp", [{ ...f(4), data: [NaN, 1, 5, 2] }, { ...f(4), data: [0, NaN, 2, 0] }, { ...f(4), data: [1, 3, NaN, 3] }]),
  c("clamp min above max gives max", "clamp", [f(4)], { min: { ...f(4), data: [2, 2, 2, 2] }, max: { ...f(4), data: [1, -1, 3, 0] } }),
  c("clamp i64 by a number", "clamp", [tensor("i64", [6])], { min: -2 }),
  c("clamp 0-d input, tensor bounds", "clamp", [f(), f(3), f(3)]),
  c("clamp empty", "clamp", [f(0, 3), f(3), f(1)]),
  c("clamp non-contiguous input and bound", "clamp", [nc(f(4, 3)), nc(f(4, 3)), f(1)]),
  c("clamp_ in place, tensor bounds broadcast", "clamp_", [f(3, 4), f(4), f(3, 1)]),
  c("clamp_ i32 in place, numbers", "clamp_", [tensor("i32", [5]), 0, 2]),
  c("clamp_ f32 in place, an f64 bound cast back", "clamp_", [f(4), tensor("f64", [4])]),
  // transposed operands read in place (shim_matmul's flags): linear's weight, the backward rules' products
  ...FLOATS.map((t) => c(`_matmul_t both transposed ${t}`, "_matmul_t", [tensor(t, [4, 3]), tensor(t, [2, 4]), true, true])),
  ...(["i64", "i32", "bool"] as const).map((t) => c(`_matmul_t input transposed ${t}`, "_matmul_t", [tensor(t, [4, 3]), tensor(t, [4, 2]), true, false])),
  c("_matmul_t batched, other transposed", "_matmul_t", [f(2, 3, 4), f(2, 5, 4), false, true]),
  c("_matmul_t batched, 2-D other transposed (linear's form)", "_matmul_t", [f(2, 3, 4), f(5, 4)], { transpose_other: true }),
  c("_matmul_t empty inner dim", "_matmul_t", [f(0, 3), f(0, 2), true, false]),
  c("linear 1-D input", "linear", [f(3), f(5, 3), f(5)]),
  c("linear empty in_features", "linear", [f(2, 0), f(4, 0), f(4)]),
  c("linear f64 with bias, rows past a block", "linear", [tensor("f64", [70, 9]), tensor("f64", [130, 9]), tensor("f64", [130])]),
  c("linear bf16", "linear", [tensor("bf16", [3, 4]), tensor("bf16", [2, 4]), tensor("bf16", [2])]),
  // the later ops' second part (after the older cases, so their seeded inputs stay as they were)
  // cross_entropy's class weight
  c("cross_entropy class weight, mean", "cross_entropy", [f(4, 3), ints("i64", [4], [0, 2, 2, 1]), { ...f(3), data: [0.5, 2, 1] }]),
  c("cross_entropy class weight, ignored, sum", "cross_entropy", [tensor("f64", [4, 3]), ints("i64", [4], [0, -100, 2, 1]), tensor("f64", [3])], { reduction: "sum" }),
  c("cross_entropy class weight, label_smoothing, mean", "cross_entropy", [f(5, 4), ints("i64", [5], [3, 0, 1, -100, 2]), { ...f(4), data: [0.3, 1.5, 1, 2] }], { label_smoothing: 0.2 }),
  c("cross_entropy class weight, label_smoothing, none", "cross_entropy", [f(3, 4), ints("i64", [3], [1, 1, 2]), { ...f(4), data: [0.3, 1.5, 1, 2] }], { label_smoothing: 0.3, reduction: "none" }),
  c("embedding padding_idx", "embedding", [ints("i64", [2, 3], [0, 4, 1, 1, 4, 2]), f(5, 3), 4]),
  // the dtype keyword of sum, prod, mean and cumsum: the input cast to it first
  c("sum dtype f16 of i32", "sum", [tensor("i32", [2, 3])], { dtype: "f16" }),
  c("sum dim, dtype i32 keeps i32", "sum", [tensor("i32", [2, 3]), 1], { dtype: "i32" }),
  c("sum dtype i64 truncates floats first", "sum", [{ ...f(2), data: [1.7, 2.6] }], { dtype: "i64" }),
  c("sum dtype f64 of f32, keepdim", "sum", [f(3, 4), [0], true], { dtype: "f64" }),
  c("prod dim, dtype f32 of i64", "prod", [tensor("i64", [3, 2]), 1], { dtype: "f32" }),
  c("mean dtype f64 of i64", "mean", [tensor("i64", [2, 3])], { dtype: "f64" }),
  c("mean dims, dtype f32 of bf16", "mean", [tensor("bf16", [2, 3, 4]), [0, 2]], { dtype: "f32" }),
  c("cumsum dtype f32 of i32", "cumsum", [tensor("i32", [3, 4]), 1], { dtype: "f32" }),
  c("cumsum dtype i32 of i32", "cumsum", [tensor("i32", [5]), 0], { dtype: "i32" }),
  c("softmax dtype f64 of f32", "softmax", [f(3, 5), -1], { dtype: "f64" }),
  c("log_softmax dtype f32 of bf16", "log_softmax", [tensor("bf16", [2, 6]), 1], { dtype: "f32" }),
  ...([2, -2, 1] as const).flatMap((d) => (["f32", "f64", "bf16"] as const).map((t) => c(`round decimals=${d} ${t}`, "round", [{ ...tensor(t, [6], 2000), data: [1.2345, -2.5551, 1234.5, 0.125, -0.0049, 15].map((x) => representable(t, x)) }], { decimals: d }))),
  // add's and sub's alpha, div's rounding_mode
  ...(["add", "sub"] as const).flatMap((op) => [
    ...FLOATS.map((t) => c(`${op} ${t} alpha 0.5, broadcast`, op, [tensor(t, [2, 3]), tensor(t, [3])], { alpha: 0.5 })),
    c(`${op} i64 alpha 3`, op, [tensor("i64", [4]), tensor("i64", [4])], { alpha: 3 }),
    c(`${op} a number with alpha`, op, [f(3), 2], { alpha: -1.5 }),
    c(`${op} i32 and f32, fractional alpha`, op, [tensor("i32", [3]), f(3)], { alpha: 0.25 }),
    c(`${op}_ alpha in place`, `${op}_`, [f(2, 3), f(3)], { alpha: 2 }),
  ]),
  ...(["trunc", "floor"] as const).flatMap((mode) => [
    c(`div ${mode} i64 mixed signs`, "div", [ints("i64", [6], [7, -7, 7, -7, 0, 9]), ints("i64", [6], [2, 2, -2, -2, 3, -4])], { rounding_mode: mode }),
    ...FLOATS.map((t) => c(`div ${mode} ${t}`, "div", [tensor(t, [2, 3]), nonzero(tensor(t, [3]))], { rounding_mode: mode })),
    c(`div ${mode} i32 by a fraction`, "div", [tensor("i32", [5]), 2.5], { rounding_mode: mode }),
    c(`div ${mode} u8`, "div", [tensor("u8", [4]), { ...tensor("u8", [4]), data: [1, 3, 4, 7] }], { rounding_mode: mode }),
    c(`div ${mode} a number by i64`, "div", [7, ints("i64", [2], [2, -2])], { rounding_mode: mode }),
    c(`div_ ${mode} in place`, "div_", [tensor("f64", [2, 3]), nonzero(tensor("f64", [3]))], { rounding_mode: mode }),
    c(`div_ ${mode} i64 in place`, "div_", [ints("i64", [3], [7, -7, 5]), 2], { rounding_mode: mode }),
  ]),
  c("div rounding_mode None is true division", "div", [tensor("i64", [3]), 2], { rounding_mode: null }),
  // linspace, eye and the *_like forms (empty's values are undefined: tests/ops/creation.test.ts)
  ...(["f32", "f64", "f16", "bf16", "i64", "i32"] as const).map((t) => c(`linspace ${t}`, "linspace", [-5.5, 2, 7], { dtype: t })),
  c("linspace default f32, symmetric from both ends", "linspace", [0.1, 0.7, 7]),
  c("linspace 1000 steps", "linspace", [-1, 3, 1000]),
  c("linspace one step is start", "linspace", [3, 5, 1]),
  c("linspace no steps", "linspace", [0, 1, 0]),
  c("linspace decreasing u8", "linspace", [10, 0, 4], { dtype: "u8" }),
  ...ALL.map((t) => c(`eye ${t}`, "eye", [3], { dtype: t })),
  c("eye n x m, more columns", "eye", [2, 4]),
  c("eye n x m, more rows", "eye", [4, 2]),
  c("eye 0", "eye", [0]),
  ...(["zeros_like", "ones_like"] as const).flatMap((op) => [
    ...ALL.map((t) => c(`${op} ${t}`, op, [tensor(t, [2, 3])])),
    c(`${op} dtype keyword`, op, [tensor("i64", [4])], { dtype: "bf16" }),
    c(`${op} 0-d and non-contiguous`, op, [nc(f(2, 3))]),
    c(`${op} empty`, op, [f(0, 2)]),
  ]),
  ...ALL.map((t) => c(`full_like ${t}`, "full_like", [tensor(t, [3]), 1])),
  c("full_like truncates for an integer dtype", "full_like", [tensor("i64", [2, 2]), -2.7]),
  c("full_like dtype keyword", "full_like", [tensor("bool", [3]), 0.25], { dtype: "f64" }),
  // the in-place forms of the elementwise ops (integer inputs where the result stays integral)
  ...IN_PLACE_UNARY.flatMap((op) => FLOATS.map((t) => c(`${op}_ ${t}`, `${op}_`, [positive(op, tensor(t, [2, 3]))]))),
  ...["neg", "abs", "sign", "relu", "floor", "ceil", "round", "trunc"].flatMap((op) => (["i64", "i32"] as const).map((t) => c(`${op}_ ${t}`, `${op}_`, [tensor(t, [5])]))),
  ...(["f32", "i64", "u8", "bool"] as const).map((t) => c(`logical_not_ ${t}`, "logical_not_", [special(t)])),
  c("exp_ 0-d", "exp_", [f()]),
  c("sqrt_ empty", "sqrt_", [f(0, 2)]),
  c("tanh_ non-contiguous", "tanh_", [nc(f(3, 2))]),
  c("round_ half to even", "round_", [{ ...f(6), data: [0.5, 1.5, 2.5, -0.5, -1.5, -2.5] }]),
  c("sign_ NaN, inf, -0", "sign_", [{ ...f(4), data: [NaN, -Infinity, -0, 3] }]),
  ...FLOATS.map((t) => c(`pow_ ${t} by a tensor, broadcast`, "pow_", [nonzero(tensor(t, [2, 3])), tensor(t, [3])])),
  c("pow_ i64 by a number", "pow_", [tensor("i64", [5]), 2]),
  c("pow_ f32 by an i64 tensor", "pow_", [nonzero(f(4)), ints("i64", [4], [0, 1, 2, 3])]),
  ...["eq", "ne", "lt", "le", "gt", "ge"].flatMap((op) => [
    c(`${op}_ f32 broadcast`, `${op}_`, [f(2, 3), { ...f(3), data: [0, -1, 1] }]),
    c(`${op}_ i64 by a number`, `${op}_`, [tensor("i64", [6]), 0]),
    c(`${op}_ bf16 by f64`, `${op}_`, [tensor("bf16", [4]), tensor("f64", [4])]),
  ]),
  c("eq_ with NaN", "eq_", [{ ...f(3), data: [NaN, 1, 2] }, { ...f(3), data: [NaN, 1, 3] }]),
  ...["logical_and", "logical_or"].flatMap((op) => [
    c(`${op}_ bool`, `${op}_`, [tensor("bool", [6]), tensor("bool", [6])]),
    c(`${op}_ f32 broadcast`, `${op}_`, [{ ...f(2, 3), data: [NaN, 0, 1, -0, 2, 0] }, { ...tensor("i64", [3]), data: [0, 1, 3] }]),
    c(`${op}_ i32 with u8`, `${op}_`, [tensor("i32", [5]), tensor("u8", [5])]),
  ]),
  ...ALL.map((t) => c(`zero_ ${t}`, "zero_", [tensor(t, [2, 3])])),
  c("zero_ 0-d", "zero_", [f()]),
  c("unbind dim 0", "unbind", [f(3, 4)], {}, 3),
  c("unbind an inner dim, i64", "unbind", [tensor("i64", [2, 3, 2]), 1], {}, 3),
  c("unbind non-contiguous", "unbind", [nc(f(3, 2)), -1], {}, 3),
  // log_softmax and cross_entropy of rows far from 0, computed as (x - max) - log sum: rows past
  // the 16 lanes of the row path, columns (dim 0) through the strided path, past a chunk
  ...[1e3, 3e4, -3e4].flatMap((by) => [
    c(`log_softmax f32 rows of 37 offset by ${by}`, "log_softmax", [offset(f(3, 37), by), -1]),
    c(`log_softmax f32 dim 0 offset by ${by}`, "log_softmax", [offset(f(37, 3), by), 0]),
    c(`log_softmax f32 rows of 1030 offset by ${by}`, "log_softmax", [offset(f(2, 1030), by), 1]),
    c(`cross_entropy f32 logits offset by ${by}, mean`, "cross_entropy", [offset(f(6, 37), by), ints("i64", [6], [0, 36, 5, 17, 2, 30])]),
    c(`cross_entropy f32 logits offset by ${by}, none`, "cross_entropy", [offset(f(4, 20), by), ints("i64", [4], [19, 0, 7, 3])], { reduction: "none" }),
  ]),
  ...[3e4, 1e7, -1e7].flatMap((by) => [
    c(`log_softmax f64 rows of 37 offset by ${by}`, "log_softmax", [offset(tensor("f64", [3, 37]), by), -1]),
    c(`log_softmax f64 dim 0 offset by ${by}`, "log_softmax", [offset(tensor("f64", [37, 3]), by), 0]),
    c(`cross_entropy f64 logits offset by ${by}, sum`, "cross_entropy", [offset(tensor("f64", [5, 37]), by), ints("i64", [5], [1, 36, 0, 12, 20])], { reduction: "sum" }),
  ]),
  c("log_softmax bf16 rows of 40 offset by 100", "log_softmax", [offset(tensor("bf16", [2, 40]), 100), -1]),
  c("log_softmax f16 rows of 40 offset by -300", "log_softmax", [offset(tensor("f16", [2, 40]), -300), -1]),
  // where past a chunk (1,024 elements) with a one-element or number operand in each slot, for
  // each element size the select moves
  c("where one-element other past a chunk", "where", [tensor("bool", [1100]), f(1100), f(1)]),
  c("where number other past a chunk", "where", [tensor("bool", [3, 700]), f(3, 700), -2.5]),
  c("where number input past a chunk", "where", [tensor("bool", [2100]), 1.5, f(2100)]),
  c("where one-element condition past a chunk", "where", [tensor("bool", [1]), f(1500), f(1500)]),
  c("where one-element condition and input past a chunk", "where", [tensor("bool", []), f(1), f(1300)]),
  c("where broadcast condition rows past a chunk", "where", [tensor("bool", [1, 1300]), f(2, 1300), f(2, 1)]),
  c("where broadcast input rows past a chunk", "where", [tensor("bool", [2, 1300]), f(1300), f(2, 1)]),
  ...(["f64", "i64", "f16", "bf16", "i32", "u8", "bool"] as const).map((t) => c(`where ${t} one-element other past a chunk`, "where", [tensor("bool", [2, 1100]), tensor(t, [2, 1100]), tensor(t, [1])])),
  c("where i64 number other past a chunk", "where", [tensor("bool", [1500]), tensor("i64", [1500]), 3]),
  // lerp, addcmul, addcdiv, masked_fill past a chunk: each slot in turn one element, a number or a broadcast row
  ...(["f32", "f64", "bf16", "f16"] as const).flatMap((t) => {
    const full = () => tensor(t, [3, 400]), one = () => tensor(t, [1]), row = () => tensor(t, [400]), col = () => tensor(t, [3, 1])
    const slots = (make: (k: number) => T) => [0, 1, 2].map((k) => make(k))
    return [
      ...[0, 1, 2].flatMap((k) => [
        c(`lerp ${t} slot ${k} one element, past a chunk`, "lerp", slots((j) => (j === k ? one() : full()))),
        c(`lerp ${t} slot ${k} a broadcast row, past a chunk`, "lerp", slots((j) => (j === k ? (k === 1 ? col() : row()) : full()))),
        c(`addcmul ${t} slot ${k} one element, past a chunk`, "addcmul", slots((j) => (j === k ? one() : full())), { value: 0.75 }),
        c(`addcmul ${t} slot ${k} a broadcast row, past a chunk`, "addcmul", slots((j) => (j === k ? (k === 2 ? col() : row()) : full())), { value: -1.5 }),
        c(`addcdiv ${t} slot ${k} one element, past a chunk`, "addcdiv", slots((j) => (j === 2 ? nonzero(j === k ? one() : full()) : j === k ? one() : full())), { value: 0.5 }),
        c(`addcdiv ${t} slot ${k} a broadcast row, past a chunk`, "addcdiv", slots((j) => (j === 2 ? nonzero(j === k ? row() : full()) : j === k ? col() : full()))),
      ]),
      c(`lerp ${t} number weight, past a chunk`, "lerp", [full(), full(), 0.7]),
      c(`masked_fill ${t} broadcast mask, past a chunk`, "masked_fill", [full(), tensor("bool", [400]), -0.25]),
      c(`masked_fill ${t} one-element mask, past a chunk`, "masked_fill", [full(), tensor("bool", [1]), 2]),
    ]
  }),
  c("addcmul i64 slot 1 one element, past a chunk", "addcmul", [tensor("i64", [1200]), tensor("i64", [1]), tensor("i64", [1200])], { value: 2 }),
  c("addcmul i32 slot 0 a broadcast row, past a chunk", "addcmul", [tensor("i32", [700]), tensor("i32", [2, 700]), tensor("i32", [2, 1])], { value: -3 }),
  c("clamp f32 tensor bounds past a chunk, one element and a row", "clamp", [f(3, 400), f(1), f(400)]),
  c("clamp bf16 tensor bounds past a chunk, a row and a column", "clamp", [tensor("bf16", [3, 400]), tensor("bf16", [400]), tensor("bf16", [3, 1])]),
  // binary and unary: half dtypes past a chunk (a one-element side each way), a repeating row
  // past the lanes, and (with the worker's two threads) past one thread's share of 65,536
  ...(["bf16", "f16"] as const).flatMap((t) => [
    c(`add ${t} one-element right past a chunk`, "add", [tensor(t, [1100]), tensor(t, [1])]),
    c(`sub ${t} one-element left past a chunk`, "sub", [tensor(t, [1]), tensor(t, [2, 1100])]),
    c(`mul ${t} by a number past a chunk`, "mul", [tensor(t, [2100]), 1.7]),
    c(`sub ${t} from a number past a chunk`, "sub", [0.3, tensor(t, [1100])]),
    c(`maximum ${t} a repeating row past a chunk`, "maximum", [tensor(t, [3, 1030]), tensor(t, [1030])]),
  ]),
  ...(["f32", "f64", "i64", "i32"] as const).map((t) => c(`add ${t} a repeating row of 37 on the left`, "add", [tensor(t, [37]), tensor(t, [5, 37])])),
  c("mul f32 a repeating row of 1030", "mul", [f(4, 1030), f(1030)]),
  c("add f32 past two threads' shares", "add", [f(140000), f(140000)]),
  c("sub f32 by one element past two threads' shares", "sub", [f(140000), f(1)]),
  c("mul f32 a repeating row past two threads' shares", "mul", [f(3, 50000), f(50000)]),
  c("div f32 by a number past two threads' shares", "div", [f(140000), 3]),
  ...["exp", "tanh", "sigmoid", "erf", "gelu", "silu", "softplus"].flatMap((op) => FLOATS.map((t) => c(`${op} ${t} past the lanes and a chunk`, op, [tensor(t, [1037])]))),
  c("log f32 past the lanes and a chunk", "log", [nonzero(f(1037))]),
  c("exp f32 past two threads' shares", "exp", [f(140000)]),
  c("gelu tanh form f32 past the lanes", "gelu", [f(1037)], { approximate: "tanh" }),
  // reductions past the lanes and a chunk: along the rows, along columns, and over everything
  ...(["sum", "mean", "amax", "amin"] as const).flatMap((op) => (["f32", "f64", "bf16"] as const).flatMap((t) => [
    c(`${op} ${t} rows of 1030`, op, [tensor(t, [3, 1030]), -1]),
    c(`${op} ${t} columns of 1030`, op, [tensor(t, [1030, 3]), 0]),
    c(`${op} ${t} dim 0 of rows of 1030`, op, [tensor(t, [3, 1030]), 0]),
  ])),
  c("sum f32 over everything past two threads' shares", "sum", [f(140000)]),
  c("sum i64 rows of 1030", "sum", [tensor("i64", [2, 1030]), 1]),
  c("prod f64 rows of 1030 near 1", "prod", [{ ...tensor("f64", [2, 1030]), data: tensor("f64", [2, 1030]).data.map((v) => 1 + v / 3000) }, 1]),
  ...(["argmax", "argmin"] as const).map((op) => c(`${op} f32 rows of 1030`, op, [f(3, 1030)], { dim: 1 })),
  c("cumsum f32 rows of 1030", "cumsum", [f(2, 1030), 1]),
  c("cumsum f64 columns of 1030", "cumsum", [tensor("f64", [1030, 3]), 0]),
  // softmax, layer_norm, rms_norm and mse_loss past their lanes, a chunk and a thread's share
  ...FLOATS.map((t) => c(`softmax ${t} rows of 1030`, "softmax", [tensor(t, [2, 1030]), -1])),
  c("softmax f32 dim 0 of columns past a chunk", "softmax", [f(1030, 3), 0]),
  c("softmax f32 rows past two threads' shares", "softmax", [f(140, 1030), -1]),
  ...FLOATS.map((t) => c(`layer_norm ${t} rows of 1030`, "layer_norm", [tensor(t, [3, 1030]), [1030], tensor(t, [1030]), tensor(t, [1030])])),
  c("layer_norm f32 rows past two threads' shares", "layer_norm", [f(140, 1030), [1030]]),
  ...FLOATS.map((t) => c(`rms_norm ${t} rows of 1030`, "rms_norm", [tensor(t, [3, 1030]), [1030], tensor(t, [1030])])),
  ...FLOATS.map((t) => c(`mse_loss ${t} past a block of 16,384`, "mse_loss", [tensor(t, [17000]), tensor(t, [17000])])),
  c("mse_loss f32 sum past two threads' blocks", "mse_loss", [f(140000), f(140000)], { reduction: "sum" }),
  c("mse_loss f32 none past a chunk", "mse_loss", [f(1100), f(1100)], { reduction: "none" }),
  // index_add of f16 and bf16 as torch's: alpha and its product with the source rounded to the dtype before the add
  ...(["f16", "bf16"] as const).map((t) => c(`index_add ${t} alpha 0.3, many adds, the product rounded`, "index_add", [tensor(t, [3, 16]), 0, ints("i64", [8], [0, 1, 2, 0, 1, 2, 0, 1]), tensor(t, [8, 16], 100)], { alpha: 0.3 })),
  // casts, layout copies, indexing, matmul, attention and the losses past a chunk, the lanes and a thread's share
  ...([["f32", "bf16"], ["f32", "f16"], ["bf16", "f32"], ["f16", "f64"], ["i64", "f32"], ["f32", "i32"], ["f64", "u8"], ["i32", "bool"]] as const).map(([from, to]) =>
    // u8 from non-negative values (torch 1.13 wraps a negative float; the shim saturates, as its cast documents)
    c(`to ${to} from ${from} past a chunk`, "to", [to === "u8" ? nonzero(tensor(from, [2100])) : tensor(from, [2100])], { dtype: to })),
  c("contiguous of a transposed [40, 40] past a chunk", "contiguous", [nc(f(40, 40))]),
  c("contiguous of a transposed f16 [50, 30]", "contiguous", [nc(tensor("f16", [50, 30]))]),
  c("expand a row past a chunk", "expand", [f(1, 1100), [3, 1100]]),
  c("permute [3, 40, 20] past a chunk", "permute", [f(3, 40, 20), [2, 0, 1]]),
  c("cat dim 1 past a chunk", "cat", [[f(2, 700), f(2, 500)]], { dim: 1 }),
  c("cat dim 0 past two threads' shares", "cat", [[f(70000), f(70000)]]),
  c("gather dim 1 past a chunk", "gather", [f(3, 1100), 1, ints("i64", [3, 1100], Array.from({ length: 3300 }, (_, i) => (i * 7) % 1100))]),
  c("index_select dim 0 past a chunk", "index_select", [f(1100, 3), 0, ints("i64", [1200], Array.from({ length: 1200 }, (_, i) => (i * 13) % 1100))]),
  c("scatter_add dim 0 past a chunk", "scatter_add", [f(3, 1100), 0, ints("i64", [2, 1100], Array.from({ length: 2200 }, (_, i) => i % 3)), f(2, 1100)]),
  c("embedding past a chunk", "embedding", [ints("i64", [1100], Array.from({ length: 1100 }, (_, i) => (i * 3) % 7)), f(7, 3)]),
  c("one_hot past a chunk", "one_hot", [ints("i64", [1100], Array.from({ length: 1100 }, (_, i) => i % 5)), 5]),
  c("tril [40, 40] past a chunk", "tril", [f(40, 40), -1]),
  ...(["f32", "f64", "bf16", "f16"] as const).map((t) => c(`matmul ${t} past the lanes`, "matmul", [tensor(t, [33, 70]), tensor(t, [70, 17])])),
  // q and k of scale 1: the scores' f32 rounding (about 2^-24 of the sum of |q k| terms) then stays well inside f32's tolerance
  ...(["f32", "bf16"] as const).map((t) => c(`scaled_dot_product_attention ${t} rows of 37, causal`, "scaled_dot_product_attention", [tensor(t, [2, 40, 37], 1), tensor(t, [2, 40, 37], 1), tensor(t, [2, 40, 20])], { is_causal: true })),
  c("nll_loss past a chunk, ignore_index", "nll_loss", [f(1100, 3), ints("i64", [1100], Array.from({ length: 1100 }, (_, i) => (i % 4 === 3 ? -100 : i % 3)))]),
  c("cross_entropy past a chunk", "cross_entropy", [f(1100, 5), ints("i64", [1100], Array.from({ length: 1100 }, (_, i) => i % 5))]),
  // sorting, scanning and sampling: ties keep their order, NaN last ascending (first descending), past a chunk of 1024
  ...ALL.map((t) => c(`sort ${t} with ties`, "sort", [{ ...tensor(t, [3, 6]), data: [2, 1, 2, 0, 1, 2, 1, 1, 0, 0, 1, 1, 0, 3, 3, 0, 1, 0].map((v) => (t === "bool" ? v & 1 : v)) }], {}, 2)),
  ...ALL.map((t) => c(`sort ${t} descending, dim 0`, "sort", [tensor(t, [5, 3]), 0, true], {}, 2)),
  c("sort NaN last, ties stable", "sort", [{ ...f(9), data: [1, NaN, 1, 0, NaN, -Infinity, Infinity, -0, 0] }], {}, 2),
  c("sort descending NaN first, ties stable", "sort", [{ ...f(9), data: [1, NaN, 1, 0, NaN, -Infinity, Infinity, -0, 0] }], { descending: true }, 2),
  c("sort stable keyword, 3-D, negative dim", "sort", [{ ...tensor("i64", [2, 3, 4]), data: Array.from({ length: 24 }, (_, i) => (i * 7) % 3) }], { dim: -2, stable: true }, 2),
  c("sort a line past 1024", "sort", [tensor("f64", [2, 1500])], {}, 2),
  c("sort inner lines past 1024", "sort", [tensor("f32", [3, 1100]), 0, true], {}, 2),
  c("sort empty dim", "sort", [f(3, 0)], {}, 2),
  c("sort 0-d", "sort", [f()], {}, 2),
  c("sort non-contiguous", "sort", [nc(f(4, 3))], {}, 2),
  c("argsort descending with ties and NaN", "argsort", [{ ...f(2, 4), data: [1, NaN, 1, 3, 2, 2, NaN, NaN] }], { descending: true }),
  c("argsort dim 0, i32", "argsort", [tensor("i32", [4, 3]), 0]),
  ...([...FLOATS.filter((t) => t !== "f16"), "i64", "i32", "u8"] as const).map((t) => c(`topk ${t}`, "topk", [{ ...tensor(t, [2, 6]), data: [5, 1, 4, 0, 3, 2, 9, 7, 8, 6, 1, 2] }, 3], {}, 2)),
  c("topk smallest, dim 0", "topk", [f(5, 3), 2, 0, false], {}, 2),
  c("topk NaN is the largest", "topk", [{ ...f(6), data: [1, NaN, 3, -Infinity, 2, 0] }, 2], {}, 2),
  c("topk k 0", "topk", [f(3, 4), 0], {}, 2),
  c("topk all, negative dim, 3-D", "topk", [tensor("f64", [2, 4, 3]), 4, -2], {}, 2),
  c("topk past 1024", "topk", [tensor("f64", [1, 1300]), 5], {}, 2),
  c("topk non-contiguous", "topk", [nc(f(5, 3)), 2], {}, 2),
  ...([...FLOATS.filter((t) => t !== "f16"), "i64", "i32", "u8"] as const).map((t) => c(`kthvalue ${t}`, "kthvalue", [{ ...tensor(t, [2, 5]), data: [5, 1, 4, 0, 3, 9, 7, 8, 6, 2] }, 2], {}, 2)),
  c("kthvalue dim 0, keepdim", "kthvalue", [f(5, 3), 3, 0, true], {}, 2),
  c("kthvalue NaN counts as the largest", "kthvalue", [{ ...f(4), data: [NaN, 1, 0, 2] }, 4], {}, 2),
  c("kthvalue 0-d", "kthvalue", [f(), 1], {}, 2),
  c("kthvalue empty other dim", "kthvalue", [f(0, 3), 2, 1], {}, 2),
  ...([...FLOATS.filter((t) => t !== "f16"), "i64", "i32", "u8", "bool"] as const).map((t) => c(`cumprod ${t}`, "cumprod", [tensor(t, [3, 4]), 1])),
  c("cumprod with zeros and NaN", "cumprod", [{ ...f(2, 4), data: [2, 0, 3, 4, NaN, 2, 0, 1] }, -1]),
  c("cumprod dtype f64 of i32, dim 0", "cumprod", [tensor("i32", [4, 2]), 0], { dtype: "f64" }),
  c("cumprod i64 wraps", "cumprod", [ints("i64", [4], [2 ** 20, 2 ** 20, 2 ** 20, 3]), 0]),
  c("cumprod past 1024 inner", "cumprod", [{ ...tensor("f64", [2, 1100]), data: Array.from({ length: 2200 }, (_, i) => 1 + ((i % 7) - 3) / 100) }, 0]),
  c("cumprod 0-d", "cumprod", [f(), 0]),
  c("cumprod empty", "cumprod", [f(0, 3), 0]),
  ...(["cummax", "cummin"] as const).flatMap((op) => [
    ...([...FLOATS.filter((t) => t !== "f16"), "i64", "i32", "u8", "bool"] as const).map((t) => c(`${op} ${t} ties take the later index`, op, [{ ...tensor(t, [2, 5]), data: [1, 3, 3, 0, 3, 0, 0, 2, 0, 1].map((v) => (t === "bool" ? v & 1 : v)) }, 1], {}, 2)),
    c(`${op} NaN stays, a later NaN moves the index`, op, [{ ...f(7), data: [1, 3, 3, NaN, 2, NaN, 5] }, 0], {}, 2),
    c(`${op} dim 0, 3-D, past 1024 inner`, op, [tensor("f32", [3, 2, 600]), 0], {}, 2),
    c(`${op} negative dim`, op, [tensor("f64", [2, 3, 4]), -2], {}, 2),
    c(`${op} 0-d`, op, [f(), 0], {}, 2),
    c(`${op} empty`, op, [f(3, 0), 1], {}, 2),
    c(`${op} non-contiguous`, op, [nc(f(4, 3)), 1], {}, 2),
  ]),
  ...([...FLOATS, "i64", "i32", "u8"] as const).map((t) => c(`fmod ${t}, the dividend's sign`, "fmod", [{ ...tensor(t, [6]), data: [7, -7, 7, -7, 5, 0].map((v) => (t === "u8" ? Math.abs(v) : v)) }, { ...tensor(t, [6]), data: [2, 2, -2, -2, 3, 4].map((v) => (t === "u8" ? Math.abs(v) : v)) }])),
  c("fmod f32 by zero, of inf", "fmod", [{ ...f(4), data: [1.5, Infinity, -2.5, NaN] }, { ...f(4), data: [0, 3, 0.75, 1] }]),
  c("fmod by a number, broadcast", "fmod", [f(2, 3), 0.7]),
  c("fmod i32 by a number", "fmod", [tensor("i32", [5]), 3]),
  c("fmod promotes i64 and f32", "fmod", [tensor("i64", [4]), nonzero(f(4))]),
  ...ALL.map((t) => c(`roll ${t} two dims`, "roll", [tensor(t, [3, 4]), [1, -3], [0, 1]])),
  c("roll flattened", "roll", [f(2, 3), 2]),
  c("roll shift past the size, negative dim", "roll", [f(2, 5), 7, -1]),
  c("roll one dim twice", "roll", [f(4, 2), [1, 2], [0, 0]]),
  c("roll empty", "roll", [f(0, 3), 1, 1]),
  c("roll 0-d flattened", "roll", [f(), 1]),
  c("roll non-contiguous", "roll", [nc(f(3, 4)), [1], [1]]),
  c("flip three dims, negative", "flip", [tensor("i64", [2, 3, 4]), [0, -1, 1]]),
  c("flip no dims", "flip", [f(2, 3), []]),
  ...(["f32", "f64", "bf16", "f16", "i64", "i32"] as const).map((t) => c(`searchsorted ${t}`, "searchsorted", [{ ...tensor(t, [6]), data: [-3, -1, 0, 0, 2, 4] }, { ...tensor(t, [2, 3]), data: [0, -5, 4, 5, 1, -1] }])),
  c("searchsorted right", "searchsorted", [{ ...f(6), data: [-3, -1, 0, 0, 2, 4] }, { ...f(5), data: [0, -3, 4, 1, -1] }], { right: true }),
  c("searchsorted side right, out_int32", "searchsorted", [{ ...f(4), data: [1, 2, 2, 3] }, { ...f(3), data: [2, 0, 9] }], { side: "right", out_int32: true }),
  c("searchsorted NaN goes last, NaN in the sequence", "searchsorted", [{ ...f(5), data: [1, 2, 2, 3, NaN] }, { ...f(4), data: [2, NaN, 0, 5] }]),
  c("searchsorted per row", "searchsorted", [{ ...f(2, 4), data: [0, 1, 2, 3, -5, -4, 10, 20] }, { ...f(2, 3), data: [1.5, 3, -1, -4, 15, 30] }]),
  c("searchsorted 0-d input", "searchsorted", [{ ...f(3), data: [0, 1, 2] }, { ...f(), data: [1] }]),
  c("searchsorted empty sequence", "searchsorted", [f(0), f(3)]),
  c("searchsorted a sequence past 1024", "searchsorted", [{ ...tensor("f64", [1500]), data: Array.from({ length: 1500 }, (_, i) => i / 3) }, tensor("f64", [7], 400)]),
  c("bincount", "bincount", [ints("i64", [6], [1, 3, 3, 0, 3, 1])], { minlength: 5 }),
  c("bincount i32, minlength exactly past the largest", "bincount", [{ ...tensor("i32", [4]), data: [2, 2, 0, 1] }, null, 3]),
  c("bincount f32 weights stay f32", "bincount", [ints("i64", [4], [0, 2, 2, 1]), { ...f(4), data: [0.5, 1.25, -2, 3] }, 4]),
  c("bincount f64 weights", "bincount", [ints("i64", [3], [1, 1, 0]), tensor("f64", [3]), 2]),
  c("bincount i64 weights give f64", "bincount", [ints("i64", [3], [1, 1, 0]), tensor("i64", [3]), 3]),
  c("bincount empty input, minlength", "bincount", [ints("i64", [0], [])], { minlength: 3 }),
  c("searchsorted values past 1024, right", "searchsorted", [{ ...f(9), data: [-3, -2, -1, -1, 0, 1, 1, 2, 3] }, tensor("f32", [1300], 4)], { right: true }),
  c("searchsorted i64 rows of values past 1024", "searchsorted", [{ ...tensor("i64", [2, 5]), data: [-4, -2, 0, 2, 4, -1, -1, 0, 0, 1] }, tensor("i64", [2, 1100])]),
  c("bincount of 1500 values", "bincount", [{ ...tensor("i64", [1500]), data: Array.from({ length: 1500 }, (_, i) => (i * 37) % 11) }, null, 12]),
  // Type promotion's three tiers and float numbers: a seeded sample of ops over operands of every
  // dtype and tier (a tensor with dims, a 0-d tensor, an integer, a float number sent as float64).
  ...promotionCases(20261201, 60),
  c("eq i64 with float 2^24 compares in f32", "eq", [ints("i64", [2], [16777217, 3]), { float: 16777216 }]),
  c("where with an int and a float number", "where", [tensor("bool", [4]), 2, { float: 1 }]),
  c("add i64 and a float number with alpha", "add", [tensor("i64", [3]), { float: 2 }], { alpha: 3 }),
  // A boolean number is bool among numbers: it keeps a bool tensor bool, as torch's.
  c("add bool and True", "add", [tensor("bool", [4]), true]),
  c("mul bool and False", "mul", [tensor("bool", [4]), false]),
  c("add u8 and True", "add", [tensor("u8", [4]), true]),
  c("mul f16 0-d and True", "mul", [tensor("f16", []), true]),
  c("eq bool and True", "eq", [tensor("bool", [4]), true]),
  c("where True and False", "where", [tensor("bool", [4]), true, false]),
  c("where True and a 0-d i32", "where", [tensor("bool", [4]), true, tensor("i32", [])]),
  // model code's ops: einsum and pad (composed; on a worker called directly, over its kernels), softplus's beta and threshold, cross_entropy over [N, C, d...]
  c("einsum batched matmul", "einsum", ["bij,bjk->bik", [f(2, 3, 4), f(2, 4, 5)]]),
  c("einsum attention scores", "einsum", ["bhqd,bhkd->bhqk", [f(2, 2, 3, 4), f(2, 2, 5, 4)]]),
  c("einsum diagonal and an implicit output", "einsum", ["ii", [f(3, 3)]]),
  c("einsum ellipsis, broadcast batch", "einsum", ["...ij,...jk->...ik", [f(2, 3, 3, 4), f(3, 4, 2)]]),
  c("einsum bf16 matrix-vector", "einsum", ["ij,j->i", [tensor("bf16", [3, 4]), tensor("bf16", [4])]]),
  ...(["constant", "reflect", "replicate", "circular"] as const).map((mode) => c(`pad ${mode} the last two dims`, "pad", [f(1, 2, 3, 4), [1, 2, 2, 1], mode])),
  c("pad circular the last dim", "pad", [f(2, 2, 5), [-2, 4], "circular"]),
  c("pad constant with a value, three dims, a crop", "pad", [f(2, 3, 4), [1, -1, 0, 2, 1, 0]], { value: -1.5 }),
  c("pad reflect with a negative side", "pad", [f(2, 5), [-1, 3], "reflect"]),
  c("pad constant i64", "pad", [tensor("i64", [2, 3]), [2, 1]], { value: 7 }),
  ...FLOATS.map((t) => c(`softplus ${t} beta 2, threshold 3`, "softplus", [tensor(t, [40])], { beta: 2, threshold: 3 })),
  c("softplus f64 beta 0.5, threshold 30, past the threshold and below", "softplus", [{ ...tensor("f64", [6]), data: [-3, 0.5, 21, 40, 59, 61] }, 0.5, 30]),
  c("cross_entropy [N, C, d1, d2] mean", "cross_entropy", [f(2, 3, 4, 2), ints("i64", [2, 4, 2], [0, 1, 2, 0, 1, 2, 0, 1, 2, 2, 1, 0, 0, 1, 2, 1])]),
  c("cross_entropy [N, C, d] none, weight, ignore_index, label_smoothing", "cross_entropy", [f(2, 4, 3), ints("i64", [2, 3], [3, -100, 1, 0, 2, 3]), { ...f(4), data: [0.5, 2, 1, 1.5] }], { reduction: "none", label_smoothing: 0.2 }),
  c("cross_entropy [N, C, d] sum, label_smoothing", "cross_entropy", [tensor("f64", [3, 4, 5]), ints("i64", [3, 5], Array.from({ length: 15 }, (_, i) => (i * 7) % 4))], { reduction: "sum", label_smoothing: 0.1 }),
  c("cross_entropy [C] with a 0-d target", "cross_entropy", [f(5), ints("i64", [], [3])]),
  c("max_pool2d kernel 3, stride 2, padding 1, ceil_mode", "max_pool2d", [f(2, 3, 7, 6), 3, 2, 1], { ceil_mode: true }),
  c("max_pool2d dilation 2", "max_pool2d", [f(1, 2, 7, 7), [3, 2], 1, 0, 2]),
  c("max_pool2d bf16", "max_pool2d", [tensor("bf16", [2, 5, 5]), 2]),
  ...[true, false].map((include) => c(`avg_pool2d padding and ceil_mode, count_include_pad ${include}`, "avg_pool2d", [f(2, 2, 6, 7), 3, 2, 1, true, include])),
  c("avg_pool2d divisor_override", "avg_pool2d", [f(1, 4, 4), 2], { divisor_override: 3 }),
  // the convolutions and norms (composed; on a worker called directly, batch_norm's running statistics moved by its in-place part)
  c("conv2d stride 2, padding past the kernel, bias", "conv2d", [f(2, 3, 6, 5), f(4, 3, 3, 2), f(4), 2, 3]),
  c("conv2d groups 2 with dilation 2", "conv2d", [f(1, 4, 7, 7), f(6, 2, 3, 3), null, 1, [1, 2], 2, 2]),
  c("conv2d unbatched bf16", "conv2d", [tensor("bf16", [2, 5, 5]), tensor("bf16", [3, 2, 3, 3])], { padding: 1 }),
  c("conv1d groups 3, stride 2, dilation 2", "conv1d", [f(2, 6, 11), f(3, 2, 3), f(3)], { stride: 2, dilation: 2, groups: 3 }),
  c("batch_norm training, affine", "batch_norm", [f(4, 3, 2, 2), f(3), { ...f(3), data: [1, 0.5, 2] }, f(3), f(3), true, 0.3, 1e-5]),
  c("batch_norm eval", "batch_norm", [f(2, 3, 4), f(3), { ...f(3), data: [1, 0.5, 2] }, f(3), null, false]),
  c("batch_norm bf16 training, f32 statistics", "batch_norm", [tensor("bf16", [4, 2, 3]), f(2), { ...f(2), data: [1, 2] }, null, null, true]),
  c("group_norm 2 groups, affine", "group_norm", [f(2, 4, 3, 2), 2, f(4), f(4)]),
  c("group_norm bf16", "group_norm", [tensor("bf16", [2, 6, 5]), 3]),
])
