/**
 * CallFunction and FetchValue: run a named function on a stream over looked-up arguments,
 * defining its tensors as results (CallFunction) or sending its value back (FetchValue).
 * A function that returns a promise, or a module imported on first use, finishes the
 * command asynchronously; everything else runs straight through.
 */
import { Effect } from "effect"
import type { Stream } from "../../../ffi/stream.ts"
import * as k from "../../../ffi/ops.ts"
import { Tensor } from "../../../ffi/tensor.ts"
import type { FunctionContext, RemoteFunction } from "../function.ts"
import { sameShape } from "../../ops/meta.ts"
import type { DeclaredMeta } from "../../protocol/fields.ts"
import type { BufferPool } from "../../net/buffers.ts"
import { WorkerSegments } from "../../net/shm.ts"
import type { CallFunction, FetchValue, Value } from "../../protocol/messages.ts"
import { FloatNumber, HostTensor } from "../../protocol/values.ts"
import { CommError } from "../../comm/errors.ts"
import { DependentOnError, FunctionFailed, ResultCountMismatch, ResultMismatch, WrongRefType } from "../errors.ts"
import { isBuiltin } from "../functions.ts"
import { blockedBy, CallGroup, endTogether, RunOutcome, startTogether } from "../group.ts"
import { holdHostCopy } from "../memory.ts"
import { DeviceMesh } from "../mesh.ts"
import { flattenTensors, getAs, kindOf } from "../refs.ts"
import { announce, lookup, tryDefine, tryDefineNow, type Session } from "../session.ts"
import { blocking, streamOf } from "../streams.ts"

/** The group of a call that declared none. */
const noGroup = (): never => {
  throw new CommError({ reason: "invalid", message: "this call declared no group: give the dims it communicates over (CallOptions.dims)" })
}

export const contextFor = (s: Session, stream: Stream, kwargs: Readonly<Record<string, unknown>>, group: FunctionContext["group"] = noGroup): FunctionContext => ({
  native: s.native, rank: s.rank, world: s.world, device: s.native.device, stream, coords: s.coords, generator: s.generator, kwargs, group,
})

/** A call's groups by their dims ("dp,tp"): the one over every declared dim, and (for two or more) one per dim. */
type CallGroups = ReadonlyMap<string, { readonly dims: ReadonlyArray<string>; readonly group: CallGroup }>

/** ctx.group of a call over `dims`: the group over them (no dims asked, or all of them), or one dim's. */
const declaredGroup = (dims: ReadonlyArray<string>, groups: CallGroups): FunctionContext["group"] => (asked) => {
  const names = asked === undefined ? dims : typeof asked === "string" ? [asked] : [...asked]
  const found = groups.get(names.join(","))
  if (found === undefined)
    throw new CommError({ reason: "invalid", message: `the function asked for the group over [${names.join(", ")}]; its call declared [${dims.join(", ")}] (the group over them all, or over one of them)` })
  return found.group
}

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

/** A call that stopped before copying its upload segment's tensors lets them go, so the controller can reuse their bytes. */
const letGoUploads = (s: Session, m: CallFunction): void => {
  s.uploads?.letGo(m.args)
  s.uploads?.letGo(m.kwargs)
}

export const callFunction = (s: Session) => (m: CallFunction) => Effect.suspend(() => callNow(s, m) ?? Effect.void)

/**
 * The controller takes a user function's results for new tensors, each with memory of its own
 * (it knows a built-in's views from the op's rule, not a function's): a result that shares
 * memory (an argument itself, a view of one, a tensor a view reads, one returned twice) is
 * defined as a contiguous copy, so a write through it changes no memory the controller counts
 * as another tensor's (its version counter, its overlap refusals). Replaced tensors no ref holds are freed.
 */
const ownResults = (s: Session, tensors: Tensor[], stream: Stream): void => {
  let seen: Set<Tensor> | undefined, replaced: Tensor[] | undefined
  for (let i = 0; i < tensors.length; i++) {
    const t = tensors[i]!
    if (t.shared || s.env.isHeld(t) || seen?.has(t)) {
      const copy = Tensor.empty(t.native, t.dtype, t.shape)
      k.cast(copy, t, stream)
      tensors[i] = copy
      ;(replaced ??= []).push(t)
    } else (seen ??= new Set()).add(t)
  }
  if (replaced !== undefined) for (const t of new Set(replaced)) if (!seen?.has(t) && !s.env.isHeld(t)) t.free()
}

