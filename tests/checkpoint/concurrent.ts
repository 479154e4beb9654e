/**
 * Saves that overlap in one checkpoint directory, each one try: four saves of one mesh started
 * together, and a sub-mesh's save committing while a whole-mesh save is still being written
 * (rank 0 of the whole mesh is held up so its file comes last). Each save must succeed on its
 * own, publish every file of its version, and leave the others' temporary directories alone.
 */
import { Effect, Result } from "effect"
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join, resolve } from "node:path"
import { Controller, eager, load, opsOn, save, shard, type HostTensor, type Mesh, type RemoteTensor } from "../../src/controller/index.ts"
import { attempt, type Trial } from "../faults/trial.ts"

const FIXTURES = resolve(import.meta.dir, "../..")
/** Saves started together in the four-save try. */
export const CONCURRENT = 4
/** How long rank 0 is held up before it takes the whole-mesh save. */
const STALL_MS = 1500

const local = (root: string) => Controller.local({ world: 4, checkpoints: root, functionPath: [FIXTURES], onWorkerLine: () => {} })

const allValues = (mesh: Mesh, ts: ReadonlyArray<RemoteTensor>) =>
  Effect.forEach(ts, (t) => Effect.map(mesh.fetchAll(t), (vs) => vs.map((v) => Array.from((v as HostTensor).toArray() as Float32Array))))

/** The committed versions in `dir` (what a load may name) and the temporary directories left. */
const contents = (dir: string) => {
  const entries = readdirSync(dir)
  return { versions: entries.filter((e) => !e.startsWith(".") && e !== "LATEST").sort(), tmps: entries.filter((e) => e.startsWith(".tmp-")) }
}

/** Four saves of different values started at once into one directory (keep 2). */
export const concurrentSaves = (): Promise<Trial> => attempt(async (trial) => {
  const root = mkdtempSync(join(tmpdir(), "monarch-concurrent-"))
  try {
    await Effect.runPromise(Effect.gen(function* () {
      const mesh = yield* (yield* Controller).mesh({ dp: 2, tp: 2 })
      const on = opsOn(mesh)
      const states = yield* eager(() => Array.from({ length: CONCURRENT }, (_, i) => ({ w: on.randn([8, 6], { seed: i }).place({ tp: shard(1) }), b: on.randn([5], { seed: 10 + i }), step: i })))
      const expected = yield* Effect.forEach(states, (s) => allValues(mesh, [s.w, s.b]))
      const pendings = yield* Effect.forEach(states, (s) => save(mesh, s, "c"))
      // The order the saves committed in: rank 0 answers the commits in the order it ran them.
      const committed: string[] = []
      const outcomes = yield* Effect.forEach(pendings, (p) => Effect.result(Effect.tap(p.durable, (d) => Effect.sync(() => committed.push(d.version)))), { concurrency: "unbounded" })
      outcomes.forEach((o, i) => trial.check(Result.isSuccess(o), `save ${i} of ${CONCURRENT} failed: ${Result.isFailure(o) ? `${o.failure._tag}: ${o.failure.message}` : ""}`))
      const dir = join(root, "c")
      const latest = readFileSync(join(dir, "LATEST"), "utf8").trim()
      const { versions, tmps } = contents(dir)
      trial.check(tmps.length === 0, `temporary directories left: ${tmps}`)
      trial.check(latest === committed.at(-1), `LATEST names ${latest}, not the last save committed (${committed.at(-1)})`)
      trial.check(JSON.stringify(versions) === JSON.stringify(committed.slice(-2).sort()), `versions [${versions}] are not the 2 committed last [${committed.slice(-2)}]`)
      for (const v of versions) {
        const i = pendings.findIndex((p) => p.version === v)
        const loaded = yield* load(mesh, "c", { version: v })
        const s = loaded.state as { w: RemoteTensor; b: RemoteTensor; step: number }
        trial.check(s.step === i, `${v} holds step ${s.step}, not ${i}`)
        trial.check(JSON.stringify(yield* allValues(mesh, [s.w, s.b])) === JSON.stringify(expected[i]), `${v} loads other values than save ${i} saved`)
      }
    }).pipe(Effect.provide(local(root))))
  } finally {
    rmSync(root, { recursive: true, force: true })
  }
})

