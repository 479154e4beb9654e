// A changed checkpoint does not load: single-bit flips of the manifest and of the rank files'
// headers, seeded (tests/checkpoint/tamper.ts; MONARCH_TAMPER_SEED replays one), and the
// changes a flip cannot make alone, each made consistently (the manifest re-sealed, a header's
// digest updated) so that the check behind the hash is what refuses it.
import { afterAll, describe, expect, test } from "bun:test"
import { Effect } from "effect"
import { cpSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { Controller, exportFile, importFile, load, save, shard, tensorsOf, type Mesh } from "../../src/controller/index.ts"
import { digest, MANIFEST_FORMAT, sealManifest, type Manifest } from "../../src/checkpoint/format.ts"
import { local, tamperRun, tamperState, TAMPERS } from "./tamper.ts"

describe("single-bit flips", () => {
  test(`${TAMPERS.default} seeded flips of the manifest and the rank files' headers: every load refused with a CheckpointError`, async () => {
    const seed = Number(process.env.MONARCH_TAMPER_SEED ?? Date.now() % 2 ** 31)
    const run = await tamperRun(TAMPERS.default, seed)
    expect(run.problems, `seed ${seed}`).toEqual([])
    expect(run.refused).toBe(TAMPERS.default)
  }, 120_000)
})

const ROOT = mkdtempSync(join(tmpdir(), "monarch-tampered-"))
afterAll(() => rmSync(ROOT, { recursive: true, force: true }))

const run = <A, E>(body: (mesh: Mesh) => Effect.Effect<A, E, Controller>) =>
  Effect.runPromise(Effect.gen(function* () {
    return yield* body(yield* (yield* Controller).mesh({ dp: 2, tp: 2 }))
  }).pipe(Effect.provide(local(ROOT))))

const failure = (e: Effect.Effect<unknown, { readonly _tag: string; readonly message: string }>) => Effect.map(Effect.flip(e), (f) => `${f._tag}: ${f.message}`)

/** The manifest's fields (its hash left out), to change and re-seal. */
const fieldsOf = (path: string): Manifest => {
  const { hash: _, ...body } = JSON.parse(readFileSync(path, "utf8")) as Manifest & { hash: string }
  return body
}

/** A safetensors file's header JSON and data, and the file rebuilt from a changed header. */
const headerOf = (bytes: Buffer) => {
  const end = 8 + Number(bytes.readBigUInt64LE(0))
  return { json: JSON.parse(bytes.subarray(8, end).toString("utf8")) as Record<string, { dtype: string; shape: number[] }>, data: bytes.subarray(end) }
}
const withHeader = (json: unknown, data: Buffer): { readonly file: Buffer; readonly header: Buffer } => {
  const text = Buffer.from(JSON.stringify(json))
  const header = Buffer.alloc(8 + Math.ceil(text.length / 8) * 8, 0x20)
  header.writeBigUInt64LE(BigInt(header.length - 8), 0)
  text.copy(header, 8)
  return { file: Buffer.concat([header, data]), header }
}

describe("changes behind the hashes", () => {
  test("edited fields (a holder, the mesh's ranks, a dtype, a placement), an old format or no hash: refused, the manifest does not match its hash", async () => {
    await run((mesh) => Effect.gen(function* () {
      const { version } = yield* Effect.flatMap(save(mesh, yield* tamperState(mesh), "fields"), (p) => p.durable)
      const path = join(ROOT, "fields", version, "manifest.json")
      const good = readFileSync(path, "utf8")
      const edits: ReadonlyArray<(m: Record<string, any>) => void> = [
        (m) => { m.tensors.row.holders["1"] = 1 - m.tensors.row.holders["1"] },
        (m) => { m.mesh.ranks = [1, 0, 2, 3] },
        (m) => { m.tensors.w.dtype = "i32" },
        (m) => { m.tensors.col.placement.dims.tp = "replicate" },
      ]
      for (const edit of edits) {
        const m = JSON.parse(good)
        edit(m)
        writeFileSync(path, JSON.stringify(m))
        expect(yield* failure(load(mesh, "fields"))).toMatch(/^CheckpointError: CheckpointCorrupt: .*manifest\.json: its contents do not match its hash/)
      }
      const { hash: _, ...unsealed } = JSON.parse(good)
      writeFileSync(path, JSON.stringify(unsealed))
      expect(yield* failure(load(mesh, "fields"))).toMatch(/manifest\.json: has no hash$/)
      writeFileSync(path, JSON.stringify({ ...JSON.parse(good), format: "monarch-bun checkpoint 1" }))
      expect(yield* failure(load(mesh, "fields"))).toMatch(new RegExp(`manifest\\.json: format "monarch-bun checkpoint 1" is not "${MANIFEST_FORMAT}"`))
      writeFileSync(path, good)
      expect((yield* load(mesh, "fields")).version).toBe(version)
    }))
  }, 60_000)

  test("re-sealed: a null shard hash with a flipped data byte, a tensor the tree names but the manifest lacks, a holder past the shards; each refused naming it", async () => {
    await run((mesh) => Effect.gen(function* () {
      const { version } = yield* Effect.flatMap(save(mesh, yield* tamperState(mesh), "sealed"), (p) => p.durable)
      const path = join(ROOT, "sealed", version, "manifest.json")
      const good = readFileSync(path, "utf8")
      const m = fieldsOf(path) as any
      m.tensors.w.shards[0].hash = null
      writeFileSync(path, sealManifest(m))
      const file = join(ROOT, "sealed", version, "rank-0.safetensors")
      const bytes = readFileSync(file)
      bytes[bytes.length - 1]! ^= 1
      writeFileSync(file, bytes)
      expect(yield* failure(load(mesh, "sealed"))).toMatch(/^CheckpointError: CheckpointCorrupt: .*manifest\.json: tensor "w" shard 0 has no hash of its bytes$/)
      bytes[bytes.length - 1]! ^= 1
      writeFileSync(file, bytes)
      const lacking = fieldsOf(path) as any
      lacking.tensors = Object.fromEntries(Object.entries(JSON.parse(good).tensors).filter(([k]) => k !== "row"))
      writeFileSync(path, sealManifest(lacking))
      expect(yield* failure(load(mesh, "sealed"))).toMatch(/^CheckpointError: CheckpointCorrupt: .*manifest\.json: the tree names tensor "row", which the manifest does not hold$/)
      // A rank's holder one past the last shard (the shard count itself).
      const pastShards = fieldsOf(path) as any
      pastShards.tensors.w.holders["0"] = pastShards.tensors.w.shards.length
      writeFileSync(path, sealManifest(pastShards))
      expect(yield* failure(load(mesh, "sealed"))).toMatch(/^CheckpointError: CheckpointCorrupt: .*manifest\.json: tensor "w" does not name a shard for every rank of the mesh/)
      writeFileSync(path, good)
      expect((yield* load(mesh, "sealed")).version).toBe(version)
    }))
  }, 60_000)

  test("a header whose dtype or shape was changed over the same bytes, its digest updated in a re-sealed manifest: refused naming the tensor and both", async () => {
    await run((mesh) => Effect.gen(function* () {
      const { version } = yield* Effect.flatMap(save(mesh, yield* tamperState(mesh), "header"), (p) => p.durable)
      const dir = join(ROOT, "header", version)
      const path = join(dir, "manifest.json"), file = join(dir, "rank-0.safetensors")
      const good = { manifest: readFileSync(path, "utf8"), file: readFileSync(file) }
      const cases: ReadonlyArray<[(h: Record<string, { dtype: string; shape: number[] }>) => void, RegExp]> = [
        [(h) => { h.w!.dtype = "I32" }, /rank-0\.safetensors: tensor "w" is i32\[3,4\] in the file, but the manifest saved it as f32\[3,4\]$/],
        [(h) => { h.w!.shape = [4, 3] }, /rank-0\.safetensors: tensor "w" is f32\[4,3\] in the file, but the manifest saved it as f32\[3,4\]$/],
      ]
      for (const [change, expected] of cases) {
        const { json, data } = headerOf(good.file)
        change(json)
        const rebuilt = withHeader(json, data)
        writeFileSync(file, rebuilt.file)
        // Without the manifest's digest updated, the header's digest refuses it.
        expect(yield* failure(load(mesh, "header"))).toMatch(/rank-0\.safetensors: its header is not the one that was saved/)
        const m = fieldsOf(path) as any
        m.files["rank-0.safetensors"].header = digest(rebuilt.header)
        writeFileSync(path, sealManifest(m))
        expect(yield* failure(load(mesh, "header"))).toMatch(expected)
        writeFileSync(path, good.manifest)
      }
      writeFileSync(file, good.file)
      expect((yield* load(mesh, "header")).version).toBe(version)
    }))
  }, 60_000)

  test("a load refused by a worker, and an import refused at its last tensor's placement, leave the mesh no tensor handle more than before", async () => {
    await run((mesh) => Effect.gen(function* () {
      const state = yield* tamperState(mesh)
      const { version } = yield* Effect.flatMap(save(mesh, state, "released"), (p) => p.durable)
      yield* exportFile(mesh, state, "released.safetensors")
      const before = mesh.live.refs
      // A flipped data byte under an intact manifest: the manifest parses, every tensor is
      // defined, and rank 0 refuses the bytes against their hash.
      const file = join(ROOT, "released", version, "rank-0.safetensors")
      const bytes = readFileSync(file)
      bytes[bytes.length - 1]! ^= 1
      writeFileSync(file, bytes)
      expect(yield* failure(load(mesh, "released"))).toMatch(/^CheckpointError: .*rank-0\.safetensors/)
      expect(mesh.live.refs).toBe(before)
      // The last tensor of the file asks for a mesh dim there is none of: refused after the
      // tensors before it were defined.
      const names = Object.keys(headerOf(readFileSync(join(ROOT, "released.safetensors"))).json).filter((n) => n !== "__metadata__")
      expect(names.length).toBeGreaterThan(1)
      expect(yield* failure(importFile(mesh, "released.safetensors", { [names.at(-1)!]: { pp: shard(0) } }))).toMatch(/cannot shard dim 0 over pp \(no such mesh dim\)/)
      expect(mesh.live.refs).toBe(before)
      for (const t of tensorsOf(state).values()) t.release()
    }))
  }, 60_000)

  test("a LATEST naming anything but a version in its own directory (another checkpoint, outside the root) is refused", async () => {
    await run((mesh) => Effect.gen(function* () {
      const { version } = yield* Effect.flatMap(save(mesh, yield* tamperState(mesh), "latest"), (p) => p.durable)
      const outside = mkdtempSync(join(tmpdir(), "monarch-outside-"))
      cpSync(join(ROOT, "latest", version), join(outside, version), { recursive: true })
      cpSync(join(ROOT, "latest", version), join(ROOT, "other"), { recursive: true })
      for (const target of [`../other`, `${outside}/${version}`, `../../${outside.split("/").at(-1)}/${version}`, ".", ""]) {
        writeFileSync(join(ROOT, "latest", "LATEST"), `${target}\n`)
        expect(yield* failure(load(mesh, "latest"))).toMatch(/^CheckpointError: CheckpointCorrupt: .*latest\/LATEST: names ".*", not a version in its directory/)
      }
      writeFileSync(join(ROOT, "latest", "LATEST"), `${version}\n`)
      expect((yield* load(mesh, "latest")).version).toBe(version)
      rmSync(outside, { recursive: true })
    }))
  }, 60_000)
})
