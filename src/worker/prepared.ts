/**
 * A recording's built-in calls prepared for its replays: on a call's first run of a command,
 * its arguments are bound and its op's rule run once (kernels/prepare.ts), so later
 * calls look up its tensors, check each still has the dtype and shape it was prepared with,
 * and run the kernel. A command whose inputs are not as prepared (a poisoned or unknown ref,
 * another shape), or that reads a replay parameter (a number its rule may check), takes the
 * usual path (callNow), which fails it or runs it as a command sent alone would run.
 */
import type { Effect } from "effect"
import { Stream } from "../../ffi/stream.ts"
import { Tensor } from "../../ffi/tensor.ts"
import type { DType } from "../protocol/values.ts"
import { prepareBuiltin, type PreparedCall } from "./kernels/prepare.ts"
import type { CallFunction } from "../protocol/messages.ts"
import { HostTensor, Ref } from "../protocol/values.ts"
import { isBuiltin } from "./functions.ts"
import type { FunctionContext } from "./function.ts"
import { sameShape } from "../ops/meta.ts"
import { contextFor } from "./handlers/calls.ts"
import { lookup, tryDefineNow, type Session } from "./session.ts"
import { streamOf } from "./streams.ts"

export interface Prepared {
  readonly call: PreparedCall
  /** The refs of the command's tensors, in the order the call takes them, with what each held when prepared. */
  readonly refs: ReadonlyArray<number>
  readonly dtypes: ReadonlyArray<DType>
  readonly shapes: ReadonlyArray<ReadonlyArray<number>>
  /** This call's tensors (reused from call to call). */
  readonly now: Tensor[]
  /** The context of its last run, reused while its stream and the mesh coordinates are the same. */
  ctx: FunctionContext | undefined
}

/** The refs of an argument tree in order; undefined when it holds host data (uploaded per call). */
const refsOf = (v: unknown, out: number[]): number[] | undefined => {
  if (v instanceof Ref) out.push(v.id)
  else if (v instanceof HostTensor || v instanceof Uint8Array) return undefined
  else if (Array.isArray(v)) {
    for (const x of v) if (refsOf(x, out) === undefined) return undefined
  } else if (v !== null && typeof v === "object") {
    for (const x of Object.values(v)) if (refsOf(x, out) === undefined) return undefined
  }
  return out
}

/** `c` prepared from the env as it is now (its inputs defined), or null where it cannot be. */
export const prepare = (s: Session, c: CallFunction): Prepared | null => {
  if (!isBuiltin(c.function)) return null
  const refs = refsOf(c.args, [])
  if (refs === undefined || refsOf(c.kwargs, refs) === undefined) return null
  const tensors: Tensor[] = []
  for (const id of refs) {
    const v = s.env.peek(id)
    if (!(v instanceof Tensor)) return null
    tensors.push(v)
  }
  try {
    const stream = streamOf(s.env, c.stream)
    const kwargs = lookup(s, c.kwargs, stream) as Record<string, unknown>
    const call = prepareBuiltin(c.function.slice(4), lookup(s, c.args, stream) as unknown[], kwargs, tensors)
    if (call === undefined || call.outputs !== c.results.length) return null
    return { call, refs, dtypes: tensors.map((t) => t.dtype), shapes: tensors.map((t) => [...t.shape]), now: new Array<Tensor>(refs.length), ctx: undefined }
  } catch {
    // Refused by its binding or its rule: the usual path reports that.
    return null
  }
}

/** A prepared call's keyword arguments are in its binding already: its context carries none. */
const BOUND: Readonly<Record<string, unknown>> = Object.freeze({})

/**
 * Runs `c` as command `ident` through `p`: undefined when it ran, the Effect that finishes its
 * failure (poisoned and reported as tryDefineNow does), or false when its inputs are not as
 * prepared (nothing ran: take the usual path).
 */
export const runPrepared = (s: Session, p: Prepared, c: CallFunction, ident: number): Effect.Effect<void> | undefined | false => {
  const now = p.now
  for (let i = 0; i < p.refs.length; i++) {
    const v = s.env.peek(p.refs[i]!)
    if (!(v instanceof Tensor) || v.dtype !== p.dtypes[i] || !sameShape(v.shape, p.shapes[i]!)) return false
    now[i] = v
  }
  const stream = s.env.peek(c.stream.id)
  if (!(stream instanceof Stream)) return false
  if (p.ctx?.stream !== stream || p.ctx.coords !== s.coords) p.ctx = contextFor(s, stream, BOUND)
  let outs: ReadonlyArray<Tensor>
  try {
    outs = p.call.run(p.ctx, now)
  } catch (e) {
    return tryDefineNow(s, ident, c.mutates.length === 0 ? c.results : [...c.results, ...c.mutates], () => {
      throw e
    })
  }
  for (let i = 0; i < outs.length; i++) s.env.define(c.results[i]!, outs[i]!)
  s.firstUncompletedIdent = ident + 1
  return undefined
}
