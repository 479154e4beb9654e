/**
 * The controller of the across-nodes recovery check, run on node 1 as a user runs theirs:
 *   bun tests/torchrun/recover_child.ts <listen host:port> <checkpoint root>
 * Controller.attach({ listen, recover }) over the 4 workers of a two-node torchrun job
 * (--max_restarts 1), training tests/checkpoint's model under supervise on { dp: 2, tp: 2 } and
 * killing rank 2 (on node 2) once mid-training (tests/checkpoint/recover.ts). Prints one JSON
 * line, the losses by step and the recoveries reported, and exits 0; or the failure on stderr
 * and exits 1. The token comes from MONARCH_TOKEN, as the workers' does.
 */
import { Controller } from "../../src/controller/index.ts"
import { supervised } from "../checkpoint/recover.ts"

const [listen = "", root = ""] = process.argv.slice(2)
const host = listen.slice(0, listen.lastIndexOf(":"))

supervised((recover) => Controller.attach({ world: 4, listen, host, checkpoints: root, recover, startTimeoutMs: 45_000, onProblem: (p) => console.error(`problem: ${p}`) }), { dp: 2, tp: 2 }, 2).then(
  (run) => {
    console.log(JSON.stringify({ losses: [...run.losses], reports: run.reports }))
    process.exit(0)
  },
  (e) => {
    console.error(`controller failed: ${e instanceof Error ? e.message : String(e)}`)
    process.exit(1)
  },
)
