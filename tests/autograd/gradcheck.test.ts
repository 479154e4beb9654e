// Gradient checks for every differentiable op in the registry, through the controller's tape on a
// CPU worker: for each case, the gradients of sum(op(inputs) * weights) (weights random, so no
// gradient is all ones) must match
//   - finite differences in f64: for each input and two random directions v, the central
//     difference of the loss along v against <gradient, v> (torch.autograd.gradcheck's fast mode);
//   - torch 1.13's autograd on the same inputs and weights (tests/ops/torch_ref.py, one process
//     serving every case; without torch those comparisons skip, saying so).
// The cases are checked against the registry: a differentiable op without a case fails.
import { afterAll, beforeAll, describe, expect, test } from "bun:test"
import { grad, noGrad, ops, opsOn, type RemoteTensor } from "../../src/controller/index.ts"
import { NOT_DIFFERENTIABLE } from "../../src/ops/grad.ts"
import { OPS, type OpName } from "../../src/ops/registry.ts"
import type { DType, HostTensor } from "../../src/protocol/values.ts"
import { describeUnless, testUnless } from "../skip.ts"
import { oneRankMesh } from "../ops/oneRank.ts"
import { fromJson, torchMissing, TorchServer } from "../torch.ts"
import { host } from "../worker/build.ts"

/** A tensor argument: its values; `grad` says whether the check differentiates with respect to it. */
interface T { readonly t: DType; readonly shape: number[]; readonly data: number[]; readonly grad: boolean }
let seed = 4242
const rnd = () => ((seed = (seed * 1103515245 + 12345) % 2 ** 31) / 2 ** 31)
const numel = (shape: ReadonlyArray<number>) => shape.reduce((a, b) => a * b, 1)
/** A differentiable f64 tensor, values in (-2, 2) ("pos": in (0.5, 2.5), away from every op's edge). */
const F = (...shape: number[]): T => ({ t: "f64", shape, data: Array.from({ length: numel(shape) }, () => rnd() * 4 - 2), grad: true })
const P = (...shape: number[]): T => ({ t: "f64", shape, data: Array.from({ length: numel(shape) }, () => rnd() * 2 + 0.5), grad: true })
/** The same in f32 (checked against torch only: f32 is too coarse for finite differences). */
const F32 = (...shape: number[]): T => ({ ...F(...shape), t: "f32", data: F(...shape).data.map(Math.fround) })
const I = (shape: number[], data: number[]): T => ({ t: "i64", shape, data, grad: false })
const B = (...shape: number[]): T => ({ t: "bool", shape, data: Array.from({ length: numel(shape) }, () => (rnd() < 0.5 ? 1 : 0)), grad: false })
const isT = (v: unknown): v is T => typeof v === "object" && v !== null && "t" in v && "data" in v

/**
 * seed: a random op's case; the rank's generator is reseeded with it before every evaluation, so
 * each drops the same elements, and torch (another stream) is not asked. torch: why torch cannot
 * be asked (the finite differences still check it).
 */
interface Case { readonly name: string; readonly op: OpName; readonly args: unknown[]; readonly kwargs: Record<string, unknown>; readonly fd: boolean; readonly seed?: number; readonly torch?: string }
const g = (name: string, op: OpName, args: unknown[], kwargs: Record<string, unknown> = {}, fd = true): Case => ({ name, op, args, kwargs, fd })
const unary = (op: OpName, x: T = F(2, 3)) => g(op, op, [x])

