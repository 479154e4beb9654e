/**
 * Typed wrappers over the shim's ops: each checks handles, dtypes and sizes before it
 * crosses the boundary (the C side checks again), then issues the op on a stream. Outputs
 * are allocated by the caller (src/ops/ decides their shapes).
 */
import { ptr } from "bun:ffi"
import { shimError } from "./native.ts"
import {
  ALL_DIMS, BinaryOp, BinaryOpFlags, LossReduction, MatmulFlag, OpFlag, OptimFlag, ReduceOp, ScatterOp, ShimStatus, TernaryOp, UnaryOp, UnaryOpFlags, type BinaryOpName,
  type LossReductionName, type ReduceOpName, type ScatterOpName, type TernaryOpName, type UnaryOpName,
} from "./symbols.ts"
import type { Stream } from "./stream.ts"
import type { Tensor } from "./tensor.ts"
import { dtypeCode } from "../base/tensor.ts"

/** The binary ops that write bool (comparisons and logical ops: their table rows say so). */
export const isComparison = (op: BinaryOpName): boolean => (BinaryOpFlags[op] & OpFlag.writes_bool) !== 0

const fail = (op: string, message: string): never => {
  throw shimError(ShimStatus.INVALID, op, message)
}

const sameNumel = (op: string, out: Tensor, a: Tensor): void => {
  if (out.numel !== a.numel) fail(op, `output ${out} does not match input ${a}`)
}

const stream = (s: Stream | undefined) => s?.handle ?? null

export const fill = (out: Tensor, value: number, s?: Stream): void =>
  out.native.check(out.native.shim.shim_fill(out.handle, value, stream(s)), "shim_fill")

export const arange = (out: Tensor, start: number, step: number, s?: Stream): void =>
  out.native.check(out.native.shim.shim_arange(out.handle, start, step, stream(s)), "shim_arange")

export const rand = (out: Tensor, seed: number | bigint, offset: number | bigint, normal: boolean, s?: Stream): void =>
  out.native.check(out.native.shim.shim_rand(out.handle, seed, offset, normal ? 1 : 0, stream(s)), "shim_rand")

export const unary = (op: UnaryOpName, out: Tensor, a: Tensor, s?: Stream): void => {
  sameNumel(op, out, a)
  const want = UnaryOpFlags[op] & OpFlag.writes_bool ? "bool" : a.dtype // the predicates
  if (out.dtype !== want) fail(op, `output ${out} must have dtype ${want}`)
  out.native.check(out.native.shim.shim_unary(UnaryOp[op], out.handle, a.handle, stream(s)), `shim_unary(${op})`)
}

export const binary = (op: BinaryOpName, out: Tensor, a: Tensor, b: Tensor, s?: Stream): void => {
  if (a.dtype !== b.dtype) fail(op, `dtypes differ: ${a} and ${b}`)
  const small = Math.min(a.numel, b.numel), big = Math.max(a.numel, b.numel)
  if (a.numel !== b.numel && a.numel !== 1 && b.numel !== 1 && (small === 0 || big % small !== 0)) fail(op, `shapes do not broadcast: ${a} and ${b}`)
  if (out.numel !== Math.max(a.numel, b.numel) && !(a.numel === 0 || b.numel === 0)) fail(op, `output ${out} has the wrong size`)
  out.native.check(out.native.shim.shim_binary(BinaryOp[op], out.handle, a.handle, b.handle, stream(s)), `shim_binary(${op})`)
}

export const binaryScalar = (op: BinaryOpName, out: Tensor, a: Tensor, b: number, scalarFirst: boolean, s?: Stream): void => {
  sameNumel(op, out, a)
  out.native.check(out.native.shim.shim_binary_scalar(BinaryOp[op], out.handle, a.handle, b, scalarFirst ? 1 : 0, stream(s)), `shim_binary_scalar(${op})`)
}

/** out = op(a, b, c); each operand has out's element count or one (value: addcmul's and addcdiv's scalar). */
export const ternary = (op: TernaryOpName, out: Tensor, a: Tensor, b: Tensor, c: Tensor, value: number, s?: Stream): void => {
  for (const x of [a, b, c]) if (x.numel !== out.numel && x.numel !== 1) fail(op, `operand ${x} does not fit output ${out}`)
  out.native.check(out.native.shim.shim_ternary(TernaryOp[op], out.handle, a.handle, b.handle, c.handle, value, stream(s)), `shim_ternary(${op})`)
}

