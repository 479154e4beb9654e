/**
 * Recordings (Monarch's `compile`): a step's commands recorded on its first call for a given
 * signature, defined once on each worker (DefineRecording), and replayed by every later call
 * with one CallRecording per worker that maps the call's tensors, replay parameters and results
 * to refs.
 *
 * The signature is what the commands may depend on: each tensor argument's dtype, shape, mesh
 * and stream (and which arguments are the same tensor), every other argument, numbers included
 * (a JavaScript number cannot be traced, so nothing proves one unused: a new value traces
 * again), the structure of the arguments, and what the step read of an object given by
 * identity (a class instance: read through a proxy while tracing, read again on every call).
 * The numbers the program names with param() are replay parameters instead: checked on every
 * trace by tracing once more with other values (sending nothing), a parameter found where it
 * was, with its new value, is sent with each call; one whose value changes the commands, the
 * tensors' dtypes or shapes, or that goes in through arithmetic is refused, naming it. Every
 * trace after the first says why it was made.
 *
 * A call takes one ident per recorded command, so that a failure on a worker is reported
 * against the command that failed (its label and call site); on the controller each result
 * depends only on the commands and inputs its value came from, so a failure poisons exactly
 * what it would have outside a recording. Temporaries live only during a call on the workers
 * and never on the controller; their handles from the trace are retired. A replay's handles
 * carry what the trace's had: dtype, shape and placement.
 *
 * The rooms: signature.ts and params.ts (what a call is keyed by), reader.ts (what a step reads
 * of its objects), recorder.ts (the sink a trace swaps in for Core), diff.ts and rewrite.ts (two
 * traces compared, messages rewritten), build.ts (a trace made a recording), check.ts (a first
 * trace checked by tracing again), replay.ts (one call), cache.ts (a step's recordings) and
 * budget.ts (what the workers hold of every step's). Each takes the Core it works on; only
 * compile() below reads it, from the Controller service the call runs under.
 */
import { Effect } from "effect"
import { autocastDtype } from "../autocast.ts"
import { Controller } from "../controller.ts"
import type { Core } from "../core.ts"
import { ControllerError } from "../errors.ts"
import { CallSite } from "../sites.ts"
import { type Recording, build } from "./build.ts"
import { collected, deleteOnWorkers, drop, evictor, mismatch, unlikeRead } from "./cache.ts"
import { checkTrace, verifyAgainst } from "./check.ts"
import type { WithParams } from "./params.ts"
import { stepArgs } from "./reader.ts"
import { call } from "./replay.ts"
import { type Flat, flatten } from "./signature.ts"
import { Held, Recorder, recordStep } from "./recorder.ts"

export interface CompileOptions {
  /** Recorder the second call too and fail it, naming both call sites, if it issued other commands. */
  readonly verify?: boolean
  /** Told why each trace after the first was made (default: a line on stderr). */
  readonly onRetrace?: (why: string) => void
  /** The step's name in messages (default: the function's name). */
  readonly name?: string
  /**
   * Recordings kept at once (default 8), one per signature: a trace past that deletes the one
   * called least recently on the workers (DeleteRecording); its signature traces again if it comes back.
   */
  readonly maxRecordings?: number
  /**
   * Calls per signature run op by op before it is traced (default 0), so that state a step
   * makes on its first call (an optimizer's moments, a momentum buffer) exists before the
   * step is recorded; recorded, that call's commands would make it afresh on every replay.
   */
  readonly warmup?: number
}

/** A compiled step: call it like the step; it returns an Effect of the step's result. */
export interface Compiled<A extends ReadonlyArray<unknown>, R, E, Rq> {
  (...args: { [K in keyof A]: WithParams<A[K]> }): Effect.Effect<R, E | ControllerError, Rq | Controller>
  /** Traces made so far (the first call's included). */
  readonly traces: number
  /** Why each trace after the first was made. */
  readonly retraces: ReadonlyArray<string>
  /** The numbers of its recordings defined on the workers now (DeleteRecording's). */
  readonly recordings: ReadonlyArray<number>
  /**
   * Deletes its recordings on the workers (after the calls already made, which still run);
   * a later call is refused. Dropping the compiled step does the same once it is collected.
   */
  dispose(): void
  [Symbol.dispose](): void
}

