// A checkpoint load on cpu reads each shard straight into its tensor's memory: a fresh worker
// loading a 64 MiB shard grows its peak RSS by about the tensor alone (under 96 MiB), where
// reading into a host buffer and copying it in would add the shard's size again; the values
// are the saved ones.
import { expect, test } from "bun:test"
import { Effect } from "effect"
import { mkdtempSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join, resolve } from "node:path"
import { Controller, load, opsOn, save, shard, type HostTensor, type Mesh, type RemoteTensor } from "../../src/controller/index.ts"

const MIB = 2 ** 20
const FIXTURES = resolve(import.meta.dir, "../..")
const ELEMENTS = 16 * MIB

/** Rank `rank`'s peak RSS in bytes (VmHWM). */
const peakOf = (mesh: Mesh, any: RemoteTensor, rank: number) =>
  Effect.map(mesh.fetch(any, rank, { fn: "tests/checkpoint/fixtures:resident" }), (v) => (v as number[])[0]!)

test("a fresh worker loading a 64 MiB shard grows its peak RSS by the tensor, not by a host copy too", async () => {
  const root = mkdtempSync(join(tmpdir(), "monarch-inplace-"))
  const local = () => Controller.local({ world: 2, device: "cpu", checkpoints: root, functionPath: [FIXTURES], onWorkerLine: () => {} })
  try {
    const sumsOf = (mesh: Mesh, w: RemoteTensor) => Effect.forEach([0, 1], (r) => Effect.map(mesh.fetch(w.to("f64").sum(), r), (h) => (h as HostTensor).toArray()[0] as number))
    const saved = await Effect.runPromise(Effect.gen(function* () {
      const mesh = yield* (yield* Controller).mesh({ dp: 2 })
      const w = opsOn(mesh).arange(ELEMENTS, { dtype: "f32" }).place({ dp: shard(0) })
      yield* Effect.flatMap(save(mesh, { w }, "inplace"), (p) => p.durable)
      return yield* sumsOf(mesh, w)
    }).pipe(Effect.provide(local())))
    const { growth, sums } = await Effect.runPromise(Effect.gen(function* () {
      const mesh = yield* (yield* Controller).mesh({ dp: 2 })
      const small = opsOn(mesh).zeros([4])
      const before = yield* peakOf(mesh, small, 1)
      const loaded = yield* load(mesh, "inplace")
      const w = (loaded.state as { w: RemoteTensor }).w
      const growth = (yield* peakOf(mesh, small, 1)) - before
      return { growth, sums: yield* sumsOf(mesh, w) }
    }).pipe(Effect.provide(local())))
    expect(sums).toEqual(saved)
    console.log(`peak RSS growth of rank 1 over the load: ${(growth / MIB).toFixed(1)} MiB`)
    expect(growth).toBeGreaterThan(60 * MIB)
    expect(growth).toBeLessThan(96 * MIB)
  } finally {
    rmSync(root, { recursive: true, force: true })
  }
}, 120_000)
