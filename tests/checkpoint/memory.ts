/**
 * Host copies under the memory limit, one try, with real workers at MONARCH_MEMORY_LIMIT=96MiB:
 * with a 64 MiB tensor held, 8 fetches of it in flight and 4 saves of it are each refused with
 * the limit's NoMemory error (its copy would pass the limit), the worker's peak RSS barely moves
 * and the guard's count is back where it was; then with a 16 MiB tensor, 8 fetches one after
 * another and a save and load succeed (each copy given back), and 8 fetches in flight each give
 * the value or the limit's error, the peak RSS staying within the limit (and what the collector
 * has not yet freed) of where it was.
 */
import { Effect, Result } from "effect"
import { mkdtempSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join, resolve } from "node:path"
import { Controller, load, save, type HostTensor, type Mesh, type RemoteTensor } from "../../src/controller/index.ts"
import { attempt, type Trial } from "../faults/trial.ts"

export const LIMIT_MIB = 96
const MIB = 2 ** 20
const FIXTURES = resolve(import.meta.dir, "../..")
/** The runtime's own allocations (messages, the heap): what the peak RSS may grow by when every copy is refused. */
const RUNTIME_SLACK = 32 * MIB
/** And past the limit when copies are made: given back copies are freed when the collector next runs. */
const COLLECTION_LAG = 64 * MIB

const limitError = (e: { readonly _tag: string; readonly message: string }) =>
  e._tag === "RemoteError" && /bytes would pass the memory limit of 100663296 bytes .*MONARCH_MEMORY_LIMIT/.test(e.message)

/** Rank 0's [peak RSS, RSS] and [tensor bytes counted in use, limit]. */
const probe = (mesh: Mesh, any: RemoteTensor) => Effect.gen(function* () {
  const [peak, rss] = (yield* mesh.fetch(any, 0, { fn: "tests/checkpoint/fixtures:resident" })) as number[]
  const [inUse, limit] = (yield* mesh.fetch(any, 0, { fn: "tests/faults/fixtures:memory" })) as number[]
  return { peak: peak!, rss: rss!, inUse: inUse!, limit: limit! }
})

export const hostCopiesCounted = (): Promise<Trial> => attempt(async (trial) => {
  const root = mkdtempSync(join(tmpdir(), "monarch-hostcopies-"))
  try {
    await Effect.runPromise(Effect.gen(function* () {
      const mesh = yield* (yield* Controller).mesh({ all: 2 })
      const small = yield* mesh.call("ops.full", [[4], 3])
      yield* mesh.fetch(small, 0)
      const big = yield* mesh.call("ops.full", [[16 * MIB], 0.5])
      const before = yield* probe(mesh, small)
      trial.check(before.limit === LIMIT_MIB * MIB, `the worker's limit is ${before.limit} bytes, not ${LIMIT_MIB} MiB`)

      const fetches = yield* Effect.forEach(Array.from({ length: 8 }), () => Effect.result(mesh.fetch(big, 0)), { concurrency: "unbounded" })
      const saves = yield* Effect.forEach(Array.from({ length: 4 }), () => Effect.result(Effect.flatMap(save(mesh, { big }, "m"), (p) => p.durable)), { concurrency: "unbounded" })
      const copies: ReadonlyArray<Result.Result<unknown, { readonly _tag: string; readonly message: string }>> = [...fetches, ...saves]
      const refused = copies.filter((r) => Result.isFailure(r) && limitError(r.failure)).length
      const other = copies.find((r) => !(Result.isFailure(r) && limitError(r.failure)))
      trial.check(refused === 12, `${refused} of 8 fetches and 4 saves of a 64 MiB tensor refused with the limit's error; one ended ${other === undefined ? "" : Result.isSuccess(other) ? "with a value" : `${other.failure._tag}: ${other.failure.message}`}`)
      const after = yield* probe(mesh, small)
      trial.facts.push(`peak RSS +${Math.round((after.peak - before.peak) / MIB)} MiB with the 64 MiB copies refused`)
      trial.check(after.peak - before.peak < RUNTIME_SLACK, `rank 0's peak RSS grew by ${((after.peak - before.peak) / MIB).toFixed(0)} MiB with every copy refused`)
      trial.check(after.inUse === before.inUse, `the guard counts ${after.inUse} bytes in use after the refusals, ${before.inUse} before`)
      big.release()

      const mid = yield* mesh.call("ops.full", [[4 * MIB], 0.25])
      const base = yield* probe(mesh, small)
      for (let i = 0; i < 8; i++) {
        const got = yield* Effect.result(mesh.fetch(mid, 0))
        trial.check(Result.isSuccess(got) && (got.success as HostTensor).toArray()[4 * MIB - 1] === 0.25, `sequential fetch ${i} of a 16 MiB tensor: ${Result.isSuccess(got) ? "wrong values" : got.failure.message}`)
      }
      const saved = yield* Effect.result(Effect.flatMap(save(mesh, { mid }, "m"), (p) => p.durable))
      trial.check(Result.isSuccess(saved), `a save of the 16 MiB tensor failed: ${Result.isFailure(saved) ? saved.failure.message : ""}`)
      if (Result.isSuccess(saved)) {
        const loaded = yield* load(mesh, "m")
        ;((loaded.state as { mid: RemoteTensor }).mid).release()
      }
      const inFlight = yield* Effect.forEach(Array.from({ length: 8 }), () => Effect.result(mesh.fetch(mid, 0)), { concurrency: "unbounded" })
      const odd = inFlight.find((r) => Result.isFailure(r) && !limitError(r.failure))
      trial.check(odd === undefined, `a fetch in flight failed with something else than the limit: ${odd !== undefined && Result.isFailure(odd) ? odd.failure.message : ""}`)
      trial.facts.push(`${inFlight.filter(Result.isSuccess).length} of 8 fetches of 16 MiB in flight got the value`)
      const end = yield* probe(mesh, small)
      trial.facts.push(`peak RSS ${Math.round((end.peak - base.rss) / MIB)} MiB over the RSS before the 16 MiB copies`)
      trial.check(end.peak - base.rss < LIMIT_MIB * MIB + COLLECTION_LAG, `rank 0's peak RSS grew by ${((end.peak - base.rss) / MIB).toFixed(0)} MiB with 16 MiB copies, past the ${LIMIT_MIB} MiB limit and ${COLLECTION_LAG / MIB} MiB more`)
      trial.check(end.inUse === base.inUse, `the guard counts ${end.inUse} bytes in use at the end, ${base.inUse} before the 16 MiB copies`)
    }).pipe(Effect.provide(Controller.local({ world: 2, device: "cpu", checkpoints: root, functionPath: [FIXTURES], env: { MONARCH_MEMORY_LIMIT: `${LIMIT_MIB}MiB` }, onWorkerLine: () => {} }))))
  } finally {
    rmSync(root, { recursive: true, force: true })
  }
})
