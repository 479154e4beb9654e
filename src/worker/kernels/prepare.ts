/**
 * Replay preparation: a built-in bound once for the calls of a recording's replays, which
 * differ only in their tensors (src/worker/prepared.ts keeps one per recorded call).
 */
import type { Tensor } from "../../../ffi/tensor.ts"
import { opNamed, type OpName } from "../../ops/registry.ts"
import type { OpSpec, Planned } from "../../ops/spec.ts"
import type { BinaryPlan } from "../../ops/specs/elementwise.ts"
import type { FunctionContext } from "../function.ts"
import { kernelOf, layoutNames, runKernel } from "./dispatch.ts"
import { planned, type Kernel } from "./kernel.ts"
import { isTensor } from "./run.ts"
import { stagingOf } from "./staging.ts"

/** A built-in prepared for repeated calls (prepareBuiltin): `run` it with a call's tensors, in the order prepared. */
export interface PreparedCall {
  /** `reuse`: tensors of the outputs' dtypes and shapes, which no one else reads, written instead of new ones (freed if the kernel fails). */
  readonly run: (ctx: FunctionContext, tensors: ReadonlyArray<Tensor>, reuse?: ReadonlyArray<Tensor>) => ReadonlyArray<Tensor>
  /** How many tensors a call returns. */
  readonly outputs: number
}

/**
 * `ops.<name>` prepared once for calls that differ only in their tensors, each of the dtype and
 * shape of the one at its place in `args` and `kwargs` now (a recording's replays): the
 * arguments are bound, the rule's results found and (for the kernels that can) the kernel's plan
 * made here, so a call puts its tensors in their places, allocates the outputs and runs the
 * kernel. undefined where that cannot hold: a view
 * op (its result is its input's memory), or a tensor that is not in its argument's place once
 * bound, or is given twice.
 */
export const prepareBuiltin = (name: string, args: ReadonlyArray<unknown>, kwargs: Readonly<Record<string, unknown>>, tensors: ReadonlyArray<Tensor>): PreparedCall | undefined => {
  const op = opNamed(name)
  if (op === undefined || op.view || new Set(tensors).size !== tensors.length) return undefined
  const bound = op.bind(args, kwargs, isTensor) as Record<string, unknown>
  const metas = (op as OpSpec).outputs(bound as never, op.name)
  // Where each tensor sits in the bound arguments (a param, or an item of a tensor list).
  const places: Array<{ readonly holder: Record<string, unknown> | unknown[]; readonly key: string | number; readonly tensor: number }> = []
  const find = (holder: Record<string, unknown> | unknown[], key: string | number, v: unknown) => {
    if (isTensor(v)) places.push({ holder, key, tensor: tensors.indexOf(v) })
    else if (Array.isArray(v)) v.forEach((x, i) => find(v, i, x))
  }
  for (const key of Object.keys(bound)) find(bound, key, bound[key])
  if (places.length !== tensors.length || places.some((p) => p.tensor < 0)) return undefined
  const general = kernelOf(op), staging = stagingOf(op as OpSpec), laidOutBy = layoutNames(op as OpSpec)
  const kernel = (planned.get(general)?.(bound as never, (metas as Planned<BinaryPlan>).plan) ?? general) as Kernel<OpName>
  const run = (ctx: FunctionContext, now: ReadonlyArray<Tensor>, reuse?: ReadonlyArray<Tensor>) => {
    for (const p of places) (p.holder as Record<string | number, unknown>)[p.key] = now[p.tensor]
    try {
      return runKernel(kernel, ctx, bound, op.name, metas, staging, reuse, laidOutBy)
    } finally {
      // The bound arguments keep no tensor between calls.
      for (const p of places) (p.holder as Record<string | number, unknown>)[p.key] = undefined
    }
  }
  return { run, outputs: metas.length }
}
