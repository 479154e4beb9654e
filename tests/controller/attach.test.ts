// Controller.attach: workers started elsewhere (here plain processes with torchrun's
// environment and no controller address or token) find the controller through the store.
import { afterAll, expect, test } from "bun:test"
import { Effect } from "effect"
import { Controller, HostTensor } from "../../src/controller/index.ts"
import { startServer } from "../../src/store/server.ts"

const WORKER = new URL("../../src/worker.ts", import.meta.url).pathname
const store = startServer({ host: "127.0.0.1", port: 0 })
const procs: Bun.Subprocess[] = []
afterAll(() => {
  for (const p of procs) p.kill("SIGKILL")
  store.stop()
})

test("two workers with only RANK, WORLD_SIZE and MASTER_ADDR/PORT meet an attaching controller", async () => {
  const { MONARCH_TOKEN: _, CONTROLLER_ADDR: __, ...env } = process.env
  for (const rank of [0, 1])
    procs.push(Bun.spawn([process.execPath, WORKER], {
      env: { ...env, RANK: String(rank), WORLD_SIZE: "2", LOCAL_RANK: String(rank), MASTER_ADDR: "127.0.0.1", MASTER_PORT: String(store.port), MONARCH_LOG: "warn" },
      stdout: "inherit", stderr: "inherit",
    }))
  const got = await Effect.runPromise(Effect.gen(function* () {
    const ctl = yield* Controller
    const mesh = yield* ctl.mesh({ x: 2 })
    const t = yield* mesh.call("ops.full", [[2], 3])
    return yield* mesh.fetch(yield* mesh.reduce(t, "x", "sum"), 1)
  }).pipe(Effect.provide(Controller.attach({ world: 2, store: { host: "127.0.0.1", port: store.port }, startTimeoutMs: 20_000 }))))
  expect([...(got as HostTensor).toArray()]).toEqual([6, 6])
  // The layer's end sent Exit: both workers leave cleanly.
  expect(await Promise.all(procs.map((p) => p.exited))).toEqual([0, 0])
}, 40_000)
