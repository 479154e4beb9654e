// Fetch and save host copies count against MONARCH_MEMORY_LIMIT (tests/checkpoint/memory.ts).
import { expect, test } from "bun:test"
import { hostCopiesCounted, LIMIT_MIB } from "./memory.ts"

test(`MONARCH_MEMORY_LIMIT=${LIMIT_MIB}MiB: host copies of fetches and saves past the limit are refused naming it, the peak RSS stays flat, the guard's count comes back; under it they work`, async () => {
  const trial = await hostCopiesCounted()
  expect(trial.problems).toEqual([])
  console.error(`host copies: ${trial.facts.join("; ")}`)
}, 90_000)
