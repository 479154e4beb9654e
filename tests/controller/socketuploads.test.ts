// Uploads by the socket (a link without shared memory): a call's large host tensor is read from
// the socket straight into the tensor made of it (src/worker/direct.ts), the rest of its frame
// into the frame, and each rank gets it bit for bit, for random sizes and dtypes, alone, beside
// another one in the same command, and in a command batched behind others; past the memory limit
// the upload fails with the limit's error and the worker goes on.
import { afterAll, beforeAll, expect, test } from "bun:test"
import { Effect, Layer, ManagedRuntime } from "effect"
import { Controller, fromHost, HostTensor, shard, type Mesh } from "../../src/controller/index.ts"
import { listen, Transport } from "../../src/controller/listener.ts"
import { Launcher } from "../../src/launcher/index.ts"
import { DTYPES, ITEM_SIZE, type DType } from "../../src/protocol/values.ts"

let rt: ManagedRuntime.ManagedRuntime<Controller, unknown>
let mesh: Mesh
const run = <A, E>(e: Effect.Effect<A, E, Controller>) => rt.runPromise(e)
const socketOnly = Layer.succeed(Transport, { listen: (o: Parameters<typeof listen>[0]) => listen({ ...o, sharedMemory: false }) })
beforeAll(async () => {
  rt = ManagedRuntime.make(Controller.layerLocal({ world: 2, env: { MONARCH_MEMORY_LIMIT: "64MiB" }, onWorkerLine: () => {} }).pipe(Layer.provide(Layer.mergeAll(Launcher.layer, socketOnly))))
  const ctl = await rt.runPromise(Effect.service(Controller))
  mesh = await run(ctl.mesh({ dp: 2 }))
}, 90_000)
afterAll(async () => {
  await rt?.dispose()
})

let seed = 0x50c
const random = () => ((seed = (seed * 1103515245 + 12345) >>> 0) / 2 ** 32)
const hostOf = (dtype: DType, n: number) =>
  new HostTensor(dtype, [n], Uint8Array.from({ length: n * ITEM_SIZE[dtype] }, () => Math.floor(random() * 256) & (dtype === "bool" ? 1 : 0xff)))
const fetched = async (t: Parameters<Mesh["fetchAll"]>[0]) => ((await run(mesh.fetchAll(t))) as HostTensor[]).map((h) => h.data)

test("a host tensor by the socket reaches every rank bit for bit: alone, two in one command, batched behind others, sharded", async () => {
  for (let trial = 0; trial < 12; trial++) {
    const dtype = DTYPES[Math.floor(random() * DTYPES.length)]!
    const n = Math.floor((1 << 14) + random() * (4 << 20) / ITEM_SIZE[dtype])
    const a = hostOf(dtype, n), b = hostOf(dtype, 1 + Math.floor(random() * 100_000))
    const label = `${dtype} [${n}]`
    const one = fromHost(mesh, a)
    expect({ label, same: (await fetched(one)).map((g) => Buffer.compare(g, a.data)) }).toEqual({ label, same: [0, 0] })
    // Two host tensors in one command (the first is read straight, the second into the frame),
    // behind small commands batched into the same frame.
    const small = fromHost(mesh, hostOf("f32", 4))
    const both = await run(mesh.call("ops.cat", [[a, b]]))
    expect({ label, same: (await fetched(both)).map((g) => Buffer.compare(g, Buffer.concat([a.data, b.data]))) }).toEqual({ label, same: [0, 0] })
    const rows = n - (n % 2)
    const half = fromHost(mesh, new HostTensor(dtype, [rows], a.data.subarray(0, rows * ITEM_SIZE[dtype])), { dp: shard(0) })
    const got = await fetched(half)
    const bytes = (rows / 2) * ITEM_SIZE[dtype]
    got.forEach((g, r) => expect({ label, r, same: Buffer.compare(g, a.data.subarray(r * bytes, (r + 1) * bytes)) }).toEqual({ label, r, same: 0 }))
    for (const t of [one, small, both, half]) t.release()
  }
}, 120_000)

test("an upload past the memory limit fails with the limit's error, and the next one arrives", async () => {
  const big = hostOf("u8", 80 << 20)
  const failed = await run(Effect.flip(mesh.fetch(fromHost(mesh, big), 1)))
  expect(failed.message).toMatch(/memory limit/)
  const a = hostOf("f32", 1 << 18)
  expect((await fetched(fromHost(mesh, a))).map((g) => Buffer.compare(g, a.data))).toEqual([0, 0])
}, 60_000)
