/**
 * Ops that model code ports from torch, composed from other ops (spec.ts's `composite`): einsum
 * (matmul, permute, reshape, expand, sum and mul), pad (index_select at computed indices, and
 * masked_fill for a constant), max_pool2d and avg_pool2d (their windows by index_select, then amax
 * or a sum). The controller issues the parts, so their rules give the gradient; a worker called
 * directly runs the same composition over its kernels.
 */
import { bad, describe, type TensorMeta } from "../meta.ts"
import type { GradOps } from "../grad.ts"
import { arg, kw, opt } from "../params.ts"
import { isFloating } from "../promotion.ts"
import { composite } from "../spec.ts"

/** An einsum label: 'A'..'Z' are 0..25 and 'a'..'z' 26..51 (torch's order, which sorts an implicit output); the ellipsis' dims 52 on. */
type Label = number
const ELLIPSIS = 52
const labelOf = (ch: string): Label => (ch >= "A" && ch <= "Z" ? ch.charCodeAt(0) - 65 : ch.charCodeAt(0) - 97 + 26)

/** What einsum computes: each operand's labels (one per dim), each label's size, the output's labels. */
export interface EinsumPlan {
  readonly operands: ReadonlyArray<ReadonlyArray<Label>>
  readonly sizes: ReadonlyMap<Label, number>
  readonly output: ReadonlyArray<Label>
}

/** A term's letters, with the ellipsis (if any) at its place as -1. */
const termOf = (op: string, term: string, where: string): Label[] => {
  const out: Label[] = []
  for (let i = 0; i < term.length; i++) {
    if (term.startsWith("...", i)) {
      if (out.includes(-1)) bad(op, `${where} has more than one ellipsis`)
      out.push(-1)
      i += 2
    } else if (/[A-Za-z]/.test(term[i]!)) out.push(labelOf(term[i]!))
    else bad(op, `${where} has '${term[i]}': subscripts are letters and one '...'`)
  }
  return out
}

/**
 * einsum's plan from its equation and operands, with torch 1.13's rules: an implicit output is
 * the ellipsis' dims then the labels seen once, sorted; a label's sizes agree or are 1
 * (broadcast), within one operand they agree (a diagonal); the ellipsis' dims broadcast,
 * aligned from the right.
 */
