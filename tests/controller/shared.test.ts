// Fetches from local workers through shared memory: a tensor fetched through a segment has the
// bytes the socket path gives for it (randomised sizes and dtypes, 0 and odd sizes included),
// the first fetch past a segment's size goes by the socket and the next ones by a segment grown
// to fit; a fetch's bytes in a segment count against the worker's memory limit while in flight
// (past it, the limit's error), none after, and at most one segment (no larger than the tensor
// and a MiB) is mapped per link; a strided view comes through one as its elements.
import { afterAll, beforeAll, expect, test } from "bun:test"
import { Effect, Layer, ManagedRuntime } from "effect"
import { Controller, fromHost, HostTensor, type Mesh } from "../../src/controller/index.ts"
import { listen, Transport } from "../../src/controller/listener.ts"
import { Launcher } from "../../src/launcher/index.ts"
import { segmentSizeFor, type ControllerSegments } from "../../src/net/shm.ts"
import { ITEM_SIZE, type DType } from "../../src/protocol/values.ts"

const ROOT = new URL("../..", import.meta.url).pathname
let rt: ManagedRuntime.ManagedRuntime<Controller, unknown>
let mesh: Mesh
const run = <A, E>(e: Effect.Effect<A, E, Controller>) => rt.runPromise(e)
const segments: ControllerSegments[] = []
const sharing = Layer.succeed(Transport, {
  listen: (o: Parameters<typeof listen>[0]) => listen({ ...o, sharedMemory: { minBytes: 0 }, onSegments: (rank, s) => void (segments[rank] = s) }),
})
beforeAll(async () => {
  rt = ManagedRuntime.make(Controller.layerLocal({ world: 2, functionPath: [ROOT], env: { MONARCH_MEMORY_LIMIT: "96MiB" }, onWorkerLine: () => {} }).pipe(Layer.provide(Layer.mergeAll(Launcher.layer, sharing))))
  const ctl = await rt.runPromise(Effect.service(Controller))
  mesh = await run(ctl.mesh({ dp: 2 }))
}, 90_000)
afterAll(async () => {
  await rt?.dispose()
})

let seed = 0x5eed
const random = () => ((seed = (seed * 1103515245 + 12345) >>> 0) / 2 ** 32)
const randomBytes = (n: number) => Uint8Array.from({ length: n }, () => Math.floor(random() * 256))
const memory = async (rank: number) => ((await run(mesh.fetch(null, rank, { fn: "tests/faults/fixtures:memory" }))) as number[])[0]!

test("a fetch through a segment gives the socket path's bytes, for sizes from 0 past the segment's", async () => {
  const dtypes: DType[] = ["u8", "f32", "f64", "i64", "f16", "bool"]
  // Elements: 0, odd, around the first segment's MiB, then well past it.
  const sizes = [0, 1, 3, 7, 1001, (1 << 20) - 1, (1 << 20) + 5, 3 << 19, ...Array.from({ length: 4 }, () => 1 + Math.floor(random() * (3 << 20)))]
  let viaSegments = segments[0]!.counts.fetches
  for (const n of sizes) {
    const dtype = dtypes[Math.floor(random() * dtypes.length)]!
    const bytes = randomBytes(n * ITEM_SIZE[dtype]).map((b) => (dtype === "bool" ? b & 1 : b))
    const t = fromHost(mesh, new HostTensor(dtype, [n], bytes))
    const fits = segments[0]!.currentBytes >= Math.max(bytes.byteLength, 1)
    const shared = (await run(mesh.fetch(t))) as HostTensor
    const socket = ((await run(mesh.fetch([t]))) as HostTensor[])[0]!
    const label = `${dtype} [${n}]`
    expect({ label, dtype: shared.dtype, shape: shared.shape }).toEqual({ label, dtype, shape: [n] })
    expect(Buffer.compare(shared.data, socket.data)).toBe(0)
    expect(Buffer.compare(shared.data, bytes)).toBe(0)
    // Through a segment exactly when one that fits was mapped before the fetch.
    expect({ label, shared: segments[0]!.counts.fetches - viaSegments }).toEqual({ label, shared: fits ? 1 : 0 })
    viaSegments = segments[0]!.counts.fetches
    // Then a segment fits it (the socket fetch of a larger one offered a larger segment).
    const again = (await run(mesh.fetch(t))) as HostTensor
    expect(Buffer.compare(again.data, bytes)).toBe(0)
    expect({ label, shared: segments[0]!.counts.fetches - viaSegments }).toEqual({ label, shared: 1 })
    viaSegments = segments[0]!.counts.fetches
    expect(segments[0]!.mappedBytes).toBeLessThanOrEqual(segmentSizeFor(Math.max(...sizes) * 8))
    t.release()
  }
}, 120_000)

