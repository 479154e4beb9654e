// User functions for the checkpoint tests ("tests/checkpoint/fixtures:<export>").
import { liveTensorCount } from "../../ffi/tensor.ts"
import { op } from "../../src/ops/kernels.ts"
import { defineFunction } from "../../src/ops/function.ts"

/** A tensor of normal values that differ on every rank (seeded by `seed` and the rank). */
export const rankRandn = defineFunction((ctx, shape: number[], seed: number) => op(ctx, "randn", [shape], { seed: seed * 1000 + ctx.rank }))

/** This process's id, to kill it. */
export const pid = defineFunction(() => process.pid)

/** Blocks rank `rank`'s command loop for `ms` (the commands behind it wait; the other ranks go on). */
export const stall = defineFunction((ctx, rank: number, ms: number) => {
  if (ctx.rank === rank) Bun.sleepSync(ms)
})

/** This worker's live tensors (fetched with any value). */
export const liveTensors = defineFunction(() => liveTensorCount())
