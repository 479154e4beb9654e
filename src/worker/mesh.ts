/**
 * DeviceMesh: this rank's view of a mesh (CreateDeviceMesh): its coordinates, and for a set
 * of dims the group of ranks that differ from it only in those dims. Communicators for a
 * group are made on first use and live as long as the mesh's refs.
 */
import { Effect } from "effect"
import type { Comm } from "../../ffi/comm.ts"
import type { NDSlice } from "../protocol/ndslice.ts"
import { CommError } from "./errors.ts"

export class DeviceMesh implements Disposable {
  /** This rank's coordinate per dim name. */
  readonly coords: Readonly<Record<string, number>>
  private readonly comms = new Map<string, Comm>()

  constructor(
    /** The mesh's ref id: the same on every rank, so it names the mesh in rendezvous keys. */
    readonly id: number,
    readonly names: ReadonlyArray<string>,
    readonly ranks: NDSlice,
    readonly rank: number,
    coordinates: ReadonlyArray<number>,
  ) {
    this.coords = Object.fromEntries(names.map((n, i) => [n, coordinates[i]!]))
  }

  /**
   * The global ranks of the group over `dims` through this rank, row-major over `dims` in
   * the order given. Throws CommError for an unknown or repeated dim.
   */
  members(dims: ReadonlyArray<string>): number[] {
    const index = dims.map((d) => {
      const i = this.names.indexOf(d)
      if (i < 0) throw new CommError({ message: `mesh ${this.id} has no dim "${d}" (dims: ${this.names.join(", ")})` })
      return i
    })
    if (new Set(index).size !== index.length) throw new CommError({ message: `repeated dim in [${dims.join(", ")}]` })
    let ranks = [this.rank - index.reduce((r, i) => r + this.ranks.strides[i]! * this.coords[this.names[i]!]!, 0)]
    for (const i of index) {
      const stride = this.ranks.strides[i]!, size = this.ranks.sizes[i]!
      ranks = ranks.flatMap((r) => Array.from({ length: size }, (_, c) => r + c * stride))
    }
    return ranks
  }

  /** The communicator of the group over `dims`, if it was opened before. */
  cachedComm(dims: ReadonlyArray<string>): Comm | undefined {
    return this.comms.get(dims.join(","))
  }

  /** Opens the communicator of the group over `dims` (every member does, in the same order). */
  openComm<E>(dims: ReadonlyArray<string>, open: (key: string, members: number[]) => Effect.Effect<Comm, E>): Effect.Effect<Comm, E | CommError> {
    return Effect.suspend(() => {
      const key = dims.join(","), members = this.members(dims)
      // Groups over the same dims differ by their first member: it names the group.
      return open(`mesh${this.id}/${key}@${members[0]}`, members).pipe(Effect.tap((comm) => Effect.sync(() => this.comms.set(key, comm))))
    })
  }

  [Symbol.dispose](): void {
    for (const comm of this.comms.values()) comm.destroy()
    this.comms.clear()
  }
}
