// A worker killed mid-training under Controller.local({ recover }): training finishes with the
// same final loss as an uninterrupted run (tests/checkpoint/recover.ts).
import { expect, test } from "bun:test"
import { lostWorkerRecovered } from "./recover.ts"

test("kill -9 of a worker mid-training: new workers, the last checkpoint loaded, the same final loss bit for bit", async () => {
  const trial = await lostWorkerRecovered()
  expect(trial.problems).toEqual([])
  console.error(`recovery: ${JSON.stringify(trial.figures)}`)
}, 120_000)
