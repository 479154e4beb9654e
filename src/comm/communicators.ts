/**
 * A worker's communicators: the world one, opened at start-up, and one per group of a mesh
 * (the ranks that differ from this one only in some dims), opened through the store on first
 * use and kept until the mesh goes. This is the only place that names communicators in the
 * store and turns the shim's failures into CommErrors.
 */
import { Effect } from "effect"
import type { Comm } from "../../ffi/comm.ts"
import { ShimError, type Native } from "../../ffi/native.ts"
import type { StoreApi } from "../store/api.ts"
import { CommError, reasonOfShimStatus, type CommReason } from "./errors.ts"
import { rendezvous } from "./rendezvous.ts"

/** Connects a communicator over `members` (global ranks, in group order) agreed on by `key`. */
export type Connect = (key: string, members: ReadonlyArray<number>) => Effect.Effect<Comm, CommError>

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

export class Communicators {
  /** Mesh id -> dims ("dp,tp") -> the group's communicator. */
  private readonly groups = new Map<number, Map<string, Comm>>()
  /** Store key -> how many times it was opened, for a fresh key each time. */
  private readonly openings = new Map<string, number>()

  constructor(
    /** The communicator over every rank (sends go through it). */
    readonly world: Comm,
    private readonly connect: Connect,
  ) {}

  /** The world communicator, then the rest through the store (the worker's start-up). */
  static open(o: CommunicatorsOptions): Effect.Effect<Communicators, CommError> {
    const connect: Connect = (key, members) =>
      rendezvous({ native: o.native, store: o.store, key, members, rank: o.rank, timeoutMs: o.timeoutMs, hostname: o.hostname })
    const everyone = Array.from({ length: o.world }, (_, r) => r)
    return connect("comm/world", everyone).pipe(Effect.map((world) => new Communicators(world, connect)))
  }

  /** The communicator of mesh `mesh`'s group over `dims`, if it was opened before (the fast path). */
  cached(mesh: number, dims: ReadonlyArray<string>): Comm | undefined {
    return this.groups.get(mesh)?.get(dims.join(","))
  }

  /**
   * Opens the communicator of mesh `mesh`'s group over `dims`, whose members are `members`.
   * Every member opens it at the same command, so the nth opening of a group is the same
   * communicator on each: the store never forgets a key, so each opening takes a new one.
   */
  open(mesh: number, dims: ReadonlyArray<string>, members: ReadonlyArray<number>): Effect.Effect<Comm, CommError> {
    const name = dims.join(",")
    // Groups over the same dims differ by their first member: it names the group.
    const group = `comm/mesh${mesh}/${name}@${members[0]}`
    const n = this.openings.get(group) ?? 0
    this.openings.set(group, n + 1)
    return this.connect(`${group}/${n}`, members).pipe(Effect.tap((comm) => Effect.sync(() => {
      let byDims = this.groups.get(mesh)
      if (byDims === undefined) this.groups.set(mesh, (byDims = new Map()))
      byDims.set(name, comm)
    })))
  }

  /** Destroys the communicators of a mesh whose last ref went. */
  release(mesh: number): void {
    const byDims = this.groups.get(mesh)
    if (byDims === undefined) return
    this.groups.delete(mesh)
    for (const comm of byDims.values()) comm.destroy()
  }
}

/**
 * A failure under a collective or send as a CommError: the shim's status gives the reason;
 * anything else is `fallback`.
 */
export const commError = (e: unknown, fallback: CommReason = "invalid"): CommError => {
  if (e instanceof CommError) return e
  const reason = e instanceof ShimError ? reasonOfShimStatus(e.reason) : fallback
  return new CommError({ reason, message: e instanceof Error ? e.message : String(e), cause: e })
}
