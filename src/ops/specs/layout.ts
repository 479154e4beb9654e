/**
 * Layout, indexing and linear algebra. Our tensors are dense and contiguous, so reshape,
 * view, flatten, squeeze, unsqueeze and contiguous are views (no copy); narrow, select,
 * slicing, split and chunk are views too where their result is one contiguous block of the
 * input (blockStart: a piece of the leading dim, say), as torch's are, and a strided copy
 * otherwise; the rest (permute, expand, cat, flip, ...) are one strided copy each
 * (shim_copy_strided), whose cost bench/ops.ts shows. The products of the backward rules read
 * their transposed operands in place instead (_matmul_t: shim_matmul's transpose flags).
 */
import { bad, describe, isTensorMeta, numelOf, type TensorMeta } from "../meta.ts"
import { type GradContext, type GradOps, NOT_DIFFERENTIABLE, padDim, sumTo } from "../grad.ts"
import { arg, kw, opt, type Param } from "../params.ts"
import { broadcastShapes, isFloating, isScalar, promoteTypes, scalarValue, type Scalar } from "../promotion.ts"
import { normDim } from "../rules.ts"
import { readsStrides, spec, withPlan } from "../spec.ts"

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

/**
 * Where `length` entries of dim d of a contiguous `shape`, from `start` every `step`, lie in its
 * memory when they are one contiguous block of it: the block's first element (flat); undefined
 * when they are not (entries of an inner dim, or a step). The block is a view; the rest copy.
 */
export const blockStart = (shape: ReadonlyArray<number>, d: number, start: number, length: number, step = 1): number | undefined => {
  const outer = numelOf(shape.slice(0, d)), inner = numelOf(shape.slice(d + 1))
  if (outer * length * inner === 0) return 0
  if ((length > 1 && step !== 1) || (outer !== 1 && length !== shape[d])) return undefined
  return start * inner
}

/** The entries of dim `d` a view op's results take of its input, each `start` + `length` every `step`; `drop`: d is dropped (select, unbind). */
export interface ViewPieces {
  readonly d: number
  readonly pieces: ReadonlyArray<{ readonly start: number; readonly length: number; readonly step?: number }>
  readonly drop: boolean
}

/**
 * The pieces of a block-view op (narrow, select, slice, split, chunk, unbind; `view: "block"`),
 * from its bound arguments and its results' metas: the worker makes each one a view or a copy
 * by them, and the controller knows by them which results share their input's memory.
 */
const viewPieces = (op: string, a: Readonly<Record<string, any>>, metas: ReadonlyArray<TensorMeta>): ViewPieces => {
  const input = (a.input ?? a.tensor) as { readonly shape: ReadonlyArray<number> }, n = input.shape.length
  const d = normDim(op, a.dim as number, n), size = input.shape[d] ?? 1
  switch (op) {
    case "narrow": return { d, pieces: [{ start: a.start < 0 ? a.start + size : a.start, length: a.length }], drop: false }
    case "select": return { d, pieces: [{ start: a.index < 0 ? a.index + size : a.index, length: 1 }], drop: true }
    case "slice": {
      const [start, step, length] = sliceOf(op, size, a.start, a.end, a.step)
      return { d, pieces: [{ start, length, step }], drop: false }
    }
    case "unbind": return { d, pieces: metas.map((_, i) => ({ start: i, length: 1 })), drop: true }
    default: {
      let at = 0
      return { d, pieces: metas.map((m) => ({ start: (at += m.shape[d]!) - m.shape[d]!, length: m.shape[d]! })), drop: false }
    }
  }
}

/** A block-view op's rule, its results with their pieces (viewPieces) as the kernel's plan. */
const blockView = <A extends Readonly<Record<string, any>>>(rule: (a: A, op: string) => TensorMeta[]) => (a: A, op: string) => {
  const metas = rule(a, op)
  return withPlan(metas, viewPieces(op, a, metas))
}

