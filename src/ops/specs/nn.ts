/** nn ops (torch.nn.functional's names and arguments): softmax, losses, normalisation, embedding, linear. */
import { bad, describe, type TensorMeta } from "../meta.ts"
import { arg, kw, opt } from "../params.ts"
import { broadcastShapes, isFloating, resultType } from "../promotion.ts"
import { normDim } from "../rules.ts"
import { spec } from "../spec.ts"

export const floating = (op: string, x: TensorMeta): void => {
  if (!isFloating(x.dtype)) bad(op, `needs a floating input, got ${describe(x)} (cast with ops.to)`)
}

const softmax = spec([arg("input", "tensor"), arg("dim", "int")], ({ input, dim }, op) => {
  floating(op, input)
  normDim(op, dim, input.shape.length)
  return [input]
}, { dtype: "same" })

export const REDUCTIONS = ["none", "mean", "sum"] as const

export const checkReduction = (op: string, reduction: string): void => {
  if (!(REDUCTIONS as ReadonlyArray<string>).includes(reduction)) bad(op, `reduction must be one of ${REDUCTIONS.join(", ")}, got "${reduction}"`)
}

/** torch.finfo(dtype).eps: rms_norm's eps when none is given. */
export const EPSILON: Readonly<Record<string, number>> = { f32: 2 ** -23, f64: 2 ** -52, f16: 2 ** -10, bf16: 2 ** -7 }

/** What scaled_dot_product_attention's kernel runs over: the broadcast batch dims, L, S, E, Ev. */
export interface AttentionPlan {
  readonly batch: number[]
  readonly l: number
  readonly s: number
  readonly e: number
  readonly ev: number
}

export const attentionPlan = (op: string, q: TensorMeta, k: TensorMeta, v: TensorMeta, mask: TensorMeta | null, causal: boolean, dropout: number): AttentionPlan => {
  floating(op, q)
  if (k.dtype !== q.dtype || v.dtype !== q.dtype) bad(op, `query, key and value need one dtype: ${[q, k, v].map(describe).join(", ")}`)
  if (q.shape.length < 2 || k.shape.length < 2 || v.shape.length < 2) bad(op, `query, key and value need at least 2 dims: ${[q, k, v].map(describe).join(", ")}`)
  const [l, e] = q.shape.slice(-2) as [number, number], [s, ek] = k.shape.slice(-2) as [number, number], [sv, ev] = v.shape.slice(-2) as [number, number]
  if (ek !== e || sv !== s) bad(op, `query [..., L, E], key [..., S, E] and value [..., S, Ev] do not fit: ${[q, k, v].map(describe).join(", ")}`)
  if (e === 0) bad(op, "the embedding dim E is 0")
  const batch = broadcastShapes(op, [q.shape.slice(0, -2), k.shape.slice(0, -2), v.shape.slice(0, -2)])
  if (mask) {
    if (mask.dtype !== "bool" && mask.dtype !== q.dtype) bad(op, `attn_mask must be bool or the query's ${q.dtype}, got ${describe(mask)}`)
    if (broadcastShapes(op, [mask.shape, [...batch, l, s]]).join() !== [...batch, l, s].join()) bad(op, `attn_mask ${describe(mask)} does not broadcast to [${[...batch, l, s]}]`)
    if (causal) bad(op, "give attn_mask or is_causal, not both (as torch)")
  }
  if (dropout !== 0) bad(op, `dropout_p must be 0 in the fused kernel, got ${dropout} (apply ops.dropout to the output instead)`)
  return { batch, l, s, e, ev }
}

/** nll_loss's shapes: input [N, C, d...] or [C], target [N, d...] or []. */
const nllShapes = (op: string, input: TensorMeta, target: TensorMeta, weight: TensorMeta | null): void => {
  floating(op, input)
  if (target.dtype !== "i64") bad(op, `target must hold class indices (i64), got ${describe(target)}`)
  const n = input.shape.length
  const fits = n === 1 ? target.shape.length === 0 : n >= 2 && target.shape.join() === [input.shape[0], ...input.shape.slice(2)].join()
  if (!fits) bad(op, `input must be [N, C, d...] with target [N, d...], or [C] with a 0-d target; got ${describe(input)} and ${describe(target)}`)
  const c = input.shape[n === 1 ? 0 : 1]!
  if (weight && (weight.shape.join() !== `${c}` || weight.dtype !== input.dtype)) bad(op, `weight must be ${input.dtype}[${c}], got ${describe(weight)}`)
}

