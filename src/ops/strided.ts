/**
 * A tensor's place in its storage (torch's model, and the shim's: c/shim.h): element
 * (i_0, .., i_n) lies at storage element offset + sum_d i_d * strides[d]. Pure: the controller
 * works out its handles' layouts with these, and the worker makes its views with the same.
 */
import { numelOf } from "./meta.ts"

/** A tensor's shape, strides (in elements, none negative) and first element's index in its storage. */
export interface Strided {
  readonly shape: ReadonlyArray<number>
  readonly strides: ReadonlyArray<number>
  readonly offset: number
}

/** Row-major strides for a shape (torch's: a size-0 dim steps as a size-1 one would). */
export const contiguousStrides = (shape: ReadonlyArray<number>): number[] => {
  const s = new Array<number>(shape.length)
  for (let i = shape.length - 1, acc = 1; i >= 0; i--) (s[i] = acc), (acc *= Math.max(shape[i]!, 1))
  return s
}

/** torch's is_contiguous: row-major strides, size-1 dims aside; an empty tensor is. */
export const isContiguous = (shape: ReadonlyArray<number>, strides: ReadonlyArray<number>): boolean => {
  if (numelOf(shape) === 0) return true
  for (let d = shape.length - 1, z = 1; d >= 0; d--) {
    if (shape[d] === 1) continue
    if (strides[d] !== z) return false
    z *= shape[d]!
  }
  return true
}

/** torch's is_non_overlapping_and_dense: contiguous (an empty tensor is), or some order of the dims is row-major (a permutation of a contiguous tensor). */
export const isNonOverlappingAndDense = (shape: ReadonlyArray<number>, strides: ReadonlyArray<number>): boolean => {
  if (isContiguous(shape, strides)) return true
  if (shape.length === 1) return shape[0]! < 2 || strides[0] === 1
  const perm = shape.map((_, i) => i).filter((i) => shape[i]! >= 2).sort((a, b) => strides[a]! - strides[b]!)
  let want = 1
  for (const d of perm) {
    if (strides[d] !== want) return false
    want *= shape[d]!
  }
  return true
}

/** Whether two elements of the tensor share memory through a stride of 0 (torch's has_internal_overlap, its certain case: an expanded tensor). */
export const overlapsItself = (shape: ReadonlyArray<number>, strides: ReadonlyArray<number>): boolean =>
  !isNonOverlappingAndDense(shape, strides) && shape.some((s, i) => s > 1 && strides[i] === 0)

/** The in-place ops torch lets write an expanded tensor (every element gets one value: its fill skips the overlap check). */
export const WRITES_ONE_VALUE: ReadonlySet<string> = new Set(["fill_", "zero_"])

/**
 * torch's computeStride: the strides of `shape` viewing a tensor of oldShape and oldStrides
 * without a copy, or undefined where a dim of `shape` would span two of its contiguous runs
 * (then reshape copies and view refuses).
 */
export const viewStrides = (oldShape: ReadonlyArray<number>, oldStrides: ReadonlyArray<number>, shape: ReadonlyArray<number>): number[] | undefined => {
  if (oldShape.length === 0) return shape.map(() => 1)
  const numel = numelOf(oldShape)
  if (numel === 0 && oldShape.length === shape.length && oldShape.every((d, i) => d === shape[i])) return [...oldStrides]
  const strides = new Array<number>(shape.length)
  if (numel === 0) {
    for (let d = shape.length - 1; d >= 0; d--) strides[d] = d === shape.length - 1 ? 1 : Math.max(shape[d + 1]!, 1) * strides[d + 1]!
    return strides
  }
  let viewD = shape.length - 1, base = oldStrides.at(-1)!, tensorNumel = 1, viewNumel = 1
  for (let d = oldShape.length - 1; d >= 0; d--) {
    tensorNumel *= oldShape[d]!
    // The end of a run of dims that are contiguous with each other: the view's dims must cover it exactly.
    if (d === 0 || (oldShape[d - 1] !== 1 && oldStrides[d - 1] !== tensorNumel * base)) {
      while (viewD >= 0 && (viewNumel < tensorNumel || shape[viewD] === 1)) {
        strides[viewD] = viewNumel * base
        viewNumel *= shape[viewD]!
        viewD--
      }
      if (viewNumel !== tensorNumel) return undefined
      if (d > 0) (base = oldStrides[d - 1]!), (tensorNumel = 1), (viewNumel = 1)
    }
  }
  return viewD === -1 ? strides : undefined
}

/** The elements of storage a tensor reaches: one past its last one's index (its offset when it is empty). */
export const storageExtent = (x: Strided): number =>
  numelOf(x.shape) === 0 ? x.offset : x.shape.reduce((end, s, i) => end + (s - 1) * x.strides[i]!, x.offset + 1)

