// A worker killed mid-save leaves the previous checkpoint intact and loadable (tests/checkpoint/crash.ts).
import { expect, test } from "bun:test"
import { crashMidSave } from "./crash.ts"

test("kill -9 of a worker while it writes its shard: the save fails with WorkerLost, LATEST and the previous version intact and loadable", async () => {
  const trial = await crashMidSave()
  expect(trial.problems).toEqual([])
}, 60_000)
