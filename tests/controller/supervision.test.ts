// A worker killed with SIGKILL mid-run: the results that need it fail within 2 s with an
// error naming the rank and its exit status; results that do not need it complete.
import { afterAll, beforeAll, expect, test } from "bun:test"
import { Effect, ManagedRuntime, Result } from "effect"
import { Controller, WorkerLost, type ControllerApi } from "../../src/controller/index.ts"

const ROOT = new URL("../..", import.meta.url).pathname
let rt: ManagedRuntime.ManagedRuntime<Controller, unknown>
let ctl: ControllerApi
const run = <A, E>(e: Effect.Effect<A, E, Controller>) => rt.runPromise(e)

beforeAll(async () => {
  rt = ManagedRuntime.make(Controller.local({ world: 4, functionPath: [ROOT], onWorkerLine: () => {}, onProblem: () => {} }))
  ctl = await rt.runPromise(Effect.service(Controller))
}, 60_000)
afterAll(() => rt?.dispose())

test("kill -9 of a worker mid-command fails exactly the results that need it, within 2 s", async () => {
  const mesh = await run(ctl.mesh({ dp: 2, tp: 2 }))
  const top = await run(mesh.slice({ dp: 0 })), bottom = await run(mesh.slice({ dp: 1 }))
  const flat = await run(mesh.flatten("all"))
  const victimPid = Number(await run(flat.fetch(null, 3, { fn: "tests/controller/fixtures:pid" })))

  const t = await run(bottom.call("ops.ones", [[2]]))
  // Rank 3 is busy (blocked) when it dies, so the fetch is in flight.
  const slow = await run(bottom.call("tests/controller/fixtures:blockOnRank", [3, 10_000, t], {}, { results: [{ dtype: "f32", shape: [2] }] }))
  const pending = rt.runPromise(Effect.flip(bottom.fetch(slow, 1)))
  // The other row has a result in flight too (rank 0 sleeps on it past the kill): it needs no
  // rank 3, so it must still complete.
  const early = await run(top.call("ops.full", [[2], 5]))
  const slowTop = await run(top.call("tests/controller/fixtures:slowOnRank", [0, 1500, early], {}, { results: [{ dtype: "f32", shape: [2] }] }))
  const inFlight = rt.runPromise(Effect.result(top.fetch(slowTop, 0)))
  await Bun.sleep(200)
  const killedAt = performance.now()
  process.kill(victimPid, "SIGKILL")
  const lost = await pending
  const took = performance.now() - killedAt

  expect(lost).toBeInstanceOf(WorkerLost)
  expect(lost).toMatchObject({ rank: 3, status: 137, signal: "SIGKILL" })
  expect(lost.message).toContain("rank 3 exited with status 137")
  expect(took).toBeLessThan(2000)

  const before = await inFlight
  expect(Result.isSuccess(before) ? [...(before.success as { toArray(): Float32Array }).toArray()] : String(before.failure),
    "a result in flight on a mesh without the lost rank failed with the loss").toEqual([5, 5])
  // The other row never needed rank 3.
  const u = await run(top.call("ops.full", [[2], 7]))
  expect([...(await run(top.fetch(u, 1)) as { toArray(): Float32Array }).toArray()]).toEqual([7, 7])
  // New work on a mesh holding rank 3 fails at once where it needs rank 3, and only there.
  const everywhere = await run(mesh.call("ops.ones", [[2]]))
  const again = await run(Effect.flip(mesh.fetch(everywhere, 3)))
  expect(again).toBeInstanceOf(WorkerLost)
  expect([...(await run(mesh.fetch(everywhere, 0)) as { toArray(): Float32Array }).toArray()]).toEqual([1, 1])
}, 30_000)
