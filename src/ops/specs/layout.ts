/**
 * Layout, indexing and linear algebra. Tensors are strided, as torch's (src/ops/strided.ts): the
 * ops torch documents as views (view, reshape where it can, transpose, permute, t, expand,
 * narrow, select, slice, split, chunk, unbind, squeeze, unsqueeze, flatten, diagonal, unfold,
 * as_strided, alias, contiguous of a contiguous input) declare their layout rule (`view`, the
 * VIEWS below): the worker makes each result a header over its input's storage by it and the
 * controller knows each handle's strides by it, with no copy and no round trip. The rest (cat,
 * flip, repeat, ...) make new tensors.
 */
import { bad, describe, isTensorMeta, numelOf, type TensorMeta } from "../meta.ts"
import { type GradContext, type GradOps, NOT_DIFFERENTIABLE, padDim, sumTo } from "../grad.ts"
import { arg, kw, opt, type Param } from "../params.ts"
import { broadcastShapes, isFloating, isScalar, promoteTypes, scalarValue, type Scalar } from "../promotion.ts"
import { normDim } from "../rules.ts"
import { readsStrides, spec, withPlan, type ViewRule } from "../spec.ts"
import { isContiguous, storageExtent, viewStrides, type Strided } from "../strided.ts"
import { ITEM_SIZE } from "../../protocol/values.ts"

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
const expandShape = (op: string, x: TensorMeta, size: ReadonlyArray<number>): number[] => {
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

/** x with dim d taking `length` entries from `start` every `step` (narrow, slice, split's pieces), or entry `start` with d dropped (select, unbind's). */
const along = (x: Strided, d: number, start: number, length: number, step: number, drop: boolean): Strided => {
  const offset = x.offset + start * x.strides[d]!
  if (drop) return { shape: x.shape.filter((_, i) => i !== d), strides: x.strides.filter((_, i) => i !== d), offset }
  return { shape: x.shape.map((n, i) => (i === d ? length : n)), strides: x.strides.map((n, i) => (i === d ? n * step : n)), offset }
}

/** Consecutive pieces of dim d, of these sizes (split, chunk). */
const piecesAlong = (x: Strided, d: number, sizes: ReadonlyArray<number>): Strided[] => {
  let at = 0
  return sizes.map((n) => along(x, d, (at += n) - n, n, 1, false))
}

const permutedLayout = (x: Strided, p: ReadonlyArray<number>): Strided => ({ shape: p.map((d) => x.shape[d]!), strides: p.map((d) => x.strides[d]!), offset: x.offset })

/** reshape's: a view where torch's computeStride finds strides for the new shape, else null (a copy). */
const reshapeLayout = (x: Strided, shape: ReadonlyArray<number>): Strided | null => {
  const strides = viewStrides(x.shape, x.strides, shape)
  return strides === undefined ? null : { shape, strides, offset: x.offset }
}

/** torch's inferExpandGeometry: a stretched or added dim gets stride 0; an added dim of size 1 the stride of the dims after it. */
const expandLayout = (x: Strided, shape: ReadonlyArray<number>): Strided => {
  if (x.shape.length === 0) return { shape, strides: shape.map(() => 0), offset: x.offset }
  const lead = shape.length - x.shape.length, strides = new Array<number>(shape.length)
  for (let i = shape.length - 1; i >= 0; i--) {
    const have = i >= lead ? x.shape[i - lead]! : 1
    strides[i] = have !== shape[i] ? 0 : i >= lead ? x.strides[i - lead]! : shape[i + 1]! * strides[i + 1]!
  }
  return { shape, strides, offset: x.offset }
}

/** torch's inferUnsqueezeGeometry: the new dim's stride spans the dim it is put before (1 at the end). */
const unsqueezeLayout = (x: Strided, d: number): Strided => {
  const shape = [...x.shape], strides = [...x.strides]
  strides.splice(d, 0, d >= x.shape.length ? 1 : x.shape[d]! * x.strides[d]!)
  shape.splice(d, 0, 1)
  return { shape, strides, offset: x.offset }
}

/** The dims diagonal reads (torch's checks) and the diagonal's length. */
const diagonalPlan = (op: string, x: TensorMeta, offset: number, dim1: number, dim2: number): { readonly d1: number; readonly d2: number; readonly n: number } => {
  const n = x.shape.length
  if (n < 2) bad(op, `needs at least 2 dims, got ${describe(x)}`)
  const d1 = normDim(op, dim1, n), d2 = normDim(op, dim2, n)
  if (d1 === d2) bad(op, `diagonal dimensions cannot be identical ${dim1}, ${dim2}`)
  const a = x.shape[d1]!, b = x.shape[d2]!
  return { d1, d2, n: Math.max(offset >= 0 ? Math.min(a, b - offset) : Math.min(a + offset, b), 0) }
}

/** torch's diagonal: d1 and d2 dropped, the diagonal last, its stride theirs added; an empty one starts at the input. */
const diagonalLayout = (x: Strided, offset: number, { d1, d2, n }: { readonly d1: number; readonly d2: number; readonly n: number }): Strided => {
  const keep = (_: unknown, i: number) => i !== d1 && i !== d2
  const start = n === 0 ? x.offset : offset >= 0 ? x.offset + offset * x.strides[d2]! : x.offset - offset * x.strides[d1]!
  return { shape: [...x.shape.filter(keep), n], strides: [...x.strides.filter(keep), x.strides[d1]! + x.strides[d2]!], offset: start }
}

/** unfold's dim (a 0-dim tensor unfolds as one of size 1) after torch's checks. */
const unfoldDim = (op: string, x: TensorMeta, dimension: number, size: number, step: number): number => {
  const d = normDim(op, dimension, x.shape.length), most = x.shape.length === 0 ? 1 : x.shape[d]!
  if (size < 0) bad(op, `size is ${size} but must be >= 0`)
  if (size > most) bad(op, `maximum size for tensor at dimension ${d} is ${most} but size is ${size}`)
  if (step <= 0) bad(op, `step is ${step} but must be > 0`)
  return d
}

/** torch's unfold: dim d counts the windows (its stride times step), a last dim of `size` walks each window. */
const unfoldLayout = (x: Strided, d: number, size: number, step: number): Strided => {
  if (x.shape.length === 0) return { shape: [size], strides: [1], offset: x.offset }
  const shape = [...x.shape, size], strides = [...x.strides, x.strides[d]!]
  shape[d] = Math.floor((x.shape[d]! - size) / step) + 1
  strides[d] = x.strides[d]! * step
  return { shape, strides, offset: x.offset }
}

/** as_strided's arguments, checked as torch checks them (the storage's bound in its view rule, where the storage is known). */
const asStridedShape = (op: string, size: ReadonlyArray<number>, stride: ReadonlyArray<number>, offset: number | null): number[] => {
  if (size.length !== stride.length) bad(op, `mismatch in length of strides and shape`)
  if (stride.some((s) => s < 0)) bad(op, `Negative strides are not supported at the moment, got strides: [${stride.join(", ")}]`)
  if (offset !== null && offset < 0) bad(op, `Tensor: invalid storage offset ${offset}`)
  return [...size]
}

/** torch's setStorage check: every element as_strided reaches lies in the input's storage. */
const asStridedLayout = (op: string, x: Strided & { readonly storage?: number }, item: number, shape: ReadonlyArray<number>, strides: ReadonlyArray<number>, at: number | null): Strided => {
  const offset = at ?? x.offset
  const need = shape.some((n) => n === 0) ? 0 : (offset + shape.reduce((end, n, i) => end + (n - 1) * strides[i]!, 1)) * item
  if (x.storage !== undefined && need > x.storage * item)
    bad(op, `setStorage: sizes [${shape.join(", ")}], strides [${strides.join(", ")}], storage offset ${offset}, and itemsize ${item} requiring a storage size of ${need} are out of bounds for storage of size ${x.storage * item}`)
  return { shape, strides, offset }
}

/** Whether squeeze (over `dim`: one, some, or null for all) drops dim i of x: a size-1 dim it names. */
const squeezed = (op: string, x: TensorMeta, dim: number | number[] | null, i: number): boolean =>
  x.shape[i] === 1 && (dim === null || (typeof dim === "number" ? [dim] : dim).some((d) => normDim(op, d, x.shape.length) === i))

/** split's and chunk's pieces: narrows of their dim, of their results' sizes. */
const piecesView: ViewRule = (x, a, metas, op) => {
  const d = normDim(op, a.dim as number, x.shape.length)
  return piecesAlong(x, d, metas.map((m) => m.shape[d]!))
}

/** Each element's index in its storage, less `from`, row-major (an i64 tensor of numel(l.shape)). */
const storageIndices = <T>(o: GradOps<T>, l: Strided, from: number): T => {
  const ones = l.shape.map(() => 1)
  let at = o.add(o.reshape(o.arange(1), ones), l.offset - from)
  l.shape.forEach((n, i) => (at = o.add(at, o.reshape(o.mul(o.arange(n), l.strides[i]!), ones.map((one, j) => (j === i ? n : one))))))
  return o.reshape(at, [-1])
}

/**
 * as_strided's gradient (torch's as_strided_backward, for an input whose elements share no
 * memory): g added into a buffer over the storage both layouts reach, at each result element's
 * index (an element read twice gets both), then read back at each input element's.
 */
const asStridedGrad = <T>(o: GradOps<T>, input: TensorMeta, x: Strided | undefined, out: Strided, g: T, dtype: TensorMeta["dtype"]): T => {
  if (x === undefined) return bad("as_strided", "its gradient needs its input's layout, which the controller does not know")
  const from = Math.min(x.offset, out.offset), span = Math.max(storageExtent(x), storageExtent(out)) - from
  const buffer = o.index_add(o.zeros([span], { dtype }), 0, storageIndices(o, out, from), o.reshape(g, [-1]))
  return o.reshape(o.index_select(buffer, 0, storageIndices(o, x, from)), [...input.shape])
}

const VIEW_REFUSED = "view size is not compatible with input tensor's size and stride (at least one dimension spans across two contiguous subspaces). Use .reshape(...) instead."

/** The view rules of reshape, view and the ops that keep every element where it is (their results' shapes from `outputs`). */
const reshapeView: ViewRule = (x, _, [m], op) => [reshapeLayout(x, m!.shape) ?? (op === "view" ? bad(op, VIEW_REFUSED) : null)]
const sameView: ViewRule = (x) => [x]

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

export const matmulShape = (op: string, x: TensorMeta, y: TensorMeta): TensorMeta => {
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

/** repeat's result shape, and the input's shape padded with leading 1s to one dim per repeat (torch's rule: no fewer repeats than dims). */
const repeatPlan = (op: string, x: TensorMeta, repeats: ReadonlyArray<number>): { readonly padded: number[]; readonly shape: number[] } => {
  if (repeats.length < x.shape.length) bad(op, `needs at least one repeat per dim of ${describe(x)}, got [${repeats}]`)
  if (repeats.some((r) => r < 0)) bad(op, `repeats must be non-negative, got [${repeats}]`)
  const padded = [...new Array<number>(repeats.length - x.shape.length).fill(1), ...x.shape]
  return { padded, shape: padded.map((s, i) => s * repeats[i]!) }
}

/** unbind's result count: its dim's size. */
const unbindCount = (op: string, input: unknown, dim: number): number => {
  if (!isTensorMeta(input)) return bad(op, "needs its input's shape to know how many pieces it makes; give the function's results as metadata")
  if (input.shape.length === 0) bad(op, "cannot unbind a 0-dim tensor")
  return input.shape[normDim(op, dim, input.shape.length)]!
}

/** The pieces of input along dim with these sizes. */
const pieces = (op: string, input: TensorMeta, sizes: ReadonlyArray<number>, dim: number): TensorMeta[] => {
  const d = normDim(op, dim, input.shape.length)
  return sizes.map((n) => ({ dtype: input.dtype, shape: input.shape.map((x, i) => (i === d ? n : x)) }))
}

/** tril and triu: of the last two dims, from `diagonal` (0: the main one, above it positive); the gradient is the same triangle of g. */
const triangle = (upper: boolean) => spec([arg("input", "tensor"), opt("diagonal", "int", 0)], ({ input }, op) => {
  if (input.shape.length < 2) bad(op, `needs at least 2 dims, got ${describe(input)}`)
  return [input]
}, (c, o) => ({ input: () => (upper ? o.triu(c.grad, c.args.diagonal) : o.tril(c.grad, c.args.diagonal)) }), { dtype: "same" })

/** A piece's gradient: g back in its place along dim, zeros around it (each piece is its own node; the tape adds them). */
const pieceGrad = <T>(o: GradOps<T>, meta: (t: T) => TensorMeta, g: T, input: TensorMeta, sizes: ReadonlyArray<number>, at: number, dim: number): T => {
  const d = normDim("split", dim, input.shape.length), start = sizes.slice(0, at).reduce((a, b) => a + b, 0)
  return padDim(o, g, meta(g), d, start, input.shape[d]! - start - sizes[at]!)
}

/** Whether two shapes of at least 2 dims have the same batch dims (all but their last two). */
const sameBatch = (a: ReadonlyArray<number>, b: ReadonlyArray<number>): boolean =>
  a.length === b.length && a.slice(0, -2).every((d, i) => d === b[i])

/**
 * matmul's rule for every form: a 1-D operand is a matrix of one row (or column) whose dim the
 * result dropped; dx = g @ y^T and dy = x^T @ g, each summed over the batch dims broadcasting
 * added, then shaped as its operand. The transposes are read in place (_matmul_t) wherever the
 * batch dims let one shim_matmul take them (a 2-D weight's dy is one product over every row);
 * a broadcast batch multiplies a transposed view (read in place as well) and sums.
 */
const matmulGrad = <T>(o: GradOps<T>, meta: (t: T) => TensorMeta, x: T, y: T, g: T) => {
  const xs = meta(x).shape, ys = meta(y).shape
  const x2 = xs.length === 1 ? o.reshape(x, [1, xs[0]!]) : x, y2 = ys.length === 1 ? o.reshape(y, [ys[0]!, 1]) : y
  const gs = [...meta(g).shape]
  if (xs.length === 1) gs.splice(gs.length - (ys.length === 1 ? 0 : 1), 0, 1)
  if (ys.length === 1) gs.push(1)
  const g2 = o.reshape(g, gs), x2s = meta(x2).shape, y2s = meta(y2).shape
  const back = (r: T, to: ReadonlyArray<number>, as: ReadonlyArray<number>) => o.reshape(sumTo(o, r, meta(r).shape, to), [...as])
  const rows = (t: T, n: number) => o.reshape(t, [-1, n])
  return {
    x: () => back(y2s.length === 2 || sameBatch(y2s, gs) ? o._matmul_t(g2, y2, false, true) : o.matmul(g2, o.transpose(y2, -1, -2)), x2s, xs),
    y: () => {
      if (!sameBatch(x2s, gs)) return back(o.matmul(o.transpose(x2, -1, -2), g2), y2s, ys)
      const r = y2s.length === 2 ? o._matmul_t(rows(x2, x2s.at(-1)!), rows(g2, gs.at(-1)!), true, false) : o._matmul_t(x2, g2, true, false)
      return back(r, y2s, ys)
    },
  }
}

/** _matmul_t's result: op(input) @ op(other), op a transpose of the last two dims where asked; other 2-D or of input's batch dims. */
const matmulTShape = (op: string, x: TensorMeta, y: TensorMeta, tx: boolean, ty: boolean): TensorMeta => {
  if (x.dtype !== y.dtype) bad(op, `dtypes differ: ${describe(x)} @ ${describe(y)} (cast with ops.to)`)
  if (x.shape.length < 2 || y.shape.length < 2) bad(op, `needs operands of at least 2 dims: ${describe(x)} @ ${describe(y)}`)
  if (y.shape.length > 2 && !sameBatch(x.shape, y.shape)) bad(op, `other must be 2-D or have input's batch dims: ${describe(x)} @ ${describe(y)}`)
  const [m, k] = tx ? [x.shape.at(-1)!, x.shape.at(-2)!] : [x.shape.at(-2)!, x.shape.at(-1)!]
  const [k2, n] = ty ? [y.shape.at(-1)!, y.shape.at(-2)!] : [y.shape.at(-2)!, y.shape.at(-1)!]
  if (k !== k2) bad(op, `inner dims differ: ${describe(x)}${tx ? "^T" : ""} @ ${describe(y)}${ty ? "^T" : ""}`)
  return { dtype: x.dtype, shape: [...x.shape.slice(0, -2), m, n] }
}

/**
 * _matmul_t's rule, in its own terms (C = op(A) op(B)): dA = g op(B)^T, or op(B) g^T when A is
 * read transposed; dB = op(A)^T g, or g^T op(A). Where the batch dims do not let the operands
 * swap (A batched, B 2-D, A transposed), dA is the transpose of g op(B)^T.
 */
const matmulTGrad = <T>(o: GradOps<T>, meta: (t: T) => TensorMeta, a: T, b: T, ta: boolean, tb: boolean, g: T) => ({
  input: () => {
    if (!ta) return o._matmul_t(g, b, false, !tb)
    return meta(b).shape.length === 2 && meta(g).shape.length > 2 ? o.transpose(o._matmul_t(g, b, false, !tb), -1, -2) : o._matmul_t(b, g, tb, true)
  },
  other: () => (tb ? o._matmul_t(g, a, true, ta) : o._matmul_t(a, g, !ta, false)),
})

// The gradient of a copy, an expand or a cast passes as it is: the tape sums every gradient to its input's shape and casts it to its dtype.

/** x padded with zeros at the end of each dim up to `shape` (a gather's gradient where src or input is larger than index). */
const padEnd = <T>(o: GradOps<T>, meta: (t: T) => TensorMeta, x: T, shape: ReadonlyArray<number>): T => {
  let r = x
  for (let i = 0; i < shape.length; i++) {
    const have = meta(r).shape[i]!, want = shape[i]!
    if (have < want) r = padDim(o, r, meta(r), i, 0, want - have)
  }
  return r
}

/** A shape with a 0-dim tensor read as [1] (torch's scatter and index_add take 0-d operands so). */
const atLeast1 = (shape: ReadonlyArray<number>): ReadonlyArray<number> => (shape.length === 0 ? [1] : shape)

/**
 * scatter's and scatter_add's checks (torch 1.13's): an i64 index; src of the input's dtype; and,
 * unless index is empty, index, src and input of one rank (0-d read as 1-d), index no larger than
 * src, nor than the input outside dim. Indices out of range fail on the worker, before any write.
 */
const scatterMeta = (op: string, input: TensorMeta, dim: number, index: TensorMeta, src: TensorMeta | number): TensorMeta => {
  indexTensor(op, index, "index")
  if (typeof src !== "number" && src.dtype !== input.dtype) bad(op, `src ${describe(src)} must have the input's dtype (${describe(input)})`)
  const d = normDim(op, dim, input.shape.length)
  if (numelOf(index.shape) === 0) return input
  const is = atLeast1(index.shape), xs = atLeast1(input.shape), ss = typeof src === "number" ? is : atLeast1(src.shape)
  if (is.length !== xs.length || ss.length !== xs.length) bad(op, `index ${describe(index)}${typeof src === "number" ? "" : `, src ${describe(src)}`} and input ${describe(input)} need one rank`)
  if (is.some((n, i) => n > ss[i]! || (i !== d && n > xs[i]!)))
    bad(op, `index ${describe(index)} must be no larger than src ${typeof src === "number" ? "" : describe(src)} and than input ${describe(input)} outside dim ${d}`)
  return input
}

/** scatter's source: the tensor or number given as src, or the value keyword (one of them). */
export const scatterSource = <T>(op: string, src: T | Scalar | null, value: number | null): T | number => {
  if ((src === null) === (value === null)) bad(op, "needs one of src (a tensor or a number) and value")
  if (src === null) return value!
  return isScalar(src) ? scalarValue(src as Scalar) : (src as T)
}

/**
 * index_add's checks (torch 1.13's): an i64 index of 0 or 1 dims; source of the input's dtype and
 * rank (0-d read as 1-d), index's count along dim, and the input's sizes (or 1, broadcast) elsewhere.
 */
const indexAddMeta = (op: string, input: TensorMeta, dim: number, index: TensorMeta, source: TensorMeta, alpha: number): TensorMeta => {
  indexTensor(op, index, "index")
  if (index.shape.length > 1) bad(op, `index must be 0-D or 1-D, got ${describe(index)}`)
  if (source.dtype !== input.dtype) bad(op, `source ${describe(source)} must have the input's dtype (${describe(input)})`)
  if (input.dtype === "bool" ? alpha !== 1 : !isFloating(input.dtype) && !Number.isInteger(alpha))
    bad(op, `alpha must be ${input.dtype === "bool" ? "1" : "an integer"} for ${describe(input)}, got ${alpha}`)
  const d = normDim(op, dim, input.shape.length), xs = atLeast1(input.shape), ss = atLeast1(source.shape), n = numelOf(index.shape)
  if (ss.length !== xs.length || ss[d] !== n || ss.some((s, i) => i !== d && s !== xs[i] && s !== 1))
    bad(op, `source ${describe(source)} must have the rank of input ${describe(input)}, ${n} entries along dim ${d} (index ${describe(index)}) and its sizes elsewhere`)
  return input
}

const scatterParams = [arg("input", "tensor"), arg("dim", "int"), arg("index", "tensor"), opt("src", "tensorOrScalar", null), kw("value", "scalar", null)] as const
const scatterAddParams = [arg("input", "tensor"), arg("dim", "int"), arg("index", "tensor"), arg("src", "tensor")] as const
const indexAddParams = [arg("input", "tensor"), arg("dim", "int"), arg("index", "tensor"), arg("source", "tensor"), kw("alpha", "scalar", 1)] as const

/**
 * The scatter family's rules (torch 1.13's): scatter's input keeps g where nothing was written
 * (g scattered with 0 at the indices), its src gets g gathered at them (for every src element,
 * overwritten ones included, as torch's); scatter_add's and index_add's input get g as it is, src
 * g gathered at the indices, source g picked along dim (index_select) times alpha.
 */
const scatterGrads = {
  scatter: <T>(c: GradContext<typeof scatterParams, T>, o: GradOps<T>) => ({
    input: () => o.scatter(c.grad, c.args.dim, c.args.index, 0),
    src: () => {
      const src = c.args.src as T
      return padEnd(o, c.meta, o.gather(c.grad, c.args.dim, c.args.index), c.meta(src).shape)
    },
  }),
  scatter_add: <T>(c: GradContext<typeof scatterAddParams, T>, o: GradOps<T>) => ({
    input: () => c.grad,
    src: () => padEnd(o, c.meta, o.gather(c.grad, c.args.dim, c.args.index), c.meta(c.args.src).shape),
  }),
  index_add: <T>(c: GradContext<typeof indexAddParams, T>, o: GradOps<T>) => ({
    input: () => c.grad,
    source: () => {
      const picked = o.index_select(c.grad, c.args.dim, c.args.index)
      return c.args.alpha === 1 ? picked : o.mul(picked, c.args.alpha)
    },
  }),
}

const same = spec([arg("input", "tensor")], ({ input }) => [input], (c) => ({ input: () => c.grad }), { dtype: "same" })
/** torch's contiguous: its input itself when that is contiguous, else a contiguous copy. */
const contiguousSpec = spec([arg("input", "tensor")], ({ input }) => [input], (c) => ({ input: () => c.grad }), { dtype: "same", view: (x) => [isContiguous(x.shape, x.strides) ? x : null] })
const reshapeSpec = spec([arg("input", "tensor"), arg("shape", "ints")], ({ input, shape }, op) => [{ dtype: input.dtype, shape: reshapeShape(op, input, shape) }], (c, o) => ({ input: () => o.reshape(c.grad, [...c.meta(c.args.input).shape]) }), { view: reshapeView, dtype: "same" })

/** A product's rule in terms of matmulGrad, for an op whose second operand is `name`. */
const productGrad = <N extends "other" | "mat2">(name: N) =>
  <T>(c: GradContext<readonly [Param<"input", "tensor", never, true, false>, Param<N, "tensor", never, true, false>], T>, o: GradOps<T>) => {
    const args = c.args as unknown as { readonly input: T } & { readonly [K in N]: T }
    const d = matmulGrad(o, c.meta, args.input, args[name], c.grad)
    return { input: d.x, [name]: d.y } as { input: () => T } & { [K in N]: () => T }
  }

export const layout = {
  matmul: spec([arg("input", "tensor"), arg("other", "tensor")], ({ input, other }, op) => [matmulShape(op, input, other)], productGrad("other"), { dtype: "same", strided: true }),
  /** op(input) @ op(other) with the transposes read where they lie (shim_matmul's flags): the backward rules' products, one command where a transposed view and a matmul are two. */
  _matmul_t: spec([arg("input", "tensor"), arg("other", "tensor"), opt("transpose_input", "bool", false), opt("transpose_other", "bool", false)],
    ({ input, other, transpose_input, transpose_other }, op) => [matmulTShape(op, input, other, transpose_input, transpose_other)],
    (c, o) => matmulTGrad(o, c.meta, c.args.input, c.args.other, c.args.transpose_input, c.args.transpose_other, c.grad), { dtype: "same", strided: true }),
  mm: spec([arg("input", "tensor"), arg("mat2", "tensor")], ({ input, mat2 }, op) => {
    if (input.shape.length !== 2 || mat2.shape.length !== 2) bad(op, `needs 2-D operands: ${describe(input)} @ ${describe(mat2)}`)
    return [matmulShape(op, input, mat2)]
  }, productGrad("mat2"), { dtype: "same", strided: true }),
  bmm: spec([arg("input", "tensor"), arg("mat2", "tensor")], ({ input, mat2 }, op) => {
    if (input.shape.length !== 3 || mat2.shape.length !== 3 || input.shape[0] !== mat2.shape[0]) bad(op, `needs 3-D operands with one batch size: ${describe(input)} @ ${describe(mat2)}`)
    return [matmulShape(op, input, mat2)]
  }, productGrad("mat2"), { dtype: "same", strided: true }),
  transpose: spec([arg("input", "tensor"), arg("dim0", "int"), arg("dim1", "int")], ({ input, dim0, dim1 }, op) => [permuted(input, transposePermutation(op, input, dim0, dim1))],
    (c, o) => ({ input: () => o.transpose(c.grad, c.args.dim0, c.args.dim1) }), { dtype: "same", view: (x, a, _, op) => [permutedLayout(x, transposePermutation(op, x as never, a.dim0, a.dim1))] }),
  t: spec([arg("input", "tensor")], ({ input }, op) => {
    if (input.shape.length > 2) bad(op, `expects a tensor of at most 2 dims, got ${describe(input)}`)
    return [permuted(input, transposePermutation(op, input, 0, -1))]
  }, (c, o) => ({ input: () => o.transpose(c.grad, 0, -1) }), { dtype: "same", view: (x, _, __, op) => [permutedLayout(x, transposePermutation(op, x as never, 0, -1))] }),
  permute: spec([arg("input", "tensor"), arg("dims", "ints")], ({ input, dims }, op) => [permuted(input, permutation(op, input, dims))], (c, o) => ({
    input: () => {
      const p = permutation("permute", c.meta(c.args.input), c.args.dims), inverse = p.map((_, i) => p.indexOf(i))
      return o.permute(c.grad, inverse)
    },
  }), { dtype: "same", view: (x, a, _, op) => [permutedLayout(x, permutation(op, x as never, a.dims))] }),
  reshape: reshapeSpec,
  view: reshapeSpec,
  flatten: spec([arg("input", "tensor"), opt("start_dim", "int", 0), opt("end_dim", "int", -1)], ({ input, start_dim, end_dim }, op) => {
    const n = input.shape.length
    if (n === 0) return [{ dtype: input.dtype, shape: [1] }]
    const s = normDim(op, start_dim, n), e = normDim(op, end_dim, n)
    if (s > e) bad(op, `start_dim ${start_dim} comes after end_dim ${end_dim}`)
    return [{ dtype: input.dtype, shape: [...input.shape.slice(0, s), numelOf(input.shape.slice(s, e + 1)), ...input.shape.slice(e + 1)] }]
  }, (c, o) => ({ input: () => o.reshape(c.grad, [...c.meta(c.args.input).shape]) }), {
    dtype: "same",
    // torch's flatten of one dim is its input itself; else a reshape (a view where one can be).
    view: (x, a, metas, op) => (x.shape.length > 0 && normDim(op, a.start_dim, x.shape.length) === normDim(op, a.end_dim, x.shape.length) ? [x] : reshapeView(x, a, metas, op)),
  }),
  squeeze: spec([arg("input", "tensor"), opt("dim", "dims", null)], ({ input, dim }, op) => {
    const n = input.shape.length
    return [{ dtype: input.dtype, shape: input.shape.filter((_, i) => !squeezed(op, input, dim, i)) }]
  }, (c, o) => ({ input: () => o.reshape(c.grad, [...c.meta(c.args.input).shape]) }), {
    dtype: "same",
    view: (x, a, _, op) => [{ shape: x.shape.filter((__, i) => !squeezed(op, x as never, a.dim, i)), strides: x.strides.filter((__, i) => !squeezed(op, x as never, a.dim, i)), offset: x.offset }],
  }),
  unsqueeze: spec([arg("input", "tensor"), arg("dim", "int")], ({ input, dim }, op) => {
    const d = normDim(op, dim, input.shape.length + 1), shape = [...input.shape]
    shape.splice(d, 0, 1)
    return [{ dtype: input.dtype, shape }]
  }, (c, o) => ({ input: () => o.reshape(c.grad, [...c.meta(c.args.input).shape]) }), { dtype: "same", view: (x, a, _, op) => [unsqueezeLayout(x, normDim(op, a.dim, x.shape.length + 1))] }),
  expand: spec([arg("input", "tensor"), arg("size", "ints")], ({ input, size }, op) => [{ dtype: input.dtype, shape: expandShape(op, input, size) }], (c) => ({ input: () => c.grad }), { dtype: "same", view: (x, _, [m]) => [expandLayout(x, m!.shape)] }),
  broadcast_to: spec([arg("input", "tensor"), arg("size", "ints")], ({ input, size }, op) => [{ dtype: input.dtype, shape: expandShape(op, input, size) }], (c) => ({ input: () => c.grad }), { dtype: "same", view: (x, _, [m]) => [expandLayout(x, m!.shape)] }),
  contiguous: contiguousSpec,
  /** The same elements under a new handle (torch's alias; detach() is one, cut from the graph). */
  alias: spec([arg("input", "tensor")], ({ input }) => [input], (c) => ({ input: () => c.grad }), { dtype: "same", view: sameView }),
  /** Its gradient: g placed on the same diagonal of zeros, by index_add over the two dims flattened (last, in that order). */
  diagonal: spec([arg("input", "tensor"), opt("offset", "int", 0), opt("dim1", "int", 0), opt("dim2", "int", 1)], ({ input, offset, dim1, dim2 }, op) => {
    const { d1, d2, n } = diagonalPlan(op, input, offset, dim1, dim2)
    return [{ dtype: input.dtype, shape: [...input.shape.filter((_, i) => i !== d1 && i !== d2), n] }]
  }, (c, o) => ({
    input: () => {
      const m = c.meta(c.args.input), { d1, d2, n } = diagonalPlan("diagonal", m, c.args.offset, c.args.dim1, c.args.dim2)
      const rest = m.shape.map((_, i) => i).filter((i) => i !== d1 && i !== d2), a = m.shape[d1]!, b = m.shape[d2]!, off = c.args.offset
      const first = (off < 0 ? -off : 0) * b + (off > 0 ? off : 0)
      const index = o.add(o.mul(o.arange(n), b + 1), first)
      const flat = o.index_add(o.zeros([...rest.map((i) => m.shape[i]!), a * b], { dtype: c.meta(c.grad).dtype }), -1, index, c.grad)
      const order = [...rest, d1, d2]
      return o.permute(o.reshape(flat, [...rest.map((i) => m.shape[i]!), a, b]), order.map((_, i) => order.indexOf(i)))
    },
  }), { dtype: "same", view: (x, a, _, op) => [diagonalLayout(x, a.offset, diagonalPlan(op, x as never, a.offset, a.dim1, a.dim2))] }),
  /** Its gradient: g's windows added back where they were read, by one index_add along dim (the window dim moved beside it). */
  unfold: spec([arg("input", "tensor"), arg("dimension", "int"), arg("size", "int"), arg("step", "int")], ({ input, dimension, size, step }, op) => {
    const d = unfoldDim(op, input, dimension, size, step)
    if (input.shape.length === 0) return [{ dtype: input.dtype, shape: [size] }]
    return [{ dtype: input.dtype, shape: [...input.shape.map((n, i) => (i === d ? Math.floor((n - size) / step) + 1 : n)), size] }]
  }, (c, o) => ({
    input: () => {
      const m = c.meta(c.args.input), { size, step } = c.args
      if (m.shape.length === 0) return o.reshape(o.sum(c.grad, null, false), [])
      const d = unfoldDim("unfold", m, c.args.dimension, size, step), gs = c.meta(c.grad).shape, windows = gs[d]!
      const order = [...gs.slice(0, d + 1).map((_, i) => i), gs.length - 1, ...gs.slice(d + 1, -1).map((_, i) => d + 1 + i)]
      const src = o.reshape(o.permute(c.grad, order), m.shape.map((n, i) => (i === d ? windows * size : n)))
      const index = o.reshape(o.add(o.reshape(o.mul(o.arange(windows), step), [windows, 1]), o.arange(size)), [windows * size])
      return o.index_add(o.zeros([...m.shape], { dtype: c.meta(c.grad).dtype }), d, index, src)
    },
  }), { dtype: "same", view: (x, a, _, op) => [unfoldLayout(x, unfoldDim(op, x as never, a.dimension, a.size, a.step), a.size, a.step)] }),
  /** torch's as_strided: the input's storage read with these sizes and strides from storage_offset (default: the input's own), checked to lie in the storage. */
  as_strided: spec([arg("input", "tensor"), arg("size", "ints"), arg("stride", "ints"), opt("storage_offset", "int", null)],
    ({ input, size, stride, storage_offset }, op) => [{ dtype: input.dtype, shape: asStridedShape(op, size, stride, storage_offset) }], (c, o) => ({
      input: () => {
        const x = c.layout(c.args.input)
        const out = { shape: c.args.size, strides: c.args.stride, offset: c.args.storage_offset ?? x?.offset ?? 0 }
        return asStridedGrad(o, c.meta(c.args.input), x, out, c.grad, c.meta(c.grad).dtype)
      },
    }), {
      dtype: "same", view: (x, a, [m], op) => [asStridedLayout(op, x, ITEM_SIZE[(a.input as TensorMeta).dtype], m!.shape, a.stride, a.storage_offset)],
    }),
  clone: readsStrides(same),
  /** A cast's gradient is cast back (as every gradient, by the tape, to its input's dtype). */
  to: spec([arg("input", "tensor"), opt("dtype", "dtype", null)], ({ input, dtype }) => [{ dtype: dtype ?? input.dtype, shape: input.shape }], (c) => ({ input: () => c.grad }), { dtype: "to", strided: true, pointwise: true }),
  narrow: spec([arg("input", "tensor"), arg("dim", "int"), arg("start", "int"), arg("length", "int")], ({ input, dim, start, length }, op) => {
    const d = normDim(op, dim, input.shape.length), size = input.shape[d] ?? 1, s = start < 0 ? start + size : start
    if (s < 0 || length < 0 || s + length > size) bad(op, `start ${start} and length ${length} exceed dim ${d} of ${describe(input)}`)
    return [{ dtype: input.dtype, shape: input.shape.map((x, i) => (i === d ? length : x)) }]
  }, (c, o) => ({
    input: () => {
      const m = c.meta(c.args.input), d = normDim("narrow", c.args.dim, m.shape.length), size = m.shape[d]!, s = c.args.start < 0 ? c.args.start + size : c.args.start
      return padDim(o, c.grad, c.meta(c.grad), d, s, size - s - c.args.length)
    },
  }), {
    dtype: "same",
    view: (x, a, _, op) => {
      const d = normDim(op, a.dim, x.shape.length)
      return [along(x, d, a.start < 0 ? a.start + x.shape[d]! : a.start, a.length, 1, false)]
    },
  }),
  select: spec([arg("input", "tensor"), arg("dim", "int"), arg("index", "int")], ({ input, dim, index }, op) => {
    if (input.shape.length === 0) bad(op, "cannot select from a 0-dim tensor")
    const d = normDim(op, dim, input.shape.length), size = input.shape[d]!
    if (index < -size || index >= size) bad(op, `index ${index} is out of range for dim ${d} of ${describe(input)}`)
    return [{ dtype: input.dtype, shape: input.shape.filter((_, i) => i !== d) }]
  }, (c, o) => ({
    input: () => {
      const m = c.meta(c.args.input), d = normDim("select", c.args.dim, m.shape.length), size = m.shape[d]!, i = c.args.index < 0 ? c.args.index + size : c.args.index
      const g = o.unsqueeze(c.grad, d)
      return padDim(o, g, c.meta(g), d, i, size - i - 1)
    },
  }), {
    dtype: "same",
    view: (x, a, _, op) => {
      const d = normDim(op, a.dim, x.shape.length)
      return [along(x, d, a.index < 0 ? a.index + x.shape[d]! : a.index, 1, 1, true)]
    },
  }),
  slice: spec([arg("input", "tensor"), opt("dim", "int", 0), opt("start", "int", null), opt("end", "int", null), opt("step", "int", 1)], ({ input, dim, start, end, step }, op) => {
    if (input.shape.length === 0) bad(op, "cannot slice a 0-dim tensor")
    const d = normDim(op, dim, input.shape.length), [, , length] = sliceOf(op, input.shape[d]!, start, end, step)
    return [{ dtype: input.dtype, shape: input.shape.map((x, i) => (i === d ? length : x)) }]
  }, (c, o) => ({
    // Each picked element back at its place: with a step, g's elements each followed by step - 1 zeros, then zeros around.
    input: () => {
      const m = c.meta(c.args.input), d = normDim("slice", c.args.dim, m.shape.length), size = m.shape[d]!
      const [s, step, length] = sliceOf("slice", size, c.args.start, c.args.end, c.args.step)
      let g = c.grad, covered = length
      if (step > 1 && length > 0) {
        const gs = c.meta(g).shape, gaps = [...gs]
        gaps.splice(d + 1, 0, step - 1)
        const spread = o.cat([o.unsqueeze(g, d + 1), o.zeros(gaps, { dtype: c.meta(g).dtype })], d + 1)
        covered = (length - 1) * step + 1
        g = o.narrow(o.reshape(spread, gs.map((x, i) => (i === d ? length * step : x))), d, 0, covered)
      }
      return padDim(o, g, c.meta(g), d, s, size - s - covered)
    },
  }), {
    dtype: "same",
    view: (x, a, _, op) => {
      const d = normDim(op, a.dim, x.shape.length), [start, step, length] = sliceOf(op, x.shape[d]!, a.start, a.end, a.step)
      return [along(x, d, start, length, step, false)]
    },
  }),
  flip: spec([arg("input", "tensor"), arg("dims", "dims")], ({ input, dims }, op) => {
    for (const d of typeof dims === "number" ? [dims] : dims) normDim(op, d, input.shape.length)
    return [input]
  }, (c, o) => ({ input: () => o.flip(c.grad, c.args.dims) }), { dtype: "same" }),
  cat: spec([arg("tensors", "tensors"), opt("dim", "int", 0)], ({ tensors, dim }, op) => [catShape(op, tensors, dim)], (c, o) => ({
    tensors: () => {
      const metas = c.args.tensors.map(c.meta), d = normDim("cat", c.args.dim, metas[0]!.shape.length)
      let at = 0
      return metas.map((m) => o.narrow(c.grad, d, (at += m.shape[d]!) - m.shape[d]!, m.shape[d]!))
    },
  }), { dtype: "same" }),
  stack: spec([arg("tensors", "tensors"), opt("dim", "int", 0)], ({ tensors, dim }, op) => {
    if (tensors.length === 0) bad(op, "needs at least one tensor")
    const first = tensors[0]!
    for (const t of tensors) if (t.shape.join() !== first.shape.join()) bad(op, `every tensor needs one shape: ${tensors.map(describe).join(", ")}`)
    const d = normDim(op, dim, first.shape.length + 1), shape = [...first.shape]
    shape.splice(d, 0, tensors.length)
    return [{ dtype: tensors.reduce((p, t) => promoteTypes(p, t.dtype), first.dtype), shape }]
  }, (c, o) => ({
    tensors: () => {
      const d = normDim("stack", c.args.dim, c.meta(c.args.tensors[0]!).shape.length + 1)
      return c.args.tensors.map((_, i) => o.select(c.grad, d, i))
    },
  }), { dtype: "same" }),
  index_select: spec([arg("input", "tensor"), arg("dim", "int"), arg("index", "tensor")], ({ input, dim, index }, op) => {
    indexTensor(op, index, "index")
    if (index.shape.length > 1) bad(op, `index must be 0-D or 1-D, got ${describe(index)}`)
    const d = normDim(op, dim, input.shape.length)
    return [{ dtype: input.dtype, shape: input.shape.length === 0 ? [] : input.shape.map((s, i) => (i === d ? numelOf(index.shape) : s)) }]
  }, (c, o) => ({
    // torch's rule: g added into zeros at the rows it was picked from (index_add, in index order).
    input: () => {
      const m = c.meta(c.args.input)
      if (m.shape.length === 0) return o.reshape(o.sum(c.grad, null, false), [])
      return o.index_add(o.zeros([...m.shape], { dtype: c.meta(c.grad).dtype }), c.args.dim, c.args.index, c.grad)
    },
  }), { dtype: "same" }),
  gather: spec([arg("input", "tensor"), arg("dim", "int"), arg("index", "tensor")], ({ input, dim, index }, op) => {
    indexTensor(op, index, "index")
    const d = normDim(op, dim, input.shape.length)
    if (index.shape.length !== input.shape.length || index.shape.some((s, i) => i !== d && s > input.shape[i]!))
      bad(op, `index ${describe(index)} must have the rank of ${describe(input)} and no larger size outside dim ${d}`)
    return [{ dtype: input.dtype, shape: index.shape }]
  }, (c, o) => ({
    // torch's rule: g added into zeros at the places it was gathered from (scatter_add).
    input: () => o.scatter_add(o.zeros([...c.meta(c.args.input).shape], { dtype: c.meta(c.grad).dtype }), c.args.dim, c.args.index, c.grad),
  }), { dtype: "same" }),
  scatter: spec(scatterParams, ({ input, dim, index, src, value }, op) => [scatterMeta(op, input, dim, index, scatterSource(op, src, value))], scatterGrads.scatter, { dtype: "same" }),
  scatter_: spec(scatterParams, ({ input, dim, index, src, value }, op) => (scatterMeta(op, input, dim, index, scatterSource(op, src, value)), []), NOT_DIFFERENTIABLE, { mutates: "input", dtype: "same" }),
  scatter_add: spec(scatterAddParams, ({ input, dim, index, src }, op) => [scatterMeta(op, input, dim, index, src)], scatterGrads.scatter_add, { dtype: "same" }),
  scatter_add_: spec(scatterAddParams, ({ input, dim, index, src }, op) => (scatterMeta(op, input, dim, index, src), []), NOT_DIFFERENTIABLE, { mutates: "input", dtype: "same" }),
  index_add: spec(indexAddParams, ({ input, dim, index, source, alpha }, op) => [indexAddMeta(op, input, dim, index, source, alpha)], scatterGrads.index_add, { dtype: "same" }),
  index_add_: spec(indexAddParams, ({ input, dim, index, source, alpha }, op) => (indexAddMeta(op, input, dim, index, source, alpha), []), NOT_DIFFERENTIABLE, { mutates: "input", dtype: "same" }),
  copy_: spec([arg("input", "tensor"), arg("src", "tensor")], ({ input, src }, op) => {
    if (broadcastShapes(op, [input.shape, src.shape]).join() !== input.shape.join()) bad(op, `cannot copy ${describe(src)} into ${describe(input)}`)
    return []
  }, NOT_DIFFERENTIABLE, { mutates: "input", dtype: "same", strided: true }),
  fill_: spec([arg("input", "tensor"), arg("value", "scalar")], () => [], NOT_DIFFERENTIABLE, { mutates: "input", dtype: "same", strided: true }),
  noop: spec([], () => [], NOT_DIFFERENTIABLE, { results: 0, returns: "none" }),
  tril: triangle(false),
  triu: triangle(true),
  split: spec([arg("tensor", "tensor"), arg("split_size_or_sections", "dims"), opt("dim", "int", 0)], ({ tensor, split_size_or_sections, dim }, op) =>
    pieces(op, tensor, splitSizes(op, tensor, split_size_or_sections, dim), dim), (c, o) => ({
    tensor: () => {
      const m = c.meta(c.args.tensor)
      return pieceGrad(o, c.meta, c.grad, m, splitSizes("split", m, c.args.split_size_or_sections, c.args.dim), c.index, c.args.dim)
    },
  }), {
    dtype: "same", returns: "tensors", view: piecesView, results: ({ tensor, split_size_or_sections, dim }, op) => splitSizes(op, tensor, split_size_or_sections, dim).length,
  }),
  chunk: spec([arg("input", "tensor"), arg("chunks", "int"), opt("dim", "int", 0)], ({ input, chunks, dim }, op) =>
    pieces(op, input, chunkSizes(op, input, chunks, dim), dim), (c, o) => ({
    input: () => {
      const m = c.meta(c.args.input)
      return pieceGrad(o, c.meta, c.grad, m, chunkSizes("chunk", m, c.args.chunks, c.args.dim), c.index, c.args.dim)
    },
  }), {
    dtype: "same", returns: "tensors", view: piecesView, results: ({ input, chunks, dim }, op) => chunkSizes(op, input, chunks, dim).length,
  }),
  /** Each entry of dim, the dim dropped (select's pieces). A piece's gradient is select's. */
  unbind: spec([arg("input", "tensor"), opt("dim", "int", 0)], ({ input, dim }, op) => {
    const n = unbindCount(op, input, dim), d = normDim(op, dim, input.shape.length)
    return Array.from({ length: n }, () => ({ dtype: input.dtype, shape: input.shape.filter((_, i) => i !== d) }))
  }, (c, o) => ({
    input: () => {
      const m = c.meta(c.args.input), d = normDim("unbind", c.args.dim, m.shape.length), g = o.unsqueeze(c.grad, d)
      return padDim(o, g, c.meta(g), d, c.index, m.shape[d]! - c.index - 1)
    },
  }), {
    dtype: "same", returns: "tensors", results: ({ input, dim }, op) => unbindCount(op, input, dim),
    view: (x, a, metas, op) => {
      const d = normDim(op, a.dim, x.shape.length)
      return metas.map((_, i) => along(x, d, i, 1, 1, true))
    },
  }),
  repeat: spec([arg("input", "tensor"), arg("repeats", "ints")], ({ input, repeats }, op) => {
    const plan = repeatPlan(op, input, repeats)
    return withPlan([{ dtype: input.dtype, shape: plan.shape }], plan)
  }, (c, o) => ({
    // Each copy's gradient summed back: g as [r0, s0, r1, s1, ...], summed over the r dims.
    input: () => {
      const m = c.meta(c.args.input), p = repeatPlan("repeat", m, c.args.repeats)
      const tiles = p.padded.flatMap((s, i) => [c.args.repeats[i]!, s])
      return o.reshape(o.sum(o.reshape(c.grad, tiles), tiles.map((_, i) => i).filter((i) => i % 2 === 0), false), [...m.shape])
    },
  }), { dtype: "same" }),
}
