// User functions for the recording tests ("tests/recordings/fixtures:<export>").
import { op } from "../../src/ops/kernels.ts"
import { defineFunction } from "../../src/ops/function.ts"

/** A copy of t, failing on `rank` when `fail` is true (a number: it may be a replay parameter). */
export const failIf = defineFunction((ctx, rank: number, fail: number, t: unknown) => {
  if (fail === 1 && ctx.rank === rank) throw new Error(`deliberate failure on rank ${rank}`)
  return op(ctx, "clone", [t])
})

/** t times (rank + 1): each rank's own value. */
export const byRank = defineFunction((ctx, t: unknown) => op(ctx, "mul", [t, ctx.rank + 1]))

/** This worker's tensor memory in use, in bytes (fetched with any tensor). */
export const memoryInUse = defineFunction((ctx) => ctx.native.memoryUsage().inUse)
