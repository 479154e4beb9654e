/**
 * The dispatch adapter: a built-in (`ops.<name>`) as a RemoteFunction, the worker's one shape
 * of callable. It binds the arguments, runs the op's rule once to allocate the results, and
 * runs its kernel (from the table, or a composite op's parts) into them; and `op`, the same
 * from a user function's code.
 */
import * as k from "../../../ffi/ops.ts"
import { Tensor } from "../../../ffi/tensor.ts"
import type { GradOps } from "../../ops/grad.ts"
import { OpArgumentError, type TensorMeta } from "../../ops/meta.ts"
import { opNamed, type Op, type OpName } from "../../ops/registry.ts"
import { layoutOperands, type Composition, type OpSpec } from "../../ops/spec.ts"
import { pointwiseStrides } from "../../ops/strided.ts"
import type { FunctionContext, RemoteFunction } from "../function.ts"
import type { Kernel, Kernels } from "./kernel.ts"
import { isTensor, Run } from "./run.ts"
import { copyBack, stage, stagingOf, type CopyBack, type Staging } from "./staging.ts"
import { KERNELS } from "./table.ts"

/**
 * The ops a composition is given on the worker: each built-in run on this command's context, its
 * result a temporary of the command (any op by name, as GradOps declares them).
 */
const partsOn = (run: Run): GradOps<Tensor> => new Proxy({} as GradOps<Tensor>, {
  get: (_, name: string) => (...args: unknown[]) => {
    const last = args.at(-1), kwargs = typeof last === "object" && last !== null && !Array.isArray(last) && !(last instanceof Tensor) ? last as Record<string, unknown> : undefined
    const out = builtinFunction(name)!({ ...run.ctx, kwargs: kwargs ?? {} }, ...(kwargs ? args.slice(0, -1) : args)) as Tensor
    // an in-place part (batch_norm's lerp_) defines nothing
    if (out !== undefined) run.temps.push(out)
    return out
  },
})

/** A composite op on the worker: its composition over the built-ins, copied into its result. */
const composed = (composition: Composition<ReadonlyArray<never>>): Kernel<OpName> => (run, [out], a, op, metas) => {
  const result = composition(a as never, partsOn(run), (t: Tensor) => t, op, metas)
  k.cast(out!, result, run.stream)
}

const kernels = new Map<OpName, Kernel<OpName>>()

/** The kernel that runs op: its entry in the table, or its composition over the built-ins. */
export const kernelOf = (op: Op): Kernel<OpName> => {
  let kernel = kernels.get(op.name)
  if (kernel === undefined) {
    const composition = (op as OpSpec).composed
    kernel = composition ? composed(composition as Composition<ReadonlyArray<never>>) : KERNELS[op.name as keyof Kernels] as Kernel<OpName>
    kernels.set(op.name, kernel)
  }
  return kernel
}

/**
 * An op as a RemoteFunction: binds the arguments (ctx.kwargs included), allocates the
 * results its rule gives, runs its kernel; one result is returned bare.
 */
const asRemoteFunction = <N extends OpName>(op: Op<N>): RemoteFunction => {
  const kernel = kernelOf(op as Op), rule = (op as OpSpec).outputs, staging = stagingOf(op as OpSpec), laidOutBy = layoutNames(op as OpSpec)
  return (ctx, ...args) => {
    const bound = op.bind(args, ctx.kwargs, isTensor)
    const metas = rule(bound as never, op.name)
    if (op.view) {
      // A view of a contiguous copy (a view op its kernel reads flat) keeps that copy's memory alive.
      const run = new Run(ctx)
      try {
        return kernel(run, [], (staging.length === 0 ? bound : stage(run, staging, bound, op.name, [])) as never, op.name, metas as never)
      } finally {
        run.free()
      }
    }
    const outs = runKernel(kernel, ctx, bound, op.name, metas, staging, undefined, laidOutBy)
    return outs.length === 1 ? outs[0] : outs.length === 0 ? undefined : outs
  }
}

/** The parameters a pointwise op's result is laid out by (OpSpec.pointwise): none for another op. */
export const layoutNames = (op: OpSpec): ReadonlyArray<string> => layoutOperands(op).map((i) => op.params[i]!.name)

