// The hash a checkpoint keeps of each shard (wyhash chained over 1 MiB chunks, computed on load
// as each chunk is read): any single flipped bit changes it, wherever it falls (the first
// chunk, a later one, either side of a chunk's edge, the last byte); a load refuses a shard with
// a flipped bit in any chunk; a manifest written before (a bare wyhash of all the bytes) still
// loads, and still refuses a flipped bit.
import { afterAll, expect, test } from "bun:test"
import { Effect } from "effect"
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { Controller, fromHost, HostTensor, load, save, type Mesh } from "../../src/controller/index.ts"
import { sealManifest } from "../../src/checkpoint/format.ts"
import { HASH_CHUNK, hashBytes } from "../../src/worker/handlers/checkpoints.ts"

const ROOT = mkdtempSync(join(tmpdir(), "monarch-ckpt-hash-"))
afterAll(() => rmSync(ROOT, { recursive: true, force: true }))
let seed = 0x1234
const random = () => ((seed = (seed * 1103515245 + 12345) >>> 0) / 2 ** 32)
const bytesOf = (n: number) => {
  const out = new Uint8Array(n)
  for (let i = 0; i < n; i++) out[i] = (seed = (seed * 1103515245 + 12345) >>> 0) >>> 24
  return out
}

test("a single flipped bit anywhere changes the chained hash; the chain is wyhash seeded chunk by chunk", () => {
  for (const n of [0, 1, HASH_CHUNK - 1, HASH_CHUNK, HASH_CHUNK + 1, Math.floor(3.5 * HASH_CHUNK)]) {
    const data = bytesOf(n)
    let h = 0n
    for (let at = 0; at < n; at += HASH_CHUNK) h = Bun.hash.wyhash(data.subarray(at, at + HASH_CHUNK), h)
    expect(hashBytes(data)).toBe(`c1m:${h}`)
    const at = n === 0 ? [] : [0, n - 1, Math.min(n - 1, HASH_CHUNK - 1), Math.min(n - 1, HASH_CHUNK), Math.floor(random() * n)]
    for (const i of at) {
      const bit = 1 << Math.floor(random() * 8)
      data[i]! ^= bit
      expect({ n, i, same: hashBytes(data) === `c1m:${h}` }).toEqual({ n, i, same: false })
      data[i]! ^= bit
    }
  }
})

const run = <A, E>(body: (mesh: Mesh) => Effect.Effect<A, E, Controller>) =>
  Effect.runPromise(Effect.gen(function* () {
    return yield* body(yield* (yield* Controller).mesh({ dp: 1 }))
  }).pipe(Effect.provide(Controller.local({ world: 1, checkpoints: ROOT, onWorkerLine: () => {} }))))
const failure = (e: Effect.Effect<unknown, unknown>) => Effect.flip(e).pipe(Effect.map((f) => `${(f as { _tag: string })._tag}: ${(f as Error).message}`))

test("a load refuses a flipped bit in any chunk of a shard, and takes a manifest's bare (whole-tensor) wyhash from before", async () => {
  const n = Math.floor(2.5 * HASH_CHUNK) + 3
  const host = bytesOf(n)
  await run((mesh) => Effect.gen(function* () {
    const { version } = yield* Effect.flatMap(save(mesh, { w: fromHost(mesh, new HostTensor("u8", [n], host)) }, "c"), (p) => p.durable)
    const dir = join(ROOT, "c", version), file = join(dir, "rank-0.safetensors"), manifest = join(dir, "manifest.json")
    const good = readFileSync(file), goodManifest = readFileSync(manifest, "utf8")
    const start = 8 + Number(good.readBigUInt64LE(0)) // safetensors: a u64 header length, the header, then the data
    const loads = () => Effect.flatMap(load(mesh, "c"), (l) => mesh.fetch((l.state as { readonly w: unknown }).w))
    expect(Buffer.compare(((yield* loads()) as HostTensor).data, host)).toBe(0)
    for (const i of [0, HASH_CHUNK - 1, HASH_CHUNK, 2 * HASH_CHUNK + 7, n - 1]) {
      const flipped = Buffer.from(good)
      flipped[start + i]! ^= 0x40
      writeFileSync(file, flipped)
      expect(yield* failure(load(mesh, "c"))).toMatch(/^CheckpointError: CheckpointCorrupt: .*rank-0\.safetensors: tensor "w" does not hold the bytes that were saved/)
    }
    writeFileSync(file, good)
    // A manifest of before: the shard's hash one wyhash of all its bytes.
    const { hash: _, ...m } = JSON.parse(goodManifest)
    expect(m.tensors.w.shards[0].hash).toBe(hashBytes(host))
    m.tensors.w.shards[0].hash = Bun.hash.wyhash(host, 0n).toString()
    writeFileSync(manifest, sealManifest(m))
    expect(Buffer.compare(((yield* loads()) as HostTensor).data, host)).toBe(0)
    const flipped = Buffer.from(good)
    flipped[start + HASH_CHUNK + 1]! ^= 1
    writeFileSync(file, flipped)
    expect(yield* failure(load(mesh, "c"))).toMatch(/does not hold the bytes that were saved/)
  }))
}, 60_000)
