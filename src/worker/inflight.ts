/**
 * Collectives in flight (docs/design.md, The execution model): each all-reduce a Reduce started
 * on the communication thread (Comm.allReduceStart) and that is not yet settled. Until it is,
 * its tensors (the memory of its input and output) are the work's:
 * - a command that names one (reads or writes it) waits for it first: `needs` says up to which
 *   work, and the loop settles the works up to there before the command runs;
 * - a command that takes every communicator or waits for everything (a send, a group call, a
 *   Reduce that runs here, RequestStatus, Exit, the checkpoint commands) settles them all;
 * - one of its tensors that the env lets go is freed once the work is settled (`defer`), so
 *   neither the memory nor its pooled handle is handed out again under the thread.
 * Works settle in the order they started (the thread runs them in that order): seen done, then
 * their Reduce finished as it would have finished had it run through at once (`finish`: a
 * failure poisons its result and is reported; a communicator it left unusable goes through the
 * comm recovery). Until then Status stays at the earliest work's ident, so a hang report names
 * the collective a rank is waiting in.
 */
import { Effect } from "effect"
import type { Comm, Work } from "../../ffi/comm.ts"
import { Tensor } from "../../ffi/tensor.ts"
import type { WorkerMessage } from "../protocol/messages.ts"
import { nowMicros } from "../trace/writer.ts"
import { HostTensor, Ref } from "../protocol/values.ts"
import type { RefEnv } from "./refs.ts"

export interface Pending {
  /** The Reduce's ident. */
  readonly ident: number
  /** For the timeline: what ran, and on which stream. */
  readonly name: string
  readonly stream: number
  readonly comm: Comm
  readonly work: Work
  /** The tensors the work reads or writes. */
  readonly holds: ReadonlyArray<Tensor>
  /** Those of them no ref holds (a poisoned input's zeros, an output not defined): freed once it is settled. */
  readonly owns: ReadonlyArray<Tensor>
  /** Finishes the Reduce once its work is done (failure: undefined when it went through). */
  readonly finish: (failure: unknown) => Effect.Effect<void> | undefined
}

/** How long the idle loop waits on the first work at a time before it looks at the link again (microseconds). */
export const IDLE_WAIT_US = 1000

/** Commands that settle every work before they run (see the top). */
const SETTLE_ALL: ReadonlySet<WorkerMessage["_tag"]> = new Set<WorkerMessage["_tag"]>([
  "SendTensor", "RequestStatus", "Exit", "SaveShards", "CommitCheckpoint", "ReadCheckpoint", "LoadShards", "DropCheckpoint",
])

/** Commands that wait for nothing: they name no tensor's contents (a tensor they let go is deferred), or their inner commands wait each for itself. */
const WAIT_NONE: ReadonlySet<WorkerMessage["_tag"]> = new Set<WorkerMessage["_tag"]>([
  "DeleteRefs", "CommandGroup", "CallRecording", "DefineRecording", "DeleteRecording", "PeerLost", "Withheld", "ControllerProof", "CreateStream",
])

/**
 * What must settle before `m` runs: the works already done (a look), then those `m` waits for;
 * undefined, costing a lookup, when there is nothing to do.
 */
export const settleFor = (inflight: InFlight, env: RefEnv, m: WorkerMessage): Effect.Effect<void> | undefined => {
  if (inflight.size === 0) return undefined
  const done = inflight.settleDone()
  if (done !== undefined) return Effect.andThen(done, Effect.suspend(() => settleFor(inflight, env, m) ?? Effect.void))
  const last = inflight.needs(env, m)
  return last < 0 ? undefined : inflight.settleThrough(last)
}

export class InFlight {
  private readonly queue: Pending[] = []
  /** Tensor memory (a root) -> how many works hold it. */
  private readonly held = new Map<Tensor, number>()
  /** Tensors the env let go while a work held their memory. */
  private deferred: Tensor[] = []
  /** Told of each work as it settles, and of each wait for one (the timeline, when tracing; microseconds since the epoch). */
  onSettled: ((p: Pending) => void) | undefined = undefined
  onWaited: ((p: Pending, from: number, to: number) => void) | undefined = undefined

  get size(): number {
    return this.queue.length
  }

  /** The ident of the earliest work not yet settled; Infinity when none. */
  get earliest(): number {
    return this.queue.length === 0 ? Number.POSITIVE_INFINITY : this.queue[0]!.ident
  }

  start(p: Pending): void {
    this.queue.push(p)
    for (const t of p.holds) this.held.set(t.root, (this.held.get(t.root) ?? 0) + 1)
  }

  /** Whether a work holds `t`'s memory. */
  holds(t: Tensor): boolean {
    return this.held.size > 0 && this.held.has(t.root)
  }

