/**
 * A worker's communicators: the world one, opened at start-up, and one per group of a mesh
 * (the ranks that differ from this one only in some dims), opened through the store at the
 * group's first collective and kept until the mesh goes. This is the only place that names
 * communicators in the store and turns the shim's failures into CommErrors, naming the
 * group's members by their global ranks.
 *
 * A group's communicator that a timeout or a lost peer left unusable is torn down, a note
 * saying at which command goes in the store, and the group's next collective opens a new one
 * once its members answer. Every member runs the same commands, so an opening is keyed by the
 * command that opens it: members can only ever meet within one command. A member whose
 * collective went through while a peer's failed keeps the old communicator until its next
 * collective on it fails; the peer's note then says the peer lives and has moved on, so it
 * opens the new one at once and runs the collective again on it.
 *
 * A rank the controller says is lost (`peerLost`) fails, at once, every collective and send
 * whose members hold it, and an opening that waits for it in the store stops waiting: its
 * members would otherwise wait out the comm timeout for an address that never comes.
 */
import { Duration, Effect } from "effect"
import type { Comm } from "../../ffi/comm.ts"
import { ShimError, type Native } from "../../ffi/native.ts"
import type { StoreApi } from "../store/api.ts"
import { CommError, reasonOfShimStatus, type CommReason } from "./errors.ts"
import { rendezvous } from "./rendezvous.ts"

/** Connects a communicator over `members` (global ranks, in group order) agreed on by `key`. */
export type Connect = (key: string, members: ReadonlyArray<number>) => Effect.Effect<Comm, CommError>

/** Where members leave word that they gave up a communicator: `abandoned(key)` is the command they did it at. */
export interface Notes {
  readonly abandoned: (key: string) => Effect.Effect<number | undefined>
  readonly abandon: (key: string, ident: number) => Effect.Effect<void>
  /** Deletes `keys` from the store (bounded: a store that is gone holds nothing up). */
  readonly forget: (keys: ReadonlyArray<string>) => Effect.Effect<void>
}

/** No notes (one member, tests): a failed communicator is only opened again at the next collective. */
const NO_NOTES: Notes = { abandoned: () => Effect.succeed(undefined), abandon: () => Effect.void, forget: () => Effect.void }

interface Group {
  readonly comm: Comm
  readonly members: ReadonlyArray<number>
  /** The store key it was opened under. */
  readonly key: string
}

/** Failures after which a communicator cannot be used again (the shim keeps the first failure). */
const UNUSABLE_AFTER: ReadonlyArray<CommReason> = ["timeout", "peer-lost"]

/** How long a note may take to read or write: a store that is gone must not hold a failure up. */
const NOTE_MS = 2000

export interface CommunicatorsOptions {
  readonly native: Native
  readonly store: StoreApi
  /** This process's global rank, and the number of ranks. */
  readonly rank: number
  readonly world: number
  /** Bounds each rendezvous and every call on the communicators. */
  readonly timeoutMs: number
  /** The address the transport binds and advertises (cpu). */
  readonly hostname: string
}

const decoder = new TextDecoder()

/** What the shim says carries a communicator's data (Comm.transport), for the log (MONARCH_LOG=info). */
const describeTransport = (transport: string, hostname: string): string => {
  switch (transport) {
    case "tcp": return `tcp (Gloo's TCP pairs, from ${hostname})`
    case "shm+tcp": return `shm+tcp (every member on this host: all_reduce through shared memory, the rest over Gloo's TCP pairs from ${hostname})`
    case "self": return "self (one member)"
    case "nccl": return "nccl (NCCL picks its own path; NCCL_DEBUG=INFO says which)"
    default: return transport
  }
}

export class Communicators {
  /** Mesh id -> dims ("dp,tp") -> the group's communicator. */
  private readonly groups = new Map<number, Map<string, Group>>()
  /** The keys of every group communicator opened since the last `forget` (its members' addresses and note under each). */
  private readonly opened = new Map<string, number>()
  /** Ranks the controller said are lost, until the next controller (`forget`). */
  private readonly lost = new Set<number>()
  /** Openings in progress, each told when a rank is lost. */
  private readonly waiting = new Set<() => void>()