const CASES: Case[] = [
  // elementwise (inputs away from kinks: random values hit none within the step)
  ...(["neg", "abs", "relu", "exp", "tanh", "sigmoid", "erf", "expm1", "sin", "cos", "floor", "ceil", "round", "trunc", "sign", "silu", "softplus"] as const).map((op) => unary(op)),
  ...(["log", "sqrt", "rsqrt", "reciprocal", "log1p"] as const).map((op) => unary(op, P(2, 3))),
  g("round decimals", "round", [F(2, 3)], { decimals: 1 }),
  g("gelu", "gelu", [F(2, 3)]),
  g("gelu tanh form", "gelu", [F(2, 3)], { approximate: "tanh" }),
  g("softplus past its threshold", "softplus", [{ ...F(3), data: [19, 21, 30] }]),
  g("add broadcast [3,4] + [4]", "add", [F(3, 4), F(4)]),
  g("add a number", "add", [F(3), 2.5]),
  g("add alpha, broadcast", "add", [F(2, 3), F(3)], { alpha: -0.5 }),
  g("sub alpha", "sub", [F(3), F(3)], { alpha: 2 }),
  g("div rounding_mode floor: zeros", "div", [F(2, 3), P(3)], { rounding_mode: "floor" }, false),
  g("div rounding_mode trunc: zeros", "div", [F(3), P(3)], { rounding_mode: "trunc" }, false),
  g("add f32 + f64: the f32 input's gradient is cast back", "add", [F32(3), F(3)], {}, false),
  g("sub [2,1,3] - [4,1]", "sub", [F(2, 1, 3), F(4, 1)]),
  g("sub from a number", "sub", [1, F(3)]),
  g("mul [3,1] * [1,4]", "mul", [F(3, 1), F(1, 4)]),
  g("mul by a number", "mul", [F(2, 2), -3]),
  g("div broadcast", "div", [F(2, 3), P(3)]),
  g("div a number by a tensor", "div", [2, P(4)]),
  g("maximum broadcast", "maximum", [F(3, 4), F(4)]),
  g("maximum ties split the gradient", "maximum", [{ ...F(3), data: [1, 2, 3] }, { ...F(3), data: [1, 0, 5] }], {}, false),
  g("minimum", "minimum", [F(2, 3), F(2, 3)]),
  g("pow by a number", "pow", [P(2, 3), 2.5]),
  g("pow by a tensor", "pow", [P(2, 3), F(3)]),
  g("pow of a number", "pow", [2, F(4)]),
  g("remainder", "remainder", [F(2, 3), P(3)]),
  g("clamp both bounds", "clamp", [F(8)], { min: -0.5, max: 0.7 }),
  g("clamp min only", "clamp", [F(6)], { min: 0.1 }),
  g("clamp tensor bounds, broadcast", "clamp", [F(3, 4), F(4), { ...F(3, 1), data: [1.5, 2.5, 3] }]),
  g("clamp tensor min only, broadcast to a larger shape", "clamp", [F(4), F(2, 1)]),
  g("clamp tensor max only (min None)", "clamp", [F(2, 3), null, F(3)]),
  g("clamp min above max: max gets it all", "clamp", [F(4), { ...F(4), data: [1, 1.5, 0.5, 1] }, { ...F(4), data: [-1, 0.2, 0.1, -0.3] }]),
  // ternary
  g("where broadcast", "where", [B(3, 1), F(4), F(3, 4)]),
  g("where with a number", "where", [B(5), F(5), 0.5]),
  g("masked_fill broadcast mask", "masked_fill", [F(2, 3), B(3), -1]),
  g("lerp number weight", "lerp", [F(2, 3), F(3), 0.3]),
  g("lerp tensor weight", "lerp", [F(2, 3), F(2, 3), F(3)]),
  g("addcmul", "addcmul", [F(2, 3), F(3), F(2, 1)], { value: 0.5 }),
  g("addcdiv", "addcdiv", [F(2, 3), F(3), P(2, 1)], { value: -1.5 }),
  // reductions
  g("sum all", "sum", [F(2, 3)]),
  g("sum dims keepdim", "sum", [F(2, 3, 4)], { dim: [0, 2], keepdim: true }),
  g("mean dim", "mean", [F(3, 4)], { dim: -1 }),
  g("sum dtype f64 of an f32 input: the gradient cast back", "sum", [F32(2, 3)], { dim: 1, dtype: "f64" }, false),
  g("mean dtype f32 of an f64 input", "mean", [F(3, 4)], { dtype: "f32" }, false),
  g("softmax dtype f64 of an f32 input", "softmax", [F32(2, 5), -1], { dtype: "f64" }, false),
  g("prod dim", "prod", [P(3, 4)], { dim: 1 }),
  g("prod with one zero in a row", "prod", [{ ...F(2, 3), data: [0, 1.5, -2, 0.7, 1.2, 0.9] }], { dim: 1 }),
  // Two or more zeros in a slice: every element's gradient there is 0 (the product of the others holds a zero).
  g("prod with two zeros in a row", "prod", [{ ...F(2, 3), data: [0, 1.5, 0, 0.7, 1.2, 0.9] }], { dim: 1 }),
  g("prod along dim 0, keepdim: three zeros, one zero, none", "prod", [{ ...F(3, 3), data: [0, 0, 1.1, 0, 1.3, 0.8, 0, 2, -0.6] }], { dim: 0, keepdim: true }),
  g("prod over everything with two zeros", "prod", [{ ...F(2, 2), data: [0, 2, 0, 3] }]),
  { ...g("prod over dims [0, 2] with two zeros in one slice", "prod", [{ ...F(2, 2, 2), data: [0, 1.5, 2, -1, 0, 0.5, 1.2, 0.9] }], { dim: [0, 2] }), torch: "torch 1.13's prod takes one dim" },
  g("prod along dim -1 of a 3-D input: two zeros, one zero", "prod", [{ ...F(2, 2, 3), data: [0, 1.5, 0, 0.7, 0, 0.9, 1.1, 1.2, 1.3, -0.4, 0, 0] }], { dim: -1 }),
  g("amax dim", "amax", [F(3, 4)], { dim: 1 }),
  g("amax ties share the gradient", "amax", [{ ...F(2, 2), data: [3, 3, 1, 2] }], { dim: 1 }, false),
  g("amin all", "amin", [F(3, 4)]),
  g("max over everything", "max", [F(3, 4)]),
  g("max over everything, ties share the gradient", "max", [{ ...F(2, 2), data: [3, 1, 3, 2] }], {}, false),
  g("max dim, values and indices", "max", [F(3, 4)], { dim: 1 }),
  g("max negative dim keepdim, 3-D", "max", [F(2, 3, 4)], { dim: -2, keepdim: true }),
  g("max dim ties: the first index gets it all", "max", [{ ...F(2, 3), data: [2, 2, 1, 0, 5, 5] }], { dim: 1 }, false),
  g("max 0-d along dim 0", "max", [F()], { dim: 0 }),
  g("min dim", "min", [F(4, 3)], { dim: 0 }),
  g("min over everything", "min", [F(2, 3)]),
  g("var dim", "var", [F(3, 5)], { dim: 1 }),
  g("var correction 0, dims keepdim", "var", [F(2, 3, 4)], { dim: [0, -1], correction: 0, keepdim: true }),
  g("std all", "std", [F(4, 5)]),
  g("std dim", "std", [F(3, 4)], { dim: 0 }),
  g("logsumexp dims", "logsumexp", [F(2, 3, 4), [0, 2]]),
  g("logsumexp keepdim", "logsumexp", [F(3, 4), 1, true]),
  g("cumsum", "cumsum", [F(3, 4), 1]),
  g("cumsum dim 0", "cumsum", [F(4, 2), 0]),
  g("norm p=2 dim", "norm", [F(3, 4)], { dim: 1 }),
  g("norm p=1", "norm", [F(3, 4)], { p: 1 }),
  g("norm p=inf dim keepdim", "norm", [F(3, 4)], { p: Infinity, dim: 0, keepdim: true }),
  // linear algebra: every matmul form
  g("matmul 2-D", "matmul", [F(3, 4), F(4, 2)]),
  g("matmul 1-D @ 2-D", "matmul", [F(4), F(4, 2)]),
  g("matmul 2-D @ 1-D", "matmul", [F(3, 4), F(4)]),
  g("matmul 1-D @ 1-D", "matmul", [F(4), F(4)]),
  g("matmul batched @ 2-D", "matmul", [F(2, 3, 4), F(4, 5)]),
  g("matmul broadcast batch", "matmul", [F(2, 1, 3, 4), F(3, 4, 2)]),
  g("matmul 2-D @ batched", "matmul", [F(3, 4), F(2, 4, 2)]),
  g("matmul 1-D @ batched", "matmul", [F(4), F(2, 4, 3)]),
  g("mm", "mm", [F(3, 4), F(4, 2)]),
  g("bmm", "bmm", [F(2, 3, 4), F(2, 4, 2)]),
  g("_matmul_t input transposed", "_matmul_t", [F(4, 3), F(4, 2), true, false]),
  g("_matmul_t other transposed", "_matmul_t", [F(3, 4), F(2, 4), false, true]),
  g("_matmul_t both transposed, batched", "_matmul_t", [F(2, 4, 3), F(2, 5, 4), true, true]),
  g("_matmul_t batched, 2-D other transposed", "_matmul_t", [F(2, 3, 4), F(5, 4), false, true]),
  g("_matmul_t batched input transposed, 2-D other", "_matmul_t", [F(2, 4, 3), F(4, 5), true, false]),
  g("baddbmm broadcast input, beta and alpha", "baddbmm", [F(3, 2), F(2, 3, 4), F(2, 4, 2)], { beta: 0.5, alpha: -1.5 }),
  g("baddbmm beta 0", "baddbmm", [F(2, 3, 2), F(2, 3, 4), F(2, 4, 2)], { beta: 0 }),
  g("outer", "outer", [F(3), F(4)]),
  g("ger", "ger", [F(2), F(5)]),
  g("repeat with a new leading dim", "repeat", [F(2, 3), [2, 1, 2]]),
  g("repeat a 0-d", "repeat", [F(), [3]]),
  // layout and indexing
  g("transpose", "transpose", [F(2, 3, 4), -1, 0]),
  g("t", "t", [F(2, 3)]),
  g("permute", "permute", [F(2, 3, 4), [2, 0, 1]]),
  g("reshape -1", "reshape", [F(2, 6), [3, -1]]),
  g("view", "view", [F(2, 6), [4, 3]]),
  g("flatten", "flatten", [F(2, 3, 4)], { start_dim: 1 }),
  g("squeeze", "squeeze", [F(2, 1, 3, 1)], { dim: 1 }),
  g("unsqueeze", "unsqueeze", [F(2, 3), -1]),
  g("expand", "expand", [F(3, 1), [2, 3, 4]]),
  g("broadcast_to", "broadcast_to", [F(4), [3, 4]]),
  g("contiguous", "contiguous", [F(2, 3)]),
  g("clone", "clone", [F(2, 3)]),
  g("to (a copy)", "to", [F(2, 3)]),
  g("to f32: the gradient is cast back to f64", "to", [F(2, 3)], { dtype: "f32" }, false),
  g("narrow", "narrow", [F(4, 5), 1, 1, 3]),
  g("narrow negative start", "narrow", [F(5), 0, -3, 2]),
  g("select negative index", "select", [F(3, 4), 0, -1]),
  g("slice with a step", "slice", [F(3, 8), 1, 1, 7, 2]),
  g("slice step 3 to the end", "slice", [F(10)], { start: 1, step: 3 }),
  g("slice negative start", "slice", [F(6)], { start: -4 }),
  g("diagonal", "diagonal", [F(3, 4)]),
  g("diagonal above, of the last two dims", "diagonal", [F(2, 3, 4), 1, -1, -2]),
  g("diagonal below, dims swapped", "diagonal", [F(4, 2, 3), -1, 2, 0]),
  g("diagonal off the end (empty)", "diagonal", [F(2, 3), 4]),
  g("unfold, overlapping windows", "unfold", [F(2, 7), 1, 3, 2]),
  g("unfold of the leading dim, windows apart", "unfold", [F(6, 2), 0, 2, 3]),
  g("unfold of a 0-d tensor", "unfold", [F(), 0, 1, 1]),
  g("alias", "alias", [F(2, 3)]),
  g("as_strided, windows apart, from an offset", "as_strided", [F(12), [3, 2], [4, 1], 1]),
  g("as_strided reading elements twice (their gradients add)", "as_strided", [F(2, 3), [2, 2], [1, 1]]),
  g("as_strided skipping elements (their gradient is 0)", "as_strided", [F(5), [2], [2]]),
  g("flip", "flip", [F(2, 3, 2), [0, 2]]),
  g("cat dim 1", "cat", [[F(2, 3), F(2, 1), F(2, 2)]], { dim: 1 }),
  g("cat dim 0", "cat", [[F(1, 3), F(2, 3)]]),
  g("stack dim 1", "stack", [[F(2, 3), F(2, 3)]], { dim: 1 }),
  g("index_select with repeats", "index_select", [F(4, 3), 0, I([4], [3, 0, 3, 1])]),
  g("index_select dim 1", "index_select", [F(2, 4), 1, I([2], [1, 2])]),
  g("gather dim 1, a smaller index", "gather", [F(3, 4), 1, I([2, 2], [0, 3, 1, 1])]),
  g("gather dim 0", "gather", [F(3, 2), 0, I([2, 2], [2, 0, 0, 0])]),
  g("gather 3-D, negative dim, repeats", "gather", [F(2, 3, 4), -1, I([2, 3, 5], Array.from({ length: 30 }, (_, i) => (i * 7) % 4))]),
  // scatter's src gradient is g gathered, overwritten elements included (torch's rule): these indices do not repeat, so finite differences agree
  g("scatter src, dim 0", "scatter", [F(3, 4), 0, I([2, 4], [2, 0, 1, 2, 0, 1, 2, 1]), F(2, 4)]),
  g("scatter src, dim -1", "scatter", [F(2, 5), -1, I([2, 2], [4, 0, 1, 3]), F(2, 2)]),
  g("scatter a number", "scatter", [F(3, 4), 1, I([3, 1], [3, 0, 2]), 2.5]),
  g("scatter value keyword, 0-d", "scatter", [F(), 0, I([], [0])], { value: 1.5 }),
  g("scatter_add repeated indices", "scatter_add", [F(3, 4), 0, I([3, 4], [2, 0, 2, 2, 0, 0, 1, 2, 2, 0, 1, 2]), F(3, 4)]),
  g("scatter_add 3-D dim 1", "scatter_add", [F(2, 3, 2), 1, I([2, 2, 2], [2, 0, 1, 1, 0, 2, 2, 1]), F(2, 2, 2)]),
  { ...g("scatter_add src larger than index: zeros past it", "scatter_add", [F(2, 3), 1, I([2, 2], [0, 0, 2, 1]), F(2, 4)]), torch: "torch 1.13's own rule returns the index's shape for src and fails" },
  g("index_add repeated indices, alpha", "index_add", [F(4, 3), 0, I([5], [3, 0, 3, 1, 3]), F(5, 3)], { alpha: -1.5 }),
  g("index_add dim 1", "index_add", [F(2, 4), 1, I([3], [0, 0, 2]), F(2, 3)]),
  { ...g("index_add source broadcast along a size-1 dim", "index_add", [F(3, 4), 0, I([2], [2, 2]), F(2, 1)]), torch: "torch 1.13's rule does not sum a broadcast source back to its shape, and fails" },
  g("index_add 0-d index", "index_add", [F(4, 2), 0, I([], [3]), F(1, 2)]),
  // nn
  g("softmax last dim", "softmax", [F(3, 5)], { dim: -1 }),
  g("softmax dim 0", "softmax", [F(4, 3)], { dim: 0 }),
  g("log_softmax 3-D middle dim", "log_softmax", [F(2, 3, 4)], { dim: 1 }),
  g("linear with bias", "linear", [F(4, 3), F(5, 3), F(5)]),
  g("linear 3-D input, no bias", "linear", [F(2, 4, 3), F(5, 3)]),
  g("cross_entropy mean", "cross_entropy", [F(4, 5), I([4], [0, 4, 2, 1])]),
  g("cross_entropy sum, ignore_index", "cross_entropy", [F(4, 5), I([4], [0, -100, 2, 1])], { reduction: "sum" }),
  g("cross_entropy none", "cross_entropy", [F(3, 4), I([3], [3, 0, 1])], { reduction: "none" }),
  g("cross_entropy mean, ignored, label_smoothing", "cross_entropy", [F(4, 5), I([4], [0, 7, 2, 1])], { ignore_index: 7, label_smoothing: 0.1 }),
  g("cross_entropy none, label_smoothing", "cross_entropy", [F(3, 4), I([3], [1, 1, 2])], { reduction: "none", label_smoothing: 0.3 }),
  g("cross_entropy class weight, ignored, mean", "cross_entropy", [F(4, 3), I([4], [0, 2, -100, 1]), { ...P(3), grad: false }]),
  g("cross_entropy class weight, label_smoothing, mean", "cross_entropy", [F(5, 4), I([5], [3, 0, 1, -100, 2]), { ...P(4), grad: false }], { label_smoothing: 0.2 }),
  g("cross_entropy class weight, label_smoothing, none", "cross_entropy", [F(3, 4), I([3], [1, 1, 2]), { ...P(4), grad: false }], { label_smoothing: 0.3, reduction: "none" }),
  g("cross_entropy class weight, sum", "cross_entropy", [F(3, 4), I([3], [0, 3, 2]), { ...P(4), grad: false }], { reduction: "sum" }),
  g("layer_norm with weight and bias", "layer_norm", [F(2, 3, 4), [4], F(4), F(4)]),
  g("layer_norm over two dims, no weight", "layer_norm", [F(2, 3, 4), [3, 4]]),
  g("embedding", "embedding", [I([2, 3], [0, 4, 1, 1, 3, 2]), F(5, 3)]),
  // torch's padding rule is not the derivative (the padding row still shapes the result): against torch only.
  g("embedding padding_idx: its lookups pass no gradient", "embedding", [I([2, 3], [0, 4, 1, 1, 4, 2]), F(5, 3), 4], {}, false),
  g("embedding negative padding_idx", "embedding", [I([4], [0, 3, 1, 3]), F(4, 2)], { padding_idx: -1 }, false),
  g("embedding repeated ids, rows never looked up", "embedding", [I([3, 4], [7, 7, 0, 2, 7, 2, 9, 0, 0, 7, 7, 2]), F(10, 4)]),
  // optimizer helpers
  g("_sum_of_squares", "_sum_of_squares", [[F(2, 3), F(4)]]),
  // the later ops (split and chunk: every piece weighted; the loss sums them)
  g("tril diagonal 1", "tril", [F(3, 4)], { diagonal: 1 }),
  g("triu batched, diagonal -1", "triu", [F(2, 3, 3), -1]),
  g("split by size", "split", [F(5, 2), 2]),
  g("split by sections along -1", "split", [F(2, 6), [1, 2, 3], -1]),
  g("chunk unevenly", "chunk", [F(2, 5), 3, -1]),
  g("unbind", "unbind", [F(3, 2)]),
  g("unbind an inner dim", "unbind", [F(2, 3, 2), -2]),
  g("scaled_dot_product_attention", "scaled_dot_product_attention", [F(2, 3, 4), F(2, 5, 4), F(2, 5, 2)]),
  g("scaled_dot_product_attention causal, scale", "scaled_dot_product_attention", [F(2, 4, 3), F(2, 4, 3), F(2, 4, 2)], { is_causal: true, scale: 0.7 }),
  g("scaled_dot_product_attention bool mask, broadcast batch", "scaled_dot_product_attention", [F(2, 3, 2), F(4, 2), F(4, 3), { ...B(3, 4), data: [1, 0, 1, 1, 0, 1, 1, 1, 1, 1, 0, 1] }]),
  g("scaled_dot_product_attention additive mask", "scaled_dot_product_attention", [F(3, 2), F(3, 2), F(3, 2), F(3, 3)]),
  g("rms_norm with weight", "rms_norm", [F(3, 4), [4], F(4)]),
  g("rms_norm over two dims, eps", "rms_norm", [F(2, 3, 2), [3, 2]], { eps: 1e-3 }),
  g("nll_loss mean, weight, ignore_index", "nll_loss", [F(4, 3), I([4], [0, 2, -100, 1]), { ...P(3), grad: false }]),
  g("nll_loss none", "nll_loss", [F(4, 3), I([4], [0, 2, 1, 1])], { reduction: "none" }),
  g("nll_loss [N, C, d] sum", "nll_loss", [F(2, 3, 2), I([2, 2], [0, 2, 1, 1])], { reduction: "sum" }),
  g("mse_loss mean, broadcast", "mse_loss", [F(2, 3), F(3)]),
  g("mse_loss none", "mse_loss", [F(2, 3), F(2, 3)], { reduction: "none" }),
  { ...g("dropout: the kept elements, scaled", "dropout", [F(6, 5), 0.4]), seed: 3 },
  g("dropout in eval mode", "dropout", [F(3, 4)], { training: false }),
  // sorting and scanning: the values' gradient back where each came from
  g("sort", "sort", [F(3, 5)]),
  g("sort descending, dim 0", "sort", [F(4, 3), 0, true]),
  g("sort 0-d", "sort", [F()]),
  g("topk", "topk", [F(3, 6), 2]),
  g("topk smallest, dim 0", "topk", [F(5, 2), 3, 0, false]),
  g("kthvalue", "kthvalue", [F(3, 5), 2]),
  g("kthvalue dim 0, keepdim", "kthvalue", [F(4, 3), 4, 0, true]),
  g("cumprod", "cumprod", [F(3, 4), 1]),
  g("cumprod through zeros: one, two, and a leading one", "cumprod", [{ ...F(3, 4), data: [1.5, 0, -0.7, 2, 0, 1.2, 0, -1.1, 0.8, -1.3, 1.4, 0] }, -1]),
  g("cumprod dim 0", "cumprod", [F(3, 2), 0]),
  g("cummax", "cummax", [F(3, 5), 1]),
  g("cummin dim 0", "cummin", [F(4, 3), 0]),
  g("fmod", "fmod", [F(2, 3), P(3)]),
  g("fmod by a number", "fmod", [F(4), 0.7]),
  g("roll two dims", "roll", [F(3, 4), [1, -2], [0, 1]]),
  g("roll flattened", "roll", [F(2, 3), 4]),
  g("flip several dims", "flip", [F(2, 3, 2), [0, -1]]),
  // model code's ops (einsum and pad: the gradients of their parts)
  g("einsum attention scores", "einsum", ["bhqd,bhkd->bhqk", [F(2, 2, 3, 4), F(2, 2, 2, 4)]]),
  g("einsum diagonal, broadcast, summed label", "einsum", ["iij,kj->k", [F(3, 3, 2), F(4, 1)]]),
  g("pad constant, a crop", "pad", [F(2, 3, 4), [1, -1, 2, 0]], { value: 0.5 }),
  g("pad reflect", "pad", [F(2, 3, 4), [2, 1, 1, 2], "reflect"]),
  g("pad replicate", "pad", [F(1, 2, 3), [2, 2], "replicate"]),
  g("pad circular", "pad", [F(1, 2, 4), [3, 1], "circular"]),
  g("softplus beta and threshold", "softplus", [{ ...F(5), data: [-1.5, 0.3, 1.2, 1.6, 1.9] }, 2, 3]),
  g("cross_entropy [N, C, d] mean, weight, ignore_index, label_smoothing", "cross_entropy", [F(2, 4, 3), I([2, 3], [3, -100, 1, 0, 2, 3]), { ...P(4), grad: false }], { label_smoothing: 0.2 }),
  g("cross_entropy [N, C, d1, d2] none", "cross_entropy", [F(2, 3, 2, 2), I([2, 2, 2], [0, 1, 2, 2, 1, 0, 0, 2])], { reduction: "none" }),
  g("max_pool2d padding, ceil_mode", "max_pool2d", [F(1, 2, 5, 5), 3, 2, 1], { ceil_mode: true }),
  g("max_pool2d dilation", "max_pool2d", [F(2, 5, 6), 2, 1, 0, 2]),
  g("avg_pool2d padding, ceil_mode, count_include_pad False", "avg_pool2d", [F(1, 2, 5, 6), 3, 2, 1, true, false]),
  g("avg_pool2d divisor_override", "avg_pool2d", [F(2, 4, 4), 2], { divisor_override: 3 }),
  g("conv1d stride, padding, dilation, groups, bias", "conv1d", [F(2, 4, 7), F(6, 2, 3), F(6)], { stride: 2, padding: 2, dilation: 2, groups: 2 }),
  g("conv2d padding past the kernel, two strides, groups, no bias", "conv2d", [F(1, 2, 4, 5), F(4, 1, 2, 2)], { stride: [2, 1], padding: 3, groups: 2 }),
  g("batch_norm training, weight and bias", "batch_norm", [F(3, 2, 4), { ...F(2), grad: false }, { ...P(2), grad: false }, F(2), F(2)], { training: true }),
  g("batch_norm eval", "batch_norm", [F(3, 2), { ...F(2), grad: false }, { ...P(2), grad: false }, F(2), F(2)], { training: false }),
  g("group_norm, affine", "group_norm", [F(2, 4, 3), 2, F(4), F(4)]),
]

