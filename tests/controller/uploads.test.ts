// Uploads to local workers through the listener's shared upload segment: a host tensor given to
// an op (fromHost, or an argument of a call, nested in a list or a keyword) reaches each rank bit
// for bit (randomised sizes and dtypes); the first one past the segment goes in its command and
// the next ones by a segment grown to fit; a tensor for several ranks is copied into the segment
// once, whatever their number, and its region is let go once every rank copied it out (or its
// command failed before, or its worker died); the socket then carries the command alone.
import { afterAll, beforeAll, expect, test } from "bun:test"
import { Effect, Layer, ManagedRuntime } from "effect"
import { Controller, fromHost, HostTensor, shard, type Mesh } from "../../src/controller/index.ts"
import { listen, Transport } from "../../src/controller/listener.ts"
import { Launcher } from "../../src/launcher/index.ts"
import { segmentSizeFor } from "../../src/net/shm.ts"
import type { ControllerUploads } from "../../src/net/uploads.ts"
import { ITEM_SIZE, SharedTensor, type DType } from "../../src/protocol/values.ts"

const ROOT = new URL("../..", import.meta.url).pathname
let rt: ManagedRuntime.ManagedRuntime<Controller, unknown>
let mesh: Mesh
const run = <A, E>(e: Effect.Effect<A, E, Controller>) => rt.runPromise(e)
let uploads: ControllerUploads
/** Bytes the controller sent each rank's socket. */
const sent = [0, 0]
const sharing = Layer.succeed(Transport, {
  listen: (o: Parameters<typeof listen>[0]) => listen({
    ...o,
    sharedMemory: { minBytes: 1024 },
    onUploads: (u) => void (uploads = u),
    onWorker: (link) => o.onWorker({
      ...link,
      sendEncoded: (parts) => {
        sent[link.hello.rank] = sent[link.hello.rank]! + parts.reduce((n, p) => n + p.byteLength, 0)
        return link.sendEncoded(parts)
      },
    }),
  }),
})
beforeAll(async () => {
  rt = ManagedRuntime.make(Controller.layerLocal({ world: 2, functionPath: [ROOT], env: { MONARCH_MEMORY_LIMIT: "512MiB" }, onWorkerLine: () => {} }).pipe(Layer.provide(Layer.mergeAll(Launcher.layer, sharing))))
  const ctl = await rt.runPromise(Effect.service(Controller))
  mesh = await run(ctl.mesh({ dp: 2 }))
}, 90_000)
afterAll(async () => {
  await rt?.dispose()
})

let seed = 0x0b10ad
const random = () => ((seed = (seed * 1103515245 + 12345) >>> 0) / 2 ** 32)
const randomBytes = (n: number) => Uint8Array.from({ length: n }, () => Math.floor(random() * 256))
const hostOf = (dtype: DType, shape: number[]) => {
  const n = shape.reduce((a, b) => a * b, 1)
  if (n > 1 << 24) return new HostTensor(dtype, shape, new Uint8Array(n * ITEM_SIZE[dtype]).map((_, i) => (i * 2654435761) >>> 24))
  return new HostTensor(dtype, shape, randomBytes(n * ITEM_SIZE[dtype]).map((b) => (dtype === "bool" ? b & 1 : b)))
}
const bytesOf = async (t: Parameters<Mesh["fetchAll"]>[0]) => ((await run(mesh.fetchAll(t))) as HostTensor[]).map((h) => h.data)
const memory = async (rank: number) => ((await run(mesh.fetch(null, rank, { fn: "tests/faults/fixtures:memory" }))) as number[])[0]!

