// The rules of the elementwise math ops (src/ops/specs/math.ts): their result dtypes, and the
// inputs they refuse, as torch does. Their values are held against torch in parity.test.ts.
import { describe, expect, test } from "bun:test"
import { infer, refusal, t } from "./infer.ts"

describe("elementwise math rules", () => {
  test("transcendental functions of integers and bool give f32; floats keep their dtype", () => {
    for (const op of ["erf", "log1p", "expm1", "rsqrt", "reciprocal", "sin", "cos"]) {
      expect(infer(op, [t("i64", 2)])).toEqual([t("f32", 2)])
      expect(infer(op, [t("bool", 2)])).toEqual([t("f32", 2)])
      expect(infer(op, [t("bf16", 2)])).toEqual([t("bf16", 2)])
    }
  })

  test("rounding keeps integers and refuses bool; sign keeps every dtype; predicates give bool", () => {
    expect(infer("floor", [t("i32", 3)])).toEqual([t("i32", 3)])
    expect(refusal(() => infer("round", [t("bool", 3)]))).toMatch(/ops\.round: not defined on bool/)
    expect(infer("sign", [t("bool", 3)])).toEqual([t("bool", 3)])
    expect(infer("isnan", [t("f16")])).toEqual([t("bool")])
    expect(infer("logical_not", [t("i64", 0)])).toEqual([t("bool", 0)])
  })

  test("activations need a floating input and take torch's keywords", () => {
    expect(refusal(() => infer("silu", [t("i64", 2)]))).toMatch(/ops\.silu: needs a floating input, got i64\[2\]/)
    expect(refusal(() => infer("gelu", [t("f32", 2)], { approximate: "fast" }))).toMatch(/approximate must be one of none, tanh, got 'fast'/)
    expect(refusal(() => infer("gelu", [t("f32", 2), "tanh"]))).toMatch(/takes 1 positional argument/)
    expect(infer("gelu", [t("f16", 2)], { approximate: "tanh" })).toEqual([t("f16", 2)])
    expect(infer("softplus", [t("f32", 2)], { beta: 2, threshold: 5 })).toEqual([t("f32", 2)])
    expect(refusal(() => infer("softplus", [t("i64", 2)], { beta: 2 }))).toMatch(/ops\.softplus: needs a floating input/)
    expect(infer("softplus", [t("f32", 2), 1, 20])).toEqual([t("f32", 2)])
  })

  test("binary and ternary rules: logical ops take tensors only; where needs a bool condition; lerp one floating dtype; addcdiv no integer division", () => {
    expect(refusal(() => infer("logical_and", [t("i32", 2), 0]))).toMatch(/other must be a tensor, got number/)
    expect(infer("logical_or", [t("f32", 2, 1), t("i64", 3)])).toEqual([t("bool", 2, 3)])
    expect(infer("floor_divide", [t("i32", 2), 2])).toEqual([t("i32", 2)])
    expect(infer("remainder", [5, t("i64", 3)])).toEqual([t("i64", 3)])
    expect(refusal(() => infer("where", [t("i64", 2), t("f32", 2), 0]))).toMatch(/ops\.where: condition must be a bool tensor, got i64\[2\]/)
    expect(infer("where", [t("bool", 2, 1), 1, 0.5])).toEqual([t("f32", 2, 1)])
    expect(infer("where", [t("bool", 3), 1, 0])).toEqual([t("i64", 3)])
    expect(refusal(() => infer("masked_fill", [t("f32", 3), t("bool", 2, 3), 0]))).toMatch(/mask bool\[2, 3\] does not broadcast to the input f32\[3\]/)
    expect(refusal(() => infer("lerp", [t("f32", 3), t("f64", 3), 0.5]))).toMatch(/expected dtype f32 for end but got f64\[3\]/)
    expect(refusal(() => infer("lerp", [t("i64", 3), t("i64", 3), 0.5]))).toMatch(/needs a floating input/)
    expect(refusal(() => infer("addcdiv", [t("f32", 3), t("i64", 3), t("i32", 3)]))).toMatch(/integer division is not supported/)
    expect(infer("addcmul", [t("i32", 3), t("f16", 3), t("i64", 2, 1)])).toEqual([t("f16", 2, 3)])
    expect(refusal(() => infer("addcmul_", [t("i32", 3), t("f32", 3), t("f32", 3)]))).toMatch(/result type f32 can't be cast to the input's i32/)
    expect(refusal(() => infer("lerp_", [t("f32", 3), t("f32", 2, 3), 0.5]))).toMatch(/does not fit in place/)
  })

  test("reduction rules: any/all give bool (u8 stays u8); norm takes p 1, 2, inf of floats; argmax gives i64, not of bool; cumsum widens integers", () => {
    expect(infer("any", [t("f32", 2, 3)], { dim: 1 })).toEqual([t("bool", 2)])
    expect(infer("all", [t("u8", 2, 3)])).toEqual([t("u8")])
    expect(refusal(() => infer("norm", [t("i64", 3)]))).toMatch(/ops\.norm: needs a floating input, got i64\[3\]/)
    expect(refusal(() => infer("norm", [t("f32", 3)], { p: 3 }))).toMatch(/p must be 1, 2 or inf, got 3/)
    expect(infer("norm", [t("f16", 2, 3), 1, [0, 1], true])).toEqual([t("f16", 1, 1)])
    expect(infer("argmax", [t("f32", 2, 3)], { dim: -1, keepdim: true })).toEqual([t("i64", 2, 1)])
    expect(refusal(() => infer("argmin", [t("bool", 3)]))).toMatch(/ops\.argmin: not defined on bool/)
    expect(refusal(() => infer("argmax", [t("f32", 2, 0)], { dim: 1 }))).toMatch(/cannot reduce an empty dim of f32\[2, 0\]/)
    expect(refusal(() => infer("argmax", [t("f32", 2)], { dim: [0] }))).toMatch(/dim must be an integer/)
    expect(infer("cumsum", [t("bool", 4), 0])).toEqual([t("i64", 4)])
    expect(refusal(() => infer("cumsum", [t("f32", 2, 3), 2]))).toMatch(/dim 2 out of range/)
  })

  test("add and sub take alpha by keyword (integral for an integer result); div's rounding_mode keeps integers integral", () => {
    expect(infer("add", [t("i64", 2), t("i64", 2)], { alpha: 3 })).toEqual([t("i64", 2)])
    expect(refusal(() => infer("sub", [t("i32", 2), 1], { alpha: 0.5 }))).toMatch(/ops\.sub: alpha must be an integer for a i32 result, got 0.5/)
    expect(refusal(() => infer("add", [t("f32", 2), t("f32", 2), 2]))).toMatch(/takes 2 positional arguments/)
    expect(infer("div", [t("i64", 2), t("i32", 2)], { rounding_mode: "floor" })).toEqual([t("i64", 2)])
    expect(infer("div", [t("i64", 2), 2])).toEqual([t("f32", 2)])
    expect(refusal(() => infer("div", [t("f32", 2), 2], { rounding_mode: "round" }))).toMatch(/rounding_mode must be None, 'trunc' or 'floor', got 'round'/)
    expect(refusal(() => infer("div_", [t("i64", 2), 2]))).toMatch(/result type f32 can't be cast to the input's i64/)
    expect(infer("div_", [t("i64", 2), 2], { rounding_mode: "trunc" })).toEqual([])
  })

  test("in-place forms: the result must fit the input (exp_ of an integer is refused, eq_ of a float writes 0 and 1); they define nothing", () => {
    expect(infer("exp_", [t("f16", 2)])).toEqual([])
    expect(refusal(() => infer("exp_", [t("i64", 2)]))).toMatch(/ops\.exp_: result type f32 can't be cast to the input's i64/)
    expect(refusal(() => infer("sqrt_", [t("bool", 2)]))).toMatch(/result type f32 can't be cast to the input's bool/)
    expect(infer("floor_", [t("i32", 2)])).toEqual([])
    expect(refusal(() => infer("round_", [t("bool", 2)]))).toMatch(/ops\.round_: not defined on bool/)
    expect(infer("eq_", [t("f32", 2, 3), t("f32", 3)])).toEqual([])
    expect(refusal(() => infer("lt_", [t("f32", 3), t("f32", 2, 3)]))).toMatch(/does not fit in place/)
    expect(refusal(() => infer("pow_", [t("i64", 3), 0.5]))).toMatch(/result type f32 can't be cast to the input's i64/)
    expect(refusal(() => infer("logical_and_", [t("bool", 3), true]))).toMatch(/other must be a tensor/)
    expect(infer("zero_", [t("u8", 0)])).toEqual([])
  })

  test("var, std and logsumexp: floating only, torch's keywords, logsumexp needs a dim that is not empty", () => {
    expect(infer("var", [t("f32", 2, 3), 1], { correction: 0, keepdim: true })).toEqual([t("f32", 2, 1)])
    expect(refusal(() => infer("std", [t("f32", 2, 3), 1, 0]))).toMatch(/takes 2 positional arguments/)
    expect(refusal(() => infer("var", [t("i64", 3)]))).toMatch(/ops\.var: needs a floating input/)
    expect(infer("logsumexp", [t("bf16", 2, 3), [0, 1]])).toEqual([t("bf16")])
    expect(refusal(() => infer("logsumexp", [t("f32", 3)]))).toMatch(/missing argument 'dim'/)
    expect(refusal(() => infer("logsumexp", [t("f32", 0, 3), 0]))).toMatch(/cannot reduce an empty dim/)
  })
})
