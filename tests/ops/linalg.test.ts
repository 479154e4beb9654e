// The rules of repeat, baddbmm and outer (src/ops/specs/linalg.ts, layout.ts): result dtypes and
// shapes, and the calls they refuse, as torch 1.13 does. Their values are held against torch in
// parity.test.ts, their gradients in tests/autograd/gradcheck.test.ts.
import { describe, expect, test } from "bun:test"
import { infer, refusal, t } from "./infer.ts"

describe("repeat, baddbmm and outer rules", () => {
  test("repeat: one repeat per dim at least (new ones lead), none negative", () => {
    expect(infer("repeat", [t("bool", 2, 3), [4, 2, 1]])).toEqual([t("bool", 4, 4, 3)])
    expect(infer("repeat", [t("f32"), []])).toEqual([t("f32")])
    expect(infer("repeat", [t("i64", 3)], { repeats: [0] })).toEqual([t("i64", 0)])
    expect(refusal(() => infer("repeat", [t("f32", 2, 3), [2]]))).toMatch(/ops\.repeat: needs at least one repeat per dim of f32\[2, 3\], got \[2\]/)
    expect(refusal(() => infer("repeat", [t("f32", 2), [-1]]))).toMatch(/repeats must be non-negative/)
  })

  test("baddbmm: batch1's dtype, input broadcast to the product, beta and alpha by keyword only", () => {
    expect(infer("baddbmm", [t("f64", 5), t("f32", 2, 3, 4), t("f32", 2, 4, 5)])).toEqual([t("f32", 2, 3, 5)])
    expect(infer("baddbmm", [t("i64", 3, 5), t("i64", 2, 3, 4), t("i64", 2, 4, 5)], { beta: 2, alpha: 3 })).toEqual([t("i64", 2, 3, 5)])
    expect(refusal(() => infer("baddbmm", [t("f32", 3, 5), t("f32", 2, 3, 4), t("f32", 2, 4, 5), 0.5]))).toMatch(/takes 3 positional arguments/)
    expect(refusal(() => infer("baddbmm", [t("f32", 3, 5), t("f32", 2, 3, 4), t("f64", 2, 4, 5)]))).toMatch(/dtypes differ/)
    expect(refusal(() => infer("baddbmm", [t("f32", 3, 5), t("f32", 2, 3, 4), t("f32", 3, 4, 5)]))).toMatch(/one batch size/)
    expect(refusal(() => infer("baddbmm", [t("f32", 3, 5), t("f32", 3, 4), t("f32", 4, 5)]))).toMatch(/needs 3-D batch1 and batch2/)
    expect(refusal(() => infer("baddbmm", [t("f32", 4, 3, 5), t("f32", 1, 3, 4), t("f32", 1, 4, 5)]))).toMatch(/input f32\[4, 3, 5\] does not broadcast to the product's \[1,3,5\]/)
    expect(refusal(() => infer("baddbmm", [t("f32", 4, 3, 5), t("f32", 2, 3, 4), t("f32", 2, 4, 5)]))).toMatch(/shapes do not broadcast/)
    expect(refusal(() => infer("baddbmm", [t("f32", 1, 2, 3, 5), t("f32", 2, 3, 4), t("f32", 2, 4, 5)]))).toMatch(/does not broadcast/)
    expect(refusal(() => infer("baddbmm", [t("bool", 3, 5), t("bool", 2, 3, 4), t("bool", 2, 4, 5)]))).toMatch(/not defined on bool/)
    expect(refusal(() => infer("baddbmm", [t("i32", 3, 5), t("i32", 2, 3, 4), t("i32", 2, 4, 5)], { alpha: 2.5 }))).toMatch(/alpha and beta must be integers for i32\[2, 3, 4\], got alpha=2.5/)
  })

  test("outer and ger: two 1-D tensors, promoted as mul", () => {
    expect(infer("outer", [t("i32", 3), t("f32", 2)])).toEqual([t("f32", 3, 2)])
    expect(infer("ger", [t("bool", 0), t("bool", 4)])).toEqual([t("bool", 0, 4)])
    expect(refusal(() => infer("outer", [t("f32", 3, 2), t("f32", 2)]))).toMatch(/ops\.outer: needs two 1-D tensors, got f32\[3, 2\] and f32\[2\]/)
    expect(refusal(() => infer("outer", [t("f32"), t("f32", 2)]))).toMatch(/needs two 1-D tensors/)
  })
})
