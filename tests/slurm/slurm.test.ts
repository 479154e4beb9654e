// Workers under real SLURM (Debian's slurm-wlm 22.05 with munge, tests/slurm/cluster.ts):
// `srun -n 4` of src/worker.ts on one node, the controller attached from this process through
// the store worker rank 0 hosts on the first node; a task killed is WorkerLost naming its rank;
// scancel ends every process of the job. Installs slurm-wlm and munge when missing (as root);
// skips, saying why, where that cannot be done.
import { afterAll, beforeAll, describe, expect, test } from "bun:test"
import { Effect } from "effect"
import { readFileSync } from "node:fs"
import { hostname } from "node:os"
import { Controller, HostTensor } from "../../src/controller/index.ts"
import { ATTACH_TOKEN, withController } from "../attaching.ts"
import { freePort } from "../processes.ts"
import { describeUnless } from "../skip.ts"
import { jobProcesses, slurmUnavailable, startCluster, until, type Cluster } from "./cluster.ts"

const ROOT = new URL("../..", import.meta.url).pathname.replace(/\/$/, "")
const WORKER = `${ROOT}/src/worker.ts`
const reason = slurmUnavailable()

const environOf = (pid: number): Record<string, string> =>
  Object.fromEntries(readFileSync(`/proc/${pid}/environ`, "latin1").split("\0").filter((e) => e.includes("=")).map((e) => [e.slice(0, e.indexOf("=")), e.slice(e.indexOf("=") + 1)]))

/** slurmstepd's processes for job `jobId` (named "slurmstepd: [<job>.<step>]"). */
const stepDaemons = (jobId: number): number[] =>
  Bun.spawnSync(["pgrep", "-f", `^slurmstepd: \\[${jobId}\\.`], { stdout: "pipe" }).stdout.toString().split("\n").filter((l) => l !== "").map(Number)

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
      await until(() => jobProcesses(jobId).length >= 4, 30_000, explain)

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

      // scancel ends the job: srun returns, and no process of the job (tasks, slurmstepd) is left.
      const left = jobProcesses(jobId)
      expect(left.length).toBeGreaterThan(0)
      expect((await c.run(["scancel", String(jobId)])).status).toBe(0)
      await until(() => srun.proc.exitCode !== null && jobProcesses(jobId).length === 0 && stepDaemons(jobId).length === 0, 20_000, () => `left: ${jobProcesses(jobId)} ${stepDaemons(jobId)}\n${explain()}`)
    } finally {
      srun.proc.kill("SIGKILL")
    }
  }, 120_000)
})
