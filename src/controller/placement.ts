/**
 * Placements: how a tensor's local values on the ranks of its mesh make up one logical tensor,
 * per mesh dim (like DTensor's placements). Along each mesh dim a tensor is
 *
 *   - `replicate`: every member holds the whole tensor, the same values;
 *   - `shard(d)`: member i holds the i-th of equal pieces of the logical tensor cut along its
 *     dim d (the pieces, concatenated along d in member order, make the whole); when several
 *     mesh dims shard one tensor dim, they nest in mesh-dim order (the first is outermost);
 *   - `partial`: every member holds an addend; the logical tensor is their sum (what a
 *     row-parallel matmul leaves before its reduce).
 *
 * The program states the placement of the tensors it makes (parameters, data): `t.placement =
 * {tp: shard(0)}` or `t.place({tp: shard(0)})` (dims not named are replicated). Ops do not
 * propagate placements (each rank's op runs on its local tensor, so its result's layout is the
 * program's to state; an unstated one reads as replicated); the mesh's collectives and sends do
 * carry them (`afterCollective`); a gradient takes its parameter's where the program sets `.grad`
 * (examples/gpt/model.ts's trainStep does).
 * Checkpoints read it to know which rank holds which block of which tensor (`blockOf`), and
 * global-norm clipping to count each replica once (`shardedDims`).
 */
import type { Reduction } from "../protocol/messages.ts"
import { refuse } from "./errors.ts"
import type { TensorHandle } from "./handles.ts"
import type { Mesh } from "./mesh.ts"

export type DimPlacement =
  | { readonly kind: "replicate" }
  | { readonly kind: "shard"; readonly dim: number }
  | { readonly kind: "partial" }

export const replicate: DimPlacement = Object.freeze({ kind: "replicate" })
export const partial: DimPlacement = Object.freeze({ kind: "partial" })
export const shard = (dim: number): DimPlacement => Object.freeze({ kind: "shard", dim })

/** A tensor's placement: one entry per dim of its mesh, by dim name. */
export type Placement = Readonly<Record<string, DimPlacement>>

/** What a program writes: the dims it names (the rest are replicated). */
export type PlacementSpec = Readonly<Record<string, DimPlacement>>

/** Every dim of `mesh` replicated. */
export const replicated = (mesh: Mesh): Placement => Object.freeze(Object.fromEntries(mesh.names.map((n) => [n, replicate])))

export const describePlacement = (p: Placement): string =>
  Object.entries(p).map(([dim, d]) => `${dim}: ${d.kind === "shard" ? `shard(${d.dim})` : d.kind}`).join(", ")

/** `spec` completed to a placement of `t` on its mesh, or the ControllerError saying what is wrong with it. */
export const checkPlacement = (t: TensorHandle, spec: PlacementSpec): Placement => {
  const mesh = t.mesh
  if (typeof spec !== "object" || spec === null || Array.isArray(spec)) throw refuse("placement", `a placement is an object of mesh dims (${mesh.names.join(", ")}), not ${JSON.stringify(spec)}`)
  const unknown = Object.keys(spec).filter((d) => !mesh.names.includes(d))
  if (unknown.length > 0) throw refuse("placement", `placement of ${t}: ${mesh} has no dim ${unknown.join(", ")} (its dims: ${mesh.names.join(", ") || "none"})`)
  const ndim = t.meta?.shape.length
  const placement: Record<string, DimPlacement> = {}
  for (const name of mesh.names) {
    const d = spec[name] ?? replicate
    if (d.kind === "shard") {
      if (!Number.isInteger(d.dim) || d.dim < 0 || (ndim !== undefined && d.dim >= ndim))
        throw refuse("placement", `placement of ${t}: shard(${d.dim}) on ${name} names no dim of a ${ndim ?? "?"}-dim tensor`)
    } else if (d.kind !== "replicate" && d.kind !== "partial") throw refuse("placement", `placement of ${t}: ${JSON.stringify(d)} on ${name} is not replicate, shard(d) or partial`)
    placement[name] = d
  }
  return Object.freeze(placement)
}

