// Faults with real processes: workers, the controller and the store killed or
// missing. Each scenario must end in a tagged error naming what failed, within its timeout,
// without losing what was already fetched. The rows are those of RELIABILITY.md
// (reliability.ts); MONARCH_LONG=1 runs the long mode's tries.
import { describe, expect, test } from "bun:test"
import { runScenario, scenarios } from "./reliability.ts"

const mode = process.env.MONARCH_LONG === "1" ? "long" : "default"

describe(`faults (${mode} mode)`, () => {
  for (const s of scenarios)
    test(s.check, async () => {
      const { row, problems } = await runScenario(s, s.tries[mode])
      console.log(`${row.held}/${row.tries} held: ${row.detail}`)
      expect(problems).toEqual([])
      expect(row.held).toBe(row.tries)
    }, s.tryMs * s.tries[mode])
})
