/**
 * What each op's backward reads the values of: torch 1.13's saved tensors, per differentiable
 * parameter (a tensor is saved when a parameter whose gradient needs it requires grad, as torch's
 * generated code saves it). The names are the op's parameters, "result" (its first result) and
 * "result1" (its second: max's indices); a name whose argument is a number or None saves nothing.
 * The autograd tape checks the versions of exactly these (src/autograd/tape.ts), so an in-place
 * write to anything else is allowed, as in torch, and the op's rule (its registry entry) reads no
 * other tensor's values.
 *
 * Measured against torch 1.13 (each input and output written in place under no_grad, one input
 * requiring grad at a time). Where a rule here reads a tensor torch keeps a private copy of
 * (cross_entropy's log_softmax, 2 / x's reciprocal), that tensor is listed too: a refusal where
 * torch has none, never a gradient from changed values. An op not listed saves every tensor
 * argument and result.
 */
import type { Bound, Param } from "./params.ts"
import type { OpName } from "./registry.ts"

/** Per differentiable parameter, the tensors its gradient reads. */
export type Saves = Readonly<Record<string, ReadonlyArray<string>>>

const NONE: Saves = {}
const INPUT: Saves = { input: ["input"] }
const RESULT: Saves = { input: ["result"] }
const INPUT_RESULT: Saves = { input: ["input", "result"] }
const PRODUCT = (a: string, b: string): Saves => ({ [a]: [b], [b]: [a] })

export const SAVES: { readonly [N in OpName]?: Saves | ((a: Bound<ReadonlyArray<Param>, unknown>) => Saves) } = {
  neg: NONE, abs: INPUT, relu: RESULT, exp: RESULT, log: INPUT, sqrt: RESULT, tanh: RESULT, sigmoid: RESULT,
  erf: INPUT, log1p: INPUT, expm1: RESULT, rsqrt: RESULT, reciprocal: RESULT, sin: INPUT, cos: INPUT,
  floor: NONE, ceil: NONE, trunc: NONE, round: NONE, sign: NONE, silu: INPUT, softplus: INPUT, gelu: INPUT,
  // Its mask (a second result no program holds) is the tape's own.
  dropout: NONE,
  add: NONE, sub: NONE,
  mul: PRODUCT("input", "other"),
  div: { input: ["other"], other: ["input", "other"] },
  maximum: { input: ["input", "other"], other: ["input", "other"] },
  minimum: { input: ["input", "other"], other: ["input", "other"] },
  pow: (a) => (typeof a.other === "number" ? INPUT : { input: ["input", "other", "result"], other: ["input", "other", "result"] }),
  remainder: { other: ["input", "other"] },
  clamp: { input: ["input", "min", "max"], min: ["input", "min", "max"], max: ["input", "min", "max"] },
  where: { input: ["condition"], other: ["condition"] },
  masked_fill: { input: ["mask"] },
  lerp: { input: ["weight"], end: ["weight"], weight: ["input", "end", "weight"] },
  addcmul: PRODUCT("tensor1", "tensor2"),
  addcdiv: { input: ["tensor2"], tensor1: ["tensor2"], tensor2: ["tensor1", "tensor2"] },
  sum: NONE, cumsum: NONE,
  // Over every element, nothing; along dims, its input (torch 1.13's mean.dim).
  mean: (a) => (a.dim === null ? NONE : INPUT),
  prod: INPUT_RESULT, amax: INPUT_RESULT, amin: INPUT_RESULT, std: INPUT_RESULT, logsumexp: INPUT_RESULT, norm: INPUT_RESULT,
  var: INPUT,
  // Over every element, the value (and which elements equal it); along a dim, the indices only.
  max: (a) => (a.dim === null ? INPUT_RESULT : { input: ["result1"] }),
  min: (a) => (a.dim === null ? INPUT_RESULT : { input: ["result1"] }),
  matmul: PRODUCT("input", "other"), _matmul_t: PRODUCT("input", "other"), mm: PRODUCT("input", "mat2"), bmm: PRODUCT("input", "mat2"),
  outer: PRODUCT("input", "vec2"), ger: PRODUCT("input", "vec2"), baddbmm: PRODUCT("batch1", "batch2"), linear: PRODUCT("input", "weight"),
  transpose: NONE, t: NONE, permute: NONE, reshape: NONE, view: NONE, flatten: NONE, squeeze: NONE, unsqueeze: NONE,
  expand: NONE, broadcast_to: NONE, contiguous: NONE, clone: NONE, to: NONE, narrow: NONE, select: NONE, slice: NONE,
  flip: NONE, cat: NONE, stack: NONE, split: NONE, chunk: NONE, unbind: NONE, repeat: NONE, tril: NONE, triu: NONE,
  alias: NONE, diagonal: NONE, unfold: NONE, as_strided: NONE,
  index_select: { input: ["index"] },
  gather: { input: ["input", "index"] },
  scatter: { input: ["index"], src: ["index"] },
  scatter_add: { src: ["index"] },
  index_add: { source: ["index", "source"] },
  softmax: RESULT, log_softmax: RESULT,
  // torch saves its log_softmax (private); this rule recomputes it from the input.
  cross_entropy: { input: ["input", "target", "weight"] },
  nll_loss: { input: ["input", "target", "weight"] },
  mse_loss: { input: ["input", "target"], target: ["input", "target"] },
  layer_norm: { input: ["input", "weight", "bias"], weight: ["input", "weight", "bias"], bias: ["input", "weight", "bias"] },
  embedding: { weight: ["input", "weight"] },
}
