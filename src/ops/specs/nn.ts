/** nn ops (torch.nn.functional's names and arguments): softmax, losses, normalisation, embedding, linear. */
import { type GradOps, oneHot } from "../grad.ts"
import { bad, describe, numelOf, type TensorMeta } from "../meta.ts"
import { arg, opt } from "../params.ts"
import { isFloating } from "../promotion.ts"
import { normDim } from "../rules.ts"
import { spec } from "../spec.ts"

export const floating = (op: string, x: TensorMeta): void => {
  if (!isFloating(x.dtype)) bad(op, `needs a floating input, got ${describe(x)} (cast with ops.to)`)
}

const softmaxParams = [arg("input", "tensor"), arg("dim", "int")] as const

/** softmax and log_softmax: their rule from the result y, its gradient g and the dim. */
const softmaxLike = (rule: <T>(o: GradOps<T>, y: T, g: T, dim: number) => T) => spec(softmaxParams, ({ input, dim }, op) => {
  floating(op, input)
  normDim(op, dim, input.shape.length)
  return [input]
}, (c, o) => ({ input: () => rule(o, c.out, c.grad, c.args.dim) }), { dtype: "same" })

/** linear's gradients: y = x w^T + b over the rows of x (its leading dims flattened). */
const linearGrads = <T>(o: GradOps<T>, x: T, w: T, wm: TensorMeta, g: T) => {
  const [out, features] = wm.shape as [number, number], rows = (t: T, n: number) => o.reshape(t, [-1, n])
  return {
    input: () => o.matmul(g, w),
    weight: () => o.matmul(o.transpose(rows(g, out), 0, 1), rows(x, features)),
    bias: () => o.sum(rows(g, out), 0, false),
  }
}

/** layer_norm's gradients, recomputing the mean and 1/std over the last dims (the kernel keeps neither). */
const layerNormGrads = <T>(o: GradOps<T>, x: T, m: TensorMeta, k: number, weight: T | null, eps: number, g: T) => {
  const dims = m.shape.map((_, i) => i).slice(m.shape.length - k), lead = m.shape.map((_, i) => i).slice(0, m.shape.length - k)
  const centred = o.sub(x, o.mean(x, dims, true))
  const rstd = o.rsqrt(o.add(o.mean(o.mul(centred, centred), dims, true), eps))
  const xhat = o.mul(centred, rstd)
  const sumLead = (t: T) => (lead.length > 0 ? o.sum(t, lead, false) : t)
  return {
    // dx = rstd (gx - mean(gx) - xhat mean(gx xhat)), gx = g w
    input: () => {
      const gx = weight === null ? g : o.mul(g, weight)
      return o.mul(rstd, o.sub(o.sub(gx, o.mean(gx, dims, true)), o.mul(xhat, o.mean(o.mul(gx, xhat), dims, true))))
    },
    weight: () => sumLead(o.mul(g, xhat)),
    bias: () => sumLead(g),
  }
}

export const REDUCTIONS = ["none", "mean", "sum"] as const

export const checkReduction = (op: string, reduction: string): void => {
  if (!(REDUCTIONS as ReadonlyArray<string>).includes(reduction)) bad(op, `reduction must be one of ${REDUCTIONS.join(", ")}, got "${reduction}"`)
}

export const nn = {
  // dx = y (g - sum(g y))
  softmax: softmaxLike((o, y, g, dim) => o.mul(y, o.sub(g, o.sum(o.mul(g, y), dim, true)))),
  // dx = g - softmax(x) sum(g)
  log_softmax: softmaxLike((o, y, g, dim) => o.sub(g, o.mul(o.exp(y), o.sum(g, dim, true)))),
  linear: spec([arg("input", "tensor"), arg("weight", "tensor"), opt("bias", "tensor", null)], ({ input, weight, bias }, op) => {
    if (weight.shape.length !== 2 || input.shape.length === 0 || input.shape.at(-1) !== weight.shape[1])
      bad(op, `input ${describe(input)} and weight ${describe(weight)} do not match (weight is [out_features, in_features])`)
    if (input.dtype !== weight.dtype || (bias && bias.dtype !== input.dtype)) bad(op, `dtypes differ: ${[input, weight, bias].filter(Boolean).map(describe).join(", ")}`)
    if (bias && (bias.shape.length !== 1 || bias.shape[0] !== weight.shape[0])) bad(op, `bias ${describe(bias)} must be [${weight.shape[0]}]`)
    return [{ dtype: input.dtype, shape: [...input.shape.slice(0, -1), weight.shape[0]!] }]
  }, (c, o) => linearGrads(o, c.args.input, c.args.weight, c.meta(c.args.weight), c.grad), { dtype: "same" }),
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
    // Per row, (softmax(x) - q) with q the smoothed target ((1 - s) one_hot + s / C), zero for
    // ignored rows; scaled by g per row (none), by g (sum), or by g over the rows counted (mean).
    (c, o) => ({
      input: () => {
        const { input: x, target, ignore_index, reduction, label_smoothing: s } = c.args, { dtype, shape } = c.meta(x), [n, classes] = shape as [number, number]
        const valid = o.to(o.ne(target, ignore_index), dtype)
        const q = o.add(o.mul(oneHot(o, target, n, classes, dtype), 1 - s), s / classes)
        const perRow = o.mul(o.sub(o.softmax(x, 1), q), o.reshape(valid, [n, 1]))
        if (reduction === "none") return o.mul(perRow, o.reshape(c.grad, [n, 1]))
        const scale = reduction === "sum" ? c.grad : o.div(c.grad, o.sum(valid, null, false))
        return o.mul(perRow, scale)
      },
    }),
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
    (c, o) => layerNormGrads(o, c.args.input, c.meta(c.args.input), c.args.normalized_shape.length, c.args.weight, c.args.eps, c.grad),
    { dtype: "same" },
  ),
  embedding: spec([arg("input", "tensor"), arg("weight", "tensor")], ({ input, weight }, op) => {
    if (input.dtype !== "i64") bad(op, `input must hold indices (i64), got ${describe(input)}`)
    if (weight.shape.length !== 2) bad(op, `weight must be [num_embeddings, embedding_dim], got ${describe(weight)}`)
    return [{ dtype: weight.dtype, shape: [...input.shape, weight.shape[1]!] }]
  }, (c, o) => ({
    // Each row's gradient summed into the row it was looked up from: one_hot(input)^T @ g.
    weight: () => {
      const [rows, width] = c.meta(c.args.weight).shape as [number, number], n = numelOf(c.meta(c.args.input).shape)
      return o.matmul(o.transpose(oneHot(o, c.args.input, n, rows, c.meta(c.args.weight).dtype), 0, 1), o.reshape(c.grad, [n, width]))
    },
  }), { dtype: "other" }),
}