/** Signatures a compiled step counts warmup calls of at once (numbers that change on every call make a new one each). */
export const WARMING = 64

/**
 * Compiles `step`: its first call for a signature records the commands it issues and defines
 * them on the workers; every later call replays them with one message per worker. The step is
 * model code (op calls; sync, or an Effect using mesh.reduce, send, borrow ...); what it
 * returns (tensors anywhere in arrays and objects) is what a call returns, with this call's
 * tensors. Its temporaries die with each call. A fetch inside is refused.
 */
export function compile<A extends ReadonlyArray<unknown>, R, E = never, Rq = never>(step: (...args: A) => Effect.Effect<R, E, Rq>, options?: CompileOptions): Compiled<A, R, E, Rq>
export function compile<A extends ReadonlyArray<unknown>, R>(step: (...args: A) => R, options?: CompileOptions): Compiled<A, R, never, never>
export function compile<A extends ReadonlyArray<unknown>, R, E, Rq>(step: (...args: A) => unknown, options: CompileOptions = {}): Compiled<A, R, E, Rq> {
  const name = options.name ?? (step.name || "step")
  const onRetrace = options.onRetrace ?? ((why: string) => console.error(`monarch: ${why}`))
  const maxRecordings = options.maxRecordings ?? 8
  if (!(Number.isInteger(maxRecordings) && maxRecordings >= 1)) throw new ControllerError({ reason: "argument", message: `compile(${name}): maxRecordings must be a positive integer, got ${maxRecordings}` })
  const cache = new Map<string, Array<Recording<R>>>()
  const warmup = options.warmup ?? 0
  if (!(Number.isInteger(warmup) && warmup >= 0)) throw new ControllerError({ reason: "argument", message: `compile(${name}): warmup must be a non-negative integer, got ${warmup}` })
  /** Calls so far (Recording.usedAt's clock); traces under way (dispose waits for none). */
  let clock = 0, tracingNow = 0, disposed = false
  /** Per signature not traced yet, the calls run op by op so far (warmup); the oldest forgotten past WARMING. */
  const warmed = new Map<string, number>()
  let last: { args: ReadonlyArray<unknown>; recording: Recording<R> } | undefined
  const retraces: string[] = []
  let traces = 0

  const newRecording = (core: Core, held: Held, args: ReadonlyArray<unknown>, flat: Flat, called: CallSite | undefined) =>
    Effect.gen(function* () {
      const first = yield* recordStep<A, R, E, Rq>(core, held, name, step, args, flat.params, called)
      traces++
      const at = yield* checkTrace<A, R, E, Rq>(core, held, name, step, args, flat, first.trace, called)
      const { recording, defines } = build(core, name, first, flat, at)
      // Room on the workers first: the deletions go before the definition.
      const tooBig = core.recordings.admit(recording.id, first.trace.commands.length, evictor(cache, recording))
      if (tooBig !== undefined) return yield* new ControllerError({ reason: "not-replayable", message: `compile(${name}): ${tooBig}` })
      for (const d of defines) core.post(d.ranks, d.message)
      return recording
    })

  const find = (flat: Flat) => cache.get(flat.key)?.find((r) => unlikeRead(r, flat) === undefined)

  /** Keeps a new recording; past maxRecordings, the one called least recently is deleted. */
  const keep = (key: string, recording: Recording<R>) => {
    cache.set(key, [...(cache.get(key) ?? []), recording])
    const all = [...cache.values()].flat()
    if (all.length <= maxRecordings) return
    drop(cache, all.reduce((a, b) => (b.usedAt < a.usedAt ? b : a)))
  }
  const needsTrace = (r: Recording<R> | undefined) => r === undefined || (options.verify === true && r.calls === 1)

  /** A call that traces: a new signature, or verify's second call. */
  const tracing = (core: Core, held: Held, args: ReadonlyArray<unknown>, flat: Flat, found: Recording<R> | undefined, called: CallSite | undefined) =>
    Effect.gen(function* () {
      let recording = found
      if (recording === undefined) {
        if (last !== undefined) {
          const why = `compile(${name}): tracing again: ${mismatch(last.recording, flatten(last.args, true), flatten(args, true))}`
          retraces.push(why)
          onRetrace(why)
        }
        recording = yield* newRecording(core, held, args, flat, called)
        warmed.delete(flat.key)
        recording.usedAt = ++clock
        keep(flat.key, recording)
      } else {
        const again = yield* recordStep<A, R, E, Rq>(core, held, name, step, args, flat.params, called)
        traces++
        const diverged = verifyAgainst(recording, again.trace, flat)
        if (diverged !== undefined)
          return yield* new ControllerError({ reason: "not-replayable", message: `compile(${name}, { verify: true }): the step's second call issued other commands than its first: ${diverged}` })
      }
      last = { args, recording }
      return yield* call(core, name, recording, flat)
    })

  const compiled = (...args: ReadonlyArray<unknown>) => {
    const flat = flatten(args), scopeDtype = autocastDtype()
    // Where the program calls the step (as Core.site is for each command), when it will be traced.
    const called = needsTrace(find(flat)) ? CallSite.capture(4) : undefined // this, `compiled`, the user's, one spare
    return Effect.flatMap(Effect.service(Controller), (ctl) => {
      const core = ctl.core
      if (disposed) return Effect.fail(new ControllerError({ reason: "disposed", message: `compile(${name}) was disposed: its recordings are deleted; compile the step again to call it` }))
      if (core.sink instanceof Recorder) return Effect.fail(new ControllerError({ reason: "not-recordable", message: `compile(${name}) was called while compile(${core.sink.name}) records its step; call it outside, or let the outer step be one recording` }))
      // the step runs when its Effect does, after an autocast scope around this call has closed
      if (scopeDtype !== null) return Effect.fail(new ControllerError({ reason: "not-recordable", message: `compile(${name}) was called inside autocast("${scopeDtype}"), which ends before the step runs; call autocast inside the step` }))
      const found = find(flat)
      if (found === undefined && (warmed.get(flat.key) ?? 0) < warmup) {
        warmed.set(flat.key, (warmed.get(flat.key) ?? 0) + 1)
        if (warmed.size > WARMING) warmed.delete(warmed.keys().next().value!)
        return Effect.suspend(() => {
          const out = step(...(stepArgs(args, flat.params) as unknown as A))
          return (Effect.isEffect(out) ? out : Effect.succeed(out)) as Effect.Effect<R, E | ControllerError, Rq>
        })
      }
      // What the step released of the tensors outside it goes after the call (that reads them), or once the trace failed.
      if (needsTrace(found)) {
        tracingNow++
        const held = new Held(core.sink)
        return Effect.ensuring(tracing(core, held, args, flat, found, called), Effect.sync(() => {
          tracingNow--
          held.release()
        }))
      }
      found!.usedAt = ++clock
      last = { args, recording: found! }
      return call(core, name, found!, flat)
    })
  }
  const dispose = () => {
    if (tracingNow > 0) throw new ControllerError({ reason: "in-use", message: `compile(${name}).dispose() was called while its step is being traced (a recording in use cannot be deleted); dispose it after the call` })
    if (disposed) return
    disposed = true
    collected.unregister(compiled)
    for (const rs of cache.values()) rs.forEach(deleteOnWorkers)
    cache.clear()
  }
  collected.register(compiled, cache as Map<string, Array<Recording<unknown>>>, compiled)
  return Object.defineProperties(compiled, {
    traces: { get: () => traces },
    retraces: { get: () => retraces },
    recordings: { get: () => [...cache.values()].flat().map((r) => r.id) },
    dispose: { value: dispose },
    [Symbol.dispose]: { value: dispose },
  }) as unknown as Compiled<A, R, E, Rq>
}
