/**
 * kill -9 of a worker while it writes its shard of a save: the save fails (WorkerLost), LATEST
 * still names the previous version, and a fresh mesh loads that version intact. One try.
 */
import { Effect } from "effect"
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { Controller, eager, load, opsOn, save, shard, type HostTensor, type Mesh, type RemoteTensor } from "../../src/controller/index.ts"
import { attempt, type Trial } from "../faults/trial.ts"

/** Per rank, a shard this big is being written when the kill comes. */
export const SHARD_MIB = 64
const KILLED = 1
/** How long after rank 1's file appears the kill comes. */
const KILL_AFTER_MS = 20

const local = (root: string) => Controller.local({ world: 4, checkpoints: root, onWorkerLine: () => {} })

const allValues = (mesh: Mesh, ts: ReadonlyArray<RemoteTensor>) =>
  Effect.forEach(ts, (t) => Effect.map(mesh.fetchAll(t), (vs) => vs.map((v) => Array.from((v as HostTensor).toArray() as Float32Array))))

export const crashMidSave = (): Promise<Trial> => attempt(async (trial) => {
  const root = mkdtempSync(join(tmpdir(), "monarch-crash-"))
  try {
    const first = await Effect.runPromise(Effect.gen(function* () {
      const ctl = yield* Controller
      const mesh = yield* ctl.mesh({ dp: 2, tp: 2 })
      const on = opsOn(mesh)
      const state = yield* eager(() => ({ w: on.randn([4, 6], { seed: 3 }).place({ tp: shard(1) }), b: on.randn([5], { seed: 4 }), step: 1 }))
      const saved = yield* Effect.flatMap(save(mesh, state, "run"), (p) => p.durable)
      const values = yield* allValues(mesh, [state.w, state.b])
      // The second save: big enough per rank that the kill finds its write under way.
      const n = (SHARD_MIB << 20) / 16
      const big = yield* eager(() => ({ w: state.w.add(1), big: on.full([4, n], 0.25).place({ dp: shard(0), tp: shard(1) }), step: 2 }))
      yield* mesh.fetch(big.w)
      const pid = ctl.workers()[KILLED]!.pid
      const pending = yield* save(mesh, big, "run")
      // Kill a little after rank 1's file appears in the temporary directory, while it writes or
      // syncs it: long enough that a save committing before every file is durable would have.
      const tmp = join(root, "run", `.tmp-${pending.version}`, `rank-${KILLED}.safetensors`)
      const waitFrom = performance.now()
      while (!existsSync(tmp) && performance.now() - waitFrom < 10_000) yield* Effect.sleep("1 millis")
      trial.check(existsSync(tmp), `rank ${KILLED}'s file never appeared in ${tmp}`)
      yield* Effect.sleep(`${KILL_AFTER_MS} millis`)
      const written = existsSync(tmp) ? Bun.file(tmp).size : 0
      process.kill(pid, "SIGKILL")
      const killedAt = performance.now()
      const outcome = yield* Effect.flip(pending.durable).pipe(Effect.timeout("20 seconds"), Effect.option)
      trial.figure("kill→save failed", performance.now() - killedAt)
      const failure = outcome._tag === "Some" ? outcome.value : undefined
      trial.check(failure?._tag === "WorkerLost" && (failure as { rank: number }).rank === KILLED, `the interrupted save's durable ended with ${failure ? `${failure._tag}: ${failure.message}` : "success or nothing"}, not WorkerLost of rank ${KILLED}`)
      trial.facts.push(`rank ${KILLED}'s file had ${written < (SHARD_MIB << 20) ? "part" : "all"} of its bytes at the kill`)
      return { version: saved.version, values }
    }).pipe(Effect.provide(local(root))))
    trial.check(readFileSync(join(root, "run", "LATEST"), "utf8").trim() === first.version, `LATEST no longer names ${first.version}`)
    const versions = readdirSync(join(root, "run")).filter((e) => !e.startsWith(".") && e !== "LATEST")
    trial.check(versions.length === 1 && versions[0] === first.version, `versions after the crash: [${versions}], expected only ${first.version}`)
    // A fresh mesh loads the previous version, every rank's block intact.
    const again = await Effect.runPromise(Effect.gen(function* () {
      const mesh = yield* (yield* Controller).mesh({ dp: 2, tp: 2 })
      const loaded = yield* load(mesh, "run")
      const s = loaded.state as { w: RemoteTensor; b: RemoteTensor; step: number }
      return { version: loaded.version, step: s.step, values: yield* allValues(mesh, [s.w, s.b]) }
    }).pipe(Effect.provide(local(root))))
    trial.check(again.version === first.version && again.step === 1, `loaded ${again.version} (step ${again.step}), not ${first.version} (step 1)`)
    trial.check(JSON.stringify(again.values) === JSON.stringify(first.values), "the loaded values differ from the ones saved")
  } finally {
    rmSync(root, { recursive: true, force: true })
  }
})
