/**
 * The shape rule of the collectives a Reduce names (docs/design.md, Reduce), in one place: the
 * controller infers a result's metadata with it and refuses what cannot run before sending;
 * the worker picks the collective and allocates its output with it. (The shim's comm checks
 * stay as the last line of defence.)
 */
import type { Reduction } from "../protocol/messages.ts"
import { describe, numelOf, type TensorMeta } from "./meta.ts"

export type Collective = "all_reduce" | "all_gather" | "reduce_scatter" | "all_to_all"

export interface CollectivePlan {
  readonly collective: Collective
  /** The result's dtype and shape on each member. */
  readonly result: TensorMeta
}

/**
 * The collective for `reduction` (and `scatter`) over a group of `size` members and its
 * result, or why it cannot run: stack + scatter is all_to_all (the flat elements split into
 * `size` chunks), stack all_gather into [size, ...shape], a reduction with scatter
 * reduce_scatter of dim 0 (which must be `size`), else all_reduce. Only all_reduce and
 * all_to_all can be in place.
 */
export const planCollective = (input: TensorMeta, size: number, reduction: Reduction, scatter: boolean, inplace: boolean): CollectivePlan | string => {
  const { dtype, shape } = input
  if (reduction === "stack") {
    if (!scatter) return inplace ? "stack (all_gather) cannot be in place" : { collective: "all_gather", result: { dtype, shape: [size, ...shape] } }
    if (numelOf(shape) % size !== 0) return `stack with scatter (all_to_all) needs the elements of ${describe(input)} to split into ${size} chunks`
    return { collective: "all_to_all", result: input }
  }
  if (dtype === "bool" && reduction === "avg") return `avg is not defined for ${describe(input)}`
  if (!scatter) return { collective: "all_reduce", result: input }
  if (inplace) return `${reduction} with scatter (reduce_scatter) cannot be in place`
  if (shape[0] !== size) return `${reduction} with scatter (reduce_scatter) needs dim 0 of ${describe(input)} to equal the group size ${size}`
  return { collective: "reduce_scatter", result: { dtype, shape: shape.slice(1) } }
}