/** dim: a dimension of `a`, or undefined for every element. */
export const reduce = (op: ReduceOpName, out: Tensor, a: Tensor, dim: number | undefined, s?: Stream): void => {
  if (dim !== undefined && (!Number.isInteger(dim) || dim < 0 || dim >= a.shape.length)) fail(op, `dim ${dim} out of range for ${a}`)
  out.native.check(out.native.shim.shim_reduce(ReduceOp[op], out.handle, a.handle, dim ?? ALL_DIMS, stream(s)), `shim_reduce(${op})`)
}

/** The i64 index of a's max or min along dim, or over every element (undefined). */
export const argreduce = (op: "max" | "min", indices: Tensor, a: Tensor, dim: number | undefined, s?: Stream): void =>
  indices.native.check(indices.native.shim.shim_argreduce(ReduceOp[op], indices.handle, a.handle, dim ?? ALL_DIMS, stream(s)), `shim_argreduce(${op})`)

export const cumsum = (out: Tensor, a: Tensor, dim: number, s?: Stream): void => {
  sameNumel("cumsum", out, a)
  out.native.check(out.native.shim.shim_cumsum(out.handle, a.handle, dim, stream(s)), "shim_cumsum")
}

/** The running product (indices undefined), or maximum or minimum with the i64 indices they came from, along dim. */
export const cumulative = (op: "prod" | "max" | "min", out: Tensor, indices: Tensor | undefined, a: Tensor, dim: number, s?: Stream): void => {
  sameNumel(op, out, a)
  if ((op === "prod") !== (indices === undefined)) fail(`cum${op}`, op === "prod" ? "takes no indices" : "needs indices")
  out.native.check(out.native.shim.shim_cumulative(ReduceOp[op], out.handle, indices?.handle ?? null, a.handle, dim, stream(s)), `shim_cumulative(${op})`)
}

/** a sorted along dim (stable; NaN last ascending, first descending) into values and their i64 indices. */
export const sort = (values: Tensor, indices: Tensor, a: Tensor, dim: number, descending: boolean, s?: Stream): void => {
  sameNumel("sort", values, a)
  sameNumel("sort", indices, a)
  a.native.check(a.native.shim.shim_sort(values.handle, indices.handle, a.handle, dim, descending ? 1 : 0, stream(s)), "shim_sort")
}

/** Each value's place in its row of sorted (the last dim; a 1-D sorted serves every row), into out (i64 or i32). */
export const searchsorted = (out: Tensor, sorted: Tensor, values: Tensor, right: boolean, s?: Stream): void => {
  sameNumel("searchsorted", out, values)
  out.native.check(out.native.shim.shim_searchsorted(out.handle, sorted.handle, values.handle, right ? 1 : 0, stream(s)), "shim_searchsorted")
}

/** Which operands shim_matmul reads transposed in their last two dims, where they lie (no copy). */
export interface Transposed { readonly a?: boolean; readonly b?: boolean }

export const matmul = (out: Tensor, a: Tensor, b: Tensor, s?: Stream, transposed: Transposed = {}): void => {
  if (a.dtype !== b.dtype || out.dtype !== a.dtype) fail("matmul", `dtypes differ: ${a} @ ${b} -> ${out}`)
  if (a.shape.length < 2 || b.shape.length < 2) fail("matmul", `needs at least 2-D operands: ${a} @ ${b}`)
  const flags = (transposed.a ? MatmulFlag.transpose_a : 0) | (transposed.b ? MatmulFlag.transpose_b : 0)
  out.native.check(out.native.shim.shim_matmul(out.handle, a.handle, b.handle, flags, stream(s)), "shim_matmul")
}

export const cast = (out: Tensor, a: Tensor, s?: Stream): void => {
  sameNumel("cast", out, a)
  if (dtypeCode(out.dtype) < 0) fail("cast", `unknown dtype ${out.dtype}`)
  out.native.check(out.native.shim.shim_cast(out.handle, a.handle, stream(s)), "shim_cast")
}

