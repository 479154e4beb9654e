/** nn ops (torch.nn.functional's names and arguments): softmax, losses, normalisation, embedding, linear. */
import { bad, describe, type TensorMeta } from "../meta.ts"
import { arg, opt } from "../params.ts"
import { isFloating } from "../promotion.ts"
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
}