  constructor(
    /** The communicator over every rank (sends go through it). */
    readonly world: Comm,
    private readonly connect: Connect,
    private readonly notes: Notes = NO_NOTES,
  ) {}

  /** The world communicator, then the rest through the store (the worker's start-up). */
  static open(o: CommunicatorsOptions): Effect.Effect<Communicators, CommError> {
    const connect: Connect = (key, members) =>
      rendezvous({ native: o.native, store: o.store, key, members, rank: o.rank, timeoutMs: o.timeoutMs, hostname: o.hostname }).pipe(
        Effect.tap((comm) => Effect.logInfo(`communicator ${key} over ranks [${members.join(", ")}]: ${describeTransport(comm.transport(), o.hostname || "127.0.0.1")}`)),
      )
    const notes: Notes = {
      abandoned: (key) => o.store.check([`${key}/abandoned`]).pipe(
        Effect.flatMap((there) => (there ? o.store.get(`${key}/abandoned`) : Effect.succeed(undefined))),
        Effect.map((v) => (v === undefined ? undefined : Number(decoder.decode(v)))),
        Effect.timeout(Duration.millis(NOTE_MS)),
        Effect.orElseSucceed(() => undefined),
      ),
      abandon: (key, ident) => o.store.set(`${key}/abandoned`, String(ident)).pipe(Effect.timeout(Duration.millis(NOTE_MS)), Effect.ignore),
      forget: (keys) => Effect.forEach(keys, (k) => o.store.deleteKey(k), { concurrency: 16, discard: true }).pipe(Effect.timeout(Duration.millis(NOTE_MS)), Effect.ignore),
    }
    const everyone = Array.from({ length: o.world }, (_, r) => r)
    return connect("comm/world", everyone).pipe(Effect.map((world) => new Communicators(world, connect, notes)))
  }

  /**
   * Runs `op` on mesh `mesh`'s group over `dims` for command `ident`: on the group's
   * communicator, opened first if needed (the group's members from `members`). Synchronous
   * when the communicator is there and `op` works (the common case); otherwise the Effect that
   * finishes it, failing with a CommError that names global ranks.
   */
  collective<A>(mesh: number, dims: ReadonlyArray<string>, members: () => ReadonlyArray<number>, ident: number, op: (comm: Comm) => A): A | Effect.Effect<A, CommError> {
    if (this.lost.size > 0) {
      const gone = this.lostAmong(members())
      if (gone !== undefined) return Effect.fail(gone)
    }
    const group = this.groups.get(mesh)?.get(dims.join(","))
    if (group === undefined) return Effect.flatMap(this.open(mesh, dims, members(), ident), (g) => this.attempt(mesh, dims, g, ident, op, true))
    try {
      return op(group.comm)
    } catch (e) {
      return this.failed(mesh, dims, group, ident, e, op, true)
    }
  }

  /**
   * The open communicator of mesh `mesh`'s group over `dims`, when a collective may start on
   * it now: open, and no member known lost. Undefined otherwise (`collective` opens it, or
   * fails at once).
   */
  current(mesh: number, dims: ReadonlyArray<string>, members: () => ReadonlyArray<number>): Comm | undefined {
    if (this.lost.size > 0 && this.lostAmong(members()) !== undefined) return undefined
    return this.groups.get(mesh)?.get(dims.join(","))?.comm
  }

