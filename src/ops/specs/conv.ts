/**
 * Convolutions and the norms of convolutional nets, composed from other ops (spec.ts's
 * `composite`), so they run on every backend the parts run on (CPU and CUDA) and the parts' rules
 * give their gradients:
 * - conv1d and conv2d as im2col and a matmul: the input zero-padded (pad), each output place's
 *   window gathered by index_select at o s + j d along each spatial dim (the pools' windows),
 *   the windows of each group as rows [N, G, OH OW, C/G KH KW] times the group's weights
 *   [G, C/G KH KW, O/G] (one batched matmul), then the bias. conv1d is conv2d over a height of 1.
 * - batch_norm: the batch's mean and biased variance over every dim but the channel's (training),
 *   or the running statistics (eval); in training the running statistics move by lerp_ toward the
 *   batch's mean and unbiased variance, by `momentum`, as torch's.
 * - group_norm: the mean and biased variance over each group of channels and the spatial dims.
 * The parts read their inputs contiguous or not (index_select, matmul and the elementwise ops take
 * strided tensors), so these need nothing of their layout.
 */
import { bad, describe, type TensorMeta } from "../meta.ts"
import type { GradOps } from "../grad.ts"
import type { DType } from "../../protocol/values.ts"
import { arg, opt, type Bound } from "../params.ts"
import { isFloating } from "../promotion.ts"
import { composite } from "../spec.ts"
import { padParts, windowsOf, type PoolDim } from "./model.ts"

type Sizes = number | number[]

/** What a convolution computes: its batch (or none: an unbatched input), groups, channels and its spatial dims' plans. */
interface ConvPlan {
  readonly batched: boolean
  readonly n: number
  readonly groups: number
  readonly cin: number
  readonly cout: number
  /** Height and width (conv1d: a height of 1). */
  readonly dims: [PoolDim, PoolDim]
}

/**
 * A convolution's plan and checks, with torch 1.13's rules: input [N, C, *spatial] or unbatched
 * [C, *spatial], weight [O, C/groups, *kernel], bias [O]; one floating dtype; stride and
 * dilation positive, padding not negative (it may exceed the kernel); an int or one per spatial
 * dim each; out = floor((n + 2p - d(k-1) - 1) / s) + 1, at least 1.
 */
const convPlan = (op: string, spatial: 1 | 2, input: TensorMeta, weight: TensorMeta, bias: TensorMeta | null, stride: Sizes, padding: Sizes, dilation: Sizes, groups: number): ConvPlan => {
  const rank = input.shape.length
  if (rank !== spatial + 1 && rank !== spatial + 2) bad(op, `input must be [N, C, ${spatial === 1 ? "L" : "H, W"}] or [C, ${spatial === 1 ? "L" : "H, W"}], got ${describe(input)}`)
  if (weight.shape.length !== spatial + 2) bad(op, `weight must be [out_channels, in_channels / groups, ${spatial === 1 ? "kW" : "kH, kW"}], got ${describe(weight)}`)
  if (!isFloating(input.dtype)) bad(op, `needs a floating input, got ${describe(input)}`)
  for (const t of [weight, bias]) if (t && t.dtype !== input.dtype) bad(op, `dtypes differ: ${[input, weight, bias].filter(Boolean).map((m) => describe(m!)).join(", ")}`)
  if (!Number.isInteger(groups) || groups < 1) bad(op, `groups must be a positive integer, got ${groups}`)
  const batched = rank === spatial + 2, cin = input.shape[batched ? 1 : 0]!, cout = weight.shape[0]!
  if (weight.shape[1]! * groups !== cin) bad(op, `weight ${describe(weight)} with groups ${groups} takes ${weight.shape[1]! * groups} input channels, got ${describe(input)}`)
  if (cout % groups !== 0) bad(op, `out_channels ${cout} must be divisible by groups ${groups}`)
  if (bias && (bias.shape.length !== 1 || bias.shape[0] !== cout)) bad(op, `bias ${describe(bias)} must be [${cout}]`)
  const each = (name: string, v: Sizes): number[] => {
    const xs = typeof v === "number" ? Array(spatial).fill(v) : v.length === 1 ? Array(spatial).fill(v[0]) : v
    if (xs.length !== spatial) bad(op, `${name} must be an int or ${spatial === 1 ? "one" : "a pair"}, got [${v}]`)
    return xs
  }
  const k = weight.shape.slice(2), s = each("stride", stride), p = each("padding", padding), d = each("dilation", dilation)
  const sizes = input.shape.slice(-spatial)
  const planned = sizes.map((size, i) => {
    if (s[i]! <= 0 || d[i]! <= 0) bad(op, `stride and dilation must be positive, got stride [${s}] and dilation [${d}]`)
    if (p[i]! < 0) bad(op, `padding must not be negative, got [${p}]`)
    const out = Math.floor((size + 2 * p[i]! - d[i]! * (k[i]! - 1) - 1) / s[i]!) + 1
    if (out < 1) bad(op, `the output would be empty: ${describe(input)} padded by [${p}] is smaller than the dilated kernel ${describe(weight)} (dilation [${d}])`)
    return { k: k[i]!, s: s[i]!, p: p[i]!, d: d[i]!, size, out }
  })
  const one: PoolDim = { k: 1, s: 1, p: 0, d: 1, size: 1, out: 1 }
  return { batched, n: batched ? input.shape[0]! : 1, groups, cin, cout, dims: (spatial === 1 ? [one, planned[0]!] : planned) as [PoolDim, PoolDim] }
}

