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
    expect(refusal(() => infer("softplus", [t("f32", 2)], { beta: 2 }))).toMatch(/only beta=1 and threshold=20 are supported, got beta=2/)
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
})
