/**
 * Backward rules: what each op's registry entry declares about its gradient (spec.ts's
 * required `backward` field). A rule is written with the same ops it differentiates, over an
 * abstract tensor type T, and receives those ops as a parameter (GradOps), so the registry
 * stays pure: the controller's tape (src/autograd, bound in src/controller/autograd.ts) passes
 * its typed op surface, and the compiler checks that surface against GradOps.
 *
 * GradOps lists its signatures by hand rather than deriving them from the registry, because the
 * registry's own type is made of these rules: deriving them would be a type that depends on
 * itself. The controller's binding assigns its derived `Ops` to GradOps, so a signature here
 * that the registry does not have is a compile error there.
 */
import type { DType } from "../protocol/values.ts"
import { numelOf, type TensorMeta } from "./meta.ts"
import type { Bound, Param } from "./params.ts"
import type { Strided } from "./strided.ts"
import { isFloating, type Scalar } from "./promotion.ts"

/** An op with no gradient (comparisons, indices, in-place forms, random creation): said explicitly, never by omission. */
export const NOT_DIFFERENTIABLE = "not differentiable"

/** A composite op's gradient: its parts' rules give it (spec.ts's `composite`). */
export const FROM_PARTS = "from its parts"

type Operand<T> = T | Scalar
type Dims = number | number[] | null

/** The ops backward rules use, over the tensor type T (positional arguments in torch's order). */
export interface GradOps<T> {
  neg(input: T): T
  abs(input: T): T
  sign(input: T): T
  exp(input: T): T
  log(input: T): T
  sqrt(input: T): T
  rsqrt(input: T): T
  reciprocal(input: T): T
  tanh(input: T): T
  sigmoid(input: T): T
  erf(input: T): T
  sin(input: T): T
  cos(input: T): T
  isinf(input: T): T
  add(input: Operand<T>, other: Operand<T>): T
  sub(input: Operand<T>, other: Operand<T>): T
  mul(input: Operand<T>, other: Operand<T>): T
  div(input: Operand<T>, other: Operand<T>): T
  pow(input: Operand<T>, other: Operand<T>): T
  floor_divide(input: Operand<T>, other: Operand<T>): T
  eq(input: Operand<T>, other: Operand<T>): T
  ne(input: Operand<T>, other: Operand<T>): T
  gt(input: Operand<T>, other: Operand<T>): T
  ge(input: Operand<T>, other: Operand<T>): T
  lt(input: Operand<T>, other: Operand<T>): T
  le(input: Operand<T>, other: Operand<T>): T
  logical_and(input: T, other: T): T
  logical_or(input: T, other: T): T
  remainder(input: Operand<T>, other: Operand<T>): T
  clamp(input: T, min: number, max: number): T
  where(condition: T, input: Operand<T>, other: Operand<T>): T
  masked_fill(input: T, mask: T, value: number): T
  sum(input: T, dim: Dims, keepdim: boolean): T
  mean(input: T, dim: Dims, keepdim: boolean): T
  prod(input: T, dim: Dims, keepdim: boolean): T
  amax(input: T, dim: number | number[], keepdim: boolean): T
  cumsum(input: T, dim: number): T
  cumprod(input: T, dim: number): T
  roll(input: T, shifts: number | number[], dims: number | number[] | null): T
  trunc(input: T): T
  flip(input: T, dims: number | number[]): T
  tril(input: T, diagonal: number): T
  triu(input: T, diagonal: number): T
  reshape(input: T, shape: number[]): T
  expand(input: T, size: number[]): T
  permute(input: T, dims: number[]): T
  transpose(input: T, dim0: number, dim1: number): T
  unsqueeze(input: T, dim: number): T
  matmul(input: T, other: T): T
  _matmul_t(input: T, other: T, transpose_input: boolean, transpose_other: boolean): T
  narrow(input: T, dim: number, start: number, length: number): T
  select(input: T, dim: number, index: number): T
  cat(tensors: T[], dim: number): T
  gather(input: T, dim: number, index: T): T
  index_select(input: T, dim: number, index: T): T
  scatter(input: T, dim: number, index: T, src: Operand<T>): T
  scatter_add(input: T, dim: number, index: T, src: T): T
  index_add(input: T, dim: number, index: T, source: T): T
  to(input: T, dtype: DType): T
  clone(input: T): T
  softmax(input: T, dim: number): T
  log_softmax(input: T, dim: number): T
  zeros(size: number[], kwargs: { dtype: DType }): T
  arange(end: number): T
  /** In place (batch_norm's running statistics): its input moved toward end by weight. */
  lerp_(input: T, end: T, weight: number): unknown
}

