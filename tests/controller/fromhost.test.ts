// fromHost puts a HostTensor's values on every rank of a mesh, typed by its dtype (each rank's
// copy bit for bit), and the README's way of giving each dp rank its own rows of a host batch
// (a reduce_scatter with max over dp of the batch viewed as [dp, rows, ...]) leaves rank i
// exactly block i, placed dp: shard(0). With a sharded placement, fromHost itself splits the
// batch: each rank gets its block and is sent no more than it (bytes counted on the real links).
import { afterAll, beforeAll, expect, test } from "bun:test"
import { Effect, Layer, ManagedRuntime } from "effect"
import { compile, Controller, ControllerError, eager, fromHost, HostTensor, shard, type Mesh, type RemoteTensor } from "../../src/controller/index.ts"
import { listen, Transport } from "../../src/controller/listener.ts"
import { Launcher } from "../../src/launcher/index.ts"

let rt: ManagedRuntime.ManagedRuntime<Controller, unknown>
let mesh: Mesh
const run = <A, E>(e: Effect.Effect<A, E, Controller>) => rt.runPromise(e)
/** Bytes the controller has sent each rank over its link: the real listener, its sends counted. */
const sent = [0, 0]
const counting = Layer.succeed(Transport, {
  listen: (o: Parameters<typeof listen>[0]) => listen({
    ...o,
    onWorker: (link) => o.onWorker({
      ...link,
      send: (m) => link.send(m),
      sendEncoded: (parts) => {
        sent[link.hello.rank] = sent[link.hello.rank]! + parts.reduce((n, p) => n + p.byteLength, 0)
        return link.sendEncoded(parts)
      },
    }),
  }),
})
beforeAll(async () => {
  rt = ManagedRuntime.make(Controller.layerLocal({ world: 2, onWorkerLine: () => {} }).pipe(Layer.provide(Layer.mergeAll(Launcher.layer, counting))))
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

/** The block of a row-major array of `shape` split into `parts[k]` along each dim k, block `index`. */
const referenceBlock = (values: Float32Array, shape: number[], parts: number[], index: number[]): number[] => {
  const sizes = shape.map((n, k) => n / parts[k]!), out: number[] = []
  const walk = (d: number, offset: number) => {
    if (d === shape.length) return void out.push(values[offset]!)
    for (let i = 0; i < sizes[d]!; i++) walk(d + 1, offset * shape[d]! + index[d]! * sizes[d]! + i)
  }
  walk(0, 0)
  return out
}

test("fromHost with a sharded placement gives each rank its block of any dim, placed so, bit for bit (seeded random shapes)", async () => {
  const seed = Number(process.env.SEED ?? Date.now() % 100_000)
  let state = seed
  const rand = (n: number) => ((state = (state * 1103515245 + 12345) % 2 ** 31), state % n)
  // The inner-dim cases first (a block of rows of runs, strided), then random ones.
  const fixed: Array<[number[], number]> = [[[3, 4], 1], [[2, 4, 3], 1], [[3, 2, 6], 2], [[4, 3], 0]]
  for (let trial = 0; trial < 10; trial++) {
    const ndim = 1 + rand(3), pick = rand(ndim)
    const [shape, dim] = fixed[trial] ?? [Array.from({ length: ndim }, (_, k) => (k === pick ? 2 : 1) * (1 + rand(4))), pick]
    const values = Float32Array.from({ length: shape.reduce((a, b) => a * b, 1) }, () => Math.fround(rand(2000) / 7 - 100))
    const t = fromHost(mesh, new HostTensor("f32", shape, new Uint8Array(values.buffer)), { dp: shard(dim) })
    const local = shape.map((n, k) => (k === dim ? n / 2 : n))
    const why = `seed ${seed}, trial ${trial}: f32[${shape}] shard(${dim})`
    expect({ why, shape: t.shape, placement: t.placement }).toEqual({ why, shape: local, placement: { dp: { kind: "shard", dim } } })
    const held = await run(mesh.fetchAll(t))
    held.forEach((h, r) => {
      const parts = shape.map((_, k) => (k === dim ? 2 : 1)), index = shape.map((_, k) => (k === dim ? r : 0))
      expect({ why, rank: r, shape: (h as HostTensor).shape, values: [...(h as HostTensor).toArray()] })
        .toEqual({ why, rank: r, shape: local, values: referenceBlock(values, shape, parts, index) })
    })
    t.release()
  }
})

test("a sharded fromHost sends each rank its own rows only: a 4 MiB batch costs each link about 2 MiB", async () => {
  const rows = new Float32Array(1024 * 1024).map((_, i) => i % 977)
  const before = [...sent]
  const t = fromHost(mesh, new HostTensor("f32", [1024, 1024], new Uint8Array(rows.buffer)), { dp: shard(0) })
  const last = await run(mesh.fetch(t.sum(), 1))
  const perRank = sent.map((n, r) => n - before[r]!)
  for (const n of perRank) {
    expect(n).toBeGreaterThanOrEqual(2 * 1024 * 1024)
    expect(n).toBeLessThan(2 * 1024 * 1024 + 64 * 1024)
  }
  let sum = 0
  for (let i = 512 * 1024; i < 1024 * 1024; i++) sum += rows[i]!
  expect((last as HostTensor).toArray()[0]).toBeCloseTo(sum, -2)
  t.release()
})

test("fromHost refuses a placement it cannot honour: an uneven split, a partial value, a dim the tensor lacks", () => {
  const host = new HostTensor("f32", [3, 2], new Uint8Array(24))
  expect(() => fromHost(mesh, host, { dp: shard(0) })).toThrow("does not split into 2 equal blocks")
  expect(() => fromHost(mesh, host, { dp: { kind: "partial" } })).toThrow("cannot be placed partial")
  expect(() => fromHost(mesh, host, { dp: shard(2) })).toThrow("names no dim of a 2-dim host tensor")
  expect(fromHost(mesh, host, {}).shape).toEqual([3, 2])
})

test("inside compile a sharded fromHost is refused with a ControllerError (a recording sends every rank the same commands)", async () => {
  const host = new HostTensor("f32", [4, 2], new Uint8Array(32))
  const step = compile((x: RemoteTensor) => Effect.gen(function* () {
    return yield* eager(() => x.add(fromHost(mesh, host, { dp: shard(0) })))
  }))
  const got = await run(Effect.flip(step(fromHost(mesh, host, { dp: shard(0) }))))
  expect(got).toBeInstanceOf(ControllerError)
  expect((got as ControllerError).message).toContain("per-rank arguments cannot be recorded")
})