  /** Keeps `t` to free once no work holds its memory; false (keeping nothing) when none does. */
  defer(t: Tensor): boolean {
    if (!this.holds(t)) return false
    this.deferred.push(t)
    return true
  }

  /**
   * The index of the last work `m` must wait for before it runs (every work for the commands
   * that settle all), or -1: none of its refs holds a tensor a work holds.
   */
  needs(env: RefEnv, m: WorkerMessage): number {
    if (this.queue.length === 0 || WAIT_NONE.has(m._tag)) return -1
    if (SETTLE_ALL.has(m._tag) || (m._tag === "CallFunction" && m.mesh !== undefined)) return this.queue.length - 1
    return this.lastHolding(env, m, -1)
  }

  private lastHolding(env: RefEnv, v: unknown, last: number): number {
    if (v instanceof Ref) {
      const t = env.peek(v.id)
      return t instanceof Tensor && this.holds(t) ? Math.max(last, this.indexOf(t)) : last
    }
    if (v === null || typeof v !== "object" || v instanceof HostTensor || ArrayBuffer.isView(v)) return last
    if (Array.isArray(v)) {
      for (const x of v) last = this.lastHolding(env, x, last)
      return last
    }
    for (const key in v) last = this.lastHolding(env, (v as Record<string, unknown>)[key], last)
    return last
  }

  /** The last work holding t's memory. */
  private indexOf(t: Tensor): number {
    const root = t.root
    for (let i = this.queue.length - 1; i >= 0; i--) if (this.queue[i]!.holds.some((h) => h.root === root)) return i
    return -1
  }

  /** Settles the works up to index `last` (or all: -1 settles none), in order, waiting for each. */
  settleThrough(last: number): Effect.Effect<void> {
    const self = this
    return Effect.gen(function* () {
      for (let n = last + 1; n > 0 && self.queue.length > 0; n--) {
        const rest = self.settleFirst(-1)
        if (rest) yield* rest
      }
    })
  }

  settleAll(): Effect.Effect<void> {
    return this.settleThrough(this.queue.length - 1)
  }

  /** Settles the works up to the last one on `comm` (a call on it from this thread comes next). */
  settleOn(comm: Comm): Effect.Effect<void> {
    return this.settleThrough(this.queue.findLastIndex((p) => p.comm === comm))
  }

  /**
   * Settles the works at the front that are done, waiting up to `microseconds` for the first
   * (0: only a look); undefined when there was nothing more to do here.
   */
  settleDone(microseconds = 0): Effect.Effect<void> | undefined {
    let rest: Effect.Effect<void> | undefined
    while (this.queue.length > 0 && rest === undefined) {
      const first = this.queue[0]!
      let done: boolean
      try {
        done = first.work.wait(microseconds)
      } catch {
        done = true
      }
      if (!done) return undefined
      microseconds = 0
      rest = this.settleFirst(0)
    }
    return rest
  }

  /** Waits for the first work (up to `microseconds`; negative: until done), takes it off the queue and finishes it. */
  private settleFirst(microseconds: number): Effect.Effect<void> | undefined {
    const p = this.queue[0]!
    let failure: unknown
    const from = this.onWaited !== undefined && !p.work.done ? nowMicros() : 0
    try {
      p.work.wait(microseconds)
    } catch (e) {
      failure = e
    }
    if (from > 0) this.onWaited!(p, from, nowMicros())
    this.queue.shift()
    for (const t of p.holds) {
      const n = this.held.get(t.root)! - 1
      if (n > 0) this.held.set(t.root, n)
      else this.held.delete(t.root)
    }
    this.onSettled?.(p)
    const release = () => {
      for (const t of p.owns) t.free()
      this.freeReleased()
    }
    let rest: Effect.Effect<void> | undefined
    try {
      rest = p.finish(failure)
    } finally {
      if (rest === undefined) release()
    }
    return rest?.pipe(Effect.ensuring(Effect.sync(release)))
  }

  /** Frees the deferred tensors no work holds any more. */
  private freeReleased(): void {
    if (this.deferred.length === 0) return
    const keep: Tensor[] = []
    for (const t of this.deferred) if (this.holds(t)) keep.push(t)
    else t.free()
    this.deferred = keep
  }

  /** At the session's end: waits for every work and frees what they held; their outcomes are no one's now. */
  drainNow(): void {
    for (const p of this.queue) {
      try {
        p.work.wait(-1)
      } catch {
        // The session is ending: nothing reads its result.
      }
    }
    for (const p of this.queue.splice(0)) for (const t of p.owns) t.free()
    this.held.clear()
    this.freeReleased()
  }
}
