// fromHost puts a HostTensor's values on every rank of a mesh, typed by its dtype (each rank's
// copy bit for bit), and the README's way of giving each dp rank its own rows of a host batch
// (a reduce_scatter with max over dp of the batch viewed as [dp, rows, ...]) leaves rank i
// exactly block i, placed dp: shard(0).
import { afterAll, beforeAll, expect, test } from "bun:test"
import { Effect, ManagedRuntime } from "effect"
import { Controller, fromHost, HostTensor, type Mesh, type RemoteTensor } from "../../src/controller/index.ts"

let rt: ManagedRuntime.ManagedRuntime<Controller, unknown>
let mesh: Mesh
const run = <A, E>(e: Effect.Effect<A, E, Controller>) => rt.runPromise(e)
beforeAll(async () => {
  rt = ManagedRuntime.make(Controller.local({ world: 2, onWorkerLine: () => {} }))
  const ctl = await rt.runPromise(Effect.service(Controller))
  mesh = await run(ctl.mesh({ dp: 2 }))
}, 90_000)
afterAll(async () => {
  await rt?.dispose()
})

test("fromHost uploads a host tensor to every rank, its dtype and values kept", async () => {
  const values = Float64Array.from({ length: 12 }, (_, i) => Math.PI * (i - 5) / 7)
  const t: RemoteTensor<"f64"> = fromHost(mesh, new HostTensor("f64", [3, 4], new Uint8Array(values.buffer)))
  expect({ dtype: t.dtype, shape: t.shape }).toEqual({ dtype: "f64", shape: [3, 4] })
  for (const h of await run(mesh.fetchAll(t))) expect([...(h as HostTensor).toArray()]).toEqual([...values])
  const ids = fromHost(mesh, new HostTensor("i64", [3], new Uint8Array(BigInt64Array.from([-1n, 2n ** 40n, 7n]).buffer)))
  expect([...(await run(ids.fetch({ dp: 1 }))).toArray()]).toEqual([-1n, 2n ** 40n, 7n])
})

test("each dp rank gets its own rows of a host batch, bit for bit", async () => {
  const rows = Float32Array.from({ length: 8 * 3 }, (_, i) => Math.fround(Math.sin(i) * 1e3))
  const batch = fromHost(mesh, new HostTensor("f32", [8, 3], new Uint8Array(rows.buffer)))
  const mine = await run(mesh.reduce(batch.reshape([2, 4, 3]), "dp", "max", { scatter: true }))
  expect(mine.placement).toEqual({ dp: { kind: "shard", dim: 0 } })
  const held = await run(mesh.fetchAll(mine))
  held.forEach((h, r) => expect([...(h as HostTensor).toArray()]).toEqual([...rows.subarray(12 * r, 12 * (r + 1))]))
})
