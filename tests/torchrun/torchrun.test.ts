// src/worker.ts under real torchrun (Debian's torch 1.13 at /usr/bin/python3, or TORCH_PYTHON):
// `torchrun --no_python --nproc_per_node 2 <bun> src/worker.ts` with the controller's address
// and token in the environment, in the two store arrangements torchrun 1.13 hands workers:
// the static rendezvous (the agent's TCPStore, keys under /worker/attempt_0) and the c10d one
// (no agent store: worker rank 0 must host one at MASTER_ADDR:MASTER_PORT). Each time both
// workers say hello, compute, all-reduce, and exit on Exit so that torchrun ends with 0; the
// store each used is then checked from the outside. Skips when torch is missing.
import { afterEach, describe, expect, test } from "bun:test"
import { describeUnless, testUnless } from "../skip.ts"
import { Duration, Effect } from "effect"
import { mkdtempSync, rmSync } from "node:fs"
import { createServer } from "node:net"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { torchAvailable } from "../store/helpers.ts"
import { call, createStream, factory, fetch, mesh, numbers, reduce, ref } from "../worker/build.ts"
import { startController, type Controller } from "./controller.ts"
import { makeClient } from "../../src/store/client.ts"
import { freePort } from "../processes.ts"
import { environOf, PYTHON, torchrun, type Torchrun } from "./job.ts"

const AGENT_STORE_KEYS = new URL("./agent_store_keys.py", import.meta.url).pathname
const torch = torchAvailable()
/** torch 1.x: c10d gives workers no store of their own; its server speaks the 1.13 dialect. */
const torchOne = torch.ok && torch.version.startsWith("1.")

const portFree = (port: number): Promise<boolean> =>
  new Promise((resolve) => {
    const server = createServer()
    server.once("error", () => resolve(false))
    server.listen(port, "127.0.0.1", () => server.close(() => resolve(true)))
  })

const c10dSkip = torch.ok && !torchOne
  ? `torch ${torch.version}'s c10d rendezvous hands workers the agent's store, as the static case does`
  : undefined
const standaloneSkip = torch.ok && !(await portFree(29400)) ? "port 29400, which --standalone always takes, is in use" : undefined

/** What a test did to the mesh; its effects are checked here, the same for both arrangements. */
const exercise = async (c: Controller) => {
  c.send("all", createStream)
  c.send("all", mesh(2, ["x"], [2]))
  for (const r of [0, 1]) c.send(r, call(0, [10], "ops.full", [[2, 3], r + 1]))
  c.send("all", reduce(1, 11, 10, 2, ["x"], "sum", factory([2, 3])))
  c.send("all", fetch(2, ref(10)))
  c.send("all", fetch(3, ref(11)))
  for (const r of [0, 1]) {
    expect(numbers((await c.next(r, "FetchResult")).value)).toEqual(Array(6).fill(r + 1))
    expect(numbers((await c.next(r, "FetchResult")).value)).toEqual(Array(6).fill(3))
  }
  expect(c.seen("RemoteFunctionFailed")).toEqual([])
}

const storeClient = (host: string, port: number) =>
  makeClient({ host, port, timeout: Duration.seconds(5), connectTimeout: Duration.seconds(5) })