export const einsumPlan = (op: string, equation: string, operands: ReadonlyArray<TensorMeta>): EinsumPlan => {
  const eq = equation.replace(/\s/g, "")
  const arrow = eq.indexOf("->")
  const lhs = arrow < 0 ? eq : eq.slice(0, arrow), rhs = arrow < 0 ? undefined : eq.slice(arrow + 2)
  if (rhs !== undefined && rhs.includes("->")) bad(op, `equation '${equation}' has more than one '->'`)
  const terms = lhs.split(",").map((t, i) => termOf(op, t, `operand ${i}'s subscript`))
  if (terms.length !== operands.length) bad(op, `equation '${equation}' has ${terms.length} operand${terms.length === 1 ? "" : "s"}, got ${operands.length} tensor${operands.length === 1 ? "" : "s"}`)
  const dtype = operands[0]!.dtype
  for (const t of operands) if (t.dtype !== dtype) bad(op, `operands need one dtype: ${operands.map(describe).join(", ")}`)
  // Each operand's ellipsis covers the dims its letters leave; they broadcast from the right.
  const covers = terms.map((t, i) => {
    const letters = t.filter((l) => l >= 0).length, rank = operands[i]!.shape.length
    if (t.includes(-1) ? rank < letters : rank !== letters) bad(op, `operand ${i} has ${rank} dims but its subscript names ${letters}${t.includes(-1) ? " besides '...'" : ""}`)
    return t.includes(-1) ? rank - letters : 0
  })
  const width = Math.max(0, ...covers)
  const labelled = terms.map((t, i) => t.flatMap((l) => (l >= 0 ? [l] : Array.from({ length: covers[i]! }, (_, j) => ELLIPSIS + width - covers[i]! + j))))
  const sizes = new Map<Label, number>()
  labelled.forEach((ls, i) => {
    const own = new Map<Label, number>()
    ls.forEach((l, d) => {
      const n = operands[i]!.shape[d]!, name = l >= ELLIPSIS ? "'...'" : `'${String.fromCharCode(l < 26 ? l + 65 : l - 26 + 97)}'`
      if (own.has(l) && own.get(l) !== n) bad(op, `subscript ${name} is repeated in operand ${i} with sizes ${own.get(l)} and ${n}`)
      own.set(l, n)
      const seen = sizes.get(l)
      if (seen !== undefined && seen !== n && seen !== 1 && n !== 1) bad(op, `subscript ${name} has size ${seen} in one operand and ${n} in operand ${i}`)
      sizes.set(l, seen === undefined || seen === 1 ? n : seen)
    })
  })
  const ellipsisDims = Array.from({ length: width }, (_, j) => ELLIPSIS + j)
  let output: Label[]
  if (rhs === undefined) {
    const counts = new Map<Label, number>()
    for (const ls of terms) for (const l of ls) if (l >= 0) counts.set(l, (counts.get(l) ?? 0) + 1)
    output = [...ellipsisDims, ...[...counts].filter(([, n]) => n === 1).map(([l]) => l).sort((a, b) => a - b)]
  } else {
    const t = termOf(op, rhs, "the output's subscript")
    output = t.flatMap((l) => (l >= 0 ? [l] : ellipsisDims))
    for (const l of t) {
      if (l < 0) continue
      if (t.indexOf(l) !== t.lastIndexOf(l)) bad(op, `output subscript '${String.fromCharCode(l < 26 ? l + 65 : l - 26 + 97)}' appears more than once`)
      if (!sizes.has(l)) bad(op, `output subscript '${String.fromCharCode(l < 26 ? l + 65 : l - 26 + 97)}' is in no operand`)
    }
  }
  return { operands: labelled, sizes, output }
}

/** The positions of `labels` in `of`. */
const positions = (of: ReadonlyArray<Label>, labels: ReadonlyArray<Label>): number[] => labels.map((l) => of.indexOf(l))
const product = (xs: ReadonlyArray<number>): number => xs.reduce((a, b) => a * b, 1)

/** t permuted to `order` (t itself when that is its order: no copy). */
const permuted = <T>(o: GradOps<T>, t: T, order: ReadonlyArray<number>): T => (order.every((d, i) => d === i) ? t : o.permute(t, [...order]))

/** One operand with its dims' labels, as the composition goes. */
interface Term<T> { readonly t: T; readonly labels: Label[] }

/** t's diagonal over each label repeated in it: t times an identity mask over the two dims, summed over the second. */
const diagonals = <T>(o: GradOps<T>, x: Term<T>, dtype: TensorMeta["dtype"], sizes: ReadonlyMap<Label, number>): Term<T> => {
  let { t, labels } = x
  for (let d = labels.length - 1; d >= 0; d--) {
    const first = labels.indexOf(labels[d]!)
    if (first === d) continue
    const n = sizes.get(labels[d]!)!, at = (dim: number) => o.reshape(o.arange(n), labels.map((_, i) => (i === dim ? n : 1)))
    t = o.sum(o.mul(t, o.to(o.eq(at(first), at(d)), dtype)), d, false)
    labels = labels.filter((_, i) => i !== d)
  }
  return { t, labels }
}

/** x's dims of size 1 whose label has a larger size elsewhere, expanded to it (torch broadcasts them). */
const broadcast = <T>(o: GradOps<T>, x: Term<T>, shape: ReadonlyArray<number>, sizes: ReadonlyMap<Label, number>): Term<T> => {
  const want = x.labels.map((l) => sizes.get(l)!)
  return want.every((n, i) => n === shape[i]) ? x : { t: o.expand(x.t, want), labels: x.labels }
}

