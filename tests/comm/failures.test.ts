// A lost or silent peer must turn into an error within the communicator's timeout, never a
// hang or a crash, and later calls on that communicator must keep failing cleanly.
import { describe, expect, test } from "bun:test"
import { WorkerGroup } from "./spawn.ts"

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

/** Starts `scenario`, waits until every rank is ready, lets `act` run, then collects the survivors' reports. */
const survivorsOf = async (scenario: string, size: number, act: (group: WorkerGroup) => Promise<void>): Promise<Failed[]> => {
  await using group = WorkerGroup.start(scenario, size, TIMEOUT_MS)
  await Promise.all(group.workers.map((w) => w.waitFor("ready")))
  await act(group)
  const survivors = group.workers.slice(0, size - 1)
  return await Promise.all(survivors.map(async (w) => (await w.waitFor("failed")) as unknown as Failed))
}

describe("a peer killed mid-collective", () => {
  for (const size of [2, 3])
    test(`world size ${size}: the others get a Comm error well within the timeout`, async () => {
      const reports = await survivorsOf("peer-dies", size, async (group) => {
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
  for (const [scenario, op] of [["peer-silent", "shim_all_reduce"], ["p2p-silent", "shim_p2p"]] as const)
    test(`${op} times out after the comm's timeout`, async () => {
      const reports = await survivorsOf(scenario, 2, async () => {})
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
