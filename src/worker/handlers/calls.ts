/**
 * CallFunction and FetchValue: run a named function on a stream over looked-up arguments,
 * defining its tensors as results (CallFunction) or sending its value back (FetchValue).
 */
import { Effect } from "effect"
import { Stream } from "../../../ffi/stream.ts"
import { Tensor } from "../../../ffi/tensor.ts"
import type { FunctionContext, RemoteFunction } from "../../ops/function.ts"
import type { CallFunction, FetchValue, Value } from "../../protocol/messages.ts"
import type { Ref } from "../../protocol/values.ts"
import { FunctionFailed, ResultCountMismatch, WrongRefType } from "../errors.ts"
import { flattenTensors, getAs } from "../refs.ts"
import { lookup, tryDefine, type Session } from "../session.ts"

export const streamOf = (s: Session, ref: Ref) =>
  Effect.try({ try: () => getAs(s.env, ref, Stream, "a stream"), catch: (e) => e })

const contextFor = (s: Session, stream: Stream, kwargs: Readonly<Record<string, unknown>>): FunctionContext => ({
  native: s.native, rank: s.rank, world: s.world, device: s.native.device, stream, coords: s.coords, kwargs,
})

/** Calls fn; a throw or a rejected promise becomes FunctionFailed with the original error. */
const invoke = (name: string, fn: RemoteFunction, ctx: FunctionContext, args: ReadonlyArray<unknown>) => {
  const failed = (cause: unknown) =>
    new FunctionFailed({ function: name, cause, message: `${name}: ${cause instanceof Error ? cause.message : String(cause)}` })
  return Effect.try({ try: () => fn(ctx, ...args), catch: failed }).pipe(
    Effect.flatMap((r) => r instanceof Promise ? Effect.tryPromise({ try: () => r, catch: failed }) : Effect.succeed(r)),
  )
}

/** Frees tensors made for one command (uploads, unkept outputs) that no ref holds. */
const freeUnheld = (s: Session, tensors: ReadonlyArray<Tensor>) => Effect.sync(() => {
  for (const t of tensors) if (!s.env.isHeld(t)) t.free()
})

export const callFunction = (s: Session) => (m: CallFunction) => {
  const uploads: Tensor[] = []
  return tryDefine(s, m.ident, [...m.results, ...m.mutates], Effect.gen(function* () {
    const stream = yield* streamOf(s, m.stream)
    const fn = yield* s.functions.resolve(m.function)
    const args = (yield* lookup(s, m.args, stream, uploads)) as unknown[]
    const kwargs = (yield* lookup(s, m.kwargs, stream, uploads)) as Record<string, unknown>
    const tensors = flattenTensors(yield* invoke(m.function, fn, contextFor(s, stream, kwargs), args))
    if (tensors.length !== m.results.length) {
      yield* freeUnheld(s, tensors)
      return yield* new ResultCountMismatch({
        message: `${m.function} returned ${tensors.length} tensor(s) for ${m.results.length} result(s)`,
      })
    }
    for (let i = 0; i < tensors.length; i++) s.env.define(m.results[i]!, tensors[i]!)
  }).pipe(Effect.ensuring(freeUnheld(s, uploads))))
}

/** The wire form of a fetched value: tensors copied to host; what the wire cannot carry is refused. */
const toWire = (v: unknown, stream: Stream): Value => {
  if (v instanceof Tensor) return v.toHost(stream)
  if (v === undefined || v === null) return null
  if (Array.isArray(v)) return v.map((x) => toWire(x, stream))
  if (v instanceof Uint8Array || ["boolean", "number", "bigint", "string"].includes(typeof v)) return v as Value
  if (typeof v !== "object" || Object.getPrototypeOf(v) !== Object.prototype)
    throw new WrongRefType({ message: `cannot fetch a ${typeof v === "object" ? (v.constructor?.name ?? "non-plain object") : typeof v}` })
  return Object.fromEntries(Object.entries(v).map(([k, x]) => [k, toWire(x, stream)]))
}

export const fetchValue = (s: Session) => (m: FetchValue) => {
  const made: Tensor[] = []
  return tryDefine(s, m.ident, m.mutates, Effect.gen(function* () {
    const stream = yield* streamOf(s, m.stream)
    let value = yield* lookup(s, m.object, stream, made)
    if (m.function !== null) {
      const fn = yield* s.functions.resolve(m.function)
      value = yield* invoke(m.function, fn, contextFor(s, stream, {}), [value])
      made.push(...flattenTensors(value))
    }
    const wire = yield* Effect.try({ try: () => toWire(value, stream), catch: (e) => e })
    s.send({ _tag: "FetchResult", ident: m.ident, value: wire })
  }).pipe(Effect.ensuring(freeUnheld(s, made))))
}