/**
 * einsum as matmuls: each operand's diagonals taken and its labels no other operand or the output
 * has summed out; then left to right, each pair as one batched matmul [batch, left, contracted] @
 * [batch, contracted, right] (a label both share is a batch dim while the output or a later operand
 * has it, else contracted); last, the output's order by a permute.
 */
export const einsumParts = <T>(o: GradOps<T>, meta: (t: T) => TensorMeta, equation: string, tensors: ReadonlyArray<T>, op: string): T => {
  const plan = einsumPlan(op, equation, tensors.map(meta)), dtype = meta(tensors[0]!).dtype
  const wanted = (terms: ReadonlyArray<Term<T>>, k: number): Set<Label> => new Set([...plan.output, ...terms.slice(k).flatMap((t) => t.labels)])
  const prepared = tensors.map((t, i) => diagonals(o, { t, labels: [...plan.operands[i]!] }, dtype, plan.sizes))
  const sumPrivate = (x: Term<T>, keep: Set<Label>): Term<T> => {
    const dims = x.labels.flatMap((l, d) => (keep.has(l) ? [] : [d]))
    return dims.length === 0 ? x : { t: o.sum(x.t, dims, false), labels: x.labels.filter((l) => keep.has(l)) }
  }
  const shapeOf = (x: Term<T>) => meta(x.t).shape
  let acc = sumPrivate(prepared[0]!, wanted(prepared, 1))
  for (let k = 1; k < prepared.length; k++) {
    const later = wanted(prepared, k + 1)
    let b = sumPrivate(prepared[k]!, new Set([...later, ...acc.labels]))
    acc = sumPrivate(acc, new Set([...later, ...b.labels]))
    acc = broadcast(o, acc, shapeOf(acc), plan.sizes)
    b = broadcast(o, b, shapeOf(b), plan.sizes)
    const shared = acc.labels.filter((l) => b.labels.includes(l))
    const batch = shared.filter((l) => later.has(l)), contracted = shared.filter((l) => !later.has(l))
    const left = acc.labels.filter((l) => !shared.includes(l)), right = b.labels.filter((l) => !shared.includes(l))
    const size = (ls: ReadonlyArray<Label>) => product(ls.map((l) => plan.sizes.get(l)!))
    const lhs = o.reshape(permuted(o, acc.t, positions(acc.labels, [...batch, ...left, ...contracted])), [size(batch), size(left), size(contracted)])
    const rhs = o.reshape(permuted(o, b.t, positions(b.labels, [...batch, ...contracted, ...right])), [size(batch), size(contracted), size(right)])
    const labels = [...batch, ...left, ...right]
    acc = { t: o.reshape(o.matmul(lhs, rhs), labels.map((l) => plan.sizes.get(l)!)), labels }
  }
  acc = sumPrivate(acc, new Set(plan.output))
  acc = broadcast(o, acc, shapeOf(acc), plan.sizes)
  return permuted(o, acc.t, positions(acc.labels, plan.output))
}

export const PAD_MODES = ["constant", "reflect", "replicate", "circular"] as const

/**
 * pad's sizes per dim (torch's list: the last dim's before and after, then the one before it's, ...)
 * and its checks: a value only for constant; an even list of at most two per dim; a mode other than constant pads the last
 * 1, 2 or 3 dims of an input with one or two more (torch 1.13's 2-D to 5-D; circular: two), less than a dim's
 * size for reflect, at most its size for circular; no dim may end up negative.
 */
