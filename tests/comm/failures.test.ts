// A lost or silent peer must turn into an error within the communicator's timeout, never a
// hang or a crash, and later calls on that communicator must keep failing cleanly, on both
// all-reduce paths (shared memory, and TCP as between hosts).
import { describe, expect, test } from "bun:test"
import { SHARED_MEMORY, TCP, WorkerGroup, type CommPath } from "./spawn.ts"

const TIMEOUT_MS = 3_000
/** Process scheduling on a loaded machine; far below the timeout itself. */
const SLACK_MS = 1_500

interface Failure {
  readonly reason: string
  readonly message: string
  readonly ms: number
}
interface Failed {
  readonly first: Failure
  readonly later?: Failure
}

/**
 * Starts `scenario` on `path`, waits until every rank is ready (and checks its communicator
 * took the path), lets `act` run, then collects the survivors' reports.
 */
const survivorsOf = async (path: CommPath, scenario: string, size: number, act: (group: WorkerGroup) => Promise<void>): Promise<Failed[]> => {
  await using group = WorkerGroup.start(scenario, size, TIMEOUT_MS, path.env)
  await Promise.all(group.workers.map((w) => w.waitFor("ready")))
  for (const w of group.workers) expect(w.event("opened")?.shmSegments).toBe(path.sharedMemory ? size : 0)
  await act(group)
  const survivors = group.workers.slice(0, size - 1)
  return await Promise.all(survivors.map(async (w) => (await w.waitFor("failed")) as unknown as Failed))
}

for (const path of [SHARED_MEMORY, TCP])
  describe(`a peer killed mid all_reduce, over ${path.name}`, () => {
    // Small inputs take one shared round or TCP's exchange; 4 MiB and more, several shared
    // rounds or Gloo's ring.
    for (const [scenario, size] of [["peer-dies", 2], ["peer-dies", 3], ["peer-dies-large", 3]] as const)
      test(`${scenario}, world size ${size}: the others get a Comm error well within the timeout`, async () => {
        const reports = await survivorsOf(path, scenario, size, async (group) => {
          await Bun.sleep(300) // the others are inside all_reduce by now
          group.workers[size - 1]!.proc.kill("SIGKILL")
        })
        for (const { first, later } of reports) {
          expect(first.reason).toBe("Comm")
          expect(first.message).toContain("shim_all_reduce")
          expect(first.ms).toBeLessThan(TIMEOUT_MS)
          expect(later?.reason).toBe("Comm")
          expect(later?.message).toContain("unusable")
        }
      }, 30_000)
  })

describe("a silent peer", () => {
  for (const [path, scenario, op] of [[SHARED_MEMORY, "peer-silent", "shim_all_reduce"], [TCP, "peer-silent", "shim_all_reduce"], [SHARED_MEMORY, "p2p-silent", "shim_p2p"]] as const)
    test(`${op} over ${path.name} times out after the comm's timeout`, async () => {
      const reports = await survivorsOf(path, scenario, 2, async () => {})
      for (const { first, later } of reports) {
        expect(first.reason).toBe("Timeout")
        expect(first.message).toContain(op)
        expect(first.ms).toBeGreaterThanOrEqual(TIMEOUT_MS * 0.9)
        expect(first.ms).toBeLessThan(TIMEOUT_MS + SLACK_MS)
        expect(later?.reason).toBe("Comm")
      }
    }, 30_000)
})

describe("a peer gone before connecting", () => {
  test("the others' rendezvous fails with a CommError within the timeout", async () => {
    await using group = WorkerGroup.start("dies-before-connect", 3, TIMEOUT_MS)
    const reports = await Promise.all(group.workers.slice(0, 2).map(async (w) => (await w.waitFor("failed")) as unknown as Failed))
    for (const { first } of reports) {
      // Comm when the dead peer's port refuses at once, Timeout when this side waits to be called
      expect(["CommError/Comm", "CommError/Timeout"]).toContain(first.reason)
      expect(first.ms).toBeLessThan(TIMEOUT_MS + SLACK_MS)
    }
  }, 30_000)
})