  /**
   * A collective started on `comm` for command `ident` (Comm.allReduceStart) failed with `e`
   * once done: what `collective` does with a failure of `op` (tear down, note, and once more
   * on a new communicator when a peer went on), when `comm` is still the group's. When an
   * earlier failure took it down after this one started, `op` runs as the collective would
   * have run then: on the group's next communicator, opened for it.
   */
  failedStarted<A>(mesh: number, dims: ReadonlyArray<string>, members: () => ReadonlyArray<number>, comm: Comm, ident: number, e: unknown, op: (comm: Comm) => A): Effect.Effect<A, CommError> {
    const group = this.groups.get(mesh)?.get(dims.join(","))
    if (group?.comm === comm) return this.failed(mesh, dims, group, ident, e, op, true)
    if (!UNUSABLE_AFTER.includes(commError(e).reason)) return Effect.fail(inGlobalRanks(commError(e), members()))
    return Effect.suspend(() => {
      const again = this.collective(mesh, dims, members, ident, op)
      return Effect.isEffect(again) ? again : Effect.succeed(again)
    })
  }

  /**
   * Rank `rank` is gone (the controller said so): every collective over it fails from now on,
   * and the openings waiting for it stop.
   */
  peerLost(rank: number): void {
    if (this.lost.has(rank)) return
    this.lost.add(rank)
    for (const wake of [...this.waiting]) wake()
  }

  /** The CommError of a call whose members (global ranks) hold a rank known lost, if they do. */
  lostAmong(members: ReadonlyArray<number>, what = "the collective"): CommError | undefined {
    if (this.lost.size === 0) return undefined
    const gone = members.find((r) => this.lost.has(r))
    return gone === undefined ? undefined : new CommError({ reason: "peer-lost", message: `${what} needs rank ${gone}, which the controller reported lost (group of ranks [${members.join(", ")}])` })
  }

  /** Fails once a member of `members` is reported lost (the opening racing it stops waiting). */
  private untilLost(key: string, members: ReadonlyArray<number>): Effect.Effect<never, CommError> {
    return Effect.callback<never, CommError>((resume) => {
      const wake = () => {
        const gone = this.lostAmong(members, `rendezvous ${key}`)
        if (gone !== undefined) resume(Effect.fail(gone))
      }
      this.waiting.add(wake)
      return Effect.sync(() => this.waiting.delete(wake))
    })
  }

  /** `op` on a group just opened, as an Effect. */
  private attempt<A>(mesh: number, dims: ReadonlyArray<string>, group: Group, ident: number, op: (comm: Comm) => A, mayRetry: boolean): Effect.Effect<A, CommError> {
    return Effect.suspend(() => {
      try {
        return Effect.succeed(op(group.comm))
      } catch (e) {
        return this.failed(mesh, dims, group, ident, e, op, mayRetry)
      }
    })
  }

  /**
   * A collective failed with `e`. A communicator it left unusable is torn down, with a note;
   * if a peer's note says it gave this one up at an earlier command, this member went on past
   * that failure alone: it opens the new communicator now and tries `op` once more.
   */
  private failed<A>(mesh: number, dims: ReadonlyArray<string>, group: Group, ident: number, e: unknown, op: (comm: Comm) => A, mayRetry: boolean): Effect.Effect<A, CommError> {
    const error = inGlobalRanks(commError(e), group.members)
    if (!UNUSABLE_AFTER.includes(error.reason)) return Effect.fail(error)
    this.drop(mesh, dims, group)
    const self = this
    return Effect.gen(function* () {
      const earlier = yield* self.notes.abandoned(group.key)
      yield* self.notes.abandon(group.key, ident)
      if (!mayRetry || earlier === undefined || earlier >= ident) return yield* Effect.fail(error)
      const fresh = yield* self.open(mesh, dims, group.members, ident)
      return yield* self.attempt(mesh, dims, fresh, ident, op, false)
    })
  }

  /** Tears down a group's communicator that a failure left unusable. */
  private drop(mesh: number, dims: ReadonlyArray<string>, group: Group): void {
    const name = dims.join(",")
    if (this.groups.get(mesh)?.get(name) === group) this.groups.get(mesh)!.delete(name)
    group.comm.destroy()
  }