/** The result's shape: [N, O, *out] (no N for an unbatched input). */
const convShape = (plan: ConvPlan, spatial: 1 | 2): number[] =>
  [...(plan.batched ? [plan.n] : []), plan.cout, ...(spatial === 1 ? [plan.dims[1].out] : plan.dims.map((d) => d.out))]

/** A convolution as im2col (the windows by index_select) and one batched matmul over the groups. */
const convParts = <T>(o: GradOps<T>, meta: (t: T) => TensorMeta, plan: ConvPlan, spatial: 1 | 2, input: T, weight: T, bias: T | null, op: string): T => {
  const [h, w] = plan.dims, g = plan.groups, cg = plan.cin / g, og = plan.cout / g
  const x = o.reshape(input, [plan.n, plan.cin, h.size, w.size])
  const padded = h.p === 0 && w.p === 0 ? x : padParts(o, meta, x, [w.p, w.p, h.p, h.p], "constant", 0, op)
  // [N, C, OH, KH, OW, KW] -> [N, G, OH, OW, C/G, KH, KW] -> rows [N, G, OH OW, C/G KH KW]
  const windows = o.reshape(windowsOf(o, padded, [plan.n, plan.cin], plan.dims), [plan.n, g, cg, h.out, h.k, w.out, w.k])
  const rows = o.reshape(o.permute(windows, [0, 1, 3, 5, 2, 4, 6]), [plan.n, g, h.out * w.out, cg * h.k * w.k])
  const kernels = o.transpose(o.reshape(weight, [g, og, cg * h.k * w.k]), 1, 2)
  const product = o.permute(o.matmul(rows, kernels), [0, 1, 3, 2])
  const out = o.reshape(product, [plan.n, plan.cout, h.out, w.out])
  const biased = bias === null ? out : o.add(out, o.reshape(bias, [plan.cout, 1, 1]))
  return o.reshape(biased, convShape(plan, spatial))
}

const convParams = [arg("input", "tensor"), arg("weight", "tensor"), opt("bias", "tensor", null), opt("stride", "intOrShape", 1), opt("padding", "intOrShape", 0), opt("dilation", "intOrShape", 1), opt("groups", "int", 1)] as const