export const padPlan = (op: string, input: TensorMeta, pad: ReadonlyArray<number>, mode: string, value: number): Array<[before: number, after: number]> => {
  if (!(PAD_MODES as ReadonlyArray<string>).includes(mode)) bad(op, `mode must be one of ${PAD_MODES.join(", ")}, got '${mode}'`)
  if (mode !== "constant" && value !== 0) bad(op, `${mode} takes no value (as torch's), got ${value}`)
  const n = input.shape.length, k = pad.length / 2
  if (!Number.isInteger(k)) bad(op, `pad must hold two sizes per padded dim, got ${pad.length}`)
  if (k > n) bad(op, `pad [${pad}] pads ${k} dims of ${describe(input)}`)
  if (mode === "circular" && !(k >= 1 && k <= 3 && n === k + 2))
    bad(op, `circular pads the last 1, 2 or 3 dims of a 3-D to 5-D input (two leading dims), got pad [${pad}] for ${describe(input)}`)
  if (mode !== "constant" && !(k >= 1 && k <= 3 && (n === k + 1 || n === k + 2)))
    bad(op, `${mode} pads the last 1, 2 or 3 dims of a 2-D to 5-D input (one or two leading dims), got pad [${pad}] for ${describe(input)}`)
  const sides = input.shape.map((): [number, number] => [0, 0])
  for (let j = 0; j < k; j++) sides[n - 1 - j] = [pad[2 * j]!, pad[2 * j + 1]!]
  sides.forEach(([before, after], d) => {
    const size = input.shape[d]!
    if (size + before + after < 0) bad(op, `pad [${pad}] leaves dim ${d} of ${describe(input)} with ${size + before + after} elements`)
    if (mode === "reflect" && (before !== 0 || after !== 0) && (Math.abs(before) >= size || Math.abs(after) >= size))
      bad(op, `reflect pads dim ${d} of size ${size} by less than its size, got ${before} and ${after}`)
    if ((mode === "circular" || mode === "replicate") && (before !== 0 || after !== 0) && (size === 0 || (mode === "circular" && (before > size || after > size))))
      bad(op, `${mode} cannot pad dim ${d} of size ${size} by ${before} and ${after}`)
  })
  return sides
}

/**
 * pad, one padded dim at a time: the input's elements at the indices i = -before .. size + after - 1
 * mapped into range (reflect: (n-1) - |(n-1) - |i||, replicate: clamped, circular: i mod n, or of
 * what a negative side leaves, as torch's, constant: clamped, then the out-of-range places filled with the value); a negative size crops.
 */
export const padParts = <T>(o: GradOps<T>, meta: (t: T) => TensorMeta, input: T, pad: ReadonlyArray<number>, mode: string, value: number, op: string): T => {
  let x = input
  padPlan(op, meta(input), pad, mode, value).forEach(([before, after], d) => {
    if (before === 0 && after === 0) return
    const m = meta(x), n = m.shape[d]!, length = n + before + after
    if (n === 0) return void (x = o.add(o.zeros(m.shape.map((s, i) => (i === d ? length : s)), { dtype: m.dtype }), value))
    const i = o.sub(o.arange(length), before)
    // circular wraps around what is left after a crop: period n + the negative sides, from -before when that crops
    const period = n + Math.min(0, before) + Math.min(0, after)
    const index = mode === "reflect" ? o.sub(n - 1, o.abs(o.sub(n - 1, o.abs(i))))
      : mode === "circular" ? o.add(o.remainder(o.add(i, Math.min(0, before)), period), Math.max(0, -before)) : o.clamp(i, 0, n - 1)
    x = o.index_select(x, d, index)
    if (mode === "constant" && (before > 0 || after > 0)) {
      const outside = o.reshape(o.logical_or(o.lt(i, 0), o.ge(i, n)), m.shape.map((_, j) => (j === d ? length : 1)))
      x = o.masked_fill(x, outside, value)
    }
  })
  return x
}

/** One spatial dim of a pooling: its kernel, stride, padding and dilation, and the output's size. */
export interface PoolDim { readonly k: number; readonly s: number; readonly p: number; readonly d: number; readonly size: number; readonly out: number }

/**
 * A 2-D pooling's plan per spatial dim (H, W), with torch 1.13's rules: an int or a pair each;
 * stride defaults to the kernel; padding at most half the kernel; out = floor((n + 2p - d(k-1) - 1
 * + (ceil_mode ? s - 1 : 0)) / s) + 1, less one in ceil mode when the last window would start
 * past the input and its left padding; an input [N, C, H, W] or [C, H, W].
 */
