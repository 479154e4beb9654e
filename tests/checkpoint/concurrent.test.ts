// Saves that overlap in one directory each succeed on their own and publish every file
// (tests/checkpoint/concurrent.ts; the reliability rows run more tries).
import { expect, test } from "bun:test"
import { concurrentSaves, subMeshDuringSave } from "./concurrent.ts"

test("four saves started together into one directory all succeed; LATEST names the last committed, the two committed last are kept, each loads what it saved", async () => {
  const trial = await concurrentSaves()
  expect(trial.problems).toEqual([])
}, 60_000)

test("a sub-mesh's save committing during a whole-mesh save leaves its temporary directory alone: the whole-mesh version has every rank's file and loads", async () => {
  const trial = await subMeshDuringSave()
  expect(trial.problems).toEqual([])
  expect(trial.facts).toEqual(["the sub-mesh committed before rank 0's file appeared"])
}, 60_000)
