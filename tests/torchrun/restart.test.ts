// Recovery under torchrun across nodes (tests/torchrun/nodes.ts), --max_restarts 1: rank 2, on
// node 2, killed -9 mid-training; the controller on node 1 (tests/torchrun/recover_child.ts,
// Controller.attach({ listen, recover })) gives the survivors no Exit, so both agents restart
// their workers, which find it again at CONTROLLER_ADDR; it loads the last checkpoint and ends
// with the losses of an uninterrupted run (Controller.local's, same mesh) bit for bit.
// Skips when torch is missing or namespaces cannot be made.
import { expect, test } from "bun:test"
import { mkdtempSync, readdirSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { Controller, type RecoveryReport } from "../../src/controller/index.ts"
import { checkRecovered, supervised } from "../checkpoint/recover.ts"
import { Trial } from "../faults/trial.ts"
import { HostProcess } from "../../rig/hostProcess.ts"
import { describeUnless } from "../skip.ts"
import { nodesUnavailable, ROOT, TOKEN, twoNodeJobs } from "./nodes.ts"

describeUnless(nodesUnavailable())("torchrun --nnodes 2 --max_restarts 1 on two hosts", () => {
  const jobs = twoNodeJobs()

  test("--max_restarts 1: rank 2 on node 2 killed mid-training, both agents restart their workers, the controller resumes from the last checkpoint with the losses of an uninterrupted run", async () => {
    const [h1] = jobs.hosts()
    const roots = [mkdtempSync(join(tmpdir(), "monarch-nodes-ckpt-")), mkdtempSync(join(tmpdir(), "monarch-nodes-ckpt-"))]
    try {
      const whole = supervised((recover) => Controller.local({ world: 4, checkpoints: roots[0]!, functionPath: [ROOT], onWorkerLine: () => {}, recover }), { dp: 2, tp: 2 })
      const listen = `${h1.address}:29600`
      const { agents, explain } = await jobs.start(["--max_restarts", "1"], { CONTROLLER_ADDR: listen, MONARCH_CHECKPOINT_DIR: roots[1]! })
      const controller = new HostProcess("controller", h1, [process.execPath, `${ROOT}/tests/torchrun/recover_child.ts`, listen, roots[1]!], { MONARCH_TOKEN: TOKEN })
      const line = await controller.line((l) => l.startsWith("{"), 150_000).catch((e) => { throw new Error(`${e.message}\n${controller.tail()}\n${explain()}`) })
      expect(await controller.exit(10_000)).toBe(0)
      const hit = JSON.parse(line) as { losses: Array<[number, number]>; reports: RecoveryReport[] }
      const trial = new Trial()
      checkRecovered(trial, await whole, { losses: new Map(hit.losses), reports: hit.reports, killedAt: undefined }, 2)
      expect(trial.problems).toEqual([])
      // Each agent restarted its workers once (attempt 1, in its log folder), and the job then ended with 0.
      for (const i of [0, 1]) expect(readdirSync(join(jobs.logDir(), `log-${i}`), { recursive: true, encoding: "utf8" }).some((f) => f.endsWith("attempt_1"))).toBe(true)
      await jobs.finish(agents, explain)
    } finally {
      for (const r of roots) rmSync(r, { recursive: true, force: true })
    }
  }, 240_000)
})
