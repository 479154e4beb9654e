/** nn ops (torch.nn.functional's names and arguments): softmax, losses, normalisation, embedding, linear. */
import { type GradOps, NOT_DIFFERENTIABLE, oneHot } from "../grad.ts"
import { bad, describe, numelOf, type TensorMeta } from "../meta.ts"
import { arg, kw, opt } from "../params.ts"
import { broadcastShapes, isFloating, resultType } from "../promotion.ts"
import { normDim } from "../rules.ts"
import { fused, spec, withPlan } from "../spec.ts"

export const floating = (op: string, x: TensorMeta): void => {
  if (!isFloating(x.dtype)) bad(op, `needs a floating input, got ${describe(x)} (cast with ops.to)`)
}

const softmaxParams = [arg("input", "tensor"), arg("dim", "int"), kw("dtype", "dtype", null)] as const

/**
 * softmax and log_softmax: their rule from the result y, its gradient g and the dim. torch's
 * `dtype` keyword casts the input to it first (the tape casts the gradient back).
 */
const softmaxLike = (rule: <T>(o: GradOps<T>, y: T, g: T, dim: number) => T) => spec(softmaxParams, ({ input, dim, dtype }, op) => {
  const x = { dtype: dtype ?? input.dtype, shape: input.shape }
  floating(op, x)
  normDim(op, dim, input.shape.length)
  return [x]
}, (c, o) => ({ input: () => rule(o, c.out, c.grad, c.args.dim) }), { dtype: "like", strided: true })