export const transpose = (out: Tensor, a: Tensor, dim0: number, dim1: number, s?: Stream): void => {
  const n = a.shape.length
  if (!(dim0 >= 0 && dim0 < n && dim1 >= 0 && dim1 < n)) fail("transpose", `dims ${dim0}, ${dim1} out of range for ${a}`)
  sameNumel("transpose", out, a)
  out.native.check(out.native.shim.shim_transpose(out.handle, a.handle, dim0, dim1, stream(s)), "shim_transpose")
}

/** A strided view of a tensor's elements (in elements): where it starts, and each dim's size and step. */
export interface Strided {
  readonly offset: number
  readonly strides: ReadonlyArray<number>
}

const stridesBuf = new BigInt64Array(3 * 8), stridesPtr = ptr(stridesBuf)

/** dst viewed as `to` gets src viewed as `from`, over `shape` (the layout ops: expand, permute, slicing, cat). */
export const copyStrided = (dst: Tensor, to: Strided, src: Tensor, from: Strided, shape: ReadonlyArray<number>, s?: Stream): void => {
  const n = shape.length
  if (n > 8 || to.strides.length !== n || from.strides.length !== n) fail("copy_strided", `${n} dims with ${to.strides.length} and ${from.strides.length} strides`)
  for (let i = 0; i < n; i++) {
    stridesBuf[i] = BigInt(to.strides[i]!)
    stridesBuf[8 + i] = BigInt(from.strides[i]!)
    stridesBuf[16 + i] = BigInt(shape[i]!)
  }
  dst.native.check(dst.native.shim.shim_copy_strided(dst.handle, to.offset, stridesPtr, src.handle, from.offset, ptr(stridesBuf, 64), n, ptr(stridesBuf, 128), stream(s)), "shim_copy_strided")
}

/** out = the parts one after another along dim (each of out's dtype and rank). */
export const cat = (out: Tensor, parts: ReadonlyArray<Tensor>, dim: number, s?: Stream): void => {
  if (parts.length === 0) fail("cat", "0 parts (at least one is needed)") // an empty array has no pointer to pass
  const handles = new BigUint64Array(parts.map((p) => BigInt(p.handle)))
  out.native.check(out.native.shim.shim_cat(out.handle, parts.length, ptr(handles), dim, stream(s)), "shim_cat")
}

export const gather = (out: Tensor, a: Tensor, dim: number, index: Tensor, s?: Stream): void =>
  out.native.check(out.native.shim.shim_gather(out.handle, a.handle, dim, index.handle, stream(s)), "shim_gather")

export const softmax = (out: Tensor, a: Tensor, dim: number, log: boolean, s?: Stream): void =>
  out.native.check(out.native.shim.shim_softmax(out.handle, a.handle, dim, log ? 1 : 0, stream(s)), `shim_softmax${log ? "(log)" : ""}`)

/** The lower (tril) or upper (triu) triangle of a's last two dims, from `diagonal`. */
export const triangle = (out: Tensor, a: Tensor, diagonal: number, upper: boolean, s?: Stream): void =>
  out.native.check(out.native.shim.shim_triangle(out.handle, a.handle, diagonal, upper ? 1 : 0, stream(s)), `shim_triangle(${upper ? "triu" : "tril"})`)

/** out [B, L, Ev] = softmax(mask(q [B, L, E] @ k [B, S, E]^T * scale)) @ v [B, S, Ev]; mask [1 or B, L, S] or null. */
export const attention = (out: Tensor, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | null, scale: number, causal: boolean, s?: Stream): void =>
  out.native.check(out.native.shim.shim_attention(out.handle, q.handle, k.handle, v.handle, mask?.handle ?? null, scale, causal ? 1 : 0, stream(s)), "shim_attention")

export const rmsNorm = (out: Tensor, a: Tensor, weight: Tensor | null, inner: number, eps: number, s?: Stream): void =>
  out.native.check(out.native.shim.shim_rms_norm(out.handle, a.handle, weight?.handle ?? null, inner, eps, stream(s)), "shim_rms_norm")

/** Drops each element of a with probability p, by the Philox draws (seed, offset + i); mask says which were kept. */
export const dropout = (out: Tensor, mask: Tensor, a: Tensor, p: number, seed: bigint, offset: bigint, s?: Stream): void =>
  out.native.check(out.native.shim.shim_dropout(out.handle, mask.handle, a.handle, p, seed, offset, stream(s)), "shim_dropout")

