// Ragged collectives and sends through a direct protocol client, on both
// transports: every command of cases.ts with every mismatch, on one pair of workers each.
import { afterAll, beforeAll, describe, expect, test } from "bun:test"
import { CASES, Rig, TRANSPORTS, type Transport } from "./cases.ts"

for (const transport of Object.keys(TRANSPORTS) as Transport[])
  describe(`ragged inputs over ${transport}`, () => {
    let rig: Rig
    beforeAll(async () => { rig = await Rig.start(transport) }, 60_000)
    afterAll(() => rig?.close())
    for (const c of CASES) test(c.name, () => c.run(rig), 30_000)
  })

test("the reliability rows (default mode) all hold", async () => {
  const { run } = await import("./reliability.ts")
  const rows = await run("default")
  for (const r of rows) expect({ check: r.check, held: r.held, detail: r.detail }).toEqual({ check: r.check, held: r.tries, detail: r.detail })
  expect(rows.every((r) => r.tries > 0)).toBe(true)
}, 300_000)
