// torchrun across nodes: `torchrun --nnodes 2 --nproc_per_node 2 --rdzv_backend c10d
// --rdzv_endpoint <node 1>` on each of two hosts (the network namespaces of tests/hosts, each
// agent in a UTS namespace of its own, its hostname resolving to its address on both), with
// --no_python and src/worker.ts. c10d gives workers no store: worker rank 0 (node 1: c10d ranks
// the nodes by hostname) hosts one and writes where to MONARCH_STORE_FILE; the controller on
// node 1 attaches through it. First tests/hosts/controller.ts's collectives and sends, exact;
// then the GPT demo (examples/gpt.ts --store-file), whose losses must equal the one-host run's.
// Skips when torch is missing or namespaces cannot be made.
import { afterAll, beforeAll, expect, test } from "bun:test"
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { describeUnless } from "../skip.ts"
import { torchAvailable } from "../store/helpers.ts"
import { mismatch, STEPS, type ControllerReport } from "../hosts/plan.ts"
import { createHosts, nameHosts, named, type Hosts } from "../hosts/netns.ts"
import { HostProcess, killHostProcesses } from "../hosts/process.ts"
import { unavailable as namespacesUnavailable } from "../hosts/reliability.ts"
import { until } from "../slurm/cluster.ts"
import { PYTHON, WORKER } from "./job.ts"

const ROOT = new URL("../..", import.meta.url).pathname.replace(/\/$/, "")
const torch = torchAvailable()
const reason = torch.ok ? namespacesUnavailable() : torch.reason
const TOKEN = "torchrun-nodes-token-0123456789"
const NAMES = ["monarch-t1", "monarch-t2"] as const
/** Steps of the demo in each run: enough for the losses to move apart were anything different. */
const DEMO_STEPS = "6"

