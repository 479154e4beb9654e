// A host batch split over dp ranks (fromHost with a sharded placement) on 2- and 4-rank meshes:
// each rank gets exactly its rows, through the upload segment, and is sent no rows but its own.
// A batch that does not divide is refused unless `uneven` says "pad" or "drop", and then each
// rank's rows are those of torch's DistributedSampler (shuffle=False) index list with that
// drop_last, cut into contiguous blocks (the padded list, or the dropped one, from torch itself).
import { afterAll, beforeAll, describe, expect, test } from "bun:test"
import { Effect, Layer, ManagedRuntime } from "effect"
import { Controller, ControllerError, fromHost, HostTensor, shard, type Mesh } from "../../src/controller/index.ts"
import { listen, Transport } from "../../src/controller/listener.ts"
import { Launcher } from "../../src/launcher/index.ts"
import type { ControllerUploads } from "../../src/net/uploads.ts"
import { describeUnless } from "../skip.ts"
import { PYTHON, torchMissing } from "../torch.ts"

let rt: ManagedRuntime.ManagedRuntime<Controller, unknown>
let uploads: ControllerUploads
const run = <A, E>(e: Effect.Effect<A, E, Controller>) => rt.runPromise(e)
const sharing = Layer.succeed(Transport, {
  listen: (o: Parameters<typeof listen>[0]) => listen({ ...o, sharedMemory: { minBytes: 0 }, onUploads: (u) => void (uploads = u) }),
})
let flat: Mesh, square: Mesh, pair: Mesh
beforeAll(async () => {
  rt = ManagedRuntime.make(Controller.layerLocal({ world: 4, onWorkerLine: () => {} }).pipe(Layer.provide(Layer.mergeAll(Launcher.layer, sharing))))
  const ctl = await rt.runPromise(Effect.service(Controller))
  flat = await run(ctl.mesh({ dp: 4 }))
  square = await run(ctl.mesh({ dp: 2, tp: 2 }))
  pair = await run(square.slice({ tp: 0 })) // dp=2 over ranks 0 and 2
}, 90_000)
afterAll(async () => {
  await rt?.dispose()
})

/** torch's DistributedSampler(shuffle=False) index list for `n` rows over `k` ranks, before each rank takes its every k-th. */
const samplerLists = (cases: ReadonlyArray<readonly [number, number, boolean]>): number[][] => {
  const script = `
import json, sys
from torch.utils.data.distributed import DistributedSampler
out = []
for n, k, drop in json.loads(sys.argv[1]):
    per = [list(DistributedSampler(range(n), num_replicas=k, rank=r, shuffle=False, drop_last=drop)) for r in range(k)]
    out.append([per[j % k][j // k] for j in range(k * len(per[0]))])
print(json.dumps(out))`
  const r = Bun.spawnSync([PYTHON, "-c", script, JSON.stringify(cases)], { stderr: "pipe" })
  if (r.exitCode !== 0) throw new Error(r.stderr.toString())
  return JSON.parse(r.stdout.toString())
}

let seed = 0x5ca7
const random = () => ((seed = (seed * 1103515245 + 12345) >>> 0) / 2 ** 32)
/** A batch of `n` rows of `width` f32s, row i's values all i + the column / 1000. */
const batchOf = (n: number, width: number) => {
  const values = Float32Array.from({ length: n * width }, (_, j) => Math.floor(j / width) + (j % width) / 1000)
  return { host: new HostTensor("f32", [n, width], new Uint8Array(values.buffer)), values }
}
const rowsOf = (values: Float32Array, width: number, rows: ReadonlyArray<number>) => rows.flatMap((i) => [...values.subarray(i * width, (i + 1) * width)])