  /**
   * `error` (in global ranks) failed a call on `comm`, mesh `mesh`'s group over `dims`, made
   * outside `collective` (a user function's own) at command `ident`: a communicator it left
   * unusable is torn down, with a note, and the group's next collective opens a new one. The
   * call is not tried again: a function may have done anything before it failed.
   */
  failedOutside(mesh: number, dims: ReadonlyArray<string>, comm: Comm, ident: number, error: CommError): Effect.Effect<never, CommError> {
    const group = this.groups.get(mesh)?.get(dims.join(","))
    if (group?.comm !== comm || !UNUSABLE_AFTER.includes(error.reason)) return Effect.fail(error)
    this.drop(mesh, dims, group)
    return this.notes.abandon(group.key, ident).pipe(Effect.andThen(Effect.fail(error)))
  }

  /**
   * Opens the communicator of mesh `mesh`'s group over `dims`, whose members are `members`, at
   * command `ident` (every member opens it at the same one, under a key of its own).
   */
  private open(mesh: number, dims: ReadonlyArray<string>, members: ReadonlyArray<number>, ident: number): Effect.Effect<Group, CommError> {
    const name = dims.join(",")
    const key = `${groupName(mesh, name, members)}/${ident}`
    this.opened.set(key, members.length)
    return this.connect(key, members).pipe(
      Effect.raceFirst(this.untilLost(key, members)),
      Effect.mapError((e) => inGlobalRanks(e, members)),
      Effect.map((comm) => {
        let byDims = this.groups.get(mesh)
        if (byDims === undefined) this.groups.set(mesh, (byDims = new Map()))
        const opened: Group = { comm, members, key }
        byDims.set(name, opened)
        return opened
      }),
    )
  }

  /**
   * A restartable worker between controllers: destroys every group communicator and deletes
   * the store keys of every one opened so far. The next controller numbers its meshes and
   * commands from the start again, so its groups take the same keys; an address left there
   * would be read by a member before its owner publishes the new one, and the connect to the
   * old, closed communicator refused. Every worker runs this before it reconnects, and a
   * controller sends nothing before all are connected, so no new key is deleted.
   */
  forget(): Effect.Effect<void> {
    for (const mesh of [...this.groups.keys()]) this.release(mesh)
    this.lost.clear()
    const keys = [...this.opened].flatMap(([key, size]) => [...Array.from({ length: size }, (_, r) => `${key}/${r}`), `${key}/abandoned`])
    this.opened.clear()
    return keys.length === 0 ? Effect.void : this.notes.forget(keys)
  }

  /** Destroys the communicators of a mesh whose last ref went. */
  release(mesh: number): void {
    const byDims = this.groups.get(mesh)
    if (byDims === undefined) return
    this.groups.delete(mesh)
    for (const { comm } of byDims.values()) comm.destroy()
  }
}

/** A group's name in the store: groups over the same dims differ by their first member. */
const groupName = (mesh: number, dims: string, members: ReadonlyArray<number>) => `comm/mesh${mesh}/${dims}@${members[0]}`

/**
 * A failure under a collective or send as a CommError: the shim's status gives the reason;
 * anything else is `fallback`.
 */
export const commError = (e: unknown, fallback: CommReason = "invalid"): CommError => {
  if (e instanceof CommError) return e
  const reason = e instanceof ShimError ? reasonOfShimStatus(e.reason) : fallback
  return new CommError({ reason, message: e instanceof Error ? e.message : String(e), cause: e })
}

/**
 * The shim and Gloo name a group's members by their rank in the group ("rank 1"): the same
 * message with each such rank as the global rank it is, and the group's members.
 */
export const inGlobalRanks = (e: CommError, members: ReadonlyArray<number>): CommError => {
  const identity = members.every((m, i) => m === i)
  if (identity) return e
  const message = e.message.replace(/\b(rank|peer|member) (\d+)\b/g, (whole, _word: string, n: string) => {
    const global = members[Number(n)]
    return global === undefined ? whole : `rank ${global}`
  })
  return new CommError({ reason: e.reason, message: `${message} (group of ranks [${members.join(", ")}])`, cause: e.cause })
}