/** linear's gradients: y = x w^T + b over the rows of x (its leading dims flattened). */
const linearGrads = <T>(o: GradOps<T>, x: T, w: T, wm: TensorMeta, g: T) => {
  const [out, features] = wm.shape as [number, number], rows = (t: T, n: number) => o.reshape(t, [-1, n])
  return {
    input: () => o.matmul(g, w),
    weight: () => o._matmul_t(rows(g, out), rows(x, features), true, false),
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

const attentionPlan = (op: string, q: TensorMeta, k: TensorMeta, v: TensorMeta, mask: TensorMeta | null, causal: boolean, dropout: number): AttentionPlan => {
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

/**
 * A loss input [N, C, d...] (or [C]) as rows [M, C], M = N d... (the class dim moved last, as
 * its targets [N, d...] flatten), and back.
 */
export const classRows = (m: TensorMeta) => {
  const rank = m.shape.length, classes = m.shape[rank === 1 ? 0 : 1]!, n = rank === 1 ? 1 : numelOf([m.shape[0]!, ...m.shape.slice(2)])
  const last = Array.from({ length: rank - 2 }, (_, i) => i + 2)
  return {
    n, classes,
    /** The permutation taking [N, C, d...] to [N, d..., C] (undefined for [C] and [N, C]). */
    toLast: rank > 2 ? [0, ...last, 1] : undefined,
    toRows: <T>(o: GradOps<T>, t: T): T => (rank === 2 ? t : rank === 1 ? o.reshape(t, [1, classes]) : o.reshape(o.permute(t, [0, ...last, 1]), [n, classes])),
    fromRows: <T>(o: GradOps<T>, t: T): T => (rank === 2 ? t : rank === 1 ? o.reshape(t, [classes])
      : o.permute(o.reshape(t, [m.shape[0]!, ...m.shape.slice(2), classes]), [0, rank - 1, ...Array.from({ length: rank - 2 }, (_, i) => i + 1)])),
  }
}

/**
 * scaled_dot_product_attention's rule, recomputing the weights P = softmax(mask(q k^T * scale)):
 * dv = P^T g, dP = g v^T, dS = P * (dP - rowsum(dP * P)), dq = dS k * scale, dk = dS^T q * scale
 * (masked weights are 0, so their dS is too); an additive mask's gradient is dS; broadcast
 * batch dims are summed by the tape.
 */
const attentionGrads = <T>(o: GradOps<T>, meta: (t: T) => TensorMeta, q: T, k: T, v: T, mask: T | null, causal: boolean, scale: number | null, g: T) => {
  const [l, e] = meta(q).shape.slice(-2) as [number, number], s = meta(k).shape.at(-2)!, sc = scale ?? 1 / Math.sqrt(e)
  const t = (x: T) => o.transpose(x, -2, -1)
  const weights = () => {
    let scores = o.mul(o.matmul(q, t(k)), sc)
    if (causal) scores = o.where(o.le(o.arange(s), o.unsqueeze(o.arange(l), 1)), scores, -Infinity)
    if (mask) scores = meta(mask).dtype === "bool" ? o.where(mask, scores, -Infinity) : o.add(scores, mask)
    return o.softmax(scores, -1)
  }
  let p: T | undefined
  const dScores = () => {
    p ??= weights()
    const dp = o.matmul(g, t(v))
    return o.mul(p, o.sub(dp, o.sum(o.mul(dp, p), -1, true)))
  }
  return {
    query: () => o.mul(o.matmul(dScores(), k), sc),
    key: () => o.mul(o.matmul(t(dScores()), q), sc),
    value: () => o.matmul(t(p ??= weights()), g),
    attn_mask: dScores,
  }
}

/**
 * rms_norm's rule: with r = rsqrt(mean(x^2) + eps) over the normalised dims and gw = g * weight,
 * dx = r * (gw - x * r^2 * mean(gw * x)), dweight = g * x * r (summed over the leading dims by the tape).
 */
const rmsNormGrads = <T>(o: GradOps<T>, meta: (t: T) => TensorMeta, x: T, k: number, weight: T | null, eps: number | null, g: T) => {
  const dims = Array.from({ length: k }, (_, i) => i - k)
  const r = () => o.rsqrt(o.add(o.mean(o.mul(x, x), dims, true), eps ?? EPSILON[meta(x).dtype]!))
  return {
    input: () => {
      const rr = r(), gw = weight ? o.mul(g, weight) : g
      return o.mul(rr, o.sub(gw, o.mul(o.mul(x, o.mul(rr, rr)), o.mean(o.mul(gw, x), dims, true))))
    },
    weight: () => o.mul(g, o.mul(x, r())),
  }
}

/**
 * nll_loss's rule: -weight[target] * g at each target's class (0 for ignore_index), over the
 * targets' total weight for a mean; the class dim is dim 1 of [N, C, d...] (the only one of [C]).
 */
const nllGrad = <T>(o: GradOps<T>, meta: (t: T) => TensorMeta, input: T, target: T, weight: T | null, ignore: number, reduction: string, g: T): T => {
  const im = meta(input), tshape = [...meta(target).shape], c = im.shape[im.shape.length === 1 ? 0 : 1]!, n = numelOf(tshape)
  const valid = o.ne(target, ignore), hot = oneHot(o, o.where(valid, target, 0), n, c, im.dtype)
  let w = o.reshape(o.to(valid, im.dtype), [n])
  if (weight) w = o.mul(w, o.reshape(o.matmul(hot, o.reshape(weight, [c, 1])), [n]))
  const coef = reduction === "mean" ? o.div(w, o.sum(w, null, false)) : w
  const perTarget = o.reshape(o.mul(o.neg(coef), reduction === "none" ? o.reshape(g, [n]) : g), [n, 1])
  const flat = o.reshape(o.mul(hot, perTarget), [...tshape, c])
  // [N, d..., C] back to [N, C, d...]
  const last = tshape.length
  return last <= 1 ? o.reshape(flat, [...im.shape]) : o.permute(flat, [0, last, ...Array.from({ length: last - 1 }, (_, i) => i + 1)])
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
    // The weight is read where it lies (a transposed one through BLAS's flags); the input's rows are one flat block.
  }, (c, o) => linearGrads(o, c.args.input, c.args.weight, c.meta(c.args.weight), c.grad), { dtype: "same", strided: ["weight", "bias"] }),
  /**
   * torch's order: weight third; ignore_index, reduction and label_smoothing by name (torch's
   * deprecated size_average and reduce sit between them positionally, so a position would mislead).
   */
  cross_entropy: fused(
    [arg("input", "tensor"), arg("target", "tensor"), opt("weight", "tensor", null), kw("ignore_index", "int", -100), kw("reduction", "string", "mean"), kw("label_smoothing", "scalar", 0)],
    ({ input, target, weight, reduction, label_smoothing }, op) => {
      nllShapes(op, input, target, weight)
      checkReduction(op, reduction)
      if (!(label_smoothing >= 0 && label_smoothing <= 1)) bad(op, `label_smoothing must be in [0, 1], got ${label_smoothing}`)
      return [{ dtype: input.dtype, shape: reduction === "none" ? target.shape : [] }]
    },
    // Over rows [M, C] (the class dim moved last, the others flattened): per row i,
    // p a_i - r_i with p = softmax(x), a_i = (1 - s) w[t_i] + s/C sum(w) and
    // r_i = (1 - s) w[t_i] one_hot(t_i) + s/C w (w = 1 without weight: p - q, q the smoothed
    // target), zero for ignored rows; scaled by g per row (none), by g (sum), or by g over the
    // rows' weights (mean); then back to the input's layout.
    (c, o) => ({
      input: () => {
        const { input, target, weight, ignore_index, reduction, label_smoothing: s } = c.args, m = c.meta(input), { dtype } = m
        const rows = classRows(m), { n, classes } = rows, flatTarget = o.reshape(target, [n])
        const x = rows.toRows(o, input)
        const valid = o.to(o.ne(flatTarget, ignore_index), dtype), hot = oneHot(o, o.where(o.ne(flatTarget, ignore_index), flatTarget, 0), n, classes, dtype)
        const p = o.softmax(x, 1)
        let perRow: typeof p, counted: typeof p
        if (weight === null) {
          perRow = o.sub(p, o.add(o.mul(hot, 1 - s), s / classes))
          counted = valid
        } else {
          const wt = o.matmul(hot, o.reshape(weight, [classes, 1]))
          const a = o.add(o.mul(wt, 1 - s), o.mul(o.sum(weight, null, false), s / classes))
          perRow = o.sub(o.mul(p, a), o.add(o.mul(hot, o.mul(wt, 1 - s)), o.mul(weight, s / classes)))
          counted = o.mul(o.reshape(wt, [n]), valid)
        }
        perRow = o.mul(perRow, o.reshape(valid, [n, 1]))
        if (reduction === "none") return rows.fromRows(o, o.mul(perRow, o.reshape(c.grad, [n, 1])))
        const scale = reduction === "sum" ? c.grad : o.div(c.grad, o.sum(counted, null, false))
        return rows.fromRows(o, o.mul(perRow, scale))
      },
    }),
    // Forward over the same rows: log_softmax, each row's log p of its target (class 0 for an
    // ignored one) times -(1 - s) and the row's weight (its target's class weight, 1 without
    // weights, 0 when ignored), plus s/C of every class's weighted -log p; then each row (none),
    // their sum, or their sum over the rows' weights (mean).
    (a, o, meta) => {
      const m = meta(a.input), rows = classRows(m), { n, classes } = rows, s = a.label_smoothing
      const logp = o.log_softmax(rows.toRows(o, a.input), 1), target = o.reshape(a.target, [n])
      const valid = o.ne(target, a.ignore_index), safe = o.mul(target, o.to(valid, "i64")), counted = o.to(valid, m.dtype)
      const weight = a.weight === null ? counted : o.mul(o.gather(a.weight, 0, safe), counted)
      let loss = o.mul(o.mul(o.reshape(o.gather(logp, 1, o.reshape(safe, [n, 1])), [n]), -(1 - s)), weight)
      if (s > 0) loss = o.add(loss, o.mul(o.mul(o.sum(a.weight === null ? logp : o.mul(logp, a.weight), 1, false), -s / classes), counted))
      if (a.reduction === "none") return o.reshape(loss, [...meta(a.target).shape])
      const total = o.sum(loss, null, false)
      return a.reduction === "sum" ? total : o.div(total, o.sum(weight, null, false))
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
    (c, o) => layerNormGrads(o, c.args.input, c.meta(c.args.input), c.args.normalized_shape.length, c.args.weight, c.args.eps, c.grad),
    { dtype: "same" },
  ),
  /** padding_idx (negative from the end, as torch's): that row's lookups pass no gradient to it. */
  embedding: spec([arg("input", "tensor"), arg("weight", "tensor"), opt("padding_idx", "int", null)], ({ input, weight, padding_idx }, op) => {
    if (input.dtype !== "i64") bad(op, `input must hold indices (i64), got ${describe(input)}`)
    if (weight.shape.length !== 2) bad(op, `weight must be [num_embeddings, embedding_dim], got ${describe(weight)}`)
    const rows = weight.shape[0]!
    if (padding_idx !== null && (padding_idx < -rows || padding_idx >= rows)) bad(op, `padding_idx ${padding_idx} is out of range for ${rows} embeddings`)
    return [{ dtype: weight.dtype, shape: [...input.shape, weight.shape[1]!] }]
  }, (c, o) => ({
    // Each row's gradient added into the row it was looked up from (index_add, in index order; torch's dense rule).
    weight: () => {
      const [rows, width] = c.meta(c.args.weight).shape as [number, number], n = numelOf(c.meta(c.args.input).shape), pad = c.args.padding_idx
      const ids = o.reshape(c.args.input, [n]), g = o.reshape(c.grad, [n, width])
      const passed = pad === null ? g : o.masked_fill(g, o.unsqueeze(o.eq(ids, pad < 0 ? pad + rows : pad), 1), 0)
      return o.index_add(o.zeros([rows, width], { dtype: c.meta(c.grad).dtype }), 0, ids, passed)
    },
  }), { dtype: "other" }),
  scaled_dot_product_attention: spec(
    [arg("query", "tensor"), arg("key", "tensor"), arg("value", "tensor"), opt("attn_mask", "tensor", null), opt("dropout_p", "scalar", 0), opt("is_causal", "bool", false), kw("scale", "scalar", null)],
    ({ query, key, value, attn_mask, dropout_p, is_causal }, op) => {
      const p = attentionPlan(op, query, key, value, attn_mask, is_causal, dropout_p)
      return withPlan([{ dtype: query.dtype, shape: [...p.batch, p.l, p.ev] }], p)
    },
    (c, o) => attentionGrads(o, c.meta, c.args.query, c.args.key, c.args.value, c.args.attn_mask, c.args.is_causal, c.args.scale, c.grad),
    { dtype: "same" },
  ),
  rms_norm: spec([arg("input", "tensor"), arg("normalized_shape", "shape"), opt("weight", "tensor", null), opt("eps", "scalar", null)], ({ input, normalized_shape, weight }, op) => {
    floating(op, input)
    const k = normalized_shape.length, tail = input.shape.slice(input.shape.length - k)
    if (k === 0 || k > input.shape.length || tail.join() !== normalized_shape.join()) bad(op, `normalized_shape [${normalized_shape}] must be the last dims of ${describe(input)}`)
    if (weight && (weight.shape.join() !== normalized_shape.join() || weight.dtype !== input.dtype)) bad(op, `weight must be ${input.dtype}[${normalized_shape}], got ${describe(weight)}`)
    return [input]
  }, (c, o) => rmsNormGrads(o, c.meta, c.args.input, c.args.normalized_shape.length, c.args.weight, c.args.eps, c.grad), { dtype: "same" }),
  nll_loss: spec(
    // As cross_entropy's: ignore_index and reduction by name.
    [arg("input", "tensor"), arg("target", "tensor"), opt("weight", "tensor", null), kw("ignore_index", "int", -100), kw("reduction", "string", "mean")],
    ({ input, target, weight, reduction }, op) => {
      nllShapes(op, input, target, weight)
      checkReduction(op, reduction)
      return [{ dtype: input.dtype, shape: reduction === "none" ? target.shape : [] }]
    },
    (c, o) => ({ input: () => nllGrad(o, c.meta, c.args.input, c.args.target, c.args.weight, c.args.ignore_index, c.args.reduction, c.grad) }),
    { dtype: "same" },
  ),
  // reduction by name: torch's deprecated size_average and reduce come before it.
  mse_loss: spec([arg("input", "tensor"), arg("target", "tensor"), kw("reduction", "string", "mean")], ({ input, target, reduction }, op) => {
    checkReduction(op, reduction)
    const dtype = resultType([input, target])
    if (!isFloating(dtype)) bad(op, `needs floating operands, got ${describe(input)} and ${describe(target)}`)
    const shape = broadcastShapes(op, [input.shape, target.shape])
    // The plan: both operands in dtype, broadcast to shape.
    return withPlan([{ dtype, shape: reduction === "none" ? shape : [] }], { compute: dtype, shape })
  }, (c, o) => {
    // d/dinput of (input - target)^2, times g, over the count for a mean; the tape sums each to its operand's shape.
    const { input, target, reduction } = c.args
    const diff = () => {
      const d = o.mul(o.mul(o.sub(input, target), 2), c.grad)
      return reduction === "mean" ? o.div(d, numelOf(broadcastShapes("mse_loss", [c.meta(input).shape, c.meta(target).shape]))) : d
    }
    return { input: diff, target: () => o.neg(diff()) }
  }, { dtype: "promote" }),
  /** num_classes must be given: -1 (torch's default, the largest index + 1) would make the shape depend on values. */
  one_hot: spec([arg("tensor", "tensor"), opt("num_classes", "int", -1)], ({ tensor, num_classes }, op) => {
    if (tensor.dtype !== "i64") bad(op, `tensor must hold class indices (i64), got ${describe(tensor)}`)
    if (num_classes < 0) bad(op, "give num_classes: the result's shape cannot depend on the values (torch's -1 reads the largest index)")
    return [{ dtype: "i64", shape: [...tensor.shape, num_classes] }]
  }, NOT_DIFFERENTIABLE),
}
