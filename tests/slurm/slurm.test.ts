// Workers under real SLURM (Debian's slurm-wlm 22.05 with munge, tests/slurm/cluster.ts):
// `srun -n 4` of src/worker.ts on one node, the controller attached from this process through
// the store worker rank 0 hosts on the first node; a task killed is WorkerLost naming its rank;
// scancel ends every process of the job. Then two nodes (network namespaces joined by a veth
// pair, each slurmd with its own hostname), 2 tasks each, driven by tests/hosts/controller.ts
// on node 1: collectives over the world and across the nodes, sends each way, exact.
// Installs slurm-wlm and munge when missing (as root); skips, saying why, where that cannot be
// done or namespaces cannot be made.
import { afterAll, beforeAll, describe, expect, test } from "bun:test"
import { Effect } from "effect"
import { readFileSync, readlinkSync } from "node:fs"
import { hostname } from "node:os"
import { join } from "node:path"
import { Controller, HostTensor } from "../../src/controller/index.ts"
import { ATTACH_TOKEN, withController } from "../attaching.ts"
import { freePort } from "../processes.ts"
import { describeUnless } from "../skip.ts"
import { mismatch, STEPS, type ControllerReport } from "../hosts/plan.ts"
import { HostProcess } from "../../rig/hostProcess.ts"
import { unavailable as namespacesUnavailable } from "../hosts/reliability.ts"
import { defaultStorePort } from "../../src/worker/slurm.ts"
import { slurmUnavailable, startCluster, until, type Cluster } from "./cluster.ts"

const ROOT = new URL("../..", import.meta.url).pathname.replace(/\/$/, "")
const WORKER = `${ROOT}/src/worker.ts`
const reason = slurmUnavailable()

const environOf = (pid: number): Record<string, string> =>
  Object.fromEntries(readFileSync(`/proc/${pid}/environ`, "latin1").split("\0").filter((e) => e.includes("=")).map((e) => [e.slice(0, e.indexOf("=")), e.slice(e.indexOf("=") + 1)]))

/** The transport each rank's world communicator picked, in rank order, from the workers' info lines. */
const transports = (lines: ReadonlyArray<string>): string[] =>
  lines.flatMap((l) => {
    const m = /\[worker (\d+)\] communicator comm\/world over ranks \[[\d, ]+\]: (\S+)/.exec(l)
    return m ? [[Number(m[1]), m[2]!] as const] : []
  }).sort((a, b) => a[0] - b[0]).map(([, t]) => t)

