/**
 * Streams, and how the worker runs work: the execution model every handler relies on.
 *
 * One JS thread runs the whole worker: the command loop (loop.ts), the once-a-second Status
 * fiber, the link's socket reader (link.ts), and every shim call.
 * - Commands run to completion, one at a time, in the order they arrived. A handler that
 *   returns an Effect (a first import, a promise, a communicator to open) is awaited before
 *   the next command starts, so every rank reaches each collective in the same order.
 * - Native calls block the loop, but one: an all-reduce on an open communicator is started on
 *   the communication thread (Comm.allReduceStart) and its Reduce returns at once; the commands
 *   that name its tensors wait for it, and the rest go on (inflight.ts; docs/design.md, The
 *   execution model). Kernels on cpu, and other collectives and sends anywhere, return only
 *   when their work is done, waiting for the peers inside the shim (Gloo's and NCCL's own
 *   threads move the bytes). Meanwhile no Status goes out and no frame is read (the kernel
 *   buffers them). On cuda, kernels and copies are queued on their stream and return at once;
 *   only what needs a result on the host (a fetch's copy, a synchronize) waits for the device.
 * - What bounds the wait: every communication call carries the comm timeout
 *   (MONARCH_COMM_TIMEOUT_MS) and then fails as a CommError (timeout, or peer-lost when the
 *   transport sees the peer go), never a hang. The store a rank hosts (torchrun without an
 *   agent store) runs on its own thread (store/serverThread.ts), so the other ranks' rendezvous
 *   go on while this loop is blocked. The controller, seeing no Status from a blocked rank,
 *   reports the command as hung after hangAfterMs, naming the ranks that have not passed it;
 *   a command that may hold the thread first sends a Status up to itself (session.ts,
 *   announce), so the report names the command the rank is in.
 *   Between commands the loop gives the event loop a turn once commands have held it for a
 *   while (session.ts, ioTurn), so a closed link is seen between long commands.
 *
 * `blocking` is the seam through which work that waits on peers on this thread goes (collectives
 * and sends run here; a communicator's rendezvous is an Effect of its own, in src/comm).
 *
 * Streams order device work; a borrow orders one stream's use of a tensor against another's
 * with events, not host synchronisation (handlers/borrows.ts runs the four steps).
 */
import { Effect } from "effect"
import type { Native } from "../../ffi/native.ts"
import { Event, Stream } from "../../ffi/stream.ts"
import type { Ref } from "../protocol/values.ts"
import { getAs, type RefEnv } from "./refs.ts"

/**
 * Runs work that may wait on the peers (a collective, a send); a throw is its failure. Work
 * that must first open a communicator returns the Effect that does both, run in turn.
 */
export const blocking = <A>(work: () => A | Effect.Effect<A, unknown>): Effect.Effect<A, unknown> =>
  Effect.flatten(Effect.try({
    try: () => {
      const result = work()
      return Effect.isEffect(result) ? result : Effect.succeed(result)
    },
    catch: (e) => e,
  }))

/** The stream `ref` names; throws UnknownRef, WrongRefType or the stored poison. */
export const streamOf = (env: RefEnv, ref: Ref): Stream => getAs(env, ref, Stream, "a stream")

/**
 * A borrow's events: `created` on `from` when it is made, waited for by `to` at the first
 * use; `lastUse` on `to` after the last use, waited for by `from` at the drop.
 */
export class Borrow {
  /** Recorded on `from` at creation; gone once the first use waited for it. */
  created: Event | null
  /** Whether the first use happened (a borrow never used needs no wait at its drop). */
  used = false
  lastUse: Event | null = null

  constructor(readonly from: Stream, readonly to: Stream) {
    this.created = from.record()
  }

  /** `to` waits for what `from` had issued when the borrow was made; once. */
  firstUse(): void {
    if (this.created === null) return
    this.to.wait(this.created)
    this.created.destroy()
    this.created = null
    this.used = true
  }

  /** Marks where on `to` the last use so far ends. */
  markLastUse(): void {
    if (!this.used) return
    this.lastUse?.destroy()
    this.lastUse = this.to.record()
  }

  /** `from` waits for the uses on `to`: to the last use marked, else to `to`'s work so far. */
  drop(native: Native): void {
    this.created?.destroy()
    this.created = null
    if (!this.used) return
    const done = this.lastUse ?? Event.create(native)
    try {
      if (done !== this.lastUse) done.record(this.to)
      this.from.wait(done)
    } finally {
      done.destroy()
      this.lastUse = null
    }
  }

  /** Destroys the events still held (the borrow is forgotten without its drop). */
  destroy(): void {
    this.created?.destroy()
    this.lastUse?.destroy()
    this.created = null
    this.lastUse = null
  }
}
