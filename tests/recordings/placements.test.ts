// A compiled step's results carry what the same step run op by op gives them (world 2, dp=2):
// placement, dtype and shape, on the trace's call and on every replay; so a reduce_scatter
// result saved from a replay is saved sharded and loads each rank's own block back.
import { afterAll, beforeAll, expect, test } from "bun:test"
import { Effect, ManagedRuntime } from "effect"
import { mkdtempSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { allReduce, compile, Controller, load, opsOn, reduceScatter, save, shard, type HostTensor, type Mesh, type RemoteTensor } from "../../src/controller/index.ts"

const ROOT = new URL("../..", import.meta.url).pathname
const CHECKPOINTS = mkdtempSync(join(tmpdir(), "monarch-compiled-"))
let rt: ManagedRuntime.ManagedRuntime<Controller, unknown>
let mesh: Mesh
beforeAll(async () => {
  rt = ManagedRuntime.make(Controller.local({ world: 2, functionPath: [ROOT], checkpoints: CHECKPOINTS, onWorkerLine: () => {} }))
  const ctl = await rt.runPromise(Effect.service(Controller))
  mesh = await rt.runPromise(ctl.mesh({ dp: 2 }))
}, 60_000)
afterAll(async () => {
  await rt?.dispose()
  rmSync(CHECKPOINTS, { recursive: true, force: true })
})

const run = <A, E>(e: Effect.Effect<A, E, Controller>) => rt.runPromise(e)
const perRank = async (t: RemoteTensor) => (await run(mesh.fetchAll(t))).map((h) => Array.from((h as HostTensor).toArray() as Float32Array))
const metaOf = (t: RemoteTensor) => ({ placement: t.placement, dtype: t.dtype, shape: t.shape })

/** x times (rank + 1): each rank its own values. */
const ranked = (x: RemoteTensor) => run(mesh.call("tests/recordings/fixtures:byRank", [x], {}, { results: [x.meta!] }))

const step = (x: RemoteTensor) => {
  const scattered = reduceScatter(x.mul(2), "dp")
  return { scattered, summed: allReduce(x, "dp"), placed: x.add(1).place({ dp: shard(0) }), cast: x.to("f64"), given: x }
}

test("every handle a replay returns has the placement, dtype and shape the op-by-op call gives", async () => {
  const x = await ranked(opsOn(mesh).arange(4).to("f32").reshape([2, 2]))
  const compiled = compile(step)
  const eager = step(x)
  expect(eager.scattered.placement).toEqual({ dp: shard(0) })
  for (let call = 0; call < 3; call++) {
    const r = await run(compiled(x))
    for (const k of Object.keys(eager) as Array<keyof typeof eager>) {
      expect({ call, k, ...metaOf(r[k]) }).toEqual({ call, k, ...metaOf(eager[k]) })
      expect(await perRank(r[k])).toEqual(await perRank(eager[k]))
    }
  }
  expect(compiled.traces).toBe(1)
}, 60_000)

test("a reduce_scatter result from a replay saves sharded: load gives each rank its own shard", async () => {
  const x = await ranked(opsOn(mesh).arange(4).to("f32").reshape([2, 2]))
  const compiled = compile((x: RemoteTensor) => reduceScatter(x, "dp"))
  await run(compiled(x))
  const replayed = await run(compiled(x))
  expect(compiled.traces).toBe(1)
  // Rank 0 holds [[0, 1], [2, 3]], rank 1 [[0, 2], [4, 6]]: the sum's first row on rank 0, its second on rank 1.
  expect(await perRank(replayed)).toEqual([[0, 3], [6, 9]])
  await run(Effect.flatMap(save(mesh, { scattered: replayed }, "scattered"), (p) => p.durable))
  const loaded = await run(load(mesh, "scattered"))
  const t = (loaded.state as { scattered: RemoteTensor }).scattered
  expect(t.placement).toEqual({ dp: shard(0) })
  expect(await perRank(t)).toEqual([[0, 3], [6, 9]])
}, 60_000)