/** Defines the call's results from what the function returned, or throws why not (freeing it). */
const defineResults = (s: Session, m: CallFunction, result: unknown, stream: Stream): void => {
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
  if (!isBuiltin(m.function)) ownResults(s, tensors, stream)
  for (let i = 0; i < tensors.length; i++) s.env.define(m.results[i]!, tensors[i]!)
}

/** The ident a member that cannot run the call gives at the start (group.ts): a poison's own, else this command's. */
const blockingIdent = (e: unknown, ident: number): number => (e instanceof DependentOnError ? e.ident : ident)

/**
 * A call that declared a group (m.mesh, m.dims): its members start together (group.ts), the
 * function runs with the group's communicators, and they end together. A failure of any of the
 * group's calls fails the command, even one the function caught: its peers failed theirs too.
 */
const callWithGroup = (s: Session, m: CallFunction, ident: number, stream: Stream): Effect.Effect<void, unknown> => {
  const mesh = getAs(s.env, m.mesh!, DeviceMesh, "a mesh")
  const dims = m.dims!
  const members = mesh.members(dims)
  const uploads: Tensor[] = []
  /** Why this member cannot run the function: it still starts with the others, to tell them. */
  let own: unknown
  let args: unknown[] = [], kwargs: Record<string, unknown> = {}
  try {
    args = lookup(s, m.args, stream, uploads) as unknown[]
    kwargs = lookup(s, m.kwargs, stream, uploads) as Record<string, unknown>
  } catch (e) {
    own = e
    letGoUploads(s, m)
  }
  return Effect.gen(function* () {
    const fn = own !== undefined ? undefined : yield* s.functions.resolve(m.function).pipe(Effect.catch((e) => Effect.sync(() => void (own = e))))
    const blockedAt = own === undefined ? undefined : blockingIdent(own, ident)
    const { comm, earliest } = yield* blocking(() => s.comms.collective(mesh.id, dims, () => members, ident, (comm) => ({ comm, earliest: startTogether(comm, blockedAt, stream) })))
    if (own !== undefined) return yield* Effect.fail(own)
    if (earliest !== undefined) return yield* Effect.fail(blockedBy(earliest))
    const groups = new Map([[dims.join(","), { dims, group: new CallGroup(comm, members, stream) }]])
    // Each dim's own group, opened once every member has started (they all span the whole one).
    if (dims.length > 1) for (const d of dims) {
      const one = [d], ranks = mesh.members(one)
      const along = yield* blocking(() => s.comms.collective(mesh.id, one, () => ranks, ident, (c) => c))
      groups.set(d, { dims: one, group: new CallGroup(along, ranks, stream) })
    }
    const ctx = contextFor(s, stream, kwargs, declaredGroup(dims, groups))
    const outcome = yield* Effect.result(Effect.suspend(() => {
      try {
        const out = fn!(ctx, ...args)
        return out instanceof Promise ? Effect.tryPromise({ try: () => out, catch: failed(m.function) }) : Effect.succeed(out)
      } catch (e) {
        return Effect.fail(failed(m.function)(e))
      }
    }))
    const broken = [...groups.values()].find(({ group }) => group.failure !== undefined)
    const mine = broken !== undefined ? RunOutcome.GroupFailed : outcome._tag === "Failure" ? RunOutcome.Failed : RunOutcome.Through
    // Only the members whose own run failed report it; the rest depend on them, as the controller's graph says.
    const report: Effect.Effect<never, unknown> | undefined = mine === RunOutcome.Failed ? Effect.fail(outcome._tag === "Failure" ? outcome.failure : undefined)
      : mine === RunOutcome.GroupFailed ? s.comms.failedOutside(mesh.id, broken!.dims, broken!.group.comm, ident, broken!.group.failure!)
      : undefined
    if (outcome._tag === "Success" && mine !== RunOutcome.Through) freeUnheld(s, flattenTensors(outcome.success))
    // A communicator that timed out or lost a peer cannot carry the end: its members all fail with that.
    if (broken !== undefined && broken.group.failure!.reason !== "invalid") return yield* report!
    const ended = yield* Effect.result(blocking(() => endTogether(comm, mine, stream)))
    if (ended._tag === "Failure") {
      const torn = s.comms.failedOutside(mesh.id, dims, comm, ident, ended.failure as CommError)
      return yield* report === undefined ? torn : torn.pipe(Effect.catch(() => report))
    }
    if (report !== undefined && ended.success === mine) return yield* report
    if (ended.success !== RunOutcome.Through) {
      if (outcome._tag === "Success" && mine === RunOutcome.Through) freeUnheld(s, flattenTensors(outcome.success))
      return yield* Effect.fail(blockedBy(ident))
    }
    defineResults(s, m, (outcome as { readonly success: unknown }).success, stream)
  }).pipe(Effect.ensuring(Effect.sync(() => freeUnheld(s, uploads))))
}

