// What a save and a restore leave behind: a rank's file is fsynced, after its last write, before
// its write reports it done (a spy on the file handle's sync, calling through); load then
// restoreInto leaves no loaded tensor alive on the workers (each worker's live tensor count); a durable
// write that fails leaves no temporary file.
import { afterAll, afterEach, describe, expect, spyOn, test } from "bun:test"
import { Effect } from "effect"
import { fstatSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs"
import { open } from "node:fs/promises"
import { tmpdir } from "node:os"
import { join, resolve } from "node:path"
import { Controller, eager, load, opsOn, perRank, restoreInto, save, shard } from "../../src/controller/index.ts"
import { writeFileDurably, writeShardFile } from "../../src/checkpoint/files.ts"
import { HostTensor } from "../../src/protocol/values.ts"

const ROOT = mkdtempSync(join(tmpdir(), "monarch-durable-"))
afterAll(() => rmSync(ROOT, { recursive: true, force: true }))

/** node:fs/promises' FileHandle class, whose methods writeShardFile calls. */
const fileHandleClass = async () => {
  const fh = await open(join(ROOT, "probe"), "w")
  await fh.close()
  return Object.getPrototypeOf(fh) as { sync(): Promise<void>; writev(chunks: Uint8Array[], at: number): Promise<{ bytesWritten: number }> }
}

describe("a rank's file is synced before it is reported written", () => {
  const spies: Array<{ mockRestore(): void }> = []
  afterEach(() => spies.splice(0).forEach((s) => s.mockRestore()))

  test("writeShardFile: every write, then one fsync of that file with all its bytes, then it resolves", async () => {
    const FileHandle = await fileHandleClass()
    const events: string[] = []
    const realSync = FileHandle.sync, realWritev = FileHandle.writev
    spies.push(spyOn(FileHandle, "writev").mockImplementation(async function (this: { fd: number }, chunks: Uint8Array[], at: number) {
      events.push("write")
      return realWritev.call(this, chunks, at)
    }))
    spies.push(spyOn(FileHandle, "sync").mockImplementation(async function (this: { fd: number }) {
      await realSync.call(this)
      events.push(`sync ${fstatSync(this.fd).size} bytes`)
    }))
    const data = new Float32Array(1 << 16).map((_, i) => i)
    const path = join(ROOT, "rank-0.safetensors")
    const written = await writeShardFile({ path, tensors: [{ name: "w", host: new HostTensor("f32", [data.length], new Uint8Array(data.buffer)) }] })
    events.push("resolved")
    const size = readFileSync(path).length
    expect(written.bytes).toBe(size)
    expect(events.filter((e) => e !== "write")).toEqual([`sync ${size} bytes`, "resolved"])
    expect(events.indexOf(`sync ${size} bytes`)).toBeGreaterThan(events.lastIndexOf("write"))
  })
})

describe("writeFileDurably", () => {
  test("a write that fails leaves neither its temporary file nor a changed target", () => {
    const dir = join(ROOT, "export-fails")
    mkdirSync(join(dir, "taken"), { recursive: true })
    writeFileSync(join(dir, "taken", "inside"), "x")
    // The target is a folder that is not empty: the rename into place fails.
    expect(() => writeFileDurably(join(dir, "taken"), [new Uint8Array(1 << 16).fill(7)])).toThrow()
    expect(readdirSync(dir)).toEqual(["taken"])
    expect(readdirSync(join(dir, "taken"))).toEqual(["inside"])
  })
})

describe("restoreInto", () => {
  test("load then restoreInto of the whole tree leaves no loaded tensor alive on any worker", async () => {
    await Effect.runPromise(Effect.gen(function* () {
      const mesh = yield* (yield* Controller).mesh({ dp: 2, tp: 2 })
      const on = opsOn(mesh)
      const gen = yield* mesh.call("tests/checkpoint/fixtures:rankRandn", [[3], 7], {}, { results: [{ dtype: "f32", shape: [3] }] })
      const state = yield* eager(() => ({ w: on.randn([4, 6], { seed: 1 }).place({ tp: shard(1) }), m: { b: on.randn([5], { seed: 2 }) }, rng: perRank(gen), step: 3 }))
      yield* Effect.flatMap(save(mesh, state, "r"), (p) => p.durable)
      const probe = yield* eager(() => on.zeros([1]))
      const live = () => Effect.map(mesh.fetchAll(probe, { fn: "tests/checkpoint/fixtures:liveTensors" }), (vs) => vs as ReadonlyArray<number>)
      const saved = yield* Effect.forEach([state.w, state.m.b], (t) => mesh.fetchAll(t))
      yield* mesh.run("ops.add_", [state.w, 1], {}, { mutates: [state.w] })
      const before = yield* live()
      const loaded = yield* load(mesh, "r")
      const during = yield* live()
      expect(during.map((n, i) => n - before[i]!)).toEqual([3, 3, 3, 3])
      yield* restoreInto(state, loaded.state)
      // The restored values are the saved ones, in the tensors the state already held.
      expect(yield* Effect.forEach([state.w, state.m.b], (t) => mesh.fetchAll(t))).toEqual(saved)
      expect(yield* live()).toEqual(before)
    }).pipe(Effect.provide(Controller.local({ world: 4, checkpoints: ROOT, functionPath: [resolve(import.meta.dir, "../..")], onWorkerLine: () => {} }))))
  }, 60_000)
})
