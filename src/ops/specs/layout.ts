/**
 * Layout, indexing and linear algebra. Our tensors are dense and contiguous, so reshape,
 * view, flatten, squeeze and unsqueeze are views (no copy); the rest (permute, expand,
 * slicing, cat, flip, ...) are one strided copy each (shim_copy_strided), whose cost
 * bench/ops.ts shows.
 */
import { bad, describe, isTensorMeta, numelOf, type TensorMeta } from "../meta.ts"
import { arg, opt } from "../params.ts"
import { broadcastShapes, promoteTypes } from "../promotion.ts"
import { normDim } from "../rules.ts"
import { spec } from "../spec.ts"

/** The new shape of a reshape; one size may be -1 (inferred). */
export const reshapeShape = (op: string, x: TensorMeta, shape: ReadonlyArray<number>): number[] => {
  const dims = [...shape]
  const numel = numelOf(x.shape), unknown = dims.indexOf(-1)
  if (dims.indexOf(-1, unknown + 1) > unknown && unknown >= 0) bad(op, `only one size may be -1, got [${dims}]`)
  if (unknown >= 0) {
    const known = numelOf(dims.filter((_, i) => i !== unknown))
    if (known === 0 || numel % known !== 0) bad(op, `cannot infer -1 reshaping ${describe(x)} to [${dims}]`)
    dims[unknown] = numel / known
  }
  if (dims.some((d) => d < 0) || numelOf(dims) !== numel) bad(op, `cannot reshape ${describe(x)} to [${dims}]`)
  return dims
}

/** A permutation of x's dims, normalised. */
export const permutation = (op: string, x: TensorMeta, dims: ReadonlyArray<number>): number[] => {
  const n = x.shape.length
  if (dims.length !== n) bad(op, `needs ${n} dims for ${describe(x)}, got [${dims}]`)
  const p = dims.map((d) => normDim(op, d, n))
  if (new Set(p).size !== n) bad(op, `[${dims}] repeats a dim`)
  return n === 0 ? [] : p
}

export const transposePermutation = (op: string, x: TensorMeta, d0: number, d1: number): number[] => {
  const n = x.shape.length, p = x.shape.map((_, i) => i)
  if (n === 0) return (normDim(op, d0, 0), normDim(op, d1, 0), [])
  const i = normDim(op, d0, n), j = normDim(op, d1, n)
  ;[p[i], p[j]] = [p[j]!, p[i]!]
  return p
}

const permuted = (x: TensorMeta, p: ReadonlyArray<number>): TensorMeta => ({ dtype: x.dtype, shape: p.map((d) => x.shape[d]!) })

/** expand's sizes: -1 keeps a dim; new leading dims may be added. */
export const expandShape = (op: string, x: TensorMeta, size: ReadonlyArray<number>): number[] => {
  if (size.length < x.shape.length) bad(op, `cannot expand ${describe(x)} to [${size}]: fewer dims`)
  const lead = size.length - x.shape.length
  return size.map((s, i) => {
    const have = i >= lead ? x.shape[i - lead]! : undefined
    if (s === -1) return have ?? bad(op, `-1 is not allowed for the new leading dim ${i}`)
    if (have !== undefined && have !== 1 && have !== s) bad(op, `cannot expand dim ${i} of ${describe(x)} to ${s}`)
    if (s < 0) bad(op, `size ${s} is negative`)
    return s
  })
}

/** A slice of one dim: start, step and length (python's slice rules; step > 0). */
export const sliceOf = (op: string, size: number, start: number | null, end: number | null, step: number): [number, number, number] => {
  if (step <= 0) bad(op, `step must be positive, got ${step}`)
  const clamp = (v: number) => Math.min(Math.max(v < 0 ? v + size : v, 0), size)
  const s = start === null ? 0 : clamp(start), e = end === null ? size : clamp(end)
  return [s, step, Math.max(0, Math.ceil((e - s) / step))]
}

const catShape = (op: string, tensors: ReadonlyArray<TensorMeta>, dim: number): TensorMeta => {
  if (tensors.length === 0) bad(op, "needs at least one tensor")
  // torch skips 1-D empty tensors in cat (legacy behaviour); we require one rank.
  const first = tensors[0]!, n = first.shape.length
  if (n === 0) bad(op, "zero-dimensional tensors cannot be concatenated")
  const d = normDim(op, dim, n)
  let size = 0, dtype = first.dtype
  for (const t of tensors) {
    if (t.shape.length !== n || t.shape.some((s, i) => i !== d && s !== first.shape[i]))
      bad(op, `sizes must match except in dim ${d}: ${tensors.map(describe).join(", ")}`)
    size += t.shape[d]!
    dtype = promoteTypes(dtype, t.dtype)
  }
  return { dtype, shape: first.shape.map((s, i) => (i === d ? size : s)) }
}