/** out[.., index, ..] (op)= src along dim, in place. */
export const scatter = (op: ScatterOpName, out: Tensor, dim: number, index: Tensor, src: Tensor, s?: Stream): void =>
  out.native.check(out.native.shim.shim_scatter(ScatterOp[op], out.handle, dim, index.handle, src.handle, stream(s)), `shim_scatter(${op})`)
/** nll_loss in one pass: input [N, C, d...] or [C], target i64 [N, d...] or [], weight [C] or null. */
export const nllLoss = (out: Tensor, input: Tensor, target: Tensor, weight: Tensor | null, ignoreIndex: number, reduction: LossReductionName, s?: Stream): void =>
  out.native.check(out.native.shim.shim_nll_loss(out.handle, input.handle, target.handle, weight?.handle ?? null, ignoreIndex, LossReduction[reduction], stream(s)), "shim_nll_loss")

/** mse_loss in one pass over a and b of one dtype and element count. */
export const mseLoss = (out: Tensor, a: Tensor, b: Tensor, reduction: LossReductionName, s?: Stream): void =>
  out.native.check(out.native.shim.shim_mse_loss(out.handle, a.handle, b.handle, LossReduction[reduction], stream(s)), "shim_mse_loss")

/** out[.., index[j], ..] += alpha * src[.., j, ..] along dim, in place (index 0-D or 1-D i64). */
export const indexAdd = (out: Tensor, dim: number, index: Tensor, src: Tensor, alpha: number, s?: Stream): void =>
  out.native.check(out.native.shim.shim_index_add(out.handle, dim, index.handle, src.handle, alpha, stream(s)), "shim_index_add")

/** Layer norm over the last m elements of a (weight and bias: m elements each, or null). */
export const layerNorm = (out: Tensor, a: Tensor, weight: Tensor | null, bias: Tensor | null, m: number, eps: number, s?: Stream): void =>
  out.native.check(out.native.shim.shim_layer_norm(out.handle, a.handle, weight?.handle ?? null, bias?.handle ?? null, m, eps, stream(s)), "shim_layer_norm")

/** out = a's entries along dim picked by index (0-D or 1-D i64). */
export const indexSelect = (out: Tensor, a: Tensor, dim: number, index: Tensor, s?: Stream): void =>
  out.native.check(out.native.shim.shim_index_select(out.handle, a.handle, dim, index.handle, stream(s)), "shim_index_select")

/** torch.optim.SGD's hyper-parameters for one step (shim_sgd). */
export interface SgdStep {
  readonly lr: number
  readonly momentum: number
  readonly dampening: number
  readonly weightDecay: number
  readonly nesterov: boolean
  readonly maximize: boolean
  /** The momentum buffer starts as the step's direction (torch's first step). */
  readonly first: boolean
}

/** One SGD step of param in place (momentumBuf: undefined when momentum is 0). */
export const sgd = (param: Tensor, grad: Tensor, momentumBuf: Tensor | undefined, a: SgdStep, s?: Stream): void => {
  const flags = (a.nesterov ? OptimFlag.nesterov : 0) | (a.maximize ? OptimFlag.maximize : 0) | (a.first ? OptimFlag.first : 0)
  param.native.check(param.native.shim.shim_sgd(param.handle, grad.handle, momentumBuf?.handle ?? null, a.lr, a.momentum, a.dampening, a.weightDecay, flags, stream(s)), "shim_sgd")
}

/** torch.optim.AdamW's hyper-parameters for step number `step` (1 on the first). */
export interface AdamwStep {
  readonly lr: number
  readonly beta1: number
  readonly beta2: number
  readonly eps: number
  readonly weightDecay: number
  readonly step: number
  readonly amsgrad: boolean
  readonly maximize: boolean
}

/** One AdamW step of param in place (maxExpAvgSq: undefined without amsgrad). */
export const adamw = (param: Tensor, grad: Tensor, expAvg: Tensor, expAvgSq: Tensor, maxExpAvgSq: Tensor | undefined, a: AdamwStep, s?: Stream): void => {
  const flags = (a.amsgrad ? OptimFlag.amsgrad : 0) | (a.maximize ? OptimFlag.maximize : 0)
  param.native.check(param.native.shim.shim_adamw(param.handle, grad.handle, expAvg.handle, expAvgSq.handle, maxExpAvgSq?.handle ?? null,
    a.lr, a.beta1, a.beta2, a.eps, a.weightDecay, a.step, flags, stream(s)), "shim_adamw")
}