/**
 * The strides of a pointwise op's result (strided.ts's pointwiseStrides) from its operands, the
 * parameters `names` of `bound`; undefined (row-major) where every operand is contiguous, which
 * is one flag read each.
 */
const resultStrides = (names: ReadonlyArray<string>, bound: Readonly<Record<string, unknown>>, shape: ReadonlyArray<number>): number[] | undefined => {
  let dense = true
  for (const n of names) {
    const v = bound[n]
    if (v instanceof Tensor && !v.contiguous) dense = false
  }
  if (dense) return undefined
  const operands: Tensor[] = []
  for (const n of names) {
    const v = bound[n]
    if (v instanceof Tensor) operands.push(v)
  }
  return pointwiseStrides(shape, operands)
}

/** Whether t is laid out with `strides` (undefined: contiguous). */
const laidOut = (t: Tensor, strides: ReadonlyArray<number> | undefined): boolean =>
  strides === undefined ? t.contiguous : !t.contiguous && t.strides.every((s, i) => s === strides[i])

/**
 * Allocates a command's outputs as its rule gave them and runs its kernel into them (freed
 * again if it throws), its operands staged as `staging` says (staging.ts).
 */
export const runKernel = (kernel: Kernel<OpName>, ctx: FunctionContext, bound: unknown, name: string, metas: ReadonlyArray<TensorMeta>, staging: Staging, reuse?: ReadonlyArray<Tensor>, laidOutBy: ReadonlyArray<string> = []): Tensor[] => {
  const run = new Run(ctx)
  const outs: Tensor[] = []
  try {
    // Most commands check nothing (staging is empty for an op that reads strides and writes nothing).
    let backs: CopyBack[] | undefined
    const args = staging.length === 0 ? bound : stage(run, staging, bound as Readonly<Record<string, unknown>>, name, (backs = []))
    // Owned: a command's outputs go to the env (or are freed) as soon as this returns; `reuse`'s
    // tensors (the outputs' dtypes, shapes and layouts, read by no one else) are written instead of new ones.
    // A pointwise op's one result is laid out by its operands.
    const strides = laidOutBy.length === 0 ? undefined : resultStrides(laidOutBy, bound as Readonly<Record<string, unknown>>, metas[0]!.shape)
    for (let i = 0; i < metas.length; i++) {
      const kept = reuse?.[i]
      if (kept !== undefined && laidOut(kept, strides)) outs.push(kept)
      else {
        kept?.free()
        outs.push(strides === undefined ? Tensor.owned(ctx.native, metas[i]!.dtype, metas[i]!.shape) : Tensor.ownedStrided(ctx.native, metas[i]!.dtype, metas[i]!.shape, strides))
      }
    }
    kernel(run, outs, args as never, name, metas as never)
    if (backs !== undefined && backs.length > 0) copyBack(run, backs)
  } catch (e) {
    for (const t of outs) t.free()
    throw e
  } finally {
    run.free()
  }
  return outs
}

const functions = new Map<string, RemoteFunction>()

/** The RemoteFunction of `ops.<name>`, or undefined when no op has that name. */
export const builtinFunction = (name: string): RemoteFunction | undefined => {
  let fn = functions.get(name)
  if (fn === undefined) {
    const op = opNamed(name)
    if (op === undefined) return undefined
    functions.set(name, (fn = asRemoteFunction(op)))
  }
  return fn
}

/**
 * Runs a built-in from code on a worker (a user function) and returns its one output, e.g.
 * `op(ctx, "matmul", [x, w])` or `op(ctx, "randn", [[4, 4]], { seed: 1 })`.
 */
export const op = (ctx: FunctionContext, name: OpName, args: ReadonlyArray<unknown>, kwargs: Readonly<Record<string, unknown>> = {}): Tensor => {
  const fn = builtinFunction(name)
  if (!fn) throw new OpArgumentError({ message: `no built-in ops.${name}` })
  const out = fn({ ...ctx, kwargs }, ...args)
  if (!(out instanceof Tensor)) throw new OpArgumentError({ message: `ops.${name} does not return one tensor` })
  // User code may drop it: the finalizer is its safety net.
  return out.track()
}