/** Where each result of a block-view op starts in its input's memory (elements), or undefined for one that is a copy. */
export const viewStarts = (op: string, a: Readonly<Record<string, any>>, metas: ReadonlyArray<TensorMeta>): Array<number | undefined> => {
  const input = (a.input ?? a.tensor) as TensorMeta, { d, pieces } = viewPieces(op, a, metas)
  return pieces.map(({ start, length, step }) => blockStart(input.shape, d, start, length, step))
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
 * only a broadcast batch materialises a transpose and sums.
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
/** torch's contiguous returns its input itself when it is contiguous, as ours always are: a view. */
const contiguousSpec = spec([arg("input", "tensor")], ({ input }) => [input], (c) => ({ input: () => c.grad }), { dtype: "same", view: true })
const reshapeSpec = spec([arg("input", "tensor"), arg("shape", "ints")], ({ input, shape }, op) => [{ dtype: input.dtype, shape: reshapeShape(op, input, shape) }], (c, o) => ({ input: () => o.reshape(c.grad, [...c.meta(c.args.input).shape]) }), { view: true, dtype: "same" })

/** A product's rule in terms of matmulGrad, for an op whose second operand is `name`. */
const productGrad = <N extends "other" | "mat2">(name: N) =>
  <T>(c: GradContext<readonly [Param<"input", "tensor", never, true, false>, Param<N, "tensor", never, true, false>], T>, o: GradOps<T>) => {
    const args = c.args as unknown as { readonly input: T } & { readonly [K in N]: T }
    const d = matmulGrad(o, c.meta, args.input, args[name], c.grad)
    return { input: d.x, [name]: d.y } as { input: () => T } & { [K in N]: () => T }
  }

export const layout = {
  matmul: spec([arg("input", "tensor"), arg("other", "tensor")], ({ input, other }, op) => [matmulShape(op, input, other)], productGrad("other"), { dtype: "same", strided: true }),
  /** op(input) @ op(other) with the transposes read where they lie (shim_matmul's flags): the backward rules' products, which a transpose would otherwise copy. */
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
    (c, o) => ({ input: () => o.transpose(c.grad, c.args.dim0, c.args.dim1) }), { dtype: "same" }),
  t: spec([arg("input", "tensor")], ({ input }, op) => {
    if (input.shape.length > 2) bad(op, `expects a tensor of at most 2 dims, got ${describe(input)}`)
    return [permuted(input, transposePermutation(op, input, 0, -1))]
  }, (c, o) => ({ input: () => o.transpose(c.grad, 0, -1) }), { dtype: "same" }),
  permute: spec([arg("input", "tensor"), arg("dims", "ints")], ({ input, dims }, op) => {
    const p = permutation(op, input, dims)
    return withPlan([permuted(input, p)], { p })
  }, (c, o) => ({
    input: () => {
      const p = permutation("permute", c.meta(c.args.input), c.args.dims), inverse = p.map((_, i) => p.indexOf(i))
      return o.permute(c.grad, inverse)
    },
  }), { dtype: "same" }),
  reshape: reshapeSpec,
  view: reshapeSpec,
  flatten: spec([arg("input", "tensor"), opt("start_dim", "int", 0), opt("end_dim", "int", -1)], ({ input, start_dim, end_dim }, op) => {
    const n = input.shape.length
    if (n === 0) return [{ dtype: input.dtype, shape: [1] }]
    const s = normDim(op, start_dim, n), e = normDim(op, end_dim, n)
    if (s > e) bad(op, `start_dim ${start_dim} comes after end_dim ${end_dim}`)
    return [{ dtype: input.dtype, shape: [...input.shape.slice(0, s), numelOf(input.shape.slice(s, e + 1)), ...input.shape.slice(e + 1)] }]
  }, (c, o) => ({ input: () => o.reshape(c.grad, [...c.meta(c.args.input).shape]) }), { view: true, dtype: "same" }),
  squeeze: spec([arg("input", "tensor"), opt("dim", "dims", null)], ({ input, dim }, op) => {
    const n = input.shape.length
    const dims = dim === null ? input.shape.map((_, i) => i) : (typeof dim === "number" ? [dim] : dim).map((d) => normDim(op, d, n))
    return [{ dtype: input.dtype, shape: input.shape.filter((s, i) => !(s === 1 && dims.includes(i))) }]
  }, (c, o) => ({ input: () => o.reshape(c.grad, [...c.meta(c.args.input).shape]) }), { view: true, dtype: "same" }),
  unsqueeze: spec([arg("input", "tensor"), arg("dim", "int")], ({ input, dim }, op) => {
    const d = normDim(op, dim, input.shape.length + 1), shape = [...input.shape]
    shape.splice(d, 0, 1)
    return [{ dtype: input.dtype, shape }]
  }, (c, o) => ({ input: () => o.reshape(c.grad, [...c.meta(c.args.input).shape]) }), { view: true, dtype: "same" }),
  expand: spec([arg("input", "tensor"), arg("size", "ints")], ({ input, size }, op) => [{ dtype: input.dtype, shape: expandShape(op, input, size) }], (c) => ({ input: () => c.grad }), { dtype: "same" }),
  broadcast_to: spec([arg("input", "tensor"), arg("size", "ints")], ({ input, size }, op) => [{ dtype: input.dtype, shape: expandShape(op, input, size) }], (c) => ({ input: () => c.grad }), { dtype: "same" }),
  contiguous: contiguousSpec,
  clone: readsStrides(same),
  /** A cast's gradient is cast back (as every gradient, by the tape, to its input's dtype). */
  to: spec([arg("input", "tensor"), opt("dtype", "dtype", null)], ({ input, dtype }) => [{ dtype: dtype ?? input.dtype, shape: input.shape }], (c) => ({ input: () => c.grad }), { dtype: "to", strided: true }),
  narrow: spec([arg("input", "tensor"), arg("dim", "int"), arg("start", "int"), arg("length", "int")], blockView(({ input, dim, start, length }, op) => {
    const d = normDim(op, dim, input.shape.length), size = input.shape[d] ?? 1, s = start < 0 ? start + size : start
    if (s < 0 || length < 0 || s + length > size) bad(op, `start ${start} and length ${length} exceed dim ${d} of ${describe(input)}`)
    return [{ dtype: input.dtype, shape: input.shape.map((x, i) => (i === d ? length : x)) }]
  }), (c, o) => ({
    input: () => {
      const m = c.meta(c.args.input), d = normDim("narrow", c.args.dim, m.shape.length), size = m.shape[d]!, s = c.args.start < 0 ? c.args.start + size : c.args.start
      return padDim(o, c.grad, c.meta(c.grad), d, s, size - s - c.args.length)
    },
  }), { dtype: "same", view: "block" }),
  select: spec([arg("input", "tensor"), arg("dim", "int"), arg("index", "int")], blockView(({ input, dim, index }, op) => {
    if (input.shape.length === 0) bad(op, "cannot select from a 0-dim tensor")
    const d = normDim(op, dim, input.shape.length), size = input.shape[d]!
    if (index < -size || index >= size) bad(op, `index ${index} is out of range for dim ${d} of ${describe(input)}`)
    return [{ dtype: input.dtype, shape: input.shape.filter((_, i) => i !== d) }]
  }), (c, o) => ({
    input: () => {
      const m = c.meta(c.args.input), d = normDim("select", c.args.dim, m.shape.length), size = m.shape[d]!, i = c.args.index < 0 ? c.args.index + size : c.args.index
      const g = o.unsqueeze(c.grad, d)
      return padDim(o, g, c.meta(g), d, i, size - i - 1)
    },
  }), { dtype: "same", view: "block" }),
  slice: spec([arg("input", "tensor"), opt("dim", "int", 0), opt("start", "int", null), opt("end", "int", null), opt("step", "int", 1)], blockView(({ input, dim, start, end, step }, op) => {
    if (input.shape.length === 0) bad(op, "cannot slice a 0-dim tensor")
    const d = normDim(op, dim, input.shape.length), [, , length] = sliceOf(op, input.shape[d]!, start, end, step)
    return [{ dtype: input.dtype, shape: input.shape.map((x, i) => (i === d ? length : x)) }]
  }), (c, o) => ({
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
  }), { dtype: "same", view: "block" }),
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
  split: spec([arg("tensor", "tensor"), arg("split_size_or_sections", "dims"), opt("dim", "int", 0)], blockView(({ tensor, split_size_or_sections, dim }, op) =>
    pieces(op, tensor, splitSizes(op, tensor, split_size_or_sections, dim), dim)), (c, o) => ({
    tensor: () => {
      const m = c.meta(c.args.tensor)
      return pieceGrad(o, c.meta, c.grad, m, splitSizes("split", m, c.args.split_size_or_sections, c.args.dim), c.index, c.args.dim)
    },
  }), {
    dtype: "same", returns: "tensors", view: "block", results: ({ tensor, split_size_or_sections, dim }, op) => splitSizes(op, tensor, split_size_or_sections, dim).length,
  }),
  chunk: spec([arg("input", "tensor"), arg("chunks", "int"), opt("dim", "int", 0)], blockView(({ input, chunks, dim }, op) =>
    pieces(op, input, chunkSizes(op, input, chunks, dim), dim)), (c, o) => ({
    input: () => {
      const m = c.meta(c.args.input)
      return pieceGrad(o, c.meta, c.grad, m, chunkSizes("chunk", m, c.args.chunks, c.args.dim), c.index, c.args.dim)
    },
  }), {
    dtype: "same", returns: "tensors", view: "block", results: ({ input, chunks, dim }, op) => chunkSizes(op, input, chunks, dim).length,
  }),
  /** Each entry of dim, the dim dropped (select's pieces): views where the dim leads. A piece's gradient is select's. */
  unbind: spec([arg("input", "tensor"), opt("dim", "int", 0)], blockView(({ input, dim }, op) => {
    const n = unbindCount(op, input, dim), d = normDim(op, dim, input.shape.length)
    return Array.from({ length: n }, () => ({ dtype: input.dtype, shape: input.shape.filter((_, i) => i !== d) }))
  }), (c, o) => ({
    input: () => {
      const m = c.meta(c.args.input), d = normDim("unbind", c.args.dim, m.shape.length), g = o.unsqueeze(c.grad, d)
      return padDim(o, g, c.meta(g), d, c.index, m.shape[d]! - c.index - 1)
    },
  }), { dtype: "same", returns: "tensors", view: "block", results: ({ input, dim }, op) => unbindCount(op, input, dim) }),
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
