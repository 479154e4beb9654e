// Save and load on a 2x2 mesh: sharded, replicated and per-rank tensors with numbers in the
// tree; what is on disk (safetensors files, the manifest, LATEST); the snapshot taken at save;
// a mesh of another shape, a corrupt, a truncated, an overlong and a missing file refused naming it; paths
// out of the root refused.
import { afterAll, describe, expect, test } from "bun:test"
import { Effect } from "effect"
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, symlinkSync, utimesSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join, resolve } from "node:path"
import { Controller, eager, load, opsOn, perRank, save, shard, type HostTensor, type Mesh, type RemoteTensor, type State } from "../../src/controller/index.ts"
import { MANIFEST_FORMAT, parseHeader, sealManifest } from "../../src/checkpoint/format.ts"
import { prune, publish, STALE_LOCK_MS, underCommitLock } from "../../src/checkpoint/files.ts"

const ROOT = mkdtempSync(join(tmpdir(), "monarch-ckpt-"))
afterAll(() => rmSync(ROOT, { recursive: true, force: true }))
const FIXTURES = resolve(import.meta.dir, "../..")

const run = <A, E>(body: (mesh: Mesh) => Effect.Effect<A, E, Controller>) =>
  Effect.runPromise(Effect.gen(function* () {
    const ctl = yield* Controller
    return yield* body(yield* ctl.mesh({ dp: 2, tp: 2 }))
  }).pipe(Effect.provide(Controller.local({ world: 4, checkpoints: ROOT, functionPath: [FIXTURES] }))))

/** Every rank's value of every tensor of a tree, as arrays. */
const values = (mesh: Mesh, ts: ReadonlyArray<RemoteTensor>) =>
  Effect.forEach(ts, (t) => Effect.map(mesh.fetchAll(t), (vs) => vs.map((v) => Array.from((v as HostTensor).toArray() as Float32Array))))

const makeState = (mesh: Mesh) => Effect.gen(function* () {
  const on = opsOn(mesh)
  const gen = yield* mesh.call("tests/checkpoint/fixtures:rankRandn", [[3], 7], {}, { results: [{ dtype: "f32", shape: [3] }] })
  const col = yield* mesh.call("tests/checkpoint/fixtures:rankRandn", [[4, 2], 2], {}, { results: [{ dtype: "f32", shape: [4, 2] }] })
  return yield* eager(() => {
    const row = on.randn([2, 5], { seed: 1 }).add(on.full([2, 5], 0)).place({ tp: shard(0) })
    col.placement = { tp: shard(1), dp: shard(0) }
    return { params: { w: on.randn([3, 4], { seed: 2 }), row }, col, step: 12, lr: 0.5, name: "run", rng: perRank(gen) } satisfies State
  })
})

