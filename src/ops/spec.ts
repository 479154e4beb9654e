/**
 * What one op declaration holds (the registry, src/ops/registry.ts, has one per op): its
 * parameters in torch's order, how many results it defines, and its rule for their dtypes and
 * shapes. The worker's kernel table (src/worker/kernels/table.ts) binds each declared op to the
 * shim calls that run it; a declared op without a kernel (or a composition) does not compile.
 *
 * Each also holds its backward rule, or an explicit "not differentiable" (src/ops/grad.ts),
 * a required field, so an op added without one does not compile either.
 */
import { type Backward, FROM_PARTS, type GradOps, type GradRule } from "./grad.ts"
import type { TensorMeta } from "./meta.ts"
import type { Bound, Param } from "./params.ts"
import type { Strided as Layout } from "./strided.ts"

/**
 * What the result's dtype is, for the typed surface's types (the rule computes the real one):
 * the first tensor's ("same"), bool, floating (an integer input gives f32), torch's promotion
 * of the two operands ("promote"; "divide" then makes integers f32), a sum's (its `dtype` keyword's, else integers give
 * i64), the dtype argument's ("to"), the second tensor's ("other"), the `dtype` keyword's
 * (default f32: "created"), the `dtype` keyword's else the input's (the `*_like` ops: "like"),
 * arange's (i64 for integral bounds), i64 indices ("index": argsort, multinomial), or not known
 * before the call ("any").
 */
export type DtypeKind = "same" | "bool" | "float" | "promote" | "divide" | "sum" | "to" | "other" | "created" | "like" | "arange" | "index" | "any"

/**
 * What a call gives a user of the typed surface: its one tensor ("tensor"), nothing ("none": an
 * op that only changes worker state, or an in-place op, which gives back its input), every
 * result as a list ("tensors": split, chunk), its first result only ("first": dropout, whose
 * mask is for its backward rule), or max and min's (values, indices) when a dim is given and
 * the values otherwise ("valuesIndices"), or (values, indices) always ("pair": sort, topk, kthvalue,
 * cummax, cummin).
 */
export type ReturnKind = "tensor" | "none" | "tensors" | "first" | "valuesIndices" | "pair"

export interface OpSpec<P extends ReadonlyArray<Param> = ReadonlyArray<Param>, K extends DtypeKind = DtypeKind, R extends ReturnKind = ReturnKind, O extends ReadonlyArray<TensorMeta> = ReadonlyArray<TensorMeta>> {
  readonly params: P
  readonly dtype: K
  /**
   * The results' dtypes and shapes from the bound arguments' (tensors as TensorMetas); throws
   * OpArgumentError (`bad(op, ...)`) for arguments the op cannot take. Runs once on the
   * controller before sending, and once on the worker before allocating; what it worked out on
   * the way (a compute dtype, the reduced dims) it returns as its plan (`withPlan`), which the
   * worker's kernel reads rather than working it out again.
   */
  readonly outputs: (a: Bound<P>, op: string) => O
  /**
   * How many results it defines (the count the controller uses when an input's shape is
   * unknown): a number, or one computed from the bound arguments (split's depends on its
   * input's shape, which may then be UNKNOWN_TENSOR: it refuses).
   */
  readonly results: number | ((a: Bound<P>, op: string) => number)
  readonly returns: R
  /**
   * In place: it writes its `input` (or the tensors of the parameters named, a list of tensors
   * included) and defines nothing; the controller lists them in `mutates`.
   */
  readonly mutates?: Mutates
  /**
   * A view op's layout rule (torch's): where each result lies in its input's storage, from the
   * input's layout and the bound arguments, or null for a result that is a copy (a reshape torch
   * would copy, contiguous of a non-contiguous input). The worker makes its views by it and the
   * controller knows its handles' strides by it; the kernel allocates what it returns itself.
   */
  readonly view?: ViewRule<P>
  /**
   * Its kernel reads its tensor operands through their strides (true: every one; else the
   * parameters named) and writes an in-place target through its own. Every other operand the
   * worker makes contiguous first, as torch's `.contiguous()` inside the op: a temporary of
   * the command, and an in-place target computed there is copied back through the view.
   */
  readonly strided?: Strided
  /**
   * An elementwise op whose result is laid out as torch's TensorIterator lays it out: in its
   * tensor operands' memory order (strided.ts's pointwiseStrides, the operands in parameter
   * order), so a transposed input gives a transposed result and the loop is one pass over memory.
   */
  readonly pointwise?: true
  /** Its gradient with respect to each tensor input, NOT_DIFFERENTIABLE, or FROM_PARTS (a composite op). */
  readonly backward: Backward<P>
  /**
   * Its forward from other ops (`composite`, `fused`), the one place it is written. A composite
   * op's (backward FROM_PARTS): the controller issues those parts in its place, so the tape
   * records them and their rules give its gradient. A fused op's (its own backward rule): the
   * controller sends it as one command. Either way a worker called with the op runs the
   * composition over its kernels, with no kernel of its own.
   */
  readonly composed?: Composition<P, O>
}

/**
 * An op's result from other ops, over the tensor type T (its tensor arguments as T), given its
 * rule's results (`rule`, with the plan the rule computed).
 */
export type Composition<P extends ReadonlyArray<Param>, O extends ReadonlyArray<TensorMeta> = ReadonlyArray<TensorMeta>> =
  <T>(a: Bound<P, T>, ops: GradOps<T>, meta: (t: T) => TensorMeta, op: string, rule: O) => T

/**
 * Where a view op's results lie, given its input's layout (`x`; `storage`: its storage's element
 * count where known, which as_strided is checked against), its bound arguments and its results'
 * metadata (what `outputs` gave).
 */
