// Collectives after a known loss, with real processes (peer_lost.ts): a failure and the
// rank-local work behind it within a couple of seconds of a kill -9, never after the comm timeout.
import { expect, test } from "bun:test"
import { COMM_TIMEOUT_MS, collectiveAfterLoss, supervisedAfterLoss } from "./peer_lost.ts"

test("kill -9 of rank 1 while rank 0 waits for it in a rendezvous: WorkerLost and rank 0's queued work within 2 s; a later all_reduce fails at once, unsent", async () => {
  const t = await collectiveAfterLoss()
  console.log(t.figures)
  expect(t.problems).toEqual([])
}, COMM_TIMEOUT_MS * 3)

test("supervise: the body that needed the lost rank runs again within 2 s of the kill plus the recovery's time", async () => {
  const t = await supervisedAfterLoss()
  console.log(t.figures)
  expect(t.problems).toEqual([])
}, COMM_TIMEOUT_MS * 3)