const matmulShape = (op: string, x: TensorMeta, y: TensorMeta): TensorMeta => {
  if (x.dtype !== y.dtype) bad(op, `dtypes differ: ${describe(x)} @ ${describe(y)} (cast with ops.to)`)
  if (x.shape.length === 0 || y.shape.length === 0) bad(op, `both arguments need at least 1 dim: ${describe(x)} @ ${describe(y)}`)
  const xs = x.shape.length === 1 ? [1, x.shape[0]!] : x.shape, ys = y.shape.length === 1 ? [y.shape[0]!, 1] : y.shape
  if (xs.at(-1) !== ys.at(-2)) bad(op, `inner dims differ: ${describe(x)} @ ${describe(y)}`)
  const batch = broadcastShapes(op, [xs.slice(0, -2), ys.slice(0, -2)])
  const shape = [...batch, ...(x.shape.length === 1 ? [] : [xs.at(-2)!]), ...(y.shape.length === 1 ? [] : [ys.at(-1)!])]
  return { dtype: x.dtype, shape }
}

const indexTensor = (op: string, index: TensorMeta, what: string): void => {
  if (index.dtype !== "i64") bad(op, `${what} must be an i64 tensor, got ${describe(index)}`)
}

/** The sizes of split's pieces along its dim: one size for all (the last may be smaller), or each piece's. */
export const splitSizes = (op: string, input: unknown, sizes: number | number[], dim: number): number[] => {
  if (!isTensorMeta(input)) return bad(op, "needs its input's shape to know how many pieces it makes; give the function's results as metadata")
  const d = normDim(op, dim, input.shape.length), size = input.shape[d] ?? 1
  if (input.shape.length === 0) bad(op, "cannot split a 0-dim tensor")
  if (typeof sizes !== "number") {
    if (sizes.some((x) => x < 0) || sizes.reduce((a, b) => a + b, 0) !== size) bad(op, `sizes [${sizes}] must be non-negative and sum to dim ${d}'s size ${size}`)
    return sizes
  }
  if (sizes < 0 || (sizes === 0 && size > 0)) bad(op, `split_size must be positive, got ${sizes}`)
  if (size === 0) return [0]
  return Array.from({ length: Math.ceil(size / sizes) }, (_, i) => Math.min(sizes, size - i * sizes))
}

/** chunk's pieces: ceil(size / chunks) each, as many as that takes (an empty dim gives `chunks` empty pieces). */
export const chunkSizes = (op: string, input: unknown, chunks: number, dim: number): number[] => {
  if (!isTensorMeta(input)) return bad(op, "needs its input's shape to know how many pieces it makes; give the function's results as metadata")
  if (chunks <= 0) bad(op, `chunks must be positive, got ${chunks}`)
  if (input.shape.length === 0) bad(op, "cannot chunk a 0-dim tensor")
  const size = input.shape[normDim(op, dim, input.shape.length)]!
  if (size === 0) return new Array<number>(chunks).fill(0)
  return splitSizes(op, input, Math.ceil(size / chunks), dim)
}

/** The pieces of input along dim with these sizes. */
const pieces = (op: string, input: TensorMeta, sizes: ReadonlyArray<number>, dim: number): TensorMeta[] => {
  const d = normDim(op, dim, input.shape.length)
  return sizes.map((n) => ({ dtype: input.dtype, shape: input.shape.map((x, i) => (i === d ? n : x)) }))
}

/** tril and triu: of the last two dims, from `diagonal` (0: the main one, above it positive). */
const triangle = spec([arg("input", "tensor"), opt("diagonal", "int", 0)], ({ input }, op) => {
  if (input.shape.length < 2) bad(op, `needs at least 2 dims, got ${describe(input)}`)
  return [input]
}, { dtype: "same" })

const same = spec([arg("input", "tensor")], ({ input }) => [input], { dtype: "same" })
const reshapeSpec = spec([arg("input", "tensor"), arg("shape", "ints")], ({ input, shape }, op) => [{ dtype: input.dtype, shape: reshapeShape(op, input, shape) }], { view: true, dtype: "same" })