describe("save and load on a 2x2 mesh", () => {
  test("round trip: every rank gets back the block it held; numbers come back; the files are safetensors; a commit prunes older versions and unfinished saves", async () => {
    await run((mesh) => Effect.gen(function* () {
      const state = yield* makeState(mesh)
      const ts = [state.params.w, state.params.row, state.col, state.rng.tensor]
      const before = yield* values(mesh, ts)
      const pending = yield* save(mesh, state, "a")
      // The snapshot: a change after save returns is not in the checkpoint.
      yield* mesh.run("ops.add_", [state.params.w, 1], {}, { mutates: [state.params.w] })
      const saved = yield* pending.durable
      expect(saved.writes.length).toBe(4)
      expect(saved.bytes).toBeGreaterThan(0)
      const dir = join(ROOT, "a")
      expect(readFileSync(join(dir, "LATEST"), "utf8").trim()).toBe(saved.version)
      expect(saved.version.startsWith("step-00000012-")).toBe(true)
      // w is replicated: written once, by rank 0; col is sharded on both dims: each rank writes its block.
      const files = readdirSync(join(dir, saved.version)).sort()
      expect(files).toEqual(["manifest.json", "rank-0.safetensors", "rank-1.safetensors", "rank-2.safetensors", "rank-3.safetensors"])
      const bytes = new Uint8Array(readFileSync(join(dir, saved.version, "rank-0.safetensors")))
      const header = parseHeader("rank-0", bytes, bytes.length)
      if ("need" in header) throw new Error("short")
      expect([...header.tensors.keys()].sort()).toEqual(["col", "params.row", "params.w", "rng"])
      const manifest = JSON.parse(readFileSync(join(dir, saved.version, "manifest.json"), "utf8"))
      expect(manifest.tensors["params.w"].shards.length).toBe(1)
      expect(manifest.tensors["params.row"].shards.length).toBe(2)
      expect(manifest.tensors["col"].shape).toEqual([8, 4])
      expect(manifest.tensors["rng"].placement).toEqual({ kind: "per-rank" })
      const loaded = yield* load(mesh, "a")
      const s = loaded.state as typeof state
      expect([s.step, s.lr, s.name]).toEqual([12, 0.5, "run"])
      expect(s.col.placement).toEqual(state.col.placement)
      expect(yield* values(mesh, [s.params.w, s.params.row, s.col, s.rng.tensor])).toEqual(before)
      // Saving the loaded tree again with keep 1 leaves the new version beside LATEST: the older
      // version goes, and a temporary directory stays (it may be a save still being written).
      mkdirSync(join(dir, ".tmp-unfinished"))
      writeFileSync(join(dir, ".tmp-unfinished", "rank-0.safetensors"), "partial")
      const again = yield* Effect.flatMap(save(mesh, loaded.state, "a", { keep: 1 }), (p) => p.durable)
      expect(readdirSync(dir).sort()).toEqual([".tmp-unfinished", "LATEST", again.version].sort())
    }))
  }, 60_000)
})

describe("every rank's generator state", () => {
  test("saved per rank with get_rng_state and restored with set_rng_state, the draws after load continue each rank's own stream", async () => {
    await run((mesh) => Effect.gen(function* () {
      const on = opsOn(mesh)
      const draw = () => Effect.map(mesh.fetchAll(on.randn([4])), (vs) => vs.map((v) => Array.from((v as HostTensor).toArray() as Float32Array)))
      yield* eager(() => { on.manual_seed(5); on.randn([3]) })
      const pending = yield* save(mesh, { rng: perRank(on.get_rng_state()) }, "gen")
      yield* pending.durable
      const expected = yield* draw()
      yield* eager(() => { on.manual_seed(99); on.randn([7]) })
      const moved = yield* draw()
      const loaded = yield* load(mesh, "gen")
      yield* eager(() => on.set_rng_state((loaded.state as { rng: ReturnType<typeof perRank> }).rng.tensor))
      const resumed = yield* draw()
      expect(resumed).toEqual(expected)
      expect(moved).not.toEqual(expected)
      expect(new Set(expected.map((r) => r.join())).size).toBe(mesh.size)
    }))
  }, 60_000)
})