describeUnless(reason)("srun -n 4 on one node (slurm-wlm, munge, slurmctld and slurmd started here)", () => {
  let cluster: Cluster | undefined
  beforeAll(async () => {
    cluster = await startCluster({ nodes: 1, cpus: 4 })
  }, 60_000)
  afterAll(async () => {
    await cluster?.stop()
  }, 30_000)

  test("the workers read SLURM's environment, rank 0 hosts the store on the first node, the controller attaches; a killed task is WorkerLost naming its rank; scancel leaves nothing", async () => {
    const c = cluster!
    const port = await freePort()
    const srun = c.spawn("srun", ["srun", "-n", "4", "--job-name", `monarch-${process.pid}`, process.execPath, WORKER], {
      MONARCH_TOKEN: ATTACH_TOKEN, MASTER_PORT: String(port), MONARCH_DEVICE: "cpu", MONARCH_LOG: "info",
      MONARCH_COMM_TIMEOUT_MS: "20000", MONARCH_CONNECT_TIMEOUT_MS: "60000",
    })
    const explain = () => `srun:\n${srun.output.slice(-30).join("\n")}\n${c.logs()}`
    try {
      // The job id, from the tasks' own environment once they run.
      let jobId = 0
      await until(async () => {
        const r = await c.run(["squeue", "-h", "-n", `monarch-${process.pid}`, "-o", "%i %T"])
        const [id, state] = r.output.trim().split(" ")
        jobId = Number(id)
        return state === "RUNNING"
      }, 30_000, explain)
      await until(() => c.jobProcesses(jobId).length >= 4, 30_000, explain)

      const outcome = await withController(Controller.attach({ world: 4, store: { host: "127.0.0.1", port }, startTimeoutMs: 60_000 }), (rt) => rt.runPromise(Effect.gen(function* () {
        const ctl = yield* Controller
        const mesh = yield* ctl.mesh({ dp: 4 })
        const mine = yield* mesh.call("ops.full", [[3], 1])
        const summed = yield* mesh.reduce(yield* mesh.call("ops.mul", [mine, 2]), "dp", "sum")
        const sums = (yield* mesh.fetchAll(summed)).map((v) => [...(v as HostTensor).toArray()].map(Number))
        const pids = ctl.workers().map((w) => w.pid)
        // Task 2 dies: the next fetch that needs it fails with WorkerLost naming rank 2.
        const victim = pids[2]!
        process.kill(victim, "SIGKILL")
        const lost = yield* mesh.fetchAll(summed).pipe(Effect.flip)
        return { sums, pids, victim, lost }
      })))
      expect(outcome.sums).toEqual(Array(4).fill([8, 8, 8]))
      // Each rank is the task SLURM numbered so, on this node.
      outcome.pids.forEach((pid, r) => {
        if (pid === outcome.victim) return
        expect(environOf(pid)).toMatchObject({ SLURM_PROCID: String(r), SLURM_JOB_ID: String(jobId), SLURMD_NODENAME: hostname() })
      })
      expect(outcome.lost._tag).toBe("WorkerLost")
      expect(outcome.lost).toMatchObject({ rank: 2 })
      expect(srun.output.some((l) => l.includes(`hosting the store at ${hostname()}:${port} (srun started none)`))).toBe(true)
      // One host: the world communicator all-reduces through shared memory (MONARCH_LOG=info says so).
      expect(transports(srun.output)).toEqual(["shm+tcp", "shm+tcp", "shm+tcp", "shm+tcp"])

      // scancel ends the job: srun returns, and no process of the job (tasks, slurmstepd) is left.
      const left = c.jobProcesses(jobId)
      expect(left.length).toBeGreaterThan(0)
      expect((await c.run(["scancel", String(jobId)])).status).toBe(0)
      await until(() => srun.proc.exitCode !== null && c.jobProcesses(jobId).length === 0, 20_000, () => `left: ${c.jobProcesses(jobId)}\n${explain()}`)
    } finally {
      srun.proc.kill("SIGKILL")
    }
  }, 120_000)
})

const twoNodeReason = reason ?? namespacesUnavailable()