export type ViewRule<P extends ReadonlyArray<Param> = ReadonlyArray<Param>> =
  (x: Layout & { readonly storage?: number }, a: Bound<P>, metas: ReadonlyArray<TensorMeta>, op: string) => ReadonlyArray<Layout | null>

/** A rule's results with the plan it computed on the way (compute dtype, broadcast shape, dims): the kernel reads it. */
export type Planned<Plan, M extends TensorMeta = TensorMeta> = ReadonlyArray<M> & { readonly plan: Plan }

/** `metas` with `plan` attached (what a rule returns when its kernel needs what it worked out). */
export const withPlan = <Plan, M extends TensorMeta>(metas: M[], plan: Plan): Planned<Plan, M> => Object.assign(metas, { plan })

/** Which tensor operands a kernel reads through their strides (OpSpec.strided). */
export type Strided = true | ReadonlyArray<string>

/** The ops of a family, each marked as reading every tensor operand through its strides (OpSpec.strided). */
export const readingStrides = <S extends object>(family: S): S =>
  Object.fromEntries(Object.entries(family).map(([name, s]) => [name, { ...s, strided: true }])) as S

/**
 * An elementwise family: every op reads its operands through their strides (OpSpec.strided), and
 * each that makes a result (not an in-place one, nor one named in `except`) lays it out by its
 * operands (OpSpec.pointwise).
 */
export const pointwiseFamily = <S extends object>(family: S, except: ReadonlyArray<keyof S> = []): S =>
  Object.fromEntries(Object.entries(family).map(([name, s]) =>
    [name, (s as OpSpec).mutates !== undefined || except.includes(name as keyof S) ? { ...s, strided: true } : { ...s, strided: true, pointwise: true }])) as S

const layoutOperandsOf = new WeakMap<OpSpec, ReadonlyArray<number>>()

/** The positions of the tensor parameters a pointwise op's result is laid out by (OpSpec.pointwise), in order; none for another op. */
export const layoutOperands = (op: OpSpec): ReadonlyArray<number> => {
  let at = layoutOperandsOf.get(op)
  if (at === undefined) {
    at = op.pointwise ? (op.params as ReadonlyArray<Param>).flatMap((p, i) => (p.kind === "tensor" || p.kind === "tensorOrScalar" ? [i] : [])) : []
    layoutOperandsOf.set(op, at)
  }
  return at
}

/** Which tensor operands op's kernel reads through their strides: a view op's always (it makes its views from its input's own layout), else its spec's `strided`. */
export const stridedOperands = (op: OpSpec): Strided | undefined => (op.view !== undefined ? true : op.strided)

/** spec marked as reading the tensor operands named (default: every one) through their strides (OpSpec.strided). */
export const readsStrides = <S extends object>(s: S, params: Strided = true): S => ({ ...s, strided: params })

/** What an in-place op writes: its `input`, or the tensors of the parameters named. */
export type Mutates = "input" | ReadonlyArray<string>

/** The names of the parameters an op writes (none for an op that is not in place). */
export const mutatedParams = (op: OpSpec): ReadonlyArray<string> => (op.mutates === undefined ? [] : op.mutates === "input" ? ["input"] : op.mutates)

/** Declares a composite op: its rule, and its result from other ops (its gradient then comes from theirs). */
export const composite = <const P extends ReadonlyArray<Param>, const K extends DtypeKind = "any", O extends ReadonlyArray<TensorMeta> = ReadonlyArray<TensorMeta>>(
  params: P,
  outputs: (a: Bound<P>, op: string) => O,
  composed: Composition<P, O>,
  more: { readonly dtype?: K } = {},
): OpSpec<P, K, "tensor", O> & { readonly composed: Composition<P, O> } => ({ params, outputs, backward: FROM_PARTS, composed, results: 1, returns: "tensor", dtype: (more.dtype ?? "any") as K })

/**
 * Declares a fused op: one command on the wire with its own backward rule, whose worker kernel
 * is its composition over other ops (written here, against the same abstract ops as its rule).
 */
export const fused = <const P extends ReadonlyArray<Param>, const K extends DtypeKind = "any", O extends ReadonlyArray<TensorMeta> = ReadonlyArray<TensorMeta>>(
  params: P,
  outputs: (a: Bound<P>, op: string) => O,
  backward: GradRule<P>,
  composed: Composition<P, O>,
  more: { readonly dtype?: K } = {},
): OpSpec<P, K, "tensor", O> & { readonly composed: Composition<P, O> } => ({ params, outputs, backward, composed, results: 1, returns: "tensor", dtype: (more.dtype ?? "any") as K })

/** Declares an op with its backward rule; `results` defaults to 1, or 0 for an in-place op. */
export const spec = <const P extends ReadonlyArray<Param>, const K extends DtypeKind = "any", const R extends ReturnKind = "tensor", O extends ReadonlyArray<TensorMeta> = ReadonlyArray<TensorMeta>>(
  params: P,
  outputs: (a: Bound<P>, op: string) => O,
  backward: Backward<P>,
  more: { readonly dtype?: K; readonly results?: number | ((a: Bound<P>, op: string) => number); readonly returns?: R; readonly mutates?: Mutates; readonly view?: NoInfer<ViewRule<P>>; readonly strided?: Strided; readonly pointwise?: true } = {},
): OpSpec<P, K, R, O> => ({
  params, outputs, backward, results: more.results ?? (more.mutates ? 0 : 1), ...more, dtype: (more.dtype ?? "any") as K,
  returns: (more.returns ?? (more.mutates || more.results === 0 ? "none" : "tensor")) as R,
})
