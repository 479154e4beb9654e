// Hang reports name the command each behind rank is in: see hang.ts.
import { expect, test } from "bun:test"
import { describeHang } from "../../src/controller/core.ts"
import { hangNamesRunningCommand } from "./hang.ts"

test("a rank blocked in a user function, and one waiting for it in an all_reduce: each report names the command each behind rank is in", async () => {
  const { reports } = await hangNamesRunningCommand()
  // The logged line says it too.
  const line = describeHang(reports.find((r) => r.label.startsWith("reduce sum"))!)
  expect(line).toMatch(/rank 0 is in command \d+ \(reduce sum over x\), rank 1 is in command \d+ \(tests\/controller\/fixtures:blockOnRank\)/)
}, 60_000)
