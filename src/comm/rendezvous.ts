/**
 * Opening a communicator through the store. Every member creates its half (Comm.create),
 * publishes the address bytes under `<key>/<group rank>`, reads every member's, and connects.
 * The store is the only meeting point: the shim opens no rendezvous sockets of its own.
 */
import { Duration, Effect } from "effect"
import { Comm } from "../../ffi/comm.ts"
import type { Native } from "../../ffi/native.ts"
import type { StoreApi } from "../store/api.ts"
import { CommError } from "./errors.ts"

export interface RendezvousOptions {
  readonly native: Native
  readonly store: StoreApi
  /**
   * Names this communicator in the store. The store never forgets a key, so each
   * communicator ever made through one store needs its own key (a group opened again
   * takes a new one).
   */
  readonly key: string
  /** Global ranks of the members, in group order: position i becomes group rank i. */
  readonly members: ReadonlyArray<number>
  /** This process's global rank, one of `members`. */
  readonly rank: number
  /** Bounds the wait for the other members here, and every later call on the communicator. */
  readonly timeoutMs: number
  /** The address the transport binds and advertises (cpu); "" or absent: loopback. */
  readonly hostname?: string
}

const failure = (key: string, e: unknown): CommError =>
  new CommError({ reason: "rendezvous", message: `rendezvous ${key}: ${e instanceof Error ? e.message : String(e)}`, cause: e })

/** A connected communicator over `members`; every member calls this with the same key. */
export const rendezvous = Effect.fnUntraced(function* (o: RendezvousOptions) {
  const groupRank = o.members.indexOf(o.rank)
  if (groupRank < 0) return yield* failure(o.key, `rank ${o.rank} is not a member of [${o.members.join(", ")}]`)
  const comm = yield* Effect.try({
    try: () => Comm.create(o.native, groupRank, o.members.length, o.timeoutMs, o.hostname ?? ""),
    catch: (e) => failure(o.key, e),
  })
  const connected = Effect.gen(function* () {
    const address = yield* Effect.try({ try: () => comm.address(), catch: (e) => failure(o.key, e) })
    yield* o.store.set(`${o.key}/${groupRank}`, address)
    const timeout = Duration.millis(o.timeoutMs)
    const addresses = yield* Effect.forEach(o.members, (_, r) => o.store.get(`${o.key}/${r}`, timeout))
    // Blocks until every pair is connected (or the timeout): Gloo's own threads do the work.
    yield* Effect.try({ try: () => comm.connect(addresses), catch: (e) => failure(o.key, e) })
    return comm
  })
  return yield* connected.pipe(
    Effect.mapError((e) => (e instanceof CommError ? e : failure(o.key, e))),
    Effect.onError(() => Effect.sync(() => destroyQuietly(comm))),
  )
})

// The rendezvous already failed; a failure to free the half-made communicator adds nothing.
const destroyQuietly = (comm: Comm): void => {
  try {
    comm.destroy()
  } catch {}
}
