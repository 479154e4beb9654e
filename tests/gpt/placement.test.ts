// Placements (src/controller/placement.ts) on a real 2x2 mesh: stated by the program, refused
// when they name what the tensor or mesh lacks, carried by collectives and sends, and the blocks
// a checkpoint reads from them match where the values really are.
import { afterAll, beforeAll, describe, expect, test } from "bun:test"
import { Effect, ManagedRuntime } from "effect"
import { blockOf, Controller, ControllerError, partial, replicate, shard, shardedDims, type ControllerApi, type Mesh } from "../../src/controller/index.ts"

let rt: ManagedRuntime.ManagedRuntime<Controller, unknown>
let ctl: ControllerApi
let mesh: Mesh
const run = <A, E>(e: Effect.Effect<A, E, Controller>) => rt.runPromise(e)

beforeAll(async () => {
  rt = ManagedRuntime.make(Controller.local({ world: 4, onWorkerLine: () => {} }))
  ctl = await rt.runPromise(Effect.service(Controller))
  mesh = await run(ctl.mesh({ dp: 2, tp: 2 }))
}, 60_000)
afterAll(() => rt?.dispose())

describe("placements", () => {
  test("a tensor is replicated unless the program says otherwise; dims not named stay replicated", async () => {
    const w = await run(mesh.call("ops.zeros", [[4, 6]]))
    expect(w.placement).toEqual({ dp: replicate, tp: replicate })
    expect(w.place({ tp: shard(1) }).placement).toEqual({ dp: replicate, tp: shard(1) })
    expect(shardedDims(w.placement)).toEqual(["tp"])
    w.placement = { dp: shard(0), tp: partial }
    expect(shardedDims(w.placement)).toEqual(["dp", "tp"])
  })

  test("a placement naming a dim the mesh or the tensor lacks is refused, and the old one stays", async () => {
    const w = (await run(mesh.call("ops.zeros", [[4, 6]]))).place({ tp: shard(0) })
    const refused = (f: () => void) => {
      try {
        f()
      } catch (e) {
        expect(e).toBeInstanceOf(ControllerError)
        return (e as ControllerError).message
      }
      throw new Error("not refused")
    }
    expect(refused(() => w.place({ pp: shard(0) }))).toContain("has no dim pp")
    expect(refused(() => w.place({ tp: shard(2) }))).toContain("shard(2) on tp names no dim of a 2-dim tensor")
    expect(w.placement.tp).toEqual(shard(0))
  })

  test("every shard dim out of range is refused: negative, past the last dim, fractional, not a number; the last and the first are taken", async () => {
    const w = (await run(mesh.call("ops.zeros", [[4, 6]]))).place({ tp: shard(1) })
    const refusal = (dim: number): string | undefined => {
      try {
        w.place({ tp: shard(dim) })
        return undefined
      } catch (e) {
        expect(e).toBeInstanceOf(ControllerError)
        return (e as ControllerError).message
      }
    }
    for (const dim of [-1, -2, 2, 3, 0.5, 1.5, NaN, Infinity]) {
      expect(refusal(dim)).toContain(`shard(${dim}) on tp names no dim of a 2-dim tensor`)
      // A refused placement leaves the one before.
      expect(w.placement.tp).toEqual(shard(1))
    }
    expect(refusal(0)).toBeUndefined()
    expect(w.placement.tp).toEqual(shard(0))
    expect(refusal(1)).toBeUndefined()
    expect(w.placement.tp).toEqual(shard(1))
  })

    test("collectives carry placements: all_reduce replicates, all_gather stacks, reduce_scatter shards dim 0, all_to_all keeps the other dims' shards where they are", async () => {
    const x = (await run(mesh.call("ops.ones", [[2, 3]]))).place({ dp: shard(1), tp: partial })
    const summed = await run(mesh.reduce(x, "tp", "sum"))
    expect(summed.placement).toEqual({ dp: shard(1), tp: replicate })
    const stacked = await run(mesh.reduce(x, "tp", "stack"))
    expect(stacked.placement).toEqual({ dp: shard(2), tp: replicate })
    const cube = (await run(mesh.call("ops.ones", [[2, 3, 4]]))).place({ dp: shard(2), tp: partial })
    const scattered = await run(mesh.reduce(cube, "tp", "sum", { scatter: true }))
    expect(scattered.placement).toEqual({ dp: shard(1), tp: shard(0) })
    // Dim 0 sharded over dp, reduce-scattered over tp: rows nest, dp outside tp.
    const rows = (await run(mesh.call("ops.ones", [[2, 3]]))).place({ dp: shard(0) })
    expect((await run(mesh.reduce(rows, "tp", "sum", { scatter: true }))).placement).toEqual({ dp: shard(0), tp: shard(0) })
    const [row] = await run(Effect.all([mesh.slice({ dp: 1 })]))
    expect((await run(row!.reduce(x, "tp", "sum"))).placement).toEqual({ tp: replicate })
    const both = await run(mesh.reduce(x, ["dp", "tp"], "avg"))
    expect(both.placement).toEqual({ dp: replicate, tp: replicate })
    // all_to_all (stack with scatter) keeps the tensor's rank: dp's shard stays on dim 1.
    const spread = (await run(mesh.call("ops.ones", [[2, 3]]))).place({ dp: shard(1) })
    expect((await run(mesh.reduce(spread, "tp", "stack", { scatter: true }))).placement).toEqual({ dp: shard(1), tp: shard(0) })
    const stated = await run(mesh.reduce(x, "tp", "stack", { scatter: true, placement: { tp: shard(1) } }))
    expect(stated.placement).toEqual({ dp: replicate, tp: shard(1) })
  })

  test("a send keeps the placement on the dims both meshes have", async () => {
    const [a, b] = await run(Effect.all([mesh.slice({ dp: 0 }), mesh.slice({ dp: 1 })]))
    const x = (await run(a.call("ops.ones", [[2, 2]]))).place({ tp: shard(1) })
    const moved = await run(a.send(x, b))
    expect(moved.placement).toEqual({ tp: shard(1) })
  })

  test("blockOf: each rank's block in the logical tensor, and which replica saves it", async () => {
    // Rank r = 2 dp + tp holds a [2, 3] block; sharded on dim 0 over dp and dim 1 over tp.
    const local = (await run(mesh.call("ops.zeros", [[2, 3]]))).place({ dp: shard(0), tp: shard(1) })
    const blocks = mesh.ranks.map((r) => blockOf(local.placement, mesh, r, [2, 3]))
    expect(blocks.map((b) => b.shape)).toEqual(Array(4).fill([4, 6]))
    expect(blocks.map((b) => b.offsets)).toEqual([[0, 0], [0, 3], [2, 0], [2, 3]])
    expect(blocks.map((b) => b.first)).toEqual([true, true, true, true])
    const rep = mesh.ranks.map((r) => blockOf(local.place({ tp: shard(1) }).placement, mesh, r, [2, 3]))
    expect(rep.map((b) => [b.offsets, b.first])).toEqual([[[0, 0], true], [[0, 3], true], [[0, 0], false], [[0, 3], false]])
    // Both mesh dims on tensor dim 0: dp outermost.
    const nested = mesh.ranks.map((r) => blockOf({ dp: shard(0), tp: shard(0) }, mesh, r, [2, 3]))
    expect(nested.map((b) => [b.shape, b.offsets])).toEqual([0, 1, 2, 3].map((i) => [[8, 3], [2 * i, 0]]))
    expect(() => blockOf({ dp: partial, tp: replicate }, mesh, 0, [2, 3])).toThrow("no blocks until it is reduced")
  })
})