/** Every differentiable op has a case. */
const differentiable = (Object.keys(OPS) as OpName[]).filter((n) => OPS[n].backward !== NOT_DIFFERENTIABLE)

test("every differentiable op in the registry has a gradient check case", () => {
  const covered = new Set(CASES.map((c) => c.op))
  expect(differentiable.filter((n) => !covered.has(n))).toEqual([])
})

const fixture = oneRankMesh()

/** The paths of the differentiated tensors among a case's arguments: [i], or [i, j] in a list. */
const pathsOf = (args: ReadonlyArray<unknown>): number[][] =>
  args.flatMap((a, i) => (isT(a) && a.grad ? [[i]] : Array.isArray(a) ? a.flatMap((x, j) => (isT(x) && x.grad ? [[i, j]] : [])) : []))
const at = <V>(args: ReadonlyArray<unknown>, path: number[]): V => (path.length === 1 ? args[path[0]!] : (args[path[0]!] as unknown[])[path[1]!]) as V
const mapTensors = (v: unknown, f: (t: T, path: number[]) => unknown, path: number[] = []): unknown =>
  isT(v) ? f(v, path) : Array.isArray(v) ? v.map((x, i) => mapTensors(x, f, [...path, i])) : v

const STEP = 1e-6
const DIRECTIONS = 2

