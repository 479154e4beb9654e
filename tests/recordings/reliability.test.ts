// The recordings area's reliability rows in default mode (reliability.ts): a few hundred random
// step programs through compile, each call equal to the program run op by op, and a compiled
// reduce_scatter that keeps its placement through save and load, and a first call's cost
// against op by op with a released capture refused after. A failing row names the
// program's seed and the call.
import { expect, test } from "bun:test"

test("the reliability rows (default mode) all hold", async () => {
  const { run } = await import("./reliability.ts")
  const rows = await run("default")
  for (const r of rows) expect({ check: r.check, held: r.held, detail: r.detail }).toEqual({ check: r.check, held: r.tries, detail: r.detail })
  expect(rows.every((r) => r.tries > 0)).toBe(true)
  // The programs replayed, not only traced: the check compares replays too.
  expect(Number(/(\d+) replays/.exec(rows[0]!.detail)?.[1])).toBeGreaterThan(rows[0]!.tries / 2)
}, 300_000)