describeUnless(torchMissing())("uneven batches follow DistributedSampler", () => {
  test("pad and drop give each rank its block of torch's index list, on 2 and 4 ranks (random sizes, some dividing)", async () => {
    const meshes: ReadonlyArray<readonly [Mesh, number]> = [[pair, 2], [flat, 4]]
    const cases: Array<readonly [number, number, boolean, Mesh]> = []
    for (const [mesh, k] of meshes) for (const drop of [false, true]) for (const n of [1, k - 1, k, k + 1, 2 * k + 1, ...Array.from({ length: 3 }, () => 1 + Math.floor(random() * 40))]) {
      if (n === 0 || (drop && n < k)) continue
      cases.push([n, k, drop, mesh])
    }
    const lists = samplerLists(cases.map(([n, k, drop]) => [n, k, drop] as const))
    for (let c = 0; c < cases.length; c++) {
      const [n, k, drop, mesh] = cases[c]!, width = 1 + Math.floor(random() * 5)
      const { host, values } = batchOf(n, width)
      const t = fromHost(mesh, host, { dp: shard(0) }, { uneven: drop ? "drop" : "pad" })
      const per = lists[c]!.length / k, label = `${n} rows over ${k}, drop_last=${drop}`
      expect({ label, local: t.shape }).toEqual({ label, local: [per, width] }) // of a padded or dropped batch of k * per rows
      const held = (await run(mesh.fetchAll(t))) as HostTensor[]
      held.forEach((h, r) => expect({ label, r, rows: [...h.toArray()] }).toEqual({ label, r, rows: rowsOf(values, width, lists[c]!.slice(r * per, (r + 1) * per)) }))
      t.release()
    }
  }, 120_000)
})

test("a batch that does not divide is refused by default, saying how to pad or drop; bad options are refused", () => {
  const { host } = batchOf(10, 3)
  const refusal = (f: () => unknown) => {
    try {
      f()
    } catch (e) {
      expect(e).toBeInstanceOf(ControllerError)
      return e as ControllerError
    }
    throw new Error("not refused")
  }
  const e = refusal(() => fromHost(flat, host, { dp: shard(0) }))
  expect(e.reason).toBe("placement")
  expect(e.message).toContain('does not split into 4 equal blocks; pass { uneven: "pad" } or { uneven: "drop" }')
  expect(refusal(() => fromHost(flat, host, { dp: shard(0) }, { uneven: "wrap" as never })).message).toContain('uneven is "pad" or "drop", not "wrap"')
  expect(refusal(() => fromHost(flat, host, undefined, { uneven: "pad" })).message).toContain("is for a sharded placement")
  expect(refusal(() => fromHost(flat, new HostTensor("f32", [0, 3], new Uint8Array(0)), { dp: shard(0) }, { uneven: "pad" })).message).toContain("no rows to pad with")
})

test("on a 2x2 mesh, rows over dp and columns over tp: each rank its block, through the segment, one copy of the batch", async () => {
  const { host, values } = batchOf(6, 8)
  await run(square.fetchAll(fromHost(square, host))) // a segment that fits
  const before = { ...uploads.counts }
  const t = fromHost(square, host, { dp: shard(0), tp: shard(1) })
  expect(t.shape).toEqual([3, 4]) // each rank's block
  const held = (await run(square.fetchAll(t))) as HostTensor[]
  held.forEach((h, i) => {
    const dp = Math.floor(i / 2), tp = i % 2
    const want = [0, 1, 2].flatMap((j) => [...values.subarray((3 * dp + j) * 8 + 4 * tp, (3 * dp + j) * 8 + 4 * tp + 4)])
    expect({ i, rows: [...h.toArray()] }).toEqual({ i, rows: want })
  })
  expect(uploads.counts.uploads - before.uploads).toBe(4)
  expect(uploads.counts.bytes - before.bytes).toBe(host.data.byteLength)
  expect(uploads.heldBytes).toBe(0)
  // Padded over dp too: 7 rows over 2 gives 4 each, the 8th the first again.
  const odd = batchOf(7, 8)
  const p = fromHost(square, odd.host, { dp: shard(0), tp: shard(1) }, { uneven: "pad" })
  expect(p.shape).toEqual([4, 4])
  const last = (await run(square.fetch(p, { dp: 1, tp: 0 }))) as HostTensor
  expect([...last.toArray()]).toEqual([4, 5, 6, 0].flatMap((row) => [...odd.values.subarray(row * 8, row * 8 + 4)]))
})
