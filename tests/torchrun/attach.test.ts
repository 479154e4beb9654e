// The README's torchrun forms, each with real torchrun (Debian's torch 1.13) and a real
// Controller.attach in this process: a controller on a fixed address (the workers started first
// and retrying), the agent's store (static rendezvous), and c10d, where worker rank 0 hosts the
// store and writes its address to MONARCH_STORE_FILE. A failed attach (wrong world size, wrong
// prefix) says why with both sides' facts, and leaves the job's workers waiting for the next
// controller, which then uses them. Skips when torch is missing.
import { afterEach, describe, expect, test } from "bun:test"
import { describeUnless, testUnless } from "../skip.ts"
import { Duration, Effect } from "effect"
import { mkdtempSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { Controller } from "../../src/controller/index.ts"
import { makeClient } from "../../src/store/client.ts"
import { allReduce, ATTACH_TOKEN, startFailure, withController } from "../attaching.ts"
import { freePort } from "../processes.ts"
import { torchAvailable } from "../store/helpers.ts"
import { torchrun, type Torchrun } from "./job.ts"

const torch = torchAvailable()
const c10dSkip = torch.ok && !torch.version.startsWith("1.")
  ? `torch ${torch.version}'s c10d rendezvous hands workers the agent's store, as the static case does`
  : undefined

const WORKER_ENV = { MONARCH_TOKEN: ATTACH_TOKEN, MONARCH_COMM_TIMEOUT_MS: "20000", MONARCH_CONNECT_TIMEOUT_MS: "60000" }

describeUnless(torch.ok ? undefined : torch.reason)(`torchrun ${torch.ok ? torch.version : ""} with Controller.attach`, () => {
  let logDir = ""
  let job: Torchrun | undefined
  afterEach(() => {
    job?.kill()
    if (logDir) rmSync(logDir, { recursive: true, force: true })
    job = undefined
  })
  const start = (flags: string[], env: Record<string, string> = {}) => {
    logDir = mkdtempSync(join(tmpdir(), "monarch-attach-"))
    job = torchrun(flags, { ...WORKER_ENV, ...env }, logDir)
    return job
  }
  /** The job must outlive a controller that failed to start (its workers keep waiting). */
  const stillRunning = async (j: Torchrun, after: string) => {
    await Bun.sleep(1000)
    if (!j.running()) throw new Error(`torchrun's job ended after ${after}:\n${j.output.slice(-20).join("\n")}`)
  }
  const endsCleanly = async (j: Torchrun) => {
    const status = await Promise.race([j.status, Bun.sleep(30_000).then(() => "torchrun still running")])
    if (status !== 0) console.error(j.output.join("\n"))
    expect(status).toBe(0)
  }

  test("fixed address: workers given CONTROLLER_ADDR retry until Controller.attach({ listen }) is up; a wrong world size is refused naming both", async () => {
    const listen = `127.0.0.1:${await freePort()}`
    const j = start(["--master_port", String(await freePort())], { CONTROLLER_ADDR: listen })
    // Nothing listens yet: the workers' first connections are refused and they keep trying.
    await Bun.sleep(2000)
    await stillRunning(j, "its workers found no controller listening")

    const wrong = await startFailure(Controller.attach({ world: 4, listen, startTimeoutMs: 10_000, onProblem: () => {} }))
    expect(wrong).toContain("WORLD_SIZE=2")
    expect(wrong).toContain("world 4")
    await stillRunning(j, "a controller refused its workers (wrong world size)")

    const sums = await withController(Controller.attach({ world: 2, listen, startTimeoutMs: 30_000 }), allReduce)
    expect(sums).toEqual([[10, 10, 10], [10, 10, 10]])
    await endsCleanly(j)
  }, 120_000)

  test("the agent's store (static rendezvous): attach with prefix /worker/attempt_0/monarch; a wrong prefix names the keys found", async () => {
    const port = await freePort()
    const j = start(["--master_port", String(port)])
    // Wait until both workers have published their world addresses in the agent store.
    await Effect.runPromise(Effect.scoped(Effect.gen(function* () {
      const store = yield* makeClient({ host: "127.0.0.1", port, timeout: Duration.seconds(40), connectTimeout: Duration.seconds(40) })
      yield* store.wait(["/worker/attempt_0/monarch/comm/world/0", "/worker/attempt_0/monarch/comm/world/1"])
    })))

    const wrong = await startFailure(Controller.attach({ world: 2, store: { host: "127.0.0.1", port }, startTimeoutMs: 1500 }))
    expect(wrong).toContain(`no worker keys under "monarch"`)
    expect(wrong).toContain("/worker/attempt_0/monarch/comm/world/{0,1}")
    await stillRunning(j, "a controller with the wrong prefix gave up")

    const sums = await withController(Controller.attach({ world: 2, store: { host: "127.0.0.1", port }, prefix: "/worker/attempt_0/monarch", startTimeoutMs: 30_000 }), allReduce)
    expect(sums).toEqual([[10, 10, 10], [10, 10, 10]])
    await endsCleanly(j)
  }, 120_000)

  testUnless(c10dSkip)("c10d (as --standalone): worker rank 0 hosts the store and writes where to MONARCH_STORE_FILE; attach({ store: { file } })", async () => {
    const dir = mkdtempSync(join(tmpdir(), "monarch-storefile-"))
    const file = join(dir, "store.json")
    try {
      const j = start(["--rdzv_backend", "c10d", "--rdzv_endpoint", `127.0.0.1:${await freePort()}`, "--rdzv_id", `attach-${process.pid}`], { MONARCH_STORE_FILE: file })
      const sums = await withController(Controller.attach({ world: 2, store: { file }, startTimeoutMs: 20_000 }), allReduce)
      expect(sums).toEqual([[10, 10, 10], [10, 10, 10]])
      await endsCleanly(j)
    } finally {
      rmSync(dir, { recursive: true, force: true })
    }
  }, 120_000)
})
