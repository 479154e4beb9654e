/**
 * The op registry: every built-in (`ops.<name>` on the wire) declared once, by family, with
 * its torch signature and its dtype/shape rule (src/ops/spec.ts). Pure: the controller
 * imports it to check calls and infer results before sending; the worker binds each entry to
 * its kernels (src/worker/kernels/table.ts, which must cover every name here but the composite
 * ones, whose compositions run there from their parts).
 */
import { isTensorMeta, type TensorMeta } from "./meta.ts"
import { binder, signatureOf, type Binder, type Param } from "./params.ts"
import type { OpSpec } from "./spec.ts"
import { conv } from "./specs/conv.ts"
import { creation } from "./specs/creation.ts"
import { elementwise } from "./specs/elementwise.ts"
import { inPlace } from "./specs/inplace.ts"
import { layout } from "./specs/layout.ts"
import { linalg } from "./specs/linalg.ts"
import { math } from "./specs/math.ts"
import { model } from "./specs/model.ts"
import { nn } from "./specs/nn.ts"
import { optim } from "./specs/optim.ts"
import { random } from "./specs/random.ts"
import { reductions } from "./specs/reduction.ts"
import { sorting } from "./specs/sorting.ts"
import { ternary } from "./specs/ternary.ts"

const SPECS = { ...creation, ...random, ...elementwise, ...math, ...inPlace, ...ternary, ...reductions, ...sorting, ...layout, ...linalg, ...nn, ...optim, ...model, ...conv }

type Specs = typeof SPECS
export type OpName = keyof Specs
export type ParamsOf<N extends OpName> = Specs[N]["params"]
export type ResultDtypeOf<N extends OpName> = Specs[N]["dtype"]
export type ReturnsOf<N extends OpName> = Specs[N]["returns"]
/** What op N's rule returns: its results' metas, with its plan where it has one. */
export type OutputsOf<N extends OpName> = ReturnType<Specs[N]["outputs"]>
/** The composite ops (declared with `composite`): the worker runs them from their parts, with no kernel of their own. */
export type ComposedName = { [N in OpName]: Specs[N] extends { readonly composed: unknown } ? N : never }[OpName]

/** A declared op with its name and its binder. */
export type Op<N extends OpName = OpName> = Specs[N] & { readonly name: N; readonly bind: Binder<ParamsOf<N>> }

export const OPS: { readonly [N in OpName]: Op<N> } = Object.fromEntries(
  Object.entries(SPECS).map(([name, s]) => [name, { ...s, name, bind: binder(name, (s as OpSpec).params) }]),
) as never

/** The op `ops.<name>` names, or undefined. */
export const opNamed = (name: string): Op | undefined => (Object.hasOwn(OPS, name) ? OPS[name as OpName] as Op : undefined)

/** `ops.add(input, other)`: the signature of every op, for docs and messages. */
export const signatures = (): string[] => Object.values(OPS).map((o) => `ops.${signatureOf(o.name, (o as OpSpec).params as ReadonlyArray<Param>)}`)

/** How many results a call of op defines, from its bound arguments. */
export const resultCount = (op: Op, bound: unknown): number => {
  const r = (op as OpSpec).results
  return typeof r === "number" ? r : r(bound as never, op.name)
}

/** A tensor whose dtype and shape the controller does not know (a user function's undeclared result). */
export const UNKNOWN_TENSOR: unique symbol = Symbol("unknown tensor")

/**
 * The controller's check of a call before sending: binds the arguments (tensors as metas,
 * UNKNOWN_TENSOR where not known) and returns the results' metas, or one undefined per result
 * when an input's metadata is unknown. Throws OpArgumentError.
 */
export const inferOutputs = (op: Op, args: ReadonlyArray<unknown>, kwargs: Readonly<Record<string, unknown>>, known: boolean): ReadonlyArray<TensorMeta | undefined> => {
  const isTensor = (v: unknown): v is TensorMeta => v === UNKNOWN_TENSOR || isTensorMeta(v)
  const bound = op.bind(args, kwargs, isTensor)
  if (!known) return Array.from({ length: resultCount(op, bound) }, () => undefined)
  return (op as OpSpec).outputs(bound as never, op.name)
}