describeUnless(torch.ok ? undefined : torch.reason)(`torchrun ${torch.ok ? torch.version : ""} --no_python with src/worker.ts`, () => {
  let logDir = ""
  let controller: Controller | undefined
  let job: Torchrun | undefined
  afterEach(async () => {
    job?.kill()
    await controller?.close()
    if (logDir) rmSync(logDir, { recursive: true, force: true })
    job = controller = undefined
  })

  const start = async (flags: string[]) => {
    logDir = mkdtempSync(join(tmpdir(), "monarch-torchrun-"))
    controller = await startController()
    job = torchrun(flags, { CONTROLLER_ADDR: controller.address, MONARCH_TOKEN: controller.token, MONARCH_COMM_TIMEOUT_MS: "20000" }, logDir)
    await controller.hellos(2, 45_000, () => job!.output)
    return { controller, job }
  }

  const exitCleanly = async (c: Controller, j: Torchrun) => {
    c.send("all", { _tag: "Exit" })
    const status = await Promise.race([j.status, Bun.sleep(30_000).then(() => "torchrun still running")])
    if (status !== 0) console.error(j.output.join("\n"))
    expect(status).toBe(0)
  }

  test("static rendezvous: the workers use the agent's store under /worker/attempt_0", async () => {
    const port = await freePort()
    const { controller: c, job: j } = await start(["--master_port", String(port)])
    const envs = [0, 1].map((r) => environOf(c.hello(r).pid))
    for (const env of envs) expect(env).toMatchObject({ TORCHELASTIC_USE_AGENT_STORE: "True", MASTER_PORT: String(port), TORCHELASTIC_RESTART_COUNT: "0" })
    await exercise(c)

    // The agent's store is torch's own (a 1.13 server answers our probe in the 1.13 dialect)
    // and holds the world communicator's rendezvous keys under the agent prefix, not at the top.
    await Effect.runPromise(Effect.scoped(Effect.gen(function* () {
      const store = yield* storeClient(envs[0]!.MASTER_ADDR!, port)
      expect(store.dialect).toBe(torchOne ? "1.13" : "2.x")
      expect(yield* store.check(["/worker/attempt_0/monarch/comm/world/0", "/worker/attempt_0/monarch/comm/world/1"])).toBe(true)
      expect(yield* store.check(["/worker/attempt_0/monarch/comm/mesh2/x@0/1/0"])).toBe(true)
      expect(yield* store.check(["monarch/comm/world/0"])).toBe(false)
    })))
    // A torch client reading the agent store as torch's own env:// rendezvous does (through
    // PrefixStore("/worker/attempt_0")) finds the world's addresses where we expect them.
    const torchView = Bun.spawnSync([PYTHON, AGENT_STORE_KEYS, envs[0]!.MASTER_ADDR!, String(port), "monarch/comm/world/0", "monarch/comm/world/1", "comm/world/0"], { stdout: "pipe", stderr: "pipe" })
    expect(torchView.stderr.toString()).toBe("")
    const lengths = JSON.parse(torchView.stdout.toString())
    expect(lengths["monarch/comm/world/0"]).toBeGreaterThan(0)
    expect(lengths["monarch/comm/world/1"]).toBe(lengths["monarch/comm/world/0"])
    expect(lengths["comm/world/0"]).toBeNull()
    await exitCleanly(c, j)
  }, 120_000)

  // --standalone is c10d on localhost:29400; the explicit form takes a free port instead.
  const c10d = [
    { name: "c10d rendezvous (--rdzv_backend c10d)", skip: c10dSkip, flags: async () => ["--rdzv_backend", "c10d", "--rdzv_endpoint", `127.0.0.1:${await freePort()}`, "--rdzv_id", `monarch-${process.pid}`] },
    { name: "--standalone", skip: c10dSkip ?? standaloneSkip, flags: async () => ["--standalone"] },
  ]
  for (const { name, skip, flags } of c10d) {
    testUnless(skip)(`${name}: worker rank 0 hosts the store at MASTER_ADDR:MASTER_PORT`, async () => {
      const { controller: c, job: j } = await start(await flags())
      const envs = [0, 1].map((r) => environOf(c.hello(r).pid))
      for (const env of envs) expect(env.TORCHELASTIC_USE_AGENT_STORE).toBe("False")
      expect(envs[0]!.MASTER_PORT).toBe(envs[1]!.MASTER_PORT!)
      await exercise(c)

      // Whatever answers at MASTER_ADDR:MASTER_PORT is our server (it answers the 2.x probe,
      // which torch 1.13's own would refuse), and holds the keys with no agent prefix.
      const host = envs[0]!.MASTER_ADDR!, port = Number(envs[0]!.MASTER_PORT)
      await Effect.runPromise(Effect.scoped(Effect.gen(function* () {
        const store = yield* storeClient(host, port)
        expect(store.dialect).toBe("2.x")
        expect(yield* store.check(["monarch/comm/world/0", "monarch/comm/world/1", "monarch/comm/mesh2/x@0/1/1"])).toBe(true)
        expect(yield* store.check(["/worker/attempt_0/monarch/comm/world/0"])).toBe(false)
      })))
      await exitCleanly(c, j)
      // torchrun tees the workers' log files to its own output on a timer: complete only now.
      expect(j.output.some((l) => l.includes("[worker 0]") && l.includes(`hosting the store at ${host}:${port}`))).toBe(true)
      }, 120_000)
  }
})
