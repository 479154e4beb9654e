// Recovery under real torchrun (Debian's torch 1.13, --max_restarts 1): a worker killed -9
// mid-training, torchrun restarts the job's workers, they find Controller.attach({ listen,
// recover }) again at their CONTROLLER_ADDR, and it loads the last checkpoint and finishes with
// the losses of an uninterrupted run (Controller.local's, same mesh) bit for bit.
import { afterEach, expect } from "bun:test"
import { mkdtempSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join, resolve } from "node:path"
import { Controller } from "../../src/controller/index.ts"
import { ATTACH_TOKEN } from "../attaching.ts"
import { attempt } from "../faults/trial.ts"
import { freePort } from "../processes.ts"
import { testUnless } from "../skip.ts"
import { torchAvailable } from "../store/helpers.ts"
import { torchrun, type Torchrun } from "../torchrun/job.ts"
import { checkRecovered, supervised } from "./recover.ts"

const torch = torchAvailable()
const FIXTURES = resolve(import.meta.dir, "../..")
const roots: string[] = []
let job: Torchrun | undefined
afterEach(() => {
  job?.kill()
  for (const r of roots.splice(0)) rmSync(r, { recursive: true, force: true })
})

testUnless(torch.ok ? undefined : torch.reason)("torchrun --max_restarts 1: a worker killed mid-training, the restarted workers re-attach, training resumes from the last checkpoint with the same losses", async () => {
  const root = mkdtempSync(join(tmpdir(), "monarch-torchrun-ckpt-")), wholeRoot = mkdtempSync(join(tmpdir(), "monarch-torchrun-ckpt-"))
  roots.push(root, wholeRoot)
  const listen = `127.0.0.1:${await freePort()}`
  job = torchrun(["--master_port", String(await freePort()), "--max_restarts", "1"], {
    MONARCH_TOKEN: ATTACH_TOKEN, CONTROLLER_ADDR: listen, MONARCH_CHECKPOINT_DIR: root, MONARCH_FUNCTION_PATH: FIXTURES,
    MONARCH_COMM_TIMEOUT_MS: "20000", MONARCH_CONNECT_TIMEOUT_MS: "60000",
  }, mkdtempSync(join(tmpdir(), "monarch-torchrun-log-")))
  const trial = await attempt(async (t) => {
    const whole = await supervised((recover) => Controller.local({ world: 2, checkpoints: wholeRoot, functionPath: [FIXTURES], onWorkerLine: () => {}, recover }), { dp: 1, tp: 2 })
    const before = process.env.MONARCH_TOKEN
    process.env.MONARCH_TOKEN = ATTACH_TOKEN
    try {
      const hit = await supervised((recover) => Controller.attach({ world: 2, listen, checkpoints: root, recover, startTimeoutMs: 60_000, onProblem: () => {} }), { dp: 1, tp: 2 }, 1)
      checkRecovered(t, whole, hit, 1)
    } finally {
      if (before === undefined) delete process.env.MONARCH_TOKEN
      else process.env.MONARCH_TOKEN = before
    }
  })
  if (trial.problems.length > 0) console.error(job.output.slice(-30).join("\n"))
  expect(trial.problems).toEqual([])
  expect(await Promise.race([job.status, Bun.sleep(30_000).then(() => "torchrun still running")])).toBe(0)
}, 150_000)