type Sizes = number | number[]
export const poolPlan = (op: string, input: TensorMeta, kernel: Sizes, stride: Sizes | null, padding: Sizes, dilation: Sizes, ceil: boolean): [PoolDim, PoolDim] => {
  if (!isFloating(input.dtype)) bad(op, `needs a floating input, got ${describe(input)}`)
  if (input.shape.length !== 3 && input.shape.length !== 4) bad(op, `input must be [N, C, H, W] or [C, H, W], got ${describe(input)}`)
  const pair = (name: string, v: Sizes): [number, number] =>
    typeof v === "number" ? [v, v] : v.length === 1 ? [v[0]!, v[0]!] : v.length === 2 ? [v[0]!, v[1]!] : bad(op, `${name} must be an int or a pair, got [${v}]`)
  // torch takes an empty stride as the kernel's
  const k = pair("kernel_size", kernel), s = stride === null || (Array.isArray(stride) && stride.length === 0) ? k : pair("stride", stride), p = pair("padding", padding), d = pair("dilation", dilation)
  const hw = input.shape.slice(-2)
  return [0, 1].map((i) => {
    if (k[i]! <= 0 || s[i]! <= 0 || d[i]! <= 0) bad(op, `kernel_size, stride and dilation must be positive, got ${k}, ${s}, ${d}`)
    if (p[i]! < 0 || p[i]! > k[i]! / 2) bad(op, `padding must be from 0 to half the kernel size, got padding ${p[i]} and kernel_size ${k[i]}`)
    const n = hw[i]!, span = d[i]! * (k[i]! - 1) + 1
    let out = Math.floor((n + 2 * p[i]! - span + (ceil ? s[i]! - 1 : 0)) / s[i]!) + 1
    if (ceil && (out - 1) * s[i]! >= n + p[i]!) out--
    if (out < 1) bad(op, `the output would be empty: ${describe(input)} with kernel_size ${k}, stride ${s}, padding ${p}, dilation ${d}`)
    return { k: k[i]!, s: s[i]!, p: p[i]!, d: d[i]!, size: n, out }
  }) as [PoolDim, PoolDim]
}

/**
 * Each pooling window of x [..., H', W'] (padded to cover every window: n + p + what ceil mode
 * reaches past it) as dims [..., OH, KH, OW, KW], by index_select at o s + j d along each dim.
 */
export const windowsOf = <T>(o: GradOps<T>, x: T, lead: ReadonlyArray<number>, [h, w]: [PoolDim, PoolDim]): T => {
  const index = (p: PoolDim) => o.reshape(o.add(o.mul(o.reshape(o.arange(p.out), [p.out, 1]), p.s), o.mul(o.arange(p.k), p.d)), [p.out * p.k])
  const rows = o.reshape(o.index_select(x, -2, index(h)), [...lead, h.out, h.k, -1])
  return o.reshape(o.index_select(rows, -1, index(w)), [...lead, h.out, h.k, w.out, w.k])
}

/** How far past n + p a pooling's windows reach (ceil mode), or less than p (negative: what pad then crops). */
const reach = (p: PoolDim): number => (p.out - 1) * p.s + p.d * (p.k - 1) + 1 - p.size - p.p

/** max_pool2d: the input padded with -inf, then the largest of each window (amax: ties share the gradient). */
const maxPoolParts = <T>(o: GradOps<T>, meta: (t: T) => TensorMeta, x: T, plan: [PoolDim, PoolDim]): T => {
  const [h, w] = plan, lead = meta(x).shape.slice(0, -2)
  const padded = padParts(o, meta, x, [w.p, reach(w), h.p, reach(h)], "constant", -Infinity, "max_pool2d")
  return o.amax(windowsOf(o, padded, lead, plan), [-3, -1], false)
}

/**
 * avg_pool2d: the input padded with zeros, each window's sum over its divisor: divisor_override,
 * else the window's places within the padded input (count_include_pad) or within the input
 * alone, counted by the same windows over ones, as torch divides.
 */
