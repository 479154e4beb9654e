/**
 * Scenario 5: an allocation larger than a worker may take. Each worker's shim holds a memory
 * limit (MONARCH_MEMORY_LIMIT; by default a share of host memory divided among the host's
 * workers), and an allocation over it fails that command with a NoMemory ShimError naming the
 * limit, at once: the worker goes on, and what it already holds is intact. Before the limit,
 * `ops.zeros([3e9])` per rank thrashed the machine until the OOM killer took a worker.
 */
import { Effect, ManagedRuntime } from "effect"
import { readFileSync } from "node:fs"
import { totalmem } from "node:os"
import { Controller, RemoteError } from "../../src/controller/index.ts"
import { DEFAULT_SHARE } from "../../src/worker/memory.ts"
import { ROOT } from "./procs.ts"
import { attempt, type Trial } from "./trial.ts"

export const LIMIT_MIB = 64
const FIXTURES = "tests/faults/fixtures"
const WORLD = 2

/** A refusal comes before any memory is touched: well within this, however large the request. */
const REFUSAL_MS = 2000

/** Heuristic overcommit (0) or none (2) refuses one allocation larger than the host; 1 would let a broken limit thrash it. */
const overcommitRefusesHuge = (): boolean => {
  try {
    return readFileSync("/proc/sys/vm/overcommit_memory", "utf8").trim() !== "1"
  } catch {
    return false
  }
}

/** Runs `body` with a fresh mesh of WORLD local workers, with `env`. */
const withMesh = async (t: Trial, env: Record<string, string>, body: (run: <A, E>(e: Effect.Effect<A, E, Controller>) => Promise<A>, rt: ManagedRuntime.ManagedRuntime<Controller, unknown>) => Promise<void>) => {
  const rt = ManagedRuntime.make(Controller.local({ world: WORLD, functionPath: [ROOT], env, onWorkerLine: () => {}, onProblem: (p) => t.problems.push(`controller: ${p}`) }))
  try {
    await body((e) => rt.runPromise(e), rt)
  } finally {
    await rt.dispose()
  }
}

/** Checks that fetching `zeros(shape)` fails fast with the limit's NoMemory error from every rank's own command. */
const expectRefused = async (t: Trial, rt: ManagedRuntime.ManagedRuntime<Controller, unknown>, run: <A, E>(e: Effect.Effect<A, E, Controller>) => Promise<A>, elements: number, what: string) => {
  const ctl = await run(Effect.service(Controller))
  const mesh = await run(ctl.mesh({ all: WORLD }))
  const issuedAt = performance.now()
  const big = await run(mesh.call("ops.zeros", [[elements]]))
  const error = await rt.runPromise(mesh.fetch(big, 1).pipe(Effect.match({ onFailure: (e) => e, onSuccess: () => "a value: the allocation was not refused" })))
  t.figure(`${what}→error`, performance.now() - issuedAt)
  if (t.check(error instanceof RemoteError, `${what}: the fetch ended with ${error}, not RemoteError`)) {
    const e = error as RemoteError
    t.check(e.type === "ShimError" && /bytes would pass the memory limit of \d+ bytes/.test(e.reason) && e.reason.includes("MONARCH_MEMORY_LIMIT"),
      `${what}: the error does not name the memory limit: ${e.message}`)
  }
  t.check(performance.now() - issuedAt < REFUSAL_MS, `${what}: the refusal took ${Math.round(performance.now() - issuedAt)} ms`)
  return mesh
}

/** MONARCH_MEMORY_LIMIT=64MiB: 100 MB refused, 16 MB fine, the worker goes on, memory given back. */
export const overTheLimit = (): Promise<Trial> =>
  attempt((t) => withMesh(t, { MONARCH_MEMORY_LIMIT: `${LIMIT_MIB}MiB` }, async (run, rt) => {
    const ctl = await run(Effect.service(Controller))
    const mesh = await run(ctl.mesh({ all: WORLD }))
    const kept = await run(mesh.call("ops.full", [[4], 7]))
    const [inUse, limit] = (await run(mesh.fetch(null, 1, { fn: `${FIXTURES}:memory` }))) as number[]
    t.check(limit === LIMIT_MIB * 2 ** 20, `the worker's limit is ${limit} bytes, not ${LIMIT_MIB} MiB`)
    await expectRefused(t, rt, run, 25_000_000, "100 MB with a 64 MiB limit")
    // The worker went on: what it held is intact, an allocation under the limit works, and the
    // refused one took nothing.
    t.checkValues(await run(mesh.fetch(kept, 1)), [7, 7, 7, 7], "a value defined before the refusal")
    const fits = await run(mesh.call("ops.ones", [[4_000_000]]))
    t.checkValues(await run(mesh.fetch(fits, 1, { fn: "ops.sum" })), [4_000_000], "16 MB under the limit")
    fits.release()
    const after = (await run(mesh.fetch(null, 1, { fn: `${FIXTURES}:memory` }))) as number[]
    t.check(after[0]! <= inUse! + 1024, `tensor memory in use grew from ${inUse} to ${after[0]} bytes after a refusal and a release`)
  }))

/**
 * No MONARCH_MEMORY_LIMIT: each of the WORLD workers gets DEFAULT_SHARE of host memory / WORLD,
 * and a tensor of 1.5 times the host's memory is refused by that limit, not by the allocator.
 */
export const defaultLimit = (): Promise<Trial> =>
  attempt((t) => withMesh(t, {}, async (run, rt) => {
    const ctl = await run(Effect.service(Controller))
    const mesh = await run(ctl.mesh({ all: WORLD }))
    const [, limit] = (await run(mesh.fetch(null, 0, { fn: `${FIXTURES}:memory` }))) as number[]
    const expected = Math.floor(totalmem() * DEFAULT_SHARE / WORLD)
    t.check(limit === expected, `the default limit is ${limit} bytes, not ${DEFAULT_SHARE * 100}% of ${totalmem()} / ${WORLD} = ${expected}`)
    if (!overcommitRefusesHuge()) {
      t.facts.push("the over-the-host allocation was skipped: vm.overcommit_memory=1 would let a broken limit thrash the host")
      return
    }
    await expectRefused(t, rt, run, Math.ceil(totalmem() * 1.5 / 4), "1.5 x host memory, default limit")
  }))
