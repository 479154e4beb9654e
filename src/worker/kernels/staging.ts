/**
 * Strided operands on their way into a kernel: an op whose kernel does not read strides
 * (OpSpec.strided) is given contiguous copies of its non-contiguous tensors, temporaries of the
 * command (torch's `.contiguous()` inside the op); an in-place target so copied is computed
 * there and copied back through its view once the kernel returns. A write to an expanded tensor
 * (stride 0 over a dim of size > 1) is refused before anything runs, as torch refuses it.
 */
import * as k from "../../../ffi/ops.ts"
import { Tensor } from "../../../ffi/tensor.ts"
import { bad } from "../../ops/meta.ts"
import type { Param } from "../../ops/params.ts"
import { mutatedParams, stridedOperands, type OpSpec } from "../../ops/spec.ts"
import { WRITES_ONE_VALUE } from "../../ops/strided.ts"
import type { Run } from "./run.ts"

/** A tensor parameter a command's operands are checked at: made contiguous (`stage`) and/or written (`written`). */
interface Operand {
  readonly name: string
  /** A list of tensors. */
  readonly list: boolean
  readonly stage: boolean
  readonly written: boolean
}

/** What the dispatch checks of an op's operands per command: nothing at all for most strided ops. */
export type Staging = ReadonlyArray<Operand>

const TENSOR_KINDS = new Set(["tensor", "tensorOrScalar", "tensors"])

/** The operands of op that a command checks: those its kernel reads flat, and those it writes. */
export const stagingOf = (op: OpSpec): Staging => {
  const written = new Set(mutatedParams(op)), strided = stridedOperands(op)
  return (op.params as ReadonlyArray<Param>)
    .filter((p) => TENSOR_KINDS.has(p.kind))
    .map((p) => ({ name: p.name, list: p.kind === "tensors", stage: strided !== true && !strided?.includes(p.name), written: written.has(p.name) }))
    .filter((o) => o.stage || o.written)
}

export const EXPANDED_WRITE =
  "unsupported operation: more than one element of the written-to tensor refers to a single memory location. Please clone() the tensor before performing the operation."

/** A target staged into a contiguous temporary, copied back through its view after the kernel. */
export interface CopyBack {
  readonly view: Tensor
  readonly staged: Tensor
}

/**
 * `bound` with each operand the op's kernel reads flat replaced by a contiguous copy (the same
 * object when every operand is already as the kernel reads it), and the targets to copy back
 * into. Throws (OpArgumentError) for a written tensor that is expanded, before anything is copied.
 */
export const stage = (run: Run, staging: Staging, bound: Readonly<Record<string, unknown>>, op: string, backs: CopyBack[]): Readonly<Record<string, unknown>> => {
  let needed = false
  for (const o of staging) {
    const v = bound[o.name]
    if (o.list) {
      for (const t of v as ReadonlyArray<Tensor>) if (check(o, t, op)) needed = true
    } else if (v instanceof Tensor && check(o, v, op)) needed = true
  }
  if (!needed) return bound
  // One copy per tensor, so a tensor given twice is still one tensor to the kernel.
  const copies = new Map<Tensor, Tensor>()
  const copyOf = (o: Operand, t: Tensor): Tensor => {
    if (!o.stage || t.contiguous) return t
    let c = copies.get(t)
    if (c === undefined) {
      copies.set(t, (c = run.temp(t.dtype, t.shape)))
      k.cast(c, t, run.stream)
    }
    if (o.written && !backs.some((b) => b.view === t)) backs.push({ view: t, staged: c })
    return c
  }
  const out: Record<string, unknown> = { ...bound }
  for (const o of staging) {
    const v = bound[o.name]
    if (o.list) out[o.name] = (v as ReadonlyArray<Tensor>).map((t) => copyOf(o, t))
    else if (v instanceof Tensor) out[o.name] = copyOf(o, v)
  }
  return out
}

/** Whether t needs a copy at o; refuses an expanded target. */
const check = (o: Operand, t: Tensor, op: string): boolean => {
  if (o.written && t.expanded && !WRITES_ONE_VALUE.has(op)) bad(op, EXPANDED_WRITE)
  return o.stage && !t.contiguous
}

/** Writes each staged target back through its view. */
export const copyBack = (run: Run, backs: ReadonlyArray<CopyBack>): void => {
  for (const b of backs) k.cast(b.view, b.staged, run.stream)
}
