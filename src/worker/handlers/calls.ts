/**
 * CallFunction and FetchValue: run a named function on a stream over looked-up arguments,
 * defining its tensors as results (CallFunction) or sending its value back (FetchValue).
 * A function that returns a promise, or a module imported on first use, finishes the
 * command asynchronously; everything else runs straight through.
 */
import { Effect } from "effect"
import type { Stream } from "../../../ffi/stream.ts"
import { Tensor } from "../../../ffi/tensor.ts"
import type { FunctionContext, RemoteFunction } from "../../ops/function.ts"
import { sameShape } from "../../ops/meta.ts"
import type { DeclaredMeta } from "../../protocol/fields.ts"
import type { CallFunction, FetchValue, Value } from "../../protocol/messages.ts"
import { FloatNumber, HostTensor } from "../../protocol/values.ts"
import { FunctionFailed, ResultCountMismatch, ResultMismatch, WrongRefType } from "../errors.ts"
import { isBuiltin } from "../functions.ts"
import { holdHostCopy } from "../memory.ts"
import { flattenTensors, kindOf } from "../refs.ts"
import { announce, lookup, tryDefine, tryDefineNow, type Session } from "../session.ts"
import { streamOf } from "../streams.ts"

export const contextFor = (s: Session, stream: Stream, kwargs: Readonly<Record<string, unknown>>): FunctionContext => ({
  native: s.native, rank: s.rank, world: s.world, device: s.native.device, stream, coords: s.coords, generator: s.generator, kwargs,
})

const failed = (name: string) => (cause: unknown) =>
  new FunctionFailed({ function: name, cause, message: `${name}: ${cause instanceof Error ? cause.message : String(cause)}` })

/**
 * Resolves `name` (from the cache, or by importing its module) and calls it; `then` gets
 * the result. A throw or a rejected promise becomes FunctionFailed with the original error.
 */
const invoke = (s: Session, name: string, call: (fn: RemoteFunction) => unknown, then: (result: unknown) => void): Effect.Effect<void, unknown> | void => {
  const run = (fn: RemoteFunction): Effect.Effect<void, unknown> | void => {
    let result: unknown
    try {
      result = call(fn)
    } catch (e) {
      throw failed(name)(e)
    }
    if (!(result instanceof Promise)) return then(result)
    return Effect.tryPromise({ try: () => result as Promise<unknown>, catch: failed(name) }).pipe(Effect.map(then))
  }
  const fn = s.functions.cached(name)
  return fn ? run(fn) : s.functions.resolve(name).pipe(Effect.flatMap((f) => run(f) ?? Effect.void))
}

/** Frees tensors made for one command (uploads, unkept outputs) that no ref holds. */
const freeUnheld = (s: Session, tensors: ReadonlyArray<Tensor>): void => {
  for (const t of tensors) if (!s.env.isHeld(t)) t.free()
}

/** Runs `body`, then frees `made` (now, or when the Effect it returned ends). */
const freeingAfter = (s: Session, made: Tensor[], body: () => Effect.Effect<void, unknown> | void): Effect.Effect<void, unknown> | void => {
  let rest: Effect.Effect<void, unknown> | void = undefined
  try {
    rest = body()
  } finally {
    if (rest === undefined) freeUnheld(s, made)
  }
  return rest?.pipe(Effect.ensuring(Effect.sync(() => freeUnheld(s, made))))
}

const metaText = (m: DeclaredMeta): string => `${m.dtype}[${m.shape.join(", ")}]`

/** The first returned tensor that is not what its result declared (nil declares nothing), as the failure naming both. */
const undeclared = (fn: string, declared: ReadonlyArray<DeclaredMeta | null>, tensors: ReadonlyArray<Tensor>): ResultMismatch | undefined => {
  for (let i = 0; i < tensors.length; i++) {
    const d = declared[i], t = tensors[i]!
    if (d == null) continue
    if (d.dtype !== t.dtype || !sameShape(d.shape, t.shape))
      return new ResultMismatch({ message: `${fn} result ${i}: declared ${metaText(d)}, returned ${metaText(t)}` })
  }
  return undefined
}

