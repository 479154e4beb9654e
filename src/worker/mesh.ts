/**
 * DeviceMesh: this rank's view of a mesh (CreateDeviceMesh): its coordinates, and for a set
 * of dims the group of ranks that differ from it only in those dims. The groups'
 * communicators (src/comm) live as long as the mesh's refs.
 */
import { CommError } from "../comm/errors.ts"
import type { Communicators } from "../comm/communicators.ts"
import type { NDSlice } from "../protocol/ndslice.ts"

export class DeviceMesh implements Disposable {
  /** This rank's coordinate per dim name. */
  readonly coords: Readonly<Record<string, number>>

  constructor(
    /** The mesh's ref id: the same on every rank, so it names the mesh in rendezvous keys. */
    readonly id: number,
    readonly names: ReadonlyArray<string>,
    readonly ranks: NDSlice,
    readonly rank: number,
    coordinates: ReadonlyArray<number>,
    /** Where the mesh's communicators are kept, released with the mesh. */
    private readonly comms: Communicators,
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
      if (i < 0) throw new CommError({ reason: "invalid", message: `mesh ${this.id} has no dim "${d}" (dims: ${this.names.join(", ")})` })
      return i
    })
    if (new Set(index).size !== index.length) throw new CommError({ reason: "invalid", message: `repeated dim in [${dims.join(", ")}]` })
    let ranks = [this.rank - index.reduce((r, i) => r + this.ranks.strides[i]! * this.coords[this.names[i]!]!, 0)]
    for (const i of index) {
      const stride = this.ranks.strides[i]!, size = this.ranks.sizes[i]!
      ranks = ranks.flatMap((r) => Array.from({ length: size }, (_, c) => r + c * stride))
    }
    return ranks
  }

  [Symbol.dispose](): void {
    this.comms.release(this.id)
  }
}