describe("what load refuses", () => {
  test("a mesh of another shape, a flipped byte, a truncated file, bytes past the data, a missing file: each a CheckpointError naming it", async () => {
    await run((mesh) => Effect.gen(function* () {
      const state = yield* makeState(mesh)
      const { version } = yield* Effect.flatMap(save(mesh, state, "b"), (p) => p.durable)
      const dir = join(ROOT, "b", version)
      const failure = (e: Effect.Effect<unknown, unknown>) => Effect.flip(e).pipe(Effect.map((f) => `${(f as { _tag: string })._tag}: ${(f as Error).message}`))
      const ctl = yield* Controller
      expect(yield* failure(load(yield* ctl.mesh({ all: 4 }), "b"))).toMatch(/^CheckpointError: .*saved from a mesh of dims dp=2, tp=2; Mesh\(all=4\) has another shape/)

      const file = join(dir, "rank-1.safetensors")
      const good = readFileSync(file)
      const flipped = Buffer.from(good)
      flipped[flipped.length - 3]! ^= 0x10
      writeFileSync(file, flipped)
      expect(yield* failure(load(mesh, "b"))).toMatch(/^CheckpointError: CheckpointCorrupt: .*rank-1\.safetensors: tensor "\S+" does not hold the bytes that were saved/)

      writeFileSync(file, good.subarray(0, good.length - 100))
      expect(yield* failure(load(mesh, "b"))).toMatch(/^CheckpointError: CheckpointCorrupt: .*rank-1\.safetensors: .*truncated/)
      writeFileSync(file, Buffer.concat([good, Buffer.from([1, 2, 3])]))
      expect(yield* failure(load(mesh, "b"))).toMatch(/^CheckpointError: CheckpointCorrupt: .*rank-1\.safetensors: 3 bytes after the last tensor's data/)
      writeFileSync(file, Buffer.concat([Buffer.from([0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0]), good.subarray(8)]))
      expect(yield* failure(load(mesh, "b"))).toMatch(/^CheckpointError: CheckpointCorrupt: .*rank-1\.safetensors: header length \d+ (is over|runs past)/)
      rmSync(file)
      expect(yield* failure(load(mesh, "b"))).toMatch(/^CheckpointError: CheckpointPathError: .*rank-1\.safetensors: cannot be opened/)
      writeFileSync(file, good)
      writeFileSync(join(dir, "manifest.json"), readFileSync(join(dir, "manifest.json"), "utf8").slice(0, 50))
      expect(yield* failure(load(mesh, "b"))).toMatch(/^CheckpointError: CheckpointCorrupt: .*manifest\.json: not JSON/)
      expect(yield* failure(load(mesh, "nothing-here"))).toMatch(/^CheckpointError: CheckpointPathError: no checkpoint in .*nothing-here: it has no LATEST file/)
      // The mesh goes on after each refusal.
      expect(((yield* mesh.fetch(state.params.w)) as HostTensor).shape).toEqual([3, 4])
    }))
  }, 60_000)

  test("paths out of the checkpoint root are refused on the workers", async () => {
    await run((mesh) => Effect.gen(function* () {
      const state = { w: yield* eager(() => opsOn(mesh).ones([2])) }
      const outside = mkdtempSync(join(tmpdir(), "monarch-outside-"))
      symlinkSync(outside, join(ROOT, "link"))
      // Each refused for its own reason (a path with ".." is not blamed on a symlink).
      const refused: ReadonlyArray<readonly [string, string]> = [
        ["../escape", "leads out of the checkpoint root"],
        ["/tmp/abs", "is absolute"],
        ["a/../../escape", "leads out of the checkpoint root"],
        ["link/run", "passes a symlink that leads out"],
      ]
      for (const [dir, why] of refused) {
        const f = yield* Effect.flip(Effect.flatMap(save(mesh, state, dir), (p) => p.durable))
        expect(`${f._tag}: ${f.message}`, `the refusal of "${dir}"`).toMatch(new RegExp(`^CheckpointError: CheckpointPathError: checkpoint path "[^"]*" ${why}`))
      }
      expect(readdirSync(join(ROOT, "..")).includes("escape")).toBe(false)
      expect(readdirSync(outside)).toEqual([])
      rmSync(outside, { recursive: true })
    }))
  }, 60_000)
})

describe("names, trees and arguments", () => {
  test("tensor names are paths joined by dots, as torch's state dicts; two paths that give one name are refused before anything is written", async () => {
    await run((mesh) => Effect.gen(function* () {
      const on = opsOn(mesh)
      const { t1, t2, t3 } = yield* eager(() => ({ t1: on.full([2], 1), t2: on.full([3], 2), t3: on.full([4], 3) }))
      const refused = (state: State, dir: string) => Effect.map(Effect.flip(Effect.flatMap(save(mesh, state, dir), (p) => p.durable)), (f) => `${f._tag}: ${f.message}`)
      expect(yield* refused({ "a.b": t1, a: { b: t2 } }, "dots")).toMatch(/^ControllerError: two tensors of the state are named "a\.b"/)
      expect(yield* refused({ x: [t1], "x.0": t2 }, "indices")).toMatch(/^ControllerError: two tensors of the state are named "x\.0"/)
      expect(existsSync(join(ROOT, "dots")) || existsSync(join(ROOT, "indices"))).toBe(false)
      // Dotted keys that do not collide keep torch's names, and load back in place.
      const state = { "h.0.weight": t1, h: { 1: { weight: t2 } }, x: [t3] }
      const saved = yield* Effect.flatMap(save(mesh, state, "names"), (p) => p.durable)
      const manifest = JSON.parse(readFileSync(join(ROOT, "names", saved.version, "manifest.json"), "utf8"))
      expect(Object.keys(manifest.tensors).sort()).toEqual(["h.0.weight", "h.1.weight", "x.0"])
      const s = (yield* load(mesh, "names")).state as typeof state
      const firsts = yield* Effect.forEach([s["h.0.weight"], s.h[1].weight, s.x[0]!], (t) => Effect.map(mesh.fetch(t), (v) => Array.from((v as HostTensor).toArray() as Float32Array)))
      expect(firsts).toEqual([[1, 1], [2, 2, 2], [3, 3, 3, 3]])
    }))
  }, 60_000)

  test("a strided view saved (a transpose, a stepped slice of an inner dim) holds its elements in row-major order, and loads as them", async () => {
    await run((mesh) => Effect.gen(function* () {
      const on = opsOn(mesh), x = on.arange(0, 24, 1, { dtype: "f32" }).reshape([4, 6])
      const state = { t: x.t(), stepped: x.slice(1, 1, 6, 2) }
      const want = yield* values(mesh, [state.t, state.stepped])
      // Row-major elements of the views, as torch's x.t() and x[:, 1::2].
      expect(want.map((v) => v[0])).toEqual([[0, 6, 12, 18, 1, 7, 13, 19, 2, 8, 14, 20, 3, 9, 15, 21, 4, 10, 16, 22, 5, 11, 17, 23], [1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23]])
      const saved = yield* Effect.flatMap(save(mesh, state, "views"), (p) => p.durable)
      const bytes = new Uint8Array(readFileSync(join(ROOT, "views", saved.version, "rank-0.safetensors")))
      const header = parseHeader("rank-0", bytes, bytes.length)
      if ("need" in header) throw new Error("short")
      const t = header.tensors.get("t")!
      expect([...t.shape]).toEqual([6, 4])
      expect([...new Float32Array(bytes.slice(header.dataStart + t.offsets[0], header.dataStart + t.offsets[1]).buffer)]).toEqual(want[0]![0]!)
      const s = (yield* load(mesh, "views")).state as typeof state
      expect(yield* values(mesh, [s.t, s.stepped])).toEqual(want)
    }))
  }, 60_000)

  test("a state with no tensor saves and loads; a key \"$tensor\" and a keep that is not a count of versions are refused before anything is written", async () => {
    await run((mesh) => Effect.gen(function* () {
      const saved = yield* Effect.flatMap(save(mesh, { step: 3, note: "none" }, "empty"), (p) => p.durable)
      expect(readdirSync(join(ROOT, "empty", saved.version))).toEqual(["manifest.json"])
      expect((yield* load(mesh, "empty")).state).toEqual({ step: 3, note: "none" })
      const w = yield* eager(() => opsOn(mesh).ones([2]))
      const refused = (state: State, dir: string, keep?: number) => Effect.map(Effect.flip(Effect.flatMap(save(mesh, state, dir, keep === undefined ? {} : { keep }), (p) => p.durable)), (f) => `${f._tag}: ${f.message}`)
      for (const keep of [-1, 0.5, 0, Number.NaN]) {
        expect(yield* refused({ w }, `keep${keep}`, keep)).toMatch(/^ControllerError: keep .* is not a count of versions/)
        expect(existsSync(join(ROOT, `keep${keep}`))).toBe(false)
      }
      expect(yield* refused({ m: { $tensor: "w" }, w }, "reserved")).toMatch(/^ControllerError: m has the key "\$tensor"/)
      expect(existsSync(join(ROOT, "reserved"))).toBe(false)
    }))
  }, 60_000)
})

describe("a save that fails", () => {
  test("a rank whose write fails fails the save naming it; the save's temporary directory is removed, LATEST and the previous version untouched", async () => {
    await run((mesh) => Effect.gen(function* () {
      const state = { w: yield* eager(() => opsOn(mesh).randn([4, 4], { seed: 1 }).place({ tp: shard(0) })) }
      const first = yield* Effect.flatMap(save(mesh, state, "fails"), (p) => p.durable)
      // Rank 1 is held up; meanwhile a directory takes the place of its file.
      yield* mesh.call("tests/faults/fixtures:blockOnRank", [1, 1500, state.w])
      const pending = yield* save(mesh, state, "fails")
      const tmp = join(ROOT, "fails", `.tmp-${pending.version}`)
      while (!existsSync(tmp)) yield* Effect.sleep("5 millis")
      mkdirSync(join(tmp, "rank-1.safetensors"))
      const f = yield* Effect.flip(pending.durable)
      expect(`${f._tag}: ${f.message}`).toMatch(/^CheckpointError: rank 1 writing fails\/\.tmp-.*rank-1\.safetensors: .*(EISDIR|directory)/i)
      yield* mesh.fetch(state.w)
      expect(readdirSync(join(ROOT, "fails")).sort()).toEqual(["LATEST", first.version])
      expect((yield* load(mesh, "fails")).version).toBe(first.version)
    }))
  }, 60_000)
})

describe("publish and prune", () => {
  test("a version is published only when every file its manifest names is there with the size its rank wrote", () => {
    const dir = mkdtempSync(join(tmpdir(), "monarch-publish-"))
    try {
      const tmp = join(dir, ".tmp-v1")
      mkdirSync(tmp)
      writeFileSync(join(tmp, "rank-0.safetensors"), new Uint8Array(16))
      const manifest = (files: Record<string, { rank: number; bytes: number; header: string }>) => sealManifest({
        format: MANIFEST_FORMAT, version: "v1", mesh: { names: ["all"], sizes: [2], ranks: [0, 1] }, tree: { step: 1 }, tensors: {}, files, savedAt: "now",
      })
      expect(() => publish(dir, tmp, "v1", manifest({ "rank-0.safetensors": { rank: 0, bytes: 16, header: "x" }, "rank-1.safetensors": { rank: 1, bytes: 16, header: "y" } })))
        .toThrow(/version v1 is incomplete: rank-1\.safetensors is missing; not published/)
      expect(() => publish(dir, tmp, "v1", manifest({ "rank-0.safetensors": { rank: 0, bytes: 24, header: "x" } })))
        .toThrow(/version v1 is incomplete: rank-0\.safetensors has 16 bytes, its rank wrote 24; not published/)
      expect(readdirSync(dir)).toEqual([".tmp-v1"])
      publish(dir, tmp, "v1", manifest({ "rank-0.safetensors": { rank: 0, bytes: 16, header: "x" } }))
      expect(readdirSync(dir).sort()).toEqual(["LATEST", "v1"])
    } finally {
      rmSync(dir, { recursive: true, force: true })
    }
  })


  test("commits to one directory take turns: one waits while another process holds the commit lock", async () => {
    const dir = mkdtempSync(join(tmpdir(), "monarch-lock-"))
    try {
      const files = resolve(import.meta.dir, "../../src/checkpoint/files.ts")
      const holder = Bun.spawn([process.execPath, "-e", `
        const { underCommitLock } = await import(${JSON.stringify(files)})
        underCommitLock(${JSON.stringify(dir)}, () => { console.log("held"); Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 800) })
      `], { stdout: "pipe" })
      const reader = holder.stdout.getReader()
      expect(new TextDecoder().decode((await reader.read()).value)).toBe("held\n")
      const asked = performance.now()
      const waited = underCommitLock(dir, () => performance.now() - asked)
      await holder.exited
      expect(waited).toBeGreaterThan(300)
      expect(readdirSync(dir)).toEqual([])
    } finally {
      rmSync(dir, { recursive: true, force: true })
    }
  }, 20_000)

  test("two processes committing at once, 2,000 times each with no pause: no commit fails on a lock its holder just removed, and none overlaps another", async () => {
    const dir = mkdtempSync(join(tmpdir(), "monarch-lock-"))
    try {
      const files = resolve(import.meta.dir, "../../src/checkpoint/files.ts"), counter = join(dir, "count")
      writeFileSync(counter, "0")
      // Each commit adds one to a count in a file: a lost update would show two commits at once.
      const committer = () => Bun.spawn([process.execPath, "-e", `
        const { readFileSync, writeFileSync } = await import("node:fs")
        const { underCommitLock } = await import(${JSON.stringify(files)})
        for (let i = 0; i < 2000; i++) underCommitLock(${JSON.stringify(dir)}, () => writeFileSync(${JSON.stringify(counter)}, String(Number(readFileSync(${JSON.stringify(counter)}, "utf8")) + 1)))
      `], { stdout: "pipe", stderr: "pipe" })
      const both = [committer(), committer()]
      const ends = await Promise.all(both.map(async (p) => ({ status: await p.exited, stderr: (await new Response(p.stderr).text()).split("\n").slice(0, 3).join("\n") })))
      expect(ends).toEqual([{ status: 0, stderr: "" }, { status: 0, stderr: "" }])
      expect(readFileSync(counter, "utf8")).toBe("4000")
    } finally {
      rmSync(dir, { recursive: true, force: true })
    }
  }, 30_000)

  test("a commit lock left by a commit that died (older than STALE_LOCK_MS) is taken at once", async () => {
    const dir = mkdtempSync(join(tmpdir(), "monarch-lock-"))
    try {
      mkdirSync(join(dir, ".commit-lock"))
      const old = (Date.now() - 2 * STALE_LOCK_MS) / 1000
      utimesSync(join(dir, ".commit-lock"), old, old)
      // In a process of its own, killed if it waits: a commit that never takes the lock blocks its thread.
      const files = resolve(import.meta.dir, "../../src/checkpoint/files.ts")
      const commit = Bun.spawn([process.execPath, "-e", `
        const { underCommitLock } = await import(${JSON.stringify(files)})
        console.log(underCommitLock(${JSON.stringify(dir)}, () => "ran"))
      `], { stdout: "pipe" })
      const killer = setTimeout(() => commit.kill("SIGKILL"), STALE_LOCK_MS / 2)
      const [out, code] = await Promise.all([new Response(commit.stdout).text(), commit.exited])
      clearTimeout(killer)
      expect({ out, code }).toEqual({ out: "ran\n", code: 0 })
      expect(readdirSync(dir)).toEqual([])
    } finally {
      rmSync(dir, { recursive: true, force: true })
    }
  }, 20_000)

  test("removes committed versions past keep, oldest first, never the one published nor the one LATEST names, and no save's temporary directory", () => {
    const dir = mkdtempSync(join(tmpdir(), "monarch-prune-"))
    try {
      ["v1", "v2", "v3", "v4"].forEach((v, i) => {
        mkdirSync(join(dir, v))
        writeFileSync(join(dir, v, "manifest.json"), "{}")
        utimesSync(join(dir, v, "manifest.json"), 1000 + i, 1000 + i)
      })
      mkdirSync(join(dir, ".tmp-v5"))
      mkdirSync(join(dir, "not-committed"))
      // LATEST names the oldest (another mesh's commit moved it); v2 is the one just published.
      writeFileSync(join(dir, "LATEST"), "v1\n")
      prune(dir, "v2", 1)
      expect(readdirSync(dir).sort()).toEqual([".tmp-v5", "LATEST", "not-committed", "v1", "v2", "v4"])
    } finally {
      rmSync(dir, { recursive: true, force: true })
    }
  })
})
