/**
 * Tampered checkpoints, seeded: one version of a 2x2 mesh's state (sharded on both dims, on
 * one, replicated and per rank), then single-bit flips at random places of its manifest or of
 * a rank file's header (the length prefix and the JSON), one at a time, each followed by a
 * load that must fail with a CheckpointError; the byte is restored after each.
 */
import { Effect, Result } from "effect"
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join, resolve } from "node:path"
import { Controller, eager, load, opsOn, perRank, save, shard, type Mesh, type State } from "../../src/controller/index.ts"
import { Rng } from "../fuzz/mutate.ts"

const FIXTURES = resolve(import.meta.dir, "../..")

export const local = (root: string) => Controller.local({ world: 4, checkpoints: root, functionPath: [FIXTURES], onWorkerLine: () => {} })

/** Flips tried per run. */
export const TAMPERS = { default: 80, long: 800 } as const

/** The state every tamper test saves: each kind of placement, and numbers in the tree. */
export const tamperState = (mesh: Mesh) => Effect.gen(function* () {
  const on = opsOn(mesh)
  const gen = yield* mesh.call("tests/checkpoint/fixtures:rankRandn", [[3], 7], {}, { results: [{ dtype: "f32", shape: [3] }] })
  return yield* eager(() => ({
    w: on.randn([3, 4], { seed: 2 }),
    row: on.randn([4, 5], { seed: 1 }).place({ tp: shard(0) }),
    col: on.randn([4, 6], { seed: 3 }).place({ dp: shard(0), tp: shard(1) }),
    rng: perRank(gen),
    step: 12,
  }) satisfies State)
})

export interface TamperRun {
  readonly seed: number
  readonly tried: number
  readonly refused: number
  /** The flips a load took without an error, or refused with something else than a CheckpointError. */
  readonly problems: ReadonlyArray<string>
}

/** The header's length (prefix included) of a safetensors file. */
const headerLength = (bytes: Uint8Array): number => 8 + Number(new DataView(bytes.buffer, bytes.byteOffset, 8).getBigUint64(0, true))

/** `count` single-bit flips, chosen by `seed`, of the manifest and the rank files' headers of one saved version. */
export const tamperRun = (count: number, seed: number): Promise<TamperRun> => {
  const root = mkdtempSync(join(tmpdir(), "monarch-tamper-"))
  const rng = new Rng(seed)
  const problems: string[] = []
  let refused = 0
  return Effect.runPromise(Effect.gen(function* () {
    const mesh = yield* (yield* Controller).mesh({ dp: 2, tp: 2 })
    const { version } = yield* Effect.flatMap(save(mesh, yield* tamperState(mesh), "t"), (p) => p.durable)
    const dir = join(root, "t", version)
    const files = readdirSync(dir).sort()
    for (let i = 0; i < count; i++) {
      const name = rng.chance(0.5) ? "manifest.json" : rng.pick(files.filter((f) => f.endsWith(".safetensors")))
      const path = join(dir, name)
      const good = new Uint8Array(readFileSync(path))
      const at = rng.int(name === "manifest.json" ? good.length : headerLength(good)), bit = rng.int(8)
      const bad = good.slice()
      bad[at]! ^= 1 << bit
      writeFileSync(path, bad)
      const outcome = yield* Effect.result(load(mesh, "t"))
      writeFileSync(path, good)
      const what = `bit ${bit} of byte ${at} of ${name} (seed ${seed}, flip ${i})`
      if (Result.isSuccess(outcome)) problems.push(`${what}: loaded without an error`)
      else if (outcome.failure._tag !== "CheckpointError") problems.push(`${what}: refused with ${outcome.failure._tag}: ${outcome.failure.message}`)
      else refused++
    }
    // The untouched version still loads: every refusal was the flip's.
    const last = yield* Effect.result(load(mesh, "t"))
    if (Result.isFailure(last)) problems.push(`the restored version does not load: ${last.failure.message}`)
    return { seed, tried: count, refused, problems }
  }).pipe(Effect.provide(local(root)), Effect.ensuring(Effect.sync(() => rmSync(root, { recursive: true, force: true })))))
}
