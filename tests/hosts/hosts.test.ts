// Several hosts, stood in for by two network namespaces joined by a veth pair (reliability.ts
// says what runs where). The rows these tests check are the ones RELIABILITY.md shows. Skips,
// saying why, where namespaces cannot be made (no iproute2, not root / no CAP_NET_ADMIN).
import { afterAll, beforeAll, describe, expect, test } from "bun:test"
import { testUnless } from "../skip.ts"
import { removeAllHosts } from "../../rig/netns.ts"
import { killHostProcesses } from "../../rig/hostProcess.ts"
import type { ReliabilityRow } from "../reliability.ts"
import { run, unavailable } from "./reliability.ts"

const reason = unavailable()

const hostTest = testUnless(reason)

describe("two hosts joined by a veth pair", () => {
  let rows: ReliabilityRow[] = []
  if (reason === undefined) {
    beforeAll(async () => {
      rows = await run("default")
    }, 240_000)
    afterAll(() => {
      // run() cleans up after itself; this covers a run cut short by the timeout above.
      killHostProcesses()
      removeAllHosts()
    })
  }

  const held = (fragment: string) => {
    const row = rows.find((r) => r.check.includes(fragment))
    expect(row).toBeDefined()
    // The detail says what failed when a try did not hold.
    expect({ held: row!.held, detail: row!.detail }).toEqual({ held: row!.tries, detail: row!.detail })
    expect(row!.tries).toBeGreaterThan(0)
  }

  hostTest("Gloo: every collective, broadcast from each root and a barrier across the hosts", () => held("every collective and dtype"))
  hostTest("Gloo: sub-communicators over a dim that crosses the hosts, and p2p both ways", () => held("sub-communicators"))
  hostTest("controller on host 1 drives workers on both hosts: collectives and sends each way", () => held("controller on host 1"))
})
