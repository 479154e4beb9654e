// The load check in default mode (4 workers x 20k commands, 16 fetches in flight): every
// fetched value exact, in issue order, nothing refused, memory flat. `bun run
// scripts/reliability.ts --long` runs it at 1M commands per worker.
import { expect, test } from "bun:test"
import { flatness, OPTIONS, run } from "./reliability.ts"

test("a steady command stream with fetches in flight loses and reorders nothing, and memory stays flat", async () => {
  const rows = await run("default")
  for (const row of rows) console.log(`${row.check}\n  ${row.held}/${row.tries}: ${row.detail}`)
  const o = OPTIONS.default
  // At least one fetch per `fetchEvery` commands (one more ends each stretch between readings).
  expect(rows[0]!.tries).toBeGreaterThanOrEqual(o.commandsPerWorker / o.fetchEvery)
  for (const row of rows) expect({ check: row.check, held: row.held, detail: row.detail }).toEqual({ check: row.check, held: row.tries, detail: row.detail })
}, 180_000)

test("the flatness rule passes readings without a trend and catches a steady climb", () => {
  const MiB = 2 ** 20
  // Settled readings like those measured over 2M commands per worker: within about 1 MiB.
  const steady = [66, 66.1, 66.4, 66.8, 66.3, 66.7, 65.7, 66.9, 65.5, 65.8, 66].map((m) => m * MiB)
  // The same readings plus 1 MiB more per reading (a leak of ~10 MiB over the run).
  const leak = steady.map((b, i) => b + i * MiB)
  expect(flatness(steady).flat).toBe(true)
  expect(flatness(leak).flat).toBe(false)
})