export const layout = {
  matmul: spec([arg("input", "tensor"), arg("other", "tensor")], ({ input, other }, op) => [matmulShape(op, input, other)], { dtype: "same" }),
  mm: spec([arg("input", "tensor"), arg("mat2", "tensor")], ({ input, mat2 }, op) => {
    if (input.shape.length !== 2 || mat2.shape.length !== 2) bad(op, `needs 2-D operands: ${describe(input)} @ ${describe(mat2)}`)
    return [matmulShape(op, input, mat2)]
  }, { dtype: "same" }),
  bmm: spec([arg("input", "tensor"), arg("mat2", "tensor")], ({ input, mat2 }, op) => {
    if (input.shape.length !== 3 || mat2.shape.length !== 3 || input.shape[0] !== mat2.shape[0]) bad(op, `needs 3-D operands with one batch size: ${describe(input)} @ ${describe(mat2)}`)
    return [matmulShape(op, input, mat2)]
  }, { dtype: "same" }),
  transpose: spec([arg("input", "tensor"), arg("dim0", "int"), arg("dim1", "int")], ({ input, dim0, dim1 }, op) => [permuted(input, transposePermutation(op, input, dim0, dim1))], { dtype: "same" }),
  t: spec([arg("input", "tensor")], ({ input }, op) => {
    if (input.shape.length > 2) bad(op, `expects a tensor of at most 2 dims, got ${describe(input)}`)
    return [permuted(input, transposePermutation(op, input, 0, -1))]
  }, { dtype: "same" }),
  permute: spec([arg("input", "tensor"), arg("dims", "ints")], ({ input, dims }, op) => [permuted(input, permutation(op, input, dims))], { dtype: "same" }),
  reshape: reshapeSpec,
  view: reshapeSpec,
  flatten: spec([arg("input", "tensor"), opt("start_dim", "int", 0), opt("end_dim", "int", -1)], ({ input, start_dim, end_dim }, op) => {
    const n = input.shape.length
    if (n === 0) return [{ dtype: input.dtype, shape: [1] }]
    const s = normDim(op, start_dim, n), e = normDim(op, end_dim, n)
    if (s > e) bad(op, `start_dim ${start_dim} comes after end_dim ${end_dim}`)
    return [{ dtype: input.dtype, shape: [...input.shape.slice(0, s), numelOf(input.shape.slice(s, e + 1)), ...input.shape.slice(e + 1)] }]
  }, { view: true, dtype: "same" }),
  squeeze: spec([arg("input", "tensor"), opt("dim", "dims", null)], ({ input, dim }, op) => {
    const n = input.shape.length
    const dims = dim === null ? input.shape.map((_, i) => i) : (typeof dim === "number" ? [dim] : dim).map((d) => normDim(op, d, n))
    return [{ dtype: input.dtype, shape: input.shape.filter((s, i) => !(s === 1 && dims.includes(i))) }]
  }, { view: true, dtype: "same" }),
  unsqueeze: spec([arg("input", "tensor"), arg("dim", "int")], ({ input, dim }, op) => {
    const d = normDim(op, dim, input.shape.length + 1), shape = [...input.shape]
    shape.splice(d, 0, 1)
    return [{ dtype: input.dtype, shape }]
  }, { view: true, dtype: "same" }),
  expand: spec([arg("input", "tensor"), arg("size", "ints")], ({ input, size }, op) => [{ dtype: input.dtype, shape: expandShape(op, input, size) }], { dtype: "same" }),
  broadcast_to: spec([arg("input", "tensor"), arg("size", "ints")], ({ input, size }, op) => [{ dtype: input.dtype, shape: expandShape(op, input, size) }], { dtype: "same" }),
  contiguous: same,
  clone: same,
  to: spec([arg("input", "tensor"), opt("dtype", "dtype", null)], ({ input, dtype }) => [{ dtype: dtype ?? input.dtype, shape: input.shape }], { dtype: "to" }),
  narrow: spec([arg("input", "tensor"), arg("dim", "int"), arg("start", "int"), arg("length", "int")], ({ input, dim, start, length }, op) => {
    const d = normDim(op, dim, input.shape.length), size = input.shape[d] ?? 1, s = start < 0 ? start + size : start
    if (s < 0 || length < 0 || s + length > size) bad(op, `start ${start} and length ${length} exceed dim ${d} of ${describe(input)}`)
    return [{ dtype: input.dtype, shape: input.shape.map((x, i) => (i === d ? length : x)) }]
  }, { dtype: "same" }),
  select: spec([arg("input", "tensor"), arg("dim", "int"), arg("index", "int")], ({ input, dim, index }, op) => {
    if (input.shape.length === 0) bad(op, "cannot select from a 0-dim tensor")
    const d = normDim(op, dim, input.shape.length), size = input.shape[d]!
    if (index < -size || index >= size) bad(op, `index ${index} is out of range for dim ${d} of ${describe(input)}`)
    return [{ dtype: input.dtype, shape: input.shape.filter((_, i) => i !== d) }]
  }, { dtype: "same" }),
  slice: spec([arg("input", "tensor"), opt("dim", "int", 0), opt("start", "int", null), opt("end", "int", null), opt("step", "int", 1)], ({ input, dim, start, end, step }, op) => {
    if (input.shape.length === 0) bad(op, "cannot slice a 0-dim tensor")
    const d = normDim(op, dim, input.shape.length), [, , length] = sliceOf(op, input.shape[d]!, start, end, step)
    return [{ dtype: input.dtype, shape: input.shape.map((x, i) => (i === d ? length : x)) }]
  }, { dtype: "same" }),
  flip: spec([arg("input", "tensor"), arg("dims", "dims")], ({ input, dims }, op) => {
    for (const d of typeof dims === "number" ? [dims] : dims) normDim(op, d, input.shape.length)
    return [input]
  }, { dtype: "same" }),
  cat: spec([arg("tensors", "tensors"), opt("dim", "int", 0)], ({ tensors, dim }, op) => [catShape(op, tensors, dim)], { dtype: "same" }),
  stack: spec([arg("tensors", "tensors"), opt("dim", "int", 0)], ({ tensors, dim }, op) => {
    if (tensors.length === 0) bad(op, "needs at least one tensor")
    const first = tensors[0]!
    for (const t of tensors) if (t.shape.join() !== first.shape.join()) bad(op, `every tensor needs one shape: ${tensors.map(describe).join(", ")}`)
    const d = normDim(op, dim, first.shape.length + 1), shape = [...first.shape]
    shape.splice(d, 0, tensors.length)
    return [{ dtype: tensors.reduce((p, t) => promoteTypes(p, t.dtype), first.dtype), shape }]
  }, { dtype: "same" }),
  index_select: spec([arg("input", "tensor"), arg("dim", "int"), arg("index", "tensor")], ({ input, dim, index }, op) => {
    indexTensor(op, index, "index")
    if (index.shape.length > 1) bad(op, `index must be 0-D or 1-D, got ${describe(index)}`)
    const d = normDim(op, dim, input.shape.length)
    return [{ dtype: input.dtype, shape: input.shape.length === 0 ? [] : input.shape.map((s, i) => (i === d ? numelOf(index.shape) : s)) }]
  }, { dtype: "same" }),
  gather: spec([arg("input", "tensor"), arg("dim", "int"), arg("index", "tensor")], ({ input, dim, index }, op) => {
    indexTensor(op, index, "index")
    const d = normDim(op, dim, input.shape.length)
    if (index.shape.length !== input.shape.length || index.shape.some((s, i) => i !== d && s > input.shape[i]!))
      bad(op, `index ${describe(index)} must have the rank of ${describe(input)} and no larger size outside dim ${d}`)
    return [{ dtype: input.dtype, shape: index.shape }]
  }, { dtype: "same" }),
  copy_: spec([arg("input", "tensor"), arg("src", "tensor")], ({ input, src }, op) => {
    if (broadcastShapes(op, [input.shape, src.shape]).join() !== input.shape.join()) bad(op, `cannot copy ${describe(src)} into ${describe(input)}`)
    return []
  }, { mutates: "input", dtype: "same" }),
  fill_: spec([arg("input", "tensor"), arg("value", "scalar")], () => [], { mutates: "input", dtype: "same" }),
  noop: spec([], () => [], { results: 0, returns: "none" }),
  tril: triangle,
  triu: triangle,
  split: spec([arg("tensor", "tensor"), arg("split_size_or_sections", "dims"), opt("dim", "int", 0)], ({ tensor, split_size_or_sections, dim }, op) =>
    pieces(op, tensor, splitSizes(op, tensor, split_size_or_sections, dim), dim), {
    dtype: "same", returns: "tensors", results: ({ tensor, split_size_or_sections, dim }, op) => splitSizes(op, tensor, split_size_or_sections, dim).length,
  }),
  chunk: spec([arg("input", "tensor"), arg("chunks", "int"), opt("dim", "int", 0)], ({ input, chunks, dim }, op) =>
    pieces(op, input, chunkSizes(op, input, chunks, dim), dim), {
    dtype: "same", returns: "tensors", results: ({ input, chunks, dim }, op) => chunkSizes(op, input, chunks, dim).length,
  }),
}
