/**
 * Layout, indexing and linear algebra. Our tensors are dense and contiguous, so reshape,
 * view, flatten, squeeze and unsqueeze are views (no copy); the rest (permute, expand,
 * slicing, cat, flip, ...) are one strided copy each (shim_copy_strided), whose cost
 * bench/ops.ts shows.
 */
import { bad, describe, isTensorMeta, numelOf, type TensorMeta } from "../meta.ts"
import { type GradContext, type GradOps, NOT_DIFFERENTIABLE, oneHot, padDim, sumTo } from "../grad.ts"
import { arg, opt, type Param } from "../params.ts"
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
export const repeatPlan = (op: string, x: TensorMeta, repeats: ReadonlyArray<number>): { readonly padded: number[]; readonly shape: number[] } => {
  if (repeats.length < x.shape.length) bad(op, `needs at least one repeat per dim of ${describe(x)}, got [${repeats}]`)
  if (repeats.some((r) => r < 0)) bad(op, `repeats must be non-negative, got [${repeats}]`)
  const padded = [...new Array<number>(repeats.length - x.shape.length).fill(1), ...x.shape]
  return { padded, shape: padded.map((s, i) => s * repeats[i]!) }
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

/**
 * matmul's rule for every form: a 1-D operand is a matrix of one row (or column) whose dim the
 * result dropped; dx = g @ y^T and dy = x^T @ g, each summed over the batch dims broadcasting
 * added, then shaped as its operand.
 */
const matmulGrad = <T>(o: GradOps<T>, meta: (t: T) => TensorMeta, x: T, y: T, g: T) => {
  const xs = meta(x).shape, ys = meta(y).shape
  const x2 = xs.length === 1 ? o.reshape(x, [1, xs[0]!]) : x, y2 = ys.length === 1 ? o.reshape(y, [ys[0]!, 1]) : y
  const gs = [...meta(g).shape]
  if (xs.length === 1) gs.splice(gs.length - (ys.length === 1 ? 0 : 1), 0, 1)
  if (ys.length === 1) gs.push(1)
  const g2 = o.reshape(g, gs)
  const back = (r: T, to: ReadonlyArray<number>, as: ReadonlyArray<number>) => o.reshape(sumTo(o, r, meta(r).shape, to), [...as])
  return {
    x: () => back(o.matmul(g2, o.transpose(y2, -1, -2)), meta(x2).shape, xs),
    y: () => back(o.matmul(o.transpose(x2, -1, -2), g2), meta(y2).shape, ys),
  }
}

// The gradient of a copy, an expand or a cast passes as it is: the tape sums every gradient to its input's shape and casts it to its dtype.
/**
 * gather's rule: torch's scatter_add of g into zeros, as a one-hot sum along dim (moved last),
 * then zeros past the index's sizes in the other dims.
 */
const gatherGrad = <T>(o: GradOps<T>, meta: (t: T) => TensorMeta, g: T, index: T, m: TensorMeta, dim: number): T => {
  const n = m.shape.length
  if (n === 0) return g
  const d = normDim("gather", dim, n), last = n - 1, moved = (t: T) => (d === last ? t : o.transpose(t, d, last))
  const hot = o.to(o.eq(o.unsqueeze(moved(index), -1), o.arange(m.shape[d]!)), m.dtype)
  let r = moved(o.sum(o.mul(o.unsqueeze(moved(g), -1), hot), -2, false))
  for (let i = 0; i < n; i++) {
    const have = meta(r).shape[i]!, want = m.shape[i]!
    if (have < want) r = padDim(o, r, meta(r), i, 0, want - have)
  }
  return r
}

const same = spec([arg("input", "tensor")], ({ input }) => [input], (c) => ({ input: () => c.grad }), { dtype: "same" })
const reshapeSpec = spec([arg("input", "tensor"), arg("shape", "ints")], ({ input, shape }, op) => [{ dtype: input.dtype, shape: reshapeShape(op, input, shape) }], (c, o) => ({ input: () => o.reshape(c.grad, [...c.meta(c.args.input).shape]) }), { view: true, dtype: "same" })

/** A product's rule in terms of matmulGrad, for an op whose second operand is `name`. */
const productGrad = <N extends "other" | "mat2">(name: N) =>
  <T>(c: GradContext<readonly [Param<"input", "tensor", never, true, false>, Param<N, "tensor", never, true, false>], T>, o: GradOps<T>) => {
    const args = c.args as unknown as { readonly input: T } & { readonly [K in N]: T }
    const d = matmulGrad(o, c.meta, args.input, args[name], c.grad)
    return { input: d.x, [name]: d.y } as { input: () => T } & { [K in N]: () => T }
  }

export const layout = {
  matmul: spec([arg("input", "tensor"), arg("other", "tensor")], ({ input, other }, op) => [matmulShape(op, input, other)], productGrad("other"), { dtype: "same" }),
  mm: spec([arg("input", "tensor"), arg("mat2", "tensor")], ({ input, mat2 }, op) => {
    if (input.shape.length !== 2 || mat2.shape.length !== 2) bad(op, `needs 2-D operands: ${describe(input)} @ ${describe(mat2)}`)
    return [matmulShape(op, input, mat2)]
  }, productGrad("mat2"), { dtype: "same" }),
  bmm: spec([arg("input", "tensor"), arg("mat2", "tensor")], ({ input, mat2 }, op) => {
    if (input.shape.length !== 3 || mat2.shape.length !== 3 || input.shape[0] !== mat2.shape[0]) bad(op, `needs 3-D operands with one batch size: ${describe(input)} @ ${describe(mat2)}`)
    return [matmulShape(op, input, mat2)]
  }, productGrad("mat2"), { dtype: "same" }),
  transpose: spec([arg("input", "tensor"), arg("dim0", "int"), arg("dim1", "int")], ({ input, dim0, dim1 }, op) => [permuted(input, transposePermutation(op, input, dim0, dim1))],
    (c, o) => ({ input: () => o.transpose(c.grad, c.args.dim0, c.args.dim1) }), { dtype: "same" }),
  t: spec([arg("input", "tensor")], ({ input }, op) => {
    if (input.shape.length > 2) bad(op, `expects a tensor of at most 2 dims, got ${describe(input)}`)
    return [permuted(input, transposePermutation(op, input, 0, -1))]
  }, (c, o) => ({ input: () => o.transpose(c.grad, 0, -1) }), { dtype: "same" }),
  permute: spec([arg("input", "tensor"), arg("dims", "ints")], ({ input, dims }, op) => [permuted(input, permutation(op, input, dims))], (c, o) => ({
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
  contiguous: same,
  clone: same,
  /** A cast's gradient is cast back (as every gradient, by the tape, to its input's dtype). */
  to: spec([arg("input", "tensor"), opt("dtype", "dtype", null)], ({ input, dtype }) => [{ dtype: dtype ?? input.dtype, shape: input.shape }], (c) => ({ input: () => c.grad }), { dtype: "to" }),
  narrow: spec([arg("input", "tensor"), arg("dim", "int"), arg("start", "int"), arg("length", "int")], ({ input, dim, start, length }, op) => {
    const d = normDim(op, dim, input.shape.length), size = input.shape[d] ?? 1, s = start < 0 ? start + size : start
    if (s < 0 || length < 0 || s + length > size) bad(op, `start ${start} and length ${length} exceed dim ${d} of ${describe(input)}`)
    return [{ dtype: input.dtype, shape: input.shape.map((x, i) => (i === d ? length : x)) }]
  }, (c, o) => ({
    input: () => {
      const m = c.meta(c.args.input), d = normDim("narrow", c.args.dim, m.shape.length), size = m.shape[d]!, s = c.args.start < 0 ? c.args.start + size : c.args.start
      return padDim(o, c.grad, c.meta(c.grad), d, s, size - s - c.args.length)
    },
  }), { dtype: "same" }),
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
  }), { dtype: "same" }),
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
  }), { dtype: "same" }),
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
    // torch's index_add of g into zeros, as a one-hot product: each picked row's gradient summed into its source row.
    input: () => {
      const m = c.meta(c.args.input)
      if (m.shape.length === 0) return o.reshape(o.sum(c.grad, null, false), [])
      const d = normDim("index_select", c.args.dim, m.shape.length), n = numelOf(c.meta(c.args.index).shape), size = m.shape[d]!
      const front = d === 0 ? c.grad : o.transpose(c.grad, 0, d), fs = c.meta(front).shape
      const rows = o.matmul(o.transpose(oneHot(o, c.args.index, n, size, m.dtype), 0, 1), o.reshape(front, [n, numelOf(fs.slice(1))]))
      const back = o.reshape(rows, fs.map((s, i) => (i === 0 ? size : s)))
      return d === 0 ? back : o.transpose(back, 0, d)
    },
  }), { dtype: "same" }),
  gather: spec([arg("input", "tensor"), arg("dim", "int"), arg("index", "tensor")], ({ input, dim, index }, op) => {
    indexTensor(op, index, "index")
    const d = normDim(op, dim, input.shape.length)
    if (index.shape.length !== input.shape.length || index.shape.some((s, i) => i !== d && s > input.shape[i]!))
      bad(op, `index ${describe(index)} must have the rank of ${describe(input)} and no larger size outside dim ${d}`)
    return [{ dtype: input.dtype, shape: index.shape }]
  }, (c, o) => ({
    input: () => gatherGrad(o, c.meta, c.grad, c.args.index, c.meta(c.args.input), c.args.dim),
  }), { dtype: "same" }),
  copy_: spec([arg("input", "tensor"), arg("src", "tensor")], ({ input, src }, op) => {
    if (broadcastShapes(op, [input.shape, src.shape]).join() !== input.shape.join()) bad(op, `cannot copy ${describe(src)} into ${describe(input)}`)
    return []
  }, NOT_DIFFERENTIABLE, { mutates: "input", dtype: "same" }),
  fill_: spec([arg("input", "tensor"), arg("value", "scalar")], () => [], NOT_DIFFERENTIABLE, { mutates: "input", dtype: "same" }),
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
    dtype: "same", returns: "tensors", results: ({ tensor, split_size_or_sections, dim }, op) => splitSizes(op, tensor, split_size_or_sections, dim).length,
  }),
  chunk: spec([arg("input", "tensor"), arg("chunks", "int"), opt("dim", "int", 0)], ({ input, chunks, dim }, op) =>
    pieces(op, input, chunkSizes(op, input, chunks, dim), dim), (c, o) => ({
    input: () => {
      const m = c.meta(c.args.input)
      return pieceGrad(o, c.meta, c.grad, m, chunkSizes("chunk", m, c.args.chunks, c.args.dim), c.index, c.args.dim)
    },
  }), {
    dtype: "same", returns: "tensors", results: ({ input, chunks, dim }, op) => chunkSizes(op, input, chunks, dim).length,
  }),
  repeat: spec([arg("input", "tensor"), arg("repeats", "ints")], ({ input, repeats }, op) => [{ dtype: input.dtype, shape: repeatPlan(op, input, repeats).shape }], (c, o) => ({
    // Each copy's gradient summed back: g as [r0, s0, r1, s1, ...], summed over the r dims.
    input: () => {
      const m = c.meta(c.args.input), p = repeatPlan("repeat", m, c.args.repeats)
      const tiles = p.padded.flatMap((s, i) => [c.args.repeats[i]!, s])
      return o.reshape(o.sum(o.reshape(c.grad, tiles), tiles.map((_, i) => i).filter((i) => i % 2 === 0), false), [...m.shape])
    },
  }), { dtype: "same" }),
}