const convolution = (spatial: 1 | 2) => composite(convParams, (a, op) => {
  const plan = convPlan(op, spatial, a.input, a.weight, a.bias, a.stride, a.padding, a.dilation, a.groups)
  return [{ dtype: a.input.dtype, shape: convShape(plan, spatial) }]
}, (a, o, meta, op) => convParts(o, meta, convPlan(op, spatial, meta(a.input), meta(a.weight), a.bias === null ? null : meta(a.bias), a.stride, a.padding, a.dilation, a.groups), spatial, a.input, a.weight, a.bias, op), { dtype: "same" })

/** A per-channel tensor [C] as [1, C, 1, ...] against an input of `rank` dims. */
const perChannel = <T>(o: GradOps<T>, t: T, c: number, rank: number): T => o.reshape(t, [1, c, ...Array(rank - 2).fill(1)])

/** The checks of a per-channel tensor (weight, bias, running statistics): [C], a floating dtype. */
const channelTensor = (op: string, name: string, t: TensorMeta | null, c: number): void => {
  if (t === null) return
  if (t.shape.length !== 1 || t.shape[0] !== c) bad(op, `${name} ${describe(t)} must be [${c}] (one per channel)`)
  if (!isFloating(t.dtype)) bad(op, `${name} must be floating, got ${describe(t)}`)
}

const normInput = (op: string, input: TensorMeta): void => {
  if (input.shape.length < 2) bad(op, `input must be [N, C, ...], got ${describe(input)}`)
  if (!isFloating(input.dtype)) bad(op, `needs a floating input, got ${describe(input)}`)
}

/** x's mean and biased variance over `dims` (kept), in x's dtype. */
const moments = <T>(o: GradOps<T>, x: T, dims: number[]): [mean: T, variance: T] => {
  const mean = o.mean(x, dims, true), centred = o.sub(x, mean)
  return [mean, o.mean(o.mul(centred, centred), dims, true)]
}

/** The affine part: x times weight plus bias, each per channel when given. */
const affine = <T>(o: GradOps<T>, x: T, weight: T | null, bias: T | null, c: number, rank: number): T => {
  const scaled = weight === null ? x : o.mul(x, perChannel(o, weight, c, rank))
  return bias === null ? scaled : o.add(scaled, perChannel(o, bias, c, rank))
}

const batchNormParams = [
  arg("input", "tensor"), arg("running_mean", "tensor"), arg("running_var", "tensor"), opt("weight", "tensor", null), opt("bias", "tensor", null),
  opt("training", "bool", false), opt("momentum", "scalar", 0.1), opt("eps", "scalar", 1e-5),
] as const

/**
 * The dtype the norms compute in: the input's when f32 or f64; f32 for f16 and bf16 (torch's
 * kernels accumulate those in float), the result cast back to the input's dtype.
 */
const computeDtype = (m: TensorMeta): DType => (m.dtype === "f16" || m.dtype === "bf16" ? "f32" : m.dtype)

/** t in dtype (t itself when it has it). */
const inDtype = <T>(o: GradOps<T>, meta: (t: T) => TensorMeta, t: T, dtype: DType): T => (meta(t).dtype === dtype ? t : o.to(t, dtype))

/**
 * batch_norm's parts: in training, the batch's moments over every dim but the channel's, the
 * running statistics moved toward them in place (lerp_: rm + momentum (batch - rm); the variance
 * unbiased, as torch's); in eval, the running statistics; then (x - mean) / sqrt(var + eps) and
 * the affine part.
 */