test("a host tensor through the upload segment reaches every rank bit for bit, for sizes from below the threshold past the segment's", async () => {
  const dtypes: DType[] = ["u8", "f32", "f64", "i64", "f16", "bool", "i32"]
  const sizes = [0, 1, 255, 257, 5000, 1 << 18, (1 << 20) + 3, ...Array.from({ length: 5 }, () => 1 + Math.floor(random() * (3 << 20)))]
  for (const n of sizes) {
    const dtype = dtypes[Math.floor(random() * dtypes.length)]!
    const host = hostOf(dtype, [n])
    const bytes = host.data.byteLength, label = `${dtype} [${n}]`
    const before = { ...uploads.counts }
    const t = fromHost(mesh, host)
    const got = await bytesOf(t)
    expect({ label, same: got.map((g) => Buffer.compare(g, host.data)) }).toEqual({ label, same: [0, 0] })
    const shared = uploads.counts.uploads - before.uploads
    // Below the threshold it goes in the command; past it, through the segment when one fits two.
    if (bytes < uploads.minBytes) expect({ label, shared }).toEqual({ label, shared: 0 })
    // One copy for both ranks, and held by neither once they copied it.
    expect({ label, copied: uploads.counts.bytes - before.bytes }).toEqual({ label, copied: shared * bytes })
    expect(uploads.heldBytes).toBe(0)
    if (bytes >= uploads.minBytes) {
      // The next upload of it goes by the segment (the first past the segment's half grew it).
      const again = fromHost(mesh, host)
      expect((await bytesOf(again)).map((g) => Buffer.compare(g, host.data))).toEqual([0, 0])
      expect({ label, shared: uploads.counts.uploads - before.uploads - shared }).toEqual({ label, shared: 1 })
      again.release()
    }
    // The newest segment and, until its last region is let go, no older one.
    expect(uploads.mappedBytes).toBeLessThanOrEqual(segmentSizeFor(2 * Math.max(...sizes) * 8))
    t.release()
  }
}, 180_000)

test("host tensors inside a call's list go through the segment too, and the socket carries only the command", async () => {
  const a = hostOf("f32", [1 << 16]), b = hostOf("f32", [1 << 16])
  await bytesOf(fromHost(mesh, hostOf("f32", [1 << 17]))) // a segment for two of 512 KiB is there
  const before = { ...uploads.counts }, socket = [...sent]
  const cat = await run(mesh.call("ops.cat", [[a, b]], { dim: 0 }))
  const got = await bytesOf(cat)
  const both = Buffer.concat([a.data, b.data])
  expect(got.map((g) => Buffer.compare(g, both))).toEqual([0, 0])
  expect(uploads.counts.uploads - before.uploads).toBe(2)
  expect(uploads.counts.bytes - before.bytes).toBe(2 * a.data.byteLength)
  // 2 x 256 KiB of tensors; a few KiB of commands per link, the fetch's included.
  for (const r of [0, 1]) expect(sent[r]! - socket[r]!).toBeLessThan(8 * 1024)
  expect(uploads.heldBytes).toBe(0)
})

test("a sharded batch is copied once, each rank's rows straight into its region; each rank gets its rows", async () => {
  const host = hostOf("u8", [64, 1 << 20])
  await bytesOf(fromHost(mesh, host)) // the segment fits it
  const before = { ...uploads.counts }, socket = [...sent]
  // No block is cut into memory of its own first: the controller's resident memory barely moves.
  const rss = process.memoryUsage().rss
  const mine = fromHost(mesh, host, { dp: shard(0) })
  expect(process.memoryUsage().rss - rss).toBeLessThan(16 << 20)
  const got = await bytesOf(mine)
  const half = host.data.byteLength / 2
  got.forEach((g, r) => expect(Buffer.compare(g, host.data.subarray(r * half, (r + 1) * half))).toBe(0))
  expect(uploads.counts.uploads - before.uploads).toBe(2)
  expect(uploads.counts.bytes - before.bytes).toBe(host.data.byteLength)
  for (const r of [0, 1]) expect(sent[r]! - socket[r]!).toBeLessThan(8 * 1024)
  expect(uploads.heldBytes).toBe(0)
  mine.release()
}, 60_000)

test("an upload whose command fails before copying it lets its region go, and the failure is the input's", async () => {
  const host = hostOf("f32", [1 << 16])
  const x = fromHost(mesh, hostOf("f32", [1 << 16]))
  // Poisoned on rank 1: the add there stops at it, so the host tensor after it is never copied.
  const poisoned = await run(mesh.call("tests/controller/fixtures:failOnRank", [1, x], {}, { results: [{ dtype: "f32", shape: [1 << 16] }] }))
  const before = { ...uploads.counts }
  const sum = await run(mesh.call("ops.add", [poisoned, host]))
  expect(uploads.counts.uploads - before.uploads).toBe(1)
  expect((await run(Effect.flip(mesh.fetch(sum, 1)))).message).toMatch(/deliberate failure on rank 1/)
  expect(((await run(mesh.fetch(sum, 0))) as HostTensor).shape).toEqual([1 << 16])
  // Each rank's UploadTaken comes before its answer to a later fetch: rank 0 copied it, rank 1 let it go.
  await memory(0)
  await memory(1)
  expect(uploads.heldBytes).toBe(0)
})

