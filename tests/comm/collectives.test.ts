// Multi-process tests of the Gloo communicators: real worker processes meeting through a real
// store server, checking every collective against results computed in TypeScript, on both
// all-reduce paths of members that share a host (shared memory, and TCP as between hosts).
import { describe, expect, test } from "bun:test"
import { SHARED_MEMORY, TCP, WorkerGroup, type CommPath, type WorkerProcess } from "./spawn.ts"

const TIMEOUT_MS = 20_000

/**
 * Runs a scenario to the end on `size` workers; returns them once every one exited cleanly
 * and every communicator it opened first took the path's all-reduce (its segments mapped, or none).
 */
const runScenario = async (path: CommPath, scenario: string, size: number): Promise<WorkerProcess[]> => {
  await using group = WorkerGroup.start(scenario, size, TIMEOUT_MS, path.env)
  const codes = await group.exits()
  const stderr = await Promise.all(group.workers.map((w) => w.stderr))
  expect({ codes, stderr }).toEqual({ codes: codes.map(() => 0), stderr: stderr.map(() => "") })
  for (const w of group.workers) {
    expect(w.event("done")).toBeDefined()
    expect(w.event("opened")?.shmSegments).toBe(path.sharedMemory && size > 1 ? size : 0)
    // What the shim reports (the worker's log line) is the path it took.
    expect(w.event("opened")?.transport).toBe(size === 1 ? "self" : path.sharedMemory ? "shm+tcp" : "tcp")
  }
  return group.workers
}

/** Every check passed, and every rank ran the same checks (at least `atLeast` of them). */
const expectAllPassed = (workers: ReadonlyArray<WorkerProcess>, atLeast: number): void => {
  for (const w of workers) {
    expect(w.checks().filter((c) => !c.ok)).toEqual([])
    expect(w.checks().length).toBeGreaterThanOrEqual(atLeast)
  }
}

/**
 * The world sizes each test runs at, per path. TCP repeats the tests whose traffic differs
 * there, at fewer sizes; the large odd sizes are for the shared-memory path's 4 MiB rounds
 * (TCP's ring past the exchange is in "thresholds").
 */
const PLANS = [
  { path: SHARED_MEMORY, collectives: [1, 2, 3, 4], thresholds: [2, 3], largeOdd: [2, 3], p2p: [2, 3, 4] },
  { path: TCP, collectives: [2, 3], thresholds: [2, 3], largeOdd: [], p2p: [3] },
]

for (const { path, ...sizes } of PLANS)
  describe(`all-reduce over ${path.name}`, () => {
    describe("collectives on the world communicator", () => {
      for (const size of sizes.collectives)
        test(`world size ${size}`, async () => {
          const workers = await runScenario(path, "collectives", size)
          // 160 all_reduce + 5 in place + 40 all_gather + 160 reduce_scatter + 32 all_to_all + 24 broadcast per root
          expectAllPassed(workers, 397 + 24 * size)
          // Nobody left the barrier before the last rank entered it.
          const times = workers.map((w) => w.event("barrier") as unknown as { entered: number; left: number })
          const lastEntry = Math.max(...times.map((t) => t.entered))
          for (const t of times) expect(t.left).toBeGreaterThanOrEqual(lastEntry)
        }, 90_000)
    })

    describe("sizes where a path changes how it works", () => {
      for (const size of sizes.thresholds)
        test(`world size ${size}`, async () => {
          // 4 at 1 MiB, 4 dtypes x (8 all_reduce + 2 reduce_scatter)
          expectAllPassed(await runScenario(path, "thresholds", size), 44)
        }, 60_000)
    })

    describe("large odd all_reduce sizes", () => {
      for (const size of sizes.largeOdd)
        test(`world size ${size}`, async () => {
          // 2 dtypes x 5 counts x (in place + out of place + input untouched), 2 reduce_scatter
          expectAllPassed(await runScenario(path, "large-odd", size), 32)
        }, 60_000)
    })

    describe("sub-communicators", () => {
      test("both dims of a 2 x 2 mesh, alive at once, then a group made again", async () => {
        expectAllPassed(await runScenario(path, "mesh", 4), 10)
      }, 60_000)
    })

    describe("point to point", () => {
      for (const size of sizes.p2p)
        test(`ring and pairs, world size ${size}`, async () => {
          // 6 ring rounds, 2 two-to-one-peer checks, 1 all_reduce, and a pair exchange where a partner exists
          const workers = await runScenario(path, "p2p", size)
          expectAllPassed(workers, 9)
          for (const w of workers) expect(w.checks().some((c) => c.check === "pair exchange f16")).toBe((w.rank ^ 1) < size)
        }, 60_000)
    })
  })

describe("argument checks", () => {
  test("bad shapes, dtypes, roots and peers are refused and the communicator still works", async () => {
    expectAllPassed(await runScenario(SHARED_MEMORY, "errors", 2), 13)
  }, 60_000)
})
