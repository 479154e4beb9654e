// The rules of the later ops (triangles, split and chunk, attention, rms_norm, the losses,
// one_hot): result metadata and the calls refused, as torch does. Their values are held against
// torch in parity.test.ts.
import { describe, expect, test } from "bun:test"
import { inferOutputs, opNamed, UNKNOWN_TENSOR } from "../../src/ops/registry.ts"
import { infer, refusal, t } from "./infer.ts"

describe("rules", () => {
  test("tril and triu need 2 dims; split and chunk give their pieces, and need the input's shape to count them", () => {
    expect(refusal(() => infer("tril", [t("f32", 3)]))).toMatch(/ops\.tril: needs at least 2 dims, got f32\[3\]/)
    expect(infer("split", [t("f32", 5, 2), 2])).toEqual([t("f32", 2, 2), t("f32", 2, 2), t("f32", 1, 2)])
    expect(infer("split", [t("i64", 2, 6), [1, 5], -1])).toEqual([t("i64", 2, 1), t("i64", 2, 5)])
    expect(refusal(() => infer("split", [t("f32", 4), [1, 2]]))).toMatch(/sizes \[1,2\] must be non-negative and sum to dim 0's size 4/)
    expect(refusal(() => infer("split", [t("f32", 4), 0]))).toMatch(/split_size must be positive, got 0/)
    expect(infer("chunk", [t("f32", 5), 3])).toEqual([t("f32", 2), t("f32", 2), t("f32", 1)])
    expect(refusal(() => infer("chunk", [t("f32", 5), 0]))).toMatch(/chunks must be positive/)
    expect(() => inferOutputs(opNamed("split")!, [UNKNOWN_TENSOR, 2], {}, false)).toThrow(/ops\.split: needs its input's shape to know how many pieces it makes/)
  })

  test("scaled_dot_product_attention: shapes that fit, one floating dtype, a mask that broadcasts, no dropout, not both masks", () => {
    expect(infer("scaled_dot_product_attention", [t("f32", 2, 1, 3, 4), t("f32", 5, 4), t("f32", 5, 6)])).toEqual([t("f32", 2, 1, 3, 6)])
    expect(refusal(() => infer("scaled_dot_product_attention", [t("f32", 3, 4), t("f32", 5, 3), t("f32", 5, 6)]))).toMatch(/do not fit/)
    expect(refusal(() => infer("scaled_dot_product_attention", [t("i64", 3, 4), t("i64", 5, 4), t("i64", 5, 6)]))).toMatch(/needs a floating input/)
    expect(refusal(() => infer("scaled_dot_product_attention", [t("f32", 3, 4), t("f64", 5, 4), t("f32", 5, 6)]))).toMatch(/need one dtype/)
    expect(refusal(() => infer("scaled_dot_product_attention", [t("f32", 3, 4), t("f32", 5, 4), t("f32", 5, 6), t("bool", 2, 5)]))).toMatch(/shapes do not broadcast: \[2, 5\] and \[3, 5\]/)
    expect(refusal(() => infer("scaled_dot_product_attention", [t("f32", 3, 4), t("f32", 5, 4), t("f32", 5, 6), t("i64", 3, 5)]))).toMatch(/attn_mask must be bool or the query's f32/)
    expect(refusal(() => infer("scaled_dot_product_attention", [t("f32", 3, 4), t("f32", 5, 4), t("f32", 5, 6), t("bool", 3, 5)], { is_causal: true }))).toMatch(/not both/)
    expect(refusal(() => infer("scaled_dot_product_attention", [t("f32", 3, 4), t("f32", 5, 4), t("f32", 5, 6), null, 0.1]))).toMatch(/dropout_p must be 0/)
    expect(refusal(() => infer("scaled_dot_product_attention", [t("f32", 3, 4), t("f32", 5, 4), t("f32", 5, 6), null, 0, false, 0.5]))).toMatch(/takes 6 positional arguments/)
  })

  test("rms_norm, nll_loss, mse_loss and one_hot refuse what torch refuses", () => {
    expect(refusal(() => infer("rms_norm", [t("f32", 2, 3), [2]]))).toMatch(/normalized_shape \[2\] must be the last dims of f32\[2, 3\]/)
    expect(refusal(() => infer("rms_norm", [t("f32", 2, 3), [3], t("f64", 3)]))).toMatch(/weight must be f32\[3\]/)
    expect(refusal(() => infer("nll_loss", [t("f32", 4, 3), t("i32", 4)]))).toMatch(/target must hold class indices \(i64\)/)
    expect(refusal(() => infer("nll_loss", [t("f32", 4, 3), t("i64", 3)]))).toMatch(/input must be \[N, C, d\.\.\.\] with target \[N, d\.\.\.\]/)
    expect(refusal(() => infer("nll_loss", [t("f32", 4, 3), t("i64", 4)], { reduction: "avg" }))).toMatch(/reduction must be one of none, mean, sum/)
    expect(infer("nll_loss", [t("f64", 2, 3, 4), t("i64", 2, 4)], { reduction: "none" })).toEqual([t("f64", 2, 4)])
    expect(refusal(() => infer("mse_loss", [t("i64", 3), t("i64", 3)]))).toMatch(/needs floating operands/)
    // torch's deprecated size_average and reduce sit before ignore_index and reduction: those go by name.
    expect(refusal(() => infer("mse_loss", [t("f32", 3), t("f32", 3), "sum"]))).toMatch(/takes 2 positional arguments/)
    expect(refusal(() => infer("nll_loss", [t("f32", 4, 3), t("i64", 4), null, 1]))).toMatch(/takes 3 positional arguments/)
    expect(refusal(() => infer("cross_entropy", [t("f32", 4, 3), t("i64", 4), t("f32", 4)]))).toMatch(/weight must be f32\[3\], got f32\[4\]/)
    expect(infer("cross_entropy", [t("f32", 4, 3), t("i64", 4), t("f32", 3)], { reduction: "none", ignore_index: 0 })).toEqual([t("f32", 4)])
    // [N, C, d...]: the class dim is dim 1, the targets [N, d...]; [C] takes a 0-d target
    expect(infer("cross_entropy", [t("f32", 2, 3, 4, 5), t("i64", 2, 4, 5)], { reduction: "none" })).toEqual([t("f32", 2, 4, 5)])
    expect(infer("cross_entropy", [t("f32", 3), t("i64")])).toEqual([t("f32")])
    expect(refusal(() => infer("cross_entropy", [t("f32", 2, 3, 4), t("i64", 2, 3)]))).toMatch(/input must be \[N, C, d...\] with target \[N, d...\]/)
    expect(infer("mse_loss", [t("f32", 2, 3), t("f64", 3)], { reduction: "none" })).toEqual([t("f64", 2, 3)])
    expect(refusal(() => infer("one_hot", [t("i64", 3)]))).toMatch(/give num_classes/)
    expect(infer("one_hot", [t("i64", 2, 3), 4])).toEqual([t("i64", 2, 3, 4)])
  })
})
