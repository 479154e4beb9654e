/**
 * Two-node torchrun jobs for tests/torchrun/nodes*.test.ts: `torchrun --nnodes 2
 * --nproc_per_node 2 --rdzv_backend c10d --rdzv_endpoint <node 1>` on each of two hosts (the
 * network namespaces of tests/hosts, each agent in a UTS namespace of its own, its hostname
 * resolving to its address on both), with --no_python and src/worker.ts. c10d gives workers no
 * store: worker rank 0 (node 1: c10d ranks the nodes by hostname) hosts one and writes where to
 * MONARCH_STORE_FILE.
 */
import { afterAll, beforeAll, expect } from "bun:test"
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { torchAvailable } from "../store/helpers.ts"
import { createHosts, nameHosts, named, type Host, type Hosts } from "../../rig/netns.ts"
import { HostProcess, killHostProcesses } from "../../rig/hostProcess.ts"
import { unavailable as namespacesUnavailable } from "../hosts/reliability.ts"
import { until } from "../slurm/cluster.ts"
import { PYTHON, WORKER } from "./job.ts"

export const ROOT = new URL("../..", import.meta.url).pathname.replace(/\/$/, "")
export const TOKEN = "torchrun-nodes-token-0123456789"
/** The two hosts' names (their hostnames, which c10d ranks the nodes by). */
export const NAMES = ["monarch-t1", "monarch-t2"] as const

/** Why two-node torchrun jobs cannot run here (torch missing, no namespaces), or undefined. */
export const nodesUnavailable = (): string | undefined => {
  const torch = torchAvailable()
  return torch.ok ? namespacesUnavailable() : torch.reason
}

/** Registers the hosts' set-up and clean-up in the current describe; returns how to start and end jobs on them. */
export const twoNodeJobs = () => {
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
    if (dir) rmSync(dir, { recursive: true, force: true })
    removeNames?.()
    hosts?.remove()
  })

  /** Both agents, node 1's hosting the rendezvous; resolves with the store file once rank 0 wrote it. */
  const start = async (extraFlags: string[] = [], extraEnv: Record<string, string> = {}) => {
    if (dir) rmSync(dir, { recursive: true, force: true })
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
      MONARCH_COMM_TIMEOUT_MS: "30000", MONARCH_CONNECT_TIMEOUT_MS: "90000", PYTHONUNBUFFERED: "1", OMP_NUM_THREADS: "1", ...extraEnv,
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

  return { hosts: (): readonly [Host, Host] => hosts!.hosts, start, finish, logDir: () => dir }
}