export const callFunction = (s: Session) => (m: CallFunction) => Effect.suspend(() => callNow(s, m) ?? Effect.void)

/** CallFunction run now (tryDefineNow), as command `ident` (a recording's call renumbers its commands): undefined when it finished here. */
export const callNow = (s: Session, m: CallFunction, ident = m.ident): Effect.Effect<void> | undefined =>
  tryDefineNow(s, ident, m.mutates.length === 0 ? m.results : [...m.results, ...m.mutates], () => {
    const stream = streamOf(s.env, m.stream)
    // Built-ins are quick for all but the largest tensors, and too frequent to announce.
    if (!isBuiltin(m.function)) announce(s, ident)
    const uploads: Tensor[] = []
    return freeingAfter(s, uploads, () => {
      const args = lookup(s, m.args, stream, uploads) as unknown[]
      const kwargs = lookup(s, m.kwargs, stream, uploads) as Record<string, unknown>
      const ctx = contextFor(s, stream, kwargs)
      return invoke(s, m.function, (fn) => fn(ctx, ...args), (result) => {
        const tensors = flattenTensors(result)
        if (tensors.length !== m.results.length) {
          freeUnheld(s, tensors)
          throw new ResultCountMismatch({ message: `${m.function} returned ${tensors.length} tensor(s) for ${m.results.length} result(s)` })
        }
        const mismatch = m.declared === undefined ? undefined : undeclared(m.function, m.declared, tensors)
        if (mismatch !== undefined) {
          freeUnheld(s, tensors)
          throw mismatch
        }
        for (let i = 0; i < tensors.length; i++) s.env.define(m.results[i]!, tensors[i]!)
      })
    })
  })

/** The wire form of a fetched value: tensors copied to host; what the wire cannot carry is refused. */
const fetchedValue = (v: unknown, stream: Stream): Value => {
  if (v instanceof Tensor) return v.toHost(stream)
  // A float the client sent goes back as the float64 it was.
  if (v instanceof HostTensor || v instanceof FloatNumber) return v
  if (v === undefined || v === null) return null
  if (Array.isArray(v)) return v.map((x) => fetchedValue(x, stream))
  if (v instanceof Uint8Array || ["boolean", "number", "bigint", "string"].includes(typeof v)) return v as Value
  if (typeof v !== "object" || Object.getPrototypeOf(v) !== Object.prototype)
    throw new WrongRefType({ message: `cannot fetch a ${kindOf(v)}` })
  return Object.fromEntries(Object.entries(v).map(([k, x]) => [k, fetchedValue(x, stream)]))
}

/** The bytes of the tensors in a value to fetch: what its host copy will take. */
const hostBytes = (v: unknown): number =>
  v instanceof Tensor ? v.nbytes
  : Array.isArray(v) ? v.reduce((a: number, x) => a + hostBytes(x), 0)
  : typeof v === "object" && v !== null && Object.getPrototypeOf(v) === Object.prototype ? Object.values(v).reduce((a: number, x) => a + hostBytes(x), 0)
  : 0

export const fetchValue = (s: Session) => (m: FetchValue) =>
  tryDefine(s, m.ident, m.mutates, () => {
    const stream = streamOf(s.env, m.stream)
    const made: Tensor[] = []
    return freeingAfter(s, made, () => {
      const value = lookup(s, m.object, stream, made)
      // The host copy counts against the memory limit until the socket has taken the reply.
      const reply = (v: unknown) => {
        const bytes = hostBytes(v)
        const release = holdHostCopy(s.native, bytes, `fetch of ${bytes} bytes to host`)
        try {
          s.send({ _tag: "FetchResult", ident: m.ident, value: fetchedValue(v, stream) })
        } finally {
          s.whenSent(release)
        }
      }
      if (m.function === null) return reply(value)
      if (!isBuiltin(m.function)) announce(s, m.ident)
      return invoke(s, m.function, (fn) => fn(contextFor(s, stream, {}), value), (v) => {
        made.push(...flattenTensors(v))
        reply(v)
      })
    })
  })