/** CallFunction run now (tryDefineNow), as command `ident` (a recording's call renumbers its commands): undefined when it finished here. */
export const callNow = (s: Session, m: CallFunction, ident = m.ident): Effect.Effect<void> | undefined =>
  tryDefineNow(s, ident, m.mutates.length === 0 ? m.results : [...m.results, ...m.mutates], () => {
    try {
      const stream = streamOf(s.env, m.stream)
      // Built-ins are quick for all but the largest tensors, and too frequent to announce.
      if (!isBuiltin(m.function)) announce(s, ident)
      if (m.mesh !== undefined) return callWithGroup(s, m, ident, stream)
      const uploads: Tensor[] = []
      return freeingAfter(s, uploads, () => {
        const args = lookup(s, m.args, stream, uploads) as unknown[]
        const kwargs = lookup(s, m.kwargs, stream, uploads) as Record<string, unknown>
        const ctx = contextFor(s, stream, kwargs)
        return invoke(s, m.function, (fn) => fn(ctx, ...args), (result) => defineResults(s, m, result, stream))
      })
    } catch (e) {
      letGoUploads(s, m)
      throw e
    }
  })

/** The wire form of a fetched value: tensors copied to host (into `buffers`' memory, each noted in `taken`); what the wire cannot carry is refused. */
const fetchedValue = (v: unknown, stream: Stream, buffers: BufferPool, taken: Uint8Array[]): Value => {
  if (v instanceof Tensor) {
    const data = buffers.take(v.nbytes)
    taken.push(data)
    v.copyOut(data, stream)
    return new HostTensor(v.dtype, v.shape, data)
  }
  // A float the client sent goes back as the float64 it was.
  if (v instanceof HostTensor || v instanceof FloatNumber) return v
  if (v === undefined || v === null) return null
  if (Array.isArray(v)) return v.map((x) => fetchedValue(x, stream, buffers, taken))
  if (v instanceof Uint8Array || ["boolean", "number", "bigint", "string"].includes(typeof v)) return v as Value
  if (typeof v !== "object" || Object.getPrototypeOf(v) !== Object.prototype)
    throw new WrongRefType({ message: `cannot fetch a ${kindOf(v)}` })
  return Object.fromEntries(Object.entries(v).map(([k, x]) => [k, fetchedValue(x, stream, buffers, taken)]))
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
        // One tensor, into the link's shared-memory segment when it is free and fits: announced
        // first, so the controller copies each chunk out as it lands; one copy, no host copy. Its
        // bytes there count against the memory limit until freed, as a host copy's would.
        const slot = v instanceof Tensor ? s.segments?.take(v.nbytes, (n) => holdHostCopy(s.native, n, `fetch of ${n} bytes to host`)) : undefined
        if (slot !== undefined) {
          const t = v as Tensor
          s.send({ _tag: "FetchShared", ident: m.ident, segment: slot.segment, dtype: t.dtype, shape: t.shape })
          try {
            stream.synchronize()
            const memory = t.hostBytes()
            if (memory !== undefined) WorkerSegments.write(slot, memory)
            else {
              t.copyOut(slot.view, stream)
              slot.written(t.nbytes)
            }
          } catch (e) {
            slot.written(-1)
            s.segments!.untake(slot.segment)
            throw e
          }
          return
        }
        const bytes = hostBytes(v)
        const release = holdHostCopy(s.native, bytes, `fetch of ${bytes} bytes to host`)
        const taken: Uint8Array[] = []
        try {
          s.send({ _tag: "FetchResult", ident: m.ident, value: fetchedValue(v, stream, s.hostBuffers, taken) })
        } finally {
          // Once the socket took the reply, its host copies are recycled for the next fetch.
          s.whenSent(() => {
            release()
            for (const data of taken) s.hostBuffers.give(data)
          })
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