/**
 * A whole-mesh save whose rank 0 is held up, then a sub-mesh's save (ranks 2 and 3) into the
 * same directory, which commits first: the whole-mesh save must still publish every rank's
 * file, LATEST must name it, and both versions load with what was saved.
 */
export const subMeshDuringSave = (): Promise<Trial> => attempt(async (trial) => {
  const root = mkdtempSync(join(tmpdir(), "monarch-submesh-"))
  try {
    await Effect.runPromise(Effect.gen(function* () {
      const mesh = yield* (yield* Controller).mesh({ dp: 2, tp: 2 })
      const sub = yield* mesh.slice({ dp: 1 })
      const on = opsOn(mesh), onSub = opsOn(sub)
      const whole = yield* eager(() => ({ w: on.randn([8, 6], { seed: 1 }).place({ dp: shard(0), tp: shard(1) }), step: 1 }))
      const part = yield* eager(() => ({ v: onSub.randn([4], { seed: 2 }), step: 2 }))
      const wholeValues = yield* allValues(mesh, [whole.w])
      const partValues = yield* allValues(sub, [part.v])
      yield* mesh.call("tests/faults/fixtures:blockOnRank", [0, STALL_MS, whole.w])
      const big = yield* save(mesh, whole, "d")
      const small = yield* Effect.flatMap(save(sub, part, "d"), (p) => p.durable)
      const rank0 = join(root, "d", `.tmp-${big.version}`, "rank-0.safetensors")
      trial.facts.push(existsSync(rank0) ? "the sub-mesh committed after rank 0's file appeared" : "the sub-mesh committed before rank 0's file appeared")
      const done = yield* Effect.result(big.durable)
      trial.check(Result.isSuccess(done), `the whole-mesh save failed: ${Result.isFailure(done) ? `${done.failure._tag}: ${done.failure.message}` : ""}`)
      const dir = join(root, "d")
      const latest = readFileSync(join(dir, "LATEST"), "utf8").trim()
      trial.check(latest === big.version, `LATEST names ${latest}, not the whole-mesh save ${big.version}`)
      const { versions, tmps } = contents(dir)
      trial.check(tmps.length === 0, `temporary directories left: ${tmps}`)
      trial.check(JSON.stringify(versions) === JSON.stringify([big.version, small.version].sort()), `versions [${versions}], expected both saves'`)
      if (existsSync(join(dir, big.version))) {
        const files = readdirSync(join(dir, big.version)).sort()
        trial.check(JSON.stringify(files) === JSON.stringify(["manifest.json", "rank-0.safetensors", "rank-1.safetensors", "rank-2.safetensors", "rank-3.safetensors"]), `the whole-mesh version holds [${files}]`)
      }
      const loaded = yield* Effect.result(load(mesh, "d"))
      trial.check(Result.isSuccess(loaded) && JSON.stringify(yield* allValues(mesh, [(loaded.success.state as { w: RemoteTensor }).w])) === JSON.stringify(wholeValues),
        `the whole-mesh version ${Result.isFailure(loaded) ? `does not load: ${loaded.failure.message}` : "loads other values than were saved"}`)
      const loadedPart = yield* Effect.result(load(sub, "d", { version: small.version }))
      trial.check(Result.isSuccess(loadedPart) && JSON.stringify(yield* allValues(sub, [(loadedPart.success.state as { v: RemoteTensor }).v])) === JSON.stringify(partValues),
        `the sub-mesh version ${Result.isFailure(loadedPart) ? `does not load: ${loadedPart.failure.message}` : "loads other values than were saved"}`)
    }).pipe(Effect.provide(local(root))))
  } finally {
    rmSync(root, { recursive: true, force: true })
  }
})