export const nn = {
  softmax,
  log_softmax: softmax,
  linear: spec([arg("input", "tensor"), arg("weight", "tensor"), opt("bias", "tensor", null)], ({ input, weight, bias }, op) => {
    if (weight.shape.length !== 2 || input.shape.length === 0 || input.shape.at(-1) !== weight.shape[1])
      bad(op, `input ${describe(input)} and weight ${describe(weight)} do not match (weight is [out_features, in_features])`)
    if (input.dtype !== weight.dtype || (bias && bias.dtype !== input.dtype)) bad(op, `dtypes differ: ${[input, weight, bias].filter(Boolean).map(describe).join(", ")}`)
    if (bias && (bias.shape.length !== 1 || bias.shape[0] !== weight.shape[0])) bad(op, `bias ${describe(bias)} must be [${weight.shape[0]}]`)
    return [{ dtype: input.dtype, shape: [...input.shape.slice(0, -1), weight.shape[0]!] }]
  }, { dtype: "same" }),
  cross_entropy: spec(
    [arg("input", "tensor"), arg("target", "tensor"), opt("ignore_index", "int", -100), opt("reduction", "string", "mean"), opt("label_smoothing", "scalar", 0)],
    ({ input, target, reduction, label_smoothing }, op) => {
      floating(op, input)
      checkReduction(op, reduction)
      if (target.dtype !== "i64") bad(op, `target must hold class indices (i64), got ${describe(target)}`)
      if (input.shape.length !== 2 || target.shape.length !== 1 || target.shape[0] !== input.shape[0])
        bad(op, `input must be [N, C] and target [N], got ${describe(input)} and ${describe(target)}`)
      if (!(label_smoothing >= 0 && label_smoothing <= 1)) bad(op, `label_smoothing must be in [0, 1], got ${label_smoothing}`)
      return [{ dtype: input.dtype, shape: reduction === "none" ? target.shape : [] }]
    },
    { dtype: "same" },
  ),
  layer_norm: spec(
    [arg("input", "tensor"), arg("normalized_shape", "shape"), opt("weight", "tensor", null), opt("bias", "tensor", null), opt("eps", "scalar", 1e-5)],
    ({ input, normalized_shape, weight, bias }, op) => {
      floating(op, input)
      const k = normalized_shape.length, tail = input.shape.slice(input.shape.length - k)
      if (k === 0 || k > input.shape.length || tail.join() !== normalized_shape.join())
        bad(op, `normalized_shape [${normalized_shape}] must be the last dims of ${describe(input)}`)
      for (const p of [weight, bias])
        if (p && (p.shape.join() !== normalized_shape.join() || p.dtype !== input.dtype)) bad(op, `weight and bias must be ${input.dtype}[${normalized_shape}], got ${describe(p)}`)
      return [input]
    },
    { dtype: "same" },
  ),
  embedding: spec([arg("input", "tensor"), arg("weight", "tensor")], ({ input, weight }, op) => {
    if (input.dtype !== "i64") bad(op, `input must hold indices (i64), got ${describe(input)}`)
    if (weight.shape.length !== 2) bad(op, `weight must be [num_embeddings, embedding_dim], got ${describe(weight)}`)
    return [{ dtype: weight.dtype, shape: [...input.shape, weight.shape[1]!] }]
  }, { dtype: "other" }),
  scaled_dot_product_attention: spec(
    [arg("query", "tensor"), arg("key", "tensor"), arg("value", "tensor"), opt("attn_mask", "tensor", null), opt("dropout_p", "scalar", 0), opt("is_causal", "bool", false), kw("scale", "scalar", null)],
    ({ query, key, value, attn_mask, dropout_p, is_causal }, op) => {
      const p = attentionPlan(op, query, key, value, attn_mask, is_causal, dropout_p)
      return [{ dtype: query.dtype, shape: [...p.batch, p.l, p.ev] }]
    },
    { dtype: "same" },
  ),
  rms_norm: spec([arg("input", "tensor"), arg("normalized_shape", "shape"), opt("weight", "tensor", null), opt("eps", "scalar", null)], ({ input, normalized_shape, weight }, op) => {
    floating(op, input)
    const k = normalized_shape.length, tail = input.shape.slice(input.shape.length - k)
    if (k === 0 || k > input.shape.length || tail.join() !== normalized_shape.join()) bad(op, `normalized_shape [${normalized_shape}] must be the last dims of ${describe(input)}`)
    if (weight && (weight.shape.join() !== normalized_shape.join() || weight.dtype !== input.dtype)) bad(op, `weight must be ${input.dtype}[${normalized_shape}], got ${describe(weight)}`)
    return [input]
  }, { dtype: "same" }),
  nll_loss: spec(
    [arg("input", "tensor"), arg("target", "tensor"), opt("weight", "tensor", null), opt("ignore_index", "int", -100), opt("reduction", "string", "mean")],
    ({ input, target, weight, reduction }, op) => {
      nllShapes(op, input, target, weight)
      checkReduction(op, reduction)
      return [{ dtype: input.dtype, shape: reduction === "none" ? target.shape : [] }]
    },
    { dtype: "same" },
  ),
  mse_loss: spec([arg("input", "tensor"), arg("target", "tensor"), opt("reduction", "string", "mean")], ({ input, target, reduction }, op) => {
    checkReduction(op, reduction)
    const dtype = resultType([input, target])
    if (!isFloating(dtype)) bad(op, `needs floating operands, got ${describe(input)} and ${describe(target)}`)
    const shape = broadcastShapes(op, [input.shape, target.shape])
    return [{ dtype, shape: reduction === "none" ? shape : [] }]
  }, { dtype: "promote" }),
  /** num_classes must be given: -1 (torch's default, the largest index + 1) would make the shape depend on values. */
  one_hot: spec([arg("tensor", "tensor"), opt("num_classes", "int", -1)], ({ tensor, num_classes }, op) => {
    if (tensor.dtype !== "i64") bad(op, `tensor must hold class indices (i64), got ${describe(tensor)}`)
    if (num_classes < 0) bad(op, "give num_classes: the result's shape cannot depend on the values (torch's -1 reads the largest index)")
    return [{ dtype: "i64", shape: [...tensor.shape, num_classes] }]
  }),
}