/** The mesh dims along which `p` holds distinct values (sharded or partial): a norm sums over these, counting the others once. */
export const shardedDims = (p: Placement): string[] => Object.entries(p).filter(([, d]) => d.kind !== "replicate").map(([n]) => n)

/**
 * Where rank `rank`'s local block of a tensor with local shape `local` sits in the logical
 * tensor: the logical shape, this block's offsets in it, and whether this rank is the first
 * holder of that block (coordinate 0 along every replicated dim), the one that saves it.
 * Refuses a partial placement: its logical value exists only after the reduce.
 */
export const blockOf = (p: Placement, mesh: Mesh, rank: number, local: ReadonlyArray<number>) => {
  const coords = mesh.layout.coordinates(rank)
  if (coords === undefined) throw refuse("mesh", `rank ${rank} is not in ${mesh}`)
  const shape = [...local], offsets = local.map(() => 0)
  let first = true
  // Per tensor dim, the block's index among its pieces: mixed radix over the mesh dims sharding it, in mesh order.
  const piece = local.map(() => 0)
  mesh.names.forEach((name, m) => {
    const d = p[name] ?? replicate
    if (d.kind === "partial") throw refuse("placement", `a partial tensor (over ${name}) has no blocks until it is reduced`)
    if (d.kind === "replicate") first &&= coords[m] === 0
    else {
      piece[d.dim] = piece[d.dim]! * mesh.layout.sizes[m]! + coords[m]!
      shape[d.dim] = shape[d.dim]! * mesh.layout.sizes[m]!
    }
  })
  local.forEach((n, d) => (offsets[d] = piece[d]! * n))
  return { shape, offsets, first }
}

/**
 * The placement a collective over `dims` gives its result. Over each of those dims:
 * all_reduce makes it replicated (a sum of addends or of replicas: every member now holds the
 * same); stack (all_gather) too (every member holds the same stack); reduce_scatter leaves
 * member i the i-th slice of dim 0 of the reduced tensor, i.e. shard(0) of the logical tensor
 * whose dims 0 and 1 are merged; all_to_all re-lays the data, so the caller states the result's
 * placement (without one it reads as shard(0): member i holds the i-th chunk from every member).
 * Dims of the result's mesh not reduced keep the input's entry, moved one tensor dim up after a
 * stack (it adds dim 0) and one down after a reduce_scatter (it removes dim 0: a shard of that
 * dim becomes shard(0) of the merged dim, nested in mesh order with the reduced dims').
 * `names` are the dims of the mesh the result is on (the input may be on a mesh it was sliced from).
 */
export const afterCollective = (input: Placement, names: ReadonlyArray<string>, dims: ReadonlyArray<string>, reduction: Reduction, scatter: boolean): PlacementSpec => {
  const out: Record<string, DimPlacement> = {}
  const shift = reduction === "stack" ? (scatter ? 0 : 1) : scatter ? -1 : 0
  for (const name of names) {
    const d = input[name] ?? replicate
    if (dims.includes(name)) out[name] = scatter ? shard(0) : replicate
    else out[name] = d.kind === "shard" ? shard(Math.max(0, d.dim + shift)) : d
  }
  return out
}

/** A send keeps the placement on the dims the destination mesh shares by name; the others read as replicated. */
export const afterSend = (input: Placement, to: Mesh): Placement =>
  Object.freeze(Object.fromEntries(to.names.map((n) => [n, input[n] ?? replicate])))

/** The placements the program stated (RemoteTensor's `placement`, tensor.ts); a tensor not here is replicated. */
const placements = new WeakMap<TensorHandle, Placement>()

/** `t`'s placement: the one stated, else every dim replicated. */
export const placementOf = (t: TensorHandle): Placement => placements.get(t) ?? replicated(t.mesh)

/** States `t`'s placement (checked, completed with replicated dims). */
export const setPlacement = (t: TensorHandle, spec: PlacementSpec): void => void placements.set(t, checkPlacement(t, spec))

/** Gives `to` the placement `from` has (a replay's result its trace's handle's), unchecked: they share mesh and shape. */
export const samePlacement = (from: TensorHandle, to: TensorHandle): void => {
  const p = placements.get(from)
  if (p !== undefined) placements.set(to, p)
}