describeUnless(reason)("torchrun --nnodes 2 --nproc_per_node 2 (c10d) on two hosts", () => {
  let hosts: Hosts | undefined
  let removeNames: (() => void) | undefined
  let dir = ""
  let job = 0
  beforeAll(() => {
    const made = createHosts()
    if ("unavailable" in made) throw new Error(made.unavailable)
    hosts = made
    removeNames = nameHosts(made.hosts.map((host, i) => ({ host, name: NAMES[i]! })))
  })
  afterAll(async () => {
    killHostProcesses()
    await Bun.sleep(200)
    removeNames?.()
    hosts?.remove()
  })

  /** Both agents, node 1's hosting the rendezvous; resolves with the store file once rank 0 wrote it. */
  const start = async (extraFlags: string[] = []) => {
    dir = mkdtempSync(join(tmpdir(), "monarch-nodes-"))
    const storeFile = join(dir, "store.json")
    const [h1] = hosts!.hosts
    const id = `nodes-${process.pid}-${job++}`
    const agents = hosts!.hosts.map((h, i) => new HostProcess(`agent ${i + 1}`, h, named(NAMES[i]!, [
      PYTHON, "-m", "torch.distributed.run", "--nnodes", "2", "--nproc_per_node", "2",
      "--rdzv_backend", "c10d", "--rdzv_endpoint", `${h1.address}:29400`, "--rdzv_id", id,
      "--no_python", "--redirects", "1", "--tee", "2", "--log_dir", join(dir, `log-${i}`), "--monitor_interval", "0.2", ...extraFlags,
      process.execPath, WORKER,
    ]), {
      MONARCH_TOKEN: TOKEN, MONARCH_FUNCTION_PATH: ROOT, MONARCH_STORE_FILE: storeFile, MONARCH_DEVICE: "cpu", MONARCH_LOG: "info",
      MONARCH_COMM_TIMEOUT_MS: "30000", MONARCH_CONNECT_TIMEOUT_MS: "90000", PYTHONUNBUFFERED: "1", OMP_NUM_THREADS: "1",
    }))
    // torchrun tees the workers' stderr on a timer; their log files are complete.
    const workerLogs = () => readdirSync(dir, { recursive: true, encoding: "utf8" }).filter((f) => f.endsWith("stderr.log"))
      .map((f) => `  [${f}]\n${readFileSync(join(dir, f), "utf8").split("\n").slice(-6).join("\n")}`).join("\n")
    const explain = () => `${agents.map((a) => a.tail(12)).join("\n")}\n${workerLogs()}`
    await until(() => existsSync(storeFile) || agents.some((a) => a.exited), 60_000, () => `no store file:\n${explain()}`)
    if (!existsSync(storeFile)) throw new Error(`an agent ended before rank 0 wrote the store file:\n${explain()}`)
    const store = JSON.parse(readFileSync(storeFile, "utf8")) as { host: string; port: number; prefix: string }
    return { agents, store, storeFile, explain }
  }
  const finish = async (agents: HostProcess[], explain: () => string) => {
    const codes = await Promise.all(agents.map((a) => a.exit(30_000)))
    if (codes.some((c) => c !== 0)) console.error(explain())
    expect(codes).toEqual([0, 0])
    rmSync(dir, { recursive: true, force: true })
  }

  test("the controller on node 1 drives both nodes: collectives over the world and across the nodes, sends each way, exact", async () => {
    const [h1, h2] = hosts!.hosts
    const { agents, store, explain } = await start()
    // Rank 0 is on node 1 (c10d ranks the agents by hostname) and hosts the store at its name.
    expect(store).toMatchObject({ host: NAMES[0], prefix: "monarch" })
    const controller = new HostProcess("controller", h1, [process.execPath, `${ROOT}/tests/hosts/controller.ts`, h1.address, String(store.port), "4"], { MONARCH_TOKEN: TOKEN })
    const line = await controller.line((l) => l.startsWith("{"), 90_000).catch((e) => { throw new Error(`${e.message}\n${controller.tail()}\n${explain()}`) })
    const report = JSON.parse(line) as ControllerReport
    expect(await controller.exit(10_000)).toBe(0)
    expect(report.placement).toEqual([[h1.address], [h1.address], [h2.address], [h2.address]])
    for (const step of STEPS) expect({ step: step.name, why: mismatch(step, report.results[step.name]) }).toEqual({ step: step.name, why: undefined })
    await finish(agents, explain)
  }, 150_000)

  test("the GPT demo trains across the two nodes with the losses of the one-host run", async () => {
    const [h1] = hosts!.hosts
    // The one-host run: Controller.local's four workers on this host, all over TCP as across hosts.
    const local = Bun.spawn([process.execPath, `${ROOT}/examples/gpt.ts`, "--losses", "--no-torch"], {
      env: { ...process.env, MONARCH_DEMO_STEPS: DEMO_STEPS, MONARCH_COMM_SHM: "0" }, stdout: "pipe", stderr: "pipe",
    })
    const { agents, storeFile, explain } = await start()
    const demo = new HostProcess("demo", h1, [process.execPath, `${ROOT}/examples/gpt.ts`, "--store-file", storeFile, "--host", h1.address, "--losses", "--no-torch"], {
      MONARCH_TOKEN: TOKEN, MONARCH_DEMO_STEPS: DEMO_STEPS,
    })
    const across = await demo.line((l) => l.startsWith("losses "), 120_000).catch((e) => { throw new Error(`${e.message}\n${demo.tail()}\n${explain()}`) })
    expect(await demo.exit(60_000)).toBe(0)
    const [out, code] = await Promise.all([new Response(local.stdout).text(), local.exited])
    expect(code).toBe(0)
    const here = out.split("\n").find((l) => l.startsWith("losses "))
    const losses = JSON.parse(across.slice("losses ".length)) as number[]
    expect(losses.length).toBe(Number(DEMO_STEPS))
    expect(losses).toEqual(JSON.parse(here!.slice("losses ".length)))
    await finish(agents, explain)
  }, 180_000)
})