interface Checked { readonly grads: number[][]; readonly weights: T[]; readonly directional: Array<{ path: number[]; v: number[]; fd: number }> }

/**
 * Runs a case on the worker: its gradients by the tape, and (in f64) the loss along random
 * directions of each input, all fetched in one round trip.
 */
const check = async (cs: Case): Promise<Checked> => {
  const on = opsOn(fixture.mesh)
  const send = (t: T) => on.clone(host(t.t, t.shape, t.data) as never)
  const paths = pathsOf(cs.args)
  const inputs = mapTensors(cs.args, (t) => (t.grad ? send(t).requiresGrad_() : send(t))) as unknown[]
  const op = (ops as unknown as Record<string, (...a: unknown[]) => RemoteTensor | RemoteTensor[]>)[cs.op]!
  // Every result as a list (split's pieces), drawn from the same stream each time for a random op.
  const fn = (...a: unknown[]): RemoteTensor[] => {
    if (cs.seed !== undefined) on.manual_seed(cs.seed)
    const out = op(...a, cs.kwargs)
    return Array.isArray(out) ? out : [out]
  }
  const outs = fn(...inputs)
  const weights: T[] = outs.map((o) => ({ t: "f64", shape: [...o.shape!], data: Array.from({ length: numel(o.shape!) }, () => rnd() * 2 - 1), grad: false }))
  const ws = weights.map(send)
  const lossOf = (args: unknown[]) => fn(...args).map((o, i) => ops.sum(ops.mul(o, ws[i]!))).reduce((a, b) => ops.add(a, b))
  const grads = grad(outs.map((o, i) => ops.sum(ops.mul(o, ws[i]!))).reduce((a, b) => ops.add(a, b)), paths.map((p) => at<RemoteTensor>(inputs, p)))
  const directions: Array<{ path: number[]; v: number[]; plus: RemoteTensor; minus: RemoteTensor }> = []
  if (cs.fd) noGrad(() => {
    for (const path of paths) for (let k = 0; k < DIRECTIONS; k++) {
      const x = at<T>(cs.args, path), v = x.data.map(() => rnd() * 2 - 1)
      const moved = (sign: number) => lossOf(mapTensors(cs.args, (t, p) =>
        p.join() === path.join() ? send({ ...t, data: t.data.map((e, i) => e + sign * STEP * v[i]!) }) : at<RemoteTensor>(inputs, p)) as unknown[])
      directions.push({ path, v, plus: moved(1), minus: moved(-1) })
    }
  })
  const fetched = await fixture.run(fixture.mesh.fetch([grads, directions.map((d) => [d.plus, d.minus])])) as unknown as [HostTensor[], HostTensor[][]]
  const num = (h: HostTensor) => [...h.toArray()].map(Number)
  return {
    grads: fetched[0].map(num),
    weights,
    directional: directions.map((d, i) => ({ path: d.path, v: d.v, fd: (num(fetched[1][i]![0]!)[0]! - num(fetched[1][i]![1]!)[0]!) / (2 * STEP) })),
  }
}

