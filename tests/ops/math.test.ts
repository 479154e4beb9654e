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
})