test("a worker holds no host copy of an upload: after it, its memory is the tensor's alone", async () => {
  const host = hostOf("u8", [24 << 20])
  const warm = fromHost(mesh, host) // grows the segment to fit it
  await bytesOf(warm)
  warm.release()
  // Handles earlier tests dropped are released after a collection: let that happen first.
  const settled = async () => {
    Bun.gc(true)
    await Bun.sleep(100)
    await memory(1)
    return memory(1)
  }
  const bare = await settled()
  const t = fromHost(mesh, host)
  expect((await bytesOf(t)).map((g) => Buffer.compare(g, host.data))).toEqual([0, 0])
  expect(await memory(1)).toBe(bare + host.data.byteLength)
  t.release()
  expect(await settled()).toBe(bare)
})

test("a typed array given to an op is the 1-dim host tensor of its dtype, through the segment when large; one of no tensor dtype is refused", async () => {
  const big = Float64Array.from({ length: 50_000 }, () => random() * 1e6 - 5e5), small = Int32Array.from([7, -3, 2 ** 30])
  const before = uploads.counts.uploads
  const sum = await run(mesh.call("ops.add", [big, 1]))
  expect({ dtype: sum.dtype, shape: sum.shape }).toEqual({ dtype: "f64", shape: [50_000] })
  for (const h of (await run(mesh.fetchAll(sum))) as HostTensor[]) expect([...h.toArray()]).toEqual([...big].map((x) => x + 1))
  expect(uploads.counts.uploads - before).toBe(1)
  const ints = await run(mesh.call("ops.mul", [small, 2]))
  expect([...((await run(mesh.fetch(ints, 1))) as HostTensor).toArray()]).toEqual([14, -6, 2 ** 31 | 0])
  const refused = await run(Effect.flip(mesh.call("ops.clone", [new Int16Array(4)])))
  expect(refused.message).toContain("a Int16Array is not a tensor's elements")
})

test("a SharedTensor the worker cannot read fails its command with SegmentRefused, naming why; what was defined stays", async () => {
  const kept = fromHost(mesh, hostOf("f32", [1 << 16]))
  const before = await bytesOf(kept)
  for (const [bad, why] of [
    [new SharedTensor(987_654, 64, "f32", [4]), "names upload segment 987654, which this worker has not mapped"],
    [new SharedTensor(uploads.currentSegment!, 1 << 30, "f32", [4]), "does not lie within upload segment"],
  ] as const) {
    const t = await run(mesh.call("ops.clone", [bad]))
    const failure = await run(Effect.flip(mesh.fetch(t, 1)))
    expect(failure.message).toContain(why)
    expect(failure.message).toContain("SegmentRefused")
  }
  expect((await bytesOf(kept)).map((g, r) => Buffer.compare(g, before[r]!))).toEqual([0, 0])
})

test("a worker that dies holding an upload lets its region go; the other rank's copy stands", async () => {
  const host = hostOf("f32", [1 << 18])
  await bytesOf(fromHost(mesh, host))
  const victim = (await run(Effect.service(Controller))).workers().find((w) => w.rank === 1)!
  // Rank 1's process blocked for a while, so the upload behind it is still held when it dies.
  await run(mesh.call("tests/controller/fixtures:blockOnRank", [1, 3000, fromHost(mesh, hostOf("f32", [2]))], {}, { results: [{ dtype: "f32", shape: [2] }] }))
  const t = fromHost(mesh, host)
  expect(Buffer.compare(((await run(mesh.fetch(t, 0))) as HostTensor).data, host.data)).toBe(0)
  expect(uploads.heldBytes).toBe(host.data.byteLength)
  process.kill(victim.pid, "SIGKILL")
  const deadline = performance.now() + 10_000
  while (uploads.heldBytes > 0 && performance.now() < deadline) await Bun.sleep(50)
  expect(uploads.heldBytes).toBe(0)
  expect(Buffer.compare(((await run(mesh.fetch(t, 0))) as HostTensor).data, host.data)).toBe(0)
}, 60_000)