/**
 * How two tensors of one storage meet (torch's get_overlap_status): "full" (the same elements in
 * the same layout), "partial", "none" (disjoint spans or an empty one), or "unknown" where
 * either has gaps or repeats (torch's TooHard: not refused).
 */
export const overlapStatus = (a: Strided, b: Strided): "none" | "full" | "partial" | "unknown" => {
  const an = numelOf(a.shape), bn = numelOf(b.shape)
  if (an === 0 || bn === 0) return "none"
  if (!isNonOverlappingAndDense(a.shape, a.strides) || !isNonOverlappingAndDense(b.shape, b.strides)) return "unknown"
  if (a.offset === b.offset && an === bn) return a.strides.length === b.strides.length && a.strides.every((s, i) => s === b.strides[i]) ? "full" : "partial"
  return a.offset < b.offset + bn && b.offset < a.offset + an ? "partial" : "none"
}

/**
 * torch's obeys_layout_contract for a gradient a leaf keeps: the leaf's strides where the leaf is
 * dense (size-1 dims aside), else row-major; AccumulateGrad copies one that does not (an expanded
 * gradient, say, which a later accumulation in place could not write).
 */
export const obeysLayoutContract = (grad: Strided, variable: Strided): boolean =>
  isNonOverlappingAndDense(variable.shape, variable.strides)
    ? grad.shape.every((n, i) => n === 1 || grad.strides[i] === variable.strides[i])
    : isContiguous(grad.shape, grad.strides)

/**
 * torch's TensorIterator layout for an elementwise result of `shape` (its reorder_dimensions and
 * allocate_or_resize_outputs): the dims ordered by the operands' strides, fastest first, then the
 * result allocated dense in that order, so the op's loop is one pass over memory. An operand's
 * broadcast dims (missing, or size 1 against a larger one) have stride 0 and decide nothing; for
 * two dims the first operand with unequal strides decides, equal strides put the smaller dim
 * first, and dims no operand orders keep torch's order. undefined where that order is
 * row-major (the result is contiguous). Operands of the result's shape that share one dense
 * layout give it that layout (torch's fast setup; torch skips it where a number operand is
 * wrapped as a tensor, for x * 2 or where, which changes only size-1 dims' strides). The caller skips it where every operand is contiguous
 * (that result is contiguous too), so an op on contiguous tensors computes nothing here.
 */
export const pointwiseStrides = (shape: ReadonlyArray<number>, operands: ReadonlyArray<{ readonly shape: ReadonlyArray<number>; readonly strides: ReadonlyArray<number> }>): number[] | undefined => {
  const n = shape.length
  if (n < 2) return undefined
  // torch's fast setup: operands of the result's shape, dense in one layout, give it that layout as it is.
  const first = operands[0]!
  if (operands.every((o) => o.shape.length === n && o.shape.every((d, i) => d === shape[i]) && o.strides.every((s, i) => s === first.strides[i])) && isNonOverlappingAndDense(shape, first.strides))
    return [...first.strides]
  // Each operand's strides over the result's dims, broadcast dims 0.
  const steps = operands.map((o) => {
    const s = new Array<number>(n).fill(0), lead = n - o.shape.length
    for (let d = 0; d < o.shape.length; d++) s[lead + d] = o.shape[d] === 1 && shape[lead + d] !== 1 ? 0 : o.strides[d]!
    return s
  })
  // 1: dim a goes after dim b (b is faster), -1: before, 0: no operand says.
  const order = (a: number, b: number): number => {
    for (const s of steps) {
      const sa = s[a]!, sb = s[b]!
      if (sa === 0 || sb === 0) continue
      if (sa !== sb) return sa < sb ? -1 : 1
      if (shape[a]! > shape[b]!) return 1
    }
    return 0
  }
  // perm[i]: the dim that is the i-th fastest; insertion sort that stops at the first dim known to be faster.
  const perm = shape.map((_, i) => n - 1 - i)
  for (let i = 1; i < n; i++) {
    for (let j = i - 1, at = i; j >= 0; j--) {
      const c = order(perm[j]!, perm[at]!)
      if (c > 0) ([perm[j], perm[at]] = [perm[at]!, perm[j]!]), (at = j)
      else if (c < 0) break
    }
  }
  if (perm.every((d, i) => d === n - 1 - i)) return undefined
  const strides = new Array<number>(n)
  for (let i = 0, next = 1; i < n; i++) (strides[perm[i]!] = next), (next *= shape[perm[i]!]!)
  return strides
}