const results = new Map<string, Promise<Checked>>()
const checked = (cs: Case) => {
  let r = results.get(cs.name)
  if (r === undefined) results.set(cs.name, (r = check(cs)))
  return r
}
const dot = (a: number[], b: number[]) => a.reduce((s, x, i) => s + x * b[i]!, 0)

describe("finite differences in f64", () => {
  for (const cs of CASES.filter((c) => c.fd)) {
    test(`${cs.op}: ${cs.name}`, async () => {
      const { grads, directional } = await checked(cs)
      const paths = pathsOf(cs.args)
      const bad = directional.flatMap(({ path, v, fd }) => {
        const analytic = dot(grads[paths.findIndex((p) => p.join() === path.join())]!, v)
        return Math.abs(analytic - fd) <= 1e-6 * (1 + Math.abs(fd)) ? [] : [`input ${path}: tape ${analytic}, finite difference ${fd}`]
      })
      expect(bad).toEqual([])
    })
  }
})

const missing = torchMissing()
describeUnless(missing)("against torch 1.13's autograd", () => {
  let torch: TorchServer
  beforeAll(() => void (torch = new TorchServer(new URL("../ops/torch_ref.py", import.meta.url).pathname)))
  afterAll(() => torch?.close())
  const wire = (v: unknown): unknown => mapTensors(v, (t) => ({ t: t.t, shape: t.shape, data: t.data }))
  for (const [id, cs] of CASES.entries()) {
    if (cs.seed !== undefined) continue
    testUnless(cs.torch)(`${cs.op}: ${cs.name}`, async () => {
      const ours = await checked(cs)
      const weights = ours.weights.length === 1 ? ours.weights[0] : ours.weights
      const want = await torch.ask<{ grads?: Array<Array<number | string>>; error?: string }>(id, { op: cs.op, args: wire(cs.args), kwargs: cs.kwargs, wrt: pathsOf(cs.args), weights: wire(weights) })
      expect(want.error).toBeUndefined()
      const bad = ours.grads.flatMap((mine, k) => mine.flatMap((v, i) => {
        const w = fromJson(want.grads![k]![i]!)
        return Math.abs(v - w) <= 1e-9 * (1 + Math.abs(w)) ? [] : [`input ${pathsOf(cs.args)[k]} element ${i}: ours ${v}, torch ${w}`]
      }))
      expect(bad.slice(0, 4)).toEqual([])
      expect(ours.grads.map((g) => g.length)).toEqual(want.grads!.map((g) => g.length))
    }, 60_000)
  }
})
