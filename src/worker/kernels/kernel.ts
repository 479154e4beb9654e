/**
 * What a kernel is: the shim calls that run one declared op, given the command's arena, the
 * outputs its rule allocated, its arguments bound by name (tensors as worker Tensors) and the
 * results' metadata. A kernel may carry a planner for prepared calls (a recording's replays).
 */
import type { UnaryOpName } from "../../../ffi/symbols.ts"
import type { Tensor } from "../../../ffi/tensor.ts"
import type { Bound } from "../../ops/params.ts"
import type { BinaryPlan } from "../../ops/specs/elementwise.ts"
import type { ComposedName, OpName, OutputsOf, ParamsOf } from "../../ops/registry.ts"
import type { Run } from "./run.ts"

/**
 * Computes into `outs`, allocated from the op's rule (`metas`, with the plan the rule computed).
 * A view op (spec.view) is given no outs and returns its results instead (views, or copies it
 * allocated); an in-place op writes its input.
 */
export type Kernel<N extends OpName> = (run: Run, outs: ReadonlyArray<Tensor>, a: Bound<ParamsOf<N>, Tensor>, op: string, metas: OutputsOf<N>) => Tensor | Tensor[] | void

/**
 * The unary ops that are the shim's op of their name with their input their only parameter
 * (exp, sign, isnan, ...): table.ts binds them by name, so adding one needs no kernel line.
 */
export type PlainUnary = { [N in Extract<OpName, UnaryOpName>]: ParamsOf<N> extends readonly [unknown] ? N : never }[Extract<OpName, UnaryOpName>]

/** A kernel for every op but the composed ones (dispatch.ts runs those from their parts). */
export type Kernels = { readonly [N in Exclude<OpName, ComposedName>]: Kernel<N> }

/**
 * Kernels that can plan once for a prepared call (prepareBuiltin): from the bound arguments of
 * its first call and its rule's plan, the kernel with that plan made, for calls whose tensors have the same dtypes
 * and shapes; undefined where the plan is not that simple.
 */
export type Planner = (a: { readonly input: unknown; readonly other: unknown; readonly alpha?: number }, plan: BinaryPlan) => Kernel<"mul"> | undefined
export const planned = new WeakMap<object, Planner>()

/** `kernel`, with its planner for prepared calls. */
export const withPlanner = <K extends object>(kernel: K, planner: Planner): K => {
  planned.set(kernel, planner)
  return kernel
}