const avgPoolParts = <T>(o: GradOps<T>, meta: (t: T) => TensorMeta, x: T, plan: [PoolDim, PoolDim], includePad: boolean, divisor: number | null): T => {
  const [h, w] = plan, m = meta(x), lead = m.shape.slice(0, -2)
  const sum = (t: T, shape: ReadonlyArray<number>, edge: number) =>
    o.sum(windowsOf(o, padParts(o, meta, padParts(o, meta, t, [w.p, w.p, h.p, h.p], "constant", edge, "avg_pool2d"), [0, reach(w) - w.p, 0, reach(h) - h.p], "constant", 0, "avg_pool2d"), shape, plan), [-3, -1], false)
  const total = sum(x, lead, 0)
  if (divisor !== null) return o.div(total, divisor)
  return o.div(total, sum(o.add(o.zeros([h.size, w.size], { dtype: m.dtype }), 1), [], includePad ? 1 : 0))
}

const poolParams = [arg("input", "tensor"), arg("kernel_size", "intOrShape"), opt("stride", "intOrShape", null), opt("padding", "intOrShape", 0)] as const

export const model = {
  /** torch.einsum(equation, *operands): the operands as one list. */
  einsum: composite([arg("equation", "string"), arg("operands", "tensors")], ({ equation, operands }, op) => {
    if (operands.length === 0) bad(op, "needs at least one operand")
    const plan = einsumPlan(op, equation, operands)
    return [{ dtype: operands[0]!.dtype, shape: plan.output.map((l) => plan.sizes.get(l)!) }]
  }, (a, o, meta, op) => einsumParts(o, meta, a.equation, a.operands, op), { dtype: "any" }),
  /** torch.nn.functional.pad: `pad` from the last dim; a negative size crops. */
  pad: composite([arg("input", "tensor"), arg("pad", "ints"), opt("mode", "string", "constant"), opt("value", "scalar", 0)], ({ input, pad, mode, value }, op) => {
    const sides = padPlan(op, input, pad, mode, value)
    return [{ dtype: input.dtype, shape: input.shape.map((s, d) => s + sides[d]![0] + sides[d]![1]) }]
  }, (a, o, meta, op) => padParts(o, meta, a.input, a.pad, a.mode, a.value, op), { dtype: "same" }),
  /** torch.nn.functional.max_pool2d without return_indices (its indices are not kept). */
  max_pool2d: composite([...poolParams, opt("dilation", "intOrShape", 1), opt("ceil_mode", "bool", false), opt("return_indices", "bool", false)], (a, op) => {
    if (a.return_indices) bad(op, "return_indices is not supported (take the indices with ops.max over the windows)")
    const [h, w] = poolPlan(op, a.input, a.kernel_size, a.stride, a.padding, a.dilation, a.ceil_mode)
    return [{ dtype: a.input.dtype, shape: [...a.input.shape.slice(0, -2), h.out, w.out] }]
  }, (a, o, meta, op) => maxPoolParts(o, meta, a.input, poolPlan(op, meta(a.input), a.kernel_size, a.stride, a.padding, a.dilation, a.ceil_mode)), { dtype: "same" }),
  avg_pool2d: composite([...poolParams, opt("ceil_mode", "bool", false), opt("count_include_pad", "bool", true), kw("divisor_override", "int", null)], (a, op) => {
    if (a.divisor_override !== null && a.divisor_override <= 0) bad(op, `divisor_override must be positive, got ${a.divisor_override}`)
    const [h, w] = poolPlan(op, a.input, a.kernel_size, a.stride, a.padding, 1, a.ceil_mode)
    return [{ dtype: a.input.dtype, shape: [...a.input.shape.slice(0, -2), h.out, w.out] }]
  }, (a, o, meta, op) => avgPoolParts(o, meta, a.input, poolPlan(op, meta(a.input), a.kernel_size, a.stride, a.padding, 1, a.ceil_mode), a.count_include_pad, a.divisor_override), { dtype: "same" }),
}