describeUnless(twoNodeReason)("srun -N 2 -n 4 on two nodes (network and UTS namespaces, a slurmd each)", () => {
  let cluster: Cluster | undefined
  beforeAll(async () => {
    cluster = await startCluster({ nodes: 2, cpus: 2 })
  }, 60_000)
  afterAll(async () => {
    await cluster?.stop()
  }, 30_000)

  test("2 tasks per node: the store on node 1 at the default port, Gloo across the veth, the controller on node 1 drives both nodes exactly", async () => {
    const c = cluster!
    const [n1, n2] = c.nodes as [(typeof c.nodes)[0], (typeof c.nodes)[0]]
    const token = "slurm-two-nodes-token-0123456789"
    const srun = c.spawn("srun", ["srun", "-N", "2", "-n", "4", "--ntasks-per-node", "2", "--job-name", `monarch2-${process.pid}`, process.execPath, WORKER], {
      MONARCH_TOKEN: token, MONARCH_DEVICE: "cpu", MONARCH_LOG: "info", MONARCH_FUNCTION_PATH: ROOT,
      MONARCH_COMM_TIMEOUT_MS: "30000", MONARCH_CONNECT_TIMEOUT_MS: "60000",
    })
    let controller: HostProcess | undefined
    const explain = () => `srun:\n${srun.output.slice(-30).join("\n")}\n${controller?.tail(10) ?? ""}\n${c.logs()}`
    try {
      let jobId = 0
      await until(async () => {
        const r = await c.run(["squeue", "-h", "-n", `monarch2-${process.pid}`, "-o", "%i %T"])
        const [id, state] = r.output.trim().split(" ")
        jobId = Number(id)
        return state === "RUNNING"
      }, 30_000, explain)
      // Until all four workers have exec'd: a slurmstepd or a task not yet the worker counts for nothing.
      const workerTasks = () => c.jobProcesses(jobId).flatMap((pid) => {
        try {
          const env = environOf(pid)
          return env.SLURM_PROCID !== undefined && readFileSync(`/proc/${pid}/cmdline`, "latin1").includes("worker.ts") ? [{ pid, env }] : []
        } catch {
          return [] // gone meanwhile
        }
      })
      await until(() => workerTasks().length >= 4, 30_000, explain)
      const tasks = workerTasks()
      // Each node's tasks run in its slurmd's UTS namespace, not this one's.
      const ownUts = readlinkSync("/proc/self/ns/uts")
      expect(tasks.map((t) => [t.env.SLURM_PROCID, t.env.SLURMD_NODENAME, readlinkSync(`/proc/${t.pid}/ns/uts`) !== ownUts]).sort())
        .toEqual([["0", n1.name, true], ["1", n1.name, true], ["2", n2.name, true], ["3", n2.name, true]])

      const port = defaultStorePort(jobId)
      controller = new HostProcess("controller", n1.host!, [process.execPath, `${ROOT}/tests/hosts/controller.ts`, n1.address, String(port), "4"], { MONARCH_TOKEN: token })
      const report = JSON.parse(await controller.line((l) => l.startsWith("{"), 60_000).catch((e) => { throw new Error(`${e.message}\n${explain()}`) })) as ControllerReport
      expect(await controller.exit(10_000)).toBe(0)
      // Ranks 0-1 on node 1's address, 2-3 on node 2's; every result exact.
      expect(report.placement).toEqual([[n1.address], [n1.address], [n2.address], [n2.address]])
      for (const step of STEPS) expect({ step: step.name, why: mismatch(step, report.results[step.name]) }).toEqual({ step: step.name, why: undefined })
      expect(srun.output.some((l) => l.includes(`hosting the store at ${n1.name}:${port} (srun started none)`))).toBe(true)
      // A communicator whose members span the nodes is Gloo over TCP (the veth pair), never shared
      // memory; one within a node (mesh dim "local") all-reduces through shared memory.
      const opened = srun.output.flatMap((l) => {
        const m = /\[worker (\d)\] communicator (\S+) over ranks \[([\d, ]+)\]: (\S+) (.*)$/.exec(l)
        return m ? [{ rank: Number(m[1]), key: m[2]!, members: m[3]!.split(", ").map(Number), transport: m[4]!, detail: m[5]! }] : []
      })
      expect(opened.filter((o) => o.key === "comm/world").length).toBe(4)
      expect(opened.some((o) => o.members.length === 2 && Math.floor(o.members[0]! / 2) === Math.floor(o.members[1]! / 2))).toBe(true)
      for (const o of opened) {
        const spans = new Set(o.members.map((r) => Math.floor(r / 2))).size > 1
        expect({ key: o.key, rank: o.rank, transport: o.transport }).toEqual({ key: o.key, rank: o.rank, transport: spans ? "tcp" : "shm+tcp" })
        expect(o.detail).toContain(`from ${o.rank < 2 ? n1.address : n2.address}`)
      }
      // The controller's Exit ends every task with 0, so srun does too, and nothing of the job is left.
      expect(await Promise.race([srun.proc.exited, Bun.sleep(20_000).then(() => "srun still running")])).toBe(0)
      await until(() => c.jobProcesses(jobId).length === 0, 20_000, () => `left: ${c.jobProcesses(jobId)}`)
    } finally {
      controller?.kill()
      srun.proc.kill("SIGKILL")
    }
  }, 120_000)

  test("scancel ends the workers on both nodes and their slurmstepd: nothing of the job is left", async () => {
    const c = cluster!
    const srun = c.spawn("srun", ["srun", "-N", "2", "-n", "4", "--ntasks-per-node", "2", "--job-name", `monarch3-${process.pid}`, process.execPath, WORKER], {
      MONARCH_TOKEN: "slurm-scancel-token-0123456789", MONARCH_DEVICE: "cpu", MONARCH_LOG: "warn",
    })
    try {
      let jobId = 0
      await until(async () => {
        const r = await c.run(["squeue", "-h", "-n", `monarch3-${process.pid}`, "-o", "%i %T"])
        const [id, state] = r.output.trim().split(" ")
        jobId = Number(id)
        return state === "RUNNING"
      }, 30_000, () => srun.output.join("\n"))
      // Every task is up (each waits for a controller), two on each node.
      await until(() => c.jobProcesses(jobId).filter((pid) => environOf(pid).SLURM_PROCID !== undefined).length === 4, 30_000, () => srun.output.join("\n"))
      const nodes = c.jobProcesses(jobId).map((pid) => environOf(pid).SLURMD_NODENAME).filter((n) => n !== undefined)
      expect([...new Set(nodes)].sort()).toEqual(c.nodes.map((n) => n.name).sort())
      // A slurmstepd per node runs the step's tasks: they count among the job's processes too.
      expect(c.jobProcesses(jobId).filter((pid) => readFileSync(`/proc/${pid}/cmdline`, "latin1").startsWith(`slurmstepd: [${jobId}.0]`)).length).toBe(2)
      expect((await c.run(["scancel", String(jobId)])).status).toBe(0)
      await until(() => srun.proc.exitCode !== null && c.jobProcesses(jobId).length === 0, 20_000, () => `left: ${c.jobProcesses(jobId)}`)
    } finally {
      srun.proc.kill("SIGKILL")
    }
  }, 90_000)

  test("examples/slurm/gpt.sbatch: the GPT demo on 2 nodes x 2 tasks, the controller in the batch step on node 1", async () => {
    const c = cluster!
    // The README shows this script: its commands, without the comments.
    const commands = (text: string) => text.split("\n").filter((l) => l.trim() !== "" && !/^# /.test(l) && l !== "#")
    const script = readFileSync(`${ROOT}/examples/slurm/gpt.sbatch`, "utf8")
    const readme = readFileSync(`${ROOT}/README.md`, "utf8")
    const block = /```sh\n(#!\/bin\/bash\n#SBATCH[\s\S]*?)```/.exec(readme)?.[1]
    expect(commands(block ?? "")).toEqual(commands(script))
    const out = join(c.dir, "gpt-%j.out")
    const sbatch = await c.run(["sbatch", "--wait", "--chdir", ROOT, "--output", out, `${ROOT}/examples/slurm/gpt.sbatch`, "--no-torch", "--losses"], {
      BUN: process.execPath, MONARCH_DEMO_STEPS: "4", MONARCH_LOG: "warn",
    })
    const jobId = Number(/Submitted batch job (\d+)/.exec(sbatch.output)?.[1])
    const text = readFileSync(out.replace("%j", String(jobId)), "utf8")
    if (sbatch.status !== 0) throw new Error(`sbatch --wait exited ${sbatch.status}:\n${sbatch.output}\n${text}\n${c.logs()}`)
    expect(text).toMatch(/^a GPT on .* \(4 workers, cpu\)/m)
    const losses = JSON.parse(/^losses (.*)$/m.exec(text)![1]!) as number[]
    expect(losses.length).toBe(4)
    expect(losses.every((l) => Number.isFinite(l) && l > 0)).toBe(true)
    expect(text).toMatch(/the mesh goes on: one more step, loss [\d.]+\ndone in/)
    await until(() => c.jobProcesses(jobId).length === 0, 20_000, () => `left: ${c.jobProcesses(jobId)}`)
  }, 120_000)
})
