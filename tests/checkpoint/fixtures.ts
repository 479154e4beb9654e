// User functions for the checkpoint tests ("tests/checkpoint/fixtures:<export>").
import { readFileSync } from "node:fs"
import { liveTensorCount } from "../../ffi/tensor.ts"
import { op } from "../../src/worker/ops.ts"
import { defineFunction } from "../../src/worker/function.ts"

/** A tensor of normal values that differ on every rank (seeded by `seed` and the rank). */
export const rankRandn = defineFunction((ctx, shape: number[], seed: number) => op(ctx, "randn", [shape], { seed: seed * 1000 + ctx.rank }))

/** This process's id, to kill it. */
export const pid = defineFunction(() => process.pid)

/** This process's peak and current resident memory in bytes (VmHWM, VmRSS of /proc/self/status). */
export const resident = defineFunction(() => {
  const status = readFileSync("/proc/self/status", "utf8")
  return ["VmHWM", "VmRSS"].map((k) => Number(new RegExp(`^${k}:\\s+(\\d+) kB`, "m").exec(status)![1]) * 1024)
})

/** This worker's live tensors (fetched with any value). */
export const liveTensors = defineFunction(() => liveTensorCount())