/** What a rule is given: the call's arguments (tensors as T), its result, the result's gradient, and any tensor's metadata. */
export interface GradContext<P extends ReadonlyArray<Param>, T> {
  readonly args: Bound<P, T>
  readonly out: T
  /** Every result of the call (dropout's mask too); `out` is the one at `index`, whose gradient `grad` is. */
  readonly outs: ReadonlyArray<T>
  readonly index: number
  readonly grad: T
  meta(t: T): TensorMeta
  /** Where a tensor lies in its storage, where known (as_strided's rule reads its input's). */
  layout(t: T): Strided | undefined
}

type TensorKind = "tensor" | "tensorOrScalar" | "tensors"

/**
 * A rule's answer: per tensor parameter, a thunk giving its gradient (a list for a list of
 * tensors), called only when that input needs one. A gradient may be the shape of the
 * broadcast result: the tape sums it down to the input's shape and casts it to its dtype.
 */
export type Grads<P extends ReadonlyArray<Param>, T> = {
  readonly [E in P[number] as E["kind"] extends TensorKind ? E["name"] : never]?: () => E["kind"] extends "tensors" ? ReadonlyArray<T> : T
}

export type GradRule<P extends ReadonlyArray<Param>> = <T>(c: GradContext<P, T>, ops: GradOps<T>) => Grads<P, T>

/** An op's backward rule, NOT_DIFFERENTIABLE, or FROM_PARTS. */
export type Backward<P extends ReadonlyArray<Param>> = GradRule<P> | typeof NOT_DIFFERENTIABLE | typeof FROM_PARTS

/** A rule for inputs that get no gradient (floor, sign, ...: torch's zeros). */
export const zeroGrad = <T>(ops: GradOps<T>, m: TensorMeta): T => ops.zeros([...m.shape], { dtype: m.dtype })

/** g summed down to `shape` over the dims numpy broadcasting added or stretched (torch's sum_to_size). */
export const sumTo = <T>(ops: GradOps<T>, g: T, from: ReadonlyArray<number>, shape: ReadonlyArray<number>): T => {
  if (from.length === shape.length && from.every((d, i) => d === shape[i])) return g
  const lead = from.length - shape.length
  const dims = from.flatMap((d, i) => (i < lead || (shape[i - lead] === 1 && d !== 1) ? [i] : []))
  const summed = dims.length > 0 ? ops.sum(g, dims, true) : g
  return ops.reshape(summed, [...shape])
}

/** A reduction's gradient g (over `dims`, with `keepdim`) as a tensor of the input's shape. */
export const expandBack = <T>(ops: GradOps<T>, g: T, input: TensorMeta, dims: ReadonlyArray<number>, keepdim: boolean): T => {
  const kept = input.shape.map((s, i) => (dims.includes(i) ? 1 : s))
  return ops.expand(keepdim ? g : ops.reshape(g, kept), [...input.shape])
}

/** How many elements a reduction over `dims` combines. */
export const reducedCount = (input: TensorMeta, dims: ReadonlyArray<number>): number => numelOf(dims.map((d) => input.shape[d]!))

/** Whether a result of this dtype can carry a gradient. */
export const differentiableDtype = (d: DType): boolean => isFloating(d)

/** x with `before` zeros and `after` zeros around it along dim (narrow's and select's backward). */
export const padDim = <T>(ops: GradOps<T>, x: T, m: TensorMeta, dim: number, before: number, after: number): T => {
  const zeros = (n: number) => ops.zeros(m.shape.map((s, i) => (i === dim ? n : s)), { dtype: m.dtype })
  const parts = [...(before > 0 ? [zeros(before)] : []), x, ...(after > 0 ? [zeros(after)] : [])]
  return parts.length === 1 ? x : ops.cat(parts, dim)
}

/** A one-hot matrix of `index` (i64, flattened to [n]) over `classes`, in dtype: [n, classes]. */
export const oneHot = <T>(ops: GradOps<T>, index: T, n: number, classes: number, dtype: DType): T =>
  ops.to(ops.eq(ops.reshape(index, [n, 1]), ops.arange(classes)), dtype)