const batchNormParts = <T>(a: Bound<typeof batchNormParams, T>, o: GradOps<T>, meta: (t: T) => TensorMeta): T => {
  const m = meta(a.input), c = m.shape[1]!, rank = m.shape.length, dt = computeDtype(m), dims = m.shape.map((_, i) => i).filter((i) => i !== 1)
  const x = inDtype(o, meta, a.input, dt), f = (t: T | null) => (t === null ? null : inDtype(o, meta, t, dt))
  let mean: T, variance: T
  if (a.training) {
    ;[mean, variance] = moments(o, x, dims)
    const count = perChannelCount(m)
    o.lerp_(a.running_mean, inDtype(o, meta, o.reshape(mean, [c]), meta(a.running_mean).dtype), a.momentum)
    o.lerp_(a.running_var, inDtype(o, meta, o.mul(o.reshape(variance, [c]), count / (count - 1)), meta(a.running_var).dtype), a.momentum)
  } else {
    mean = perChannel(o, f(a.running_mean)!, c, rank)
    variance = perChannel(o, f(a.running_var)!, c, rank)
  }
  const normalised = o.mul(o.sub(x, mean), o.rsqrt(o.add(variance, a.eps)))
  return inDtype(o, meta, affine(o, normalised, f(a.weight), f(a.bias), c, rank), m.dtype)
}

/** group_norm's parts: the moments of each group of channels over it and the spatial dims, then the affine part. */
const groupNormParts = <T>(a: Bound<typeof groupNormParams, T>, o: GradOps<T>, meta: (t: T) => TensorMeta): T => {
  const m = meta(a.input), c = m.shape[1]!, dt = computeDtype(m), f = (t: T | null) => (t === null ? null : inDtype(o, meta, t, dt))
  const grouped = o.reshape(inDtype(o, meta, a.input, dt), [m.shape[0]!, a.num_groups, -1])
  const [mean, variance] = moments(o, grouped, [2])
  const normalised = o.reshape(o.mul(o.sub(grouped, mean), o.rsqrt(o.add(variance, a.eps))), [...m.shape])
  return inDtype(o, meta, affine(o, normalised, f(a.weight), f(a.bias), c, m.shape.length), m.dtype)
}

const groupNormParams = [arg("input", "tensor"), arg("num_groups", "int"), opt("weight", "tensor", null), opt("bias", "tensor", null), opt("eps", "scalar", 1e-5)] as const

/** How many values each channel's batch statistics combine: every dim but the channel's. */
const perChannelCount = (m: TensorMeta): number => m.shape.reduce((a, s, i) => (i === 1 ? a : a * s), 1)

export const conv = {
  /** torch.nn.functional.conv1d: input [N, C, L] or [C, L], weight [O, C/groups, kW]; padding as ints (not 'same' or 'valid'). */
  conv1d: convolution(1),
  /** torch.nn.functional.conv2d: input [N, C, H, W] or [C, H, W], weight [O, C/groups, kH, kW]; padding as ints. */
  conv2d: convolution(2),
  /**
   * torch.nn.functional.batch_norm. running_mean and running_var are tensors ([C]; torch also
   * takes None in training, which this does not); in training they are updated in place.
   */
  batch_norm: composite(batchNormParams, (a, op) => {
    normInput(op, a.input)
    const c = a.input.shape[1]!
    channelTensor(op, "running_mean", a.running_mean, c)
    channelTensor(op, "running_var", a.running_var, c)
    channelTensor(op, "weight", a.weight, c)
    channelTensor(op, "bias", a.bias, c)
    if (a.training && perChannelCount(a.input) <= 1) bad(op, `expected more than 1 value per channel when training, got input ${describe(a.input)}`)
    return [{ dtype: a.input.dtype, shape: [...a.input.shape] }]
  }, batchNormParts, { dtype: "same" }),
  /** torch.nn.functional.group_norm: input [N, C, ...] in num_groups groups of channels. */
  group_norm: composite(groupNormParams, (a, op) => {
    normInput(op, a.input)
    const c = a.input.shape[1]!
    if (!Number.isInteger(a.num_groups) || a.num_groups < 1 || c % a.num_groups !== 0) bad(op, `num_groups must divide the ${c} channels of ${describe(a.input)}, got ${a.num_groups}`)
    channelTensor(op, "weight", a.weight, c)
    channelTensor(op, "bias", a.bias, c)
    return [{ dtype: a.input.dtype, shape: [...a.input.shape] }]
  }, groupNormParts, { dtype: "same" }),
}