test("a strided view (a transpose, a stepped slice) fetched through a segment gives its elements in row-major order, as the socket does", async () => {
  const [rows, cols] = [300, 700], values = Float32Array.from({ length: rows * cols }, (_, i) => i)
  const x = fromHost(mesh, new HostTensor("f32", [rows, cols], new Uint8Array(values.buffer)))
  const cases = [
    { label: "x.t()", view: x.t(), want: Float32Array.from({ length: rows * cols }, (_, i) => values[(i % rows) * cols + Math.floor(i / rows)]!) },
    { label: "x[:, ::3]", view: x.slice(1, 0, cols, 3), want: Float32Array.from({ length: rows * Math.ceil(cols / 3) }, (_, i) => values[Math.floor(i / Math.ceil(cols / 3)) * cols + (i % Math.ceil(cols / 3)) * 3]!) },
  ]
  await run(mesh.fetch(x)) // a segment that fits both
  for (const { label, view, want } of cases) {
    const before = segments[0]!.counts.fetches
    const shared = (await run(mesh.fetch(view))) as HostTensor
    expect({ label, shared: segments[0]!.counts.fetches - before }).toEqual({ label, shared: 1 })
    const socket = ((await run(mesh.fetch([view]))) as HostTensor[])[0]!
    expect({ label, equal: Buffer.compare(shared.data, new Uint8Array(want.buffer)) }).toEqual({ label, equal: 0 })
    expect(Buffer.compare(socket.data, shared.data)).toBe(0)
    view.release()
  }
  x.release()
}, 60_000)

test("a fetch through a segment holds no host copy after; its bytes count against the limit while in flight", async () => {
  const bytes = 30 << 20
  const host = randomBytes(bytes)
  const t = fromHost(mesh, new HostTensor("u8", [bytes], host), {})
  const bare = await memory(1)
  expect(segments[1]!.mappedBytes).toBe(0) // rank 1 fetched nothing yet
  await run(mesh.fetch(t, 1)) // by the socket; offers a segment that fits
  expect(await memory(1)).toBe(bare) // a round trip: the worker's answer to the offer comes before it
  expect(segments[1]!.currentBytes).toBe(segmentSizeFor(bytes))
  for (let i = 0; i < 3; i++) expect(Buffer.compare(((await run(mesh.fetch(t, 1))) as HostTensor).data, host)).toBe(0)
  // Reused: the same one segment; the worker's count back where it was (nothing held after).
  expect(segments[1]!.counts).toEqual({ fetches: 3, bytes: 3 * bytes, offers: 1 })
  expect(segments[1]!.mappedBytes).toBe(segmentSizeFor(bytes))
  expect(await memory(1)).toBe(bare)
  // Two fetches at once: the second finds the segment in use and goes by the socket, which offers
  // nothing new (the segment fits); both give the bytes.
  const both = (await run(Effect.all([mesh.fetch(t, 1), mesh.fetch(t, 1)], { concurrency: 2 }))) as HostTensor[]
  expect(both.map((h) => Buffer.compare(h.data, host))).toEqual([0, 0])
  expect(segments[1]!.counts).toEqual({ fetches: 4, bytes: 4 * bytes, offers: 1 })
  // With 40 MiB more held, the copy into the segment would pass the 96 MiB limit: refused so.
  const more = await run(mesh.call("ops.full", [[10 << 20], 0.5]))
  const refused = await run(Effect.flip(mesh.fetch(t, 1)))
  expect(refused.message).toMatch(/fetch of 31457280 bytes to host.*would pass the memory limit/)
  expect(segments[1]!.counts.fetches).toBe(4)
  more.release()
  expect(Buffer.compare(((await run(mesh.fetch(t, 1))) as HostTensor).data, host)).toBe(0)
  expect(segments[1]!.counts.fetches).toBe(5)
  t.release()
}, 60_000)
