// User functions for the recording tests ("tests/recordings/fixtures:<export>").
import { heapStats } from "bun:jsc"
import { liveTensorBytes } from "../../ffi/tensor.ts"
import { op } from "../../src/worker/ops.ts"
import { defineFunction } from "../../src/worker/function.ts"

/** A copy of t, failing on `rank` when `fail` is true (a number: it may be a replay parameter). */
export const failIf = defineFunction((ctx, rank: number, fail: number, t: unknown) => {
  if (fail === 1 && ctx.rank === rank) throw new Error(`deliberate failure on rank ${rank}`)
  return op(ctx, "clone", [t])
})

/** t times (rank + 1): each rank's own value. */
export const byRank = defineFunction((ctx, t: unknown) => op(ctx, "mul", [t, ctx.rank + 1]))

/** This worker's live tensors' memory, in bytes (fetched with any tensor; not what the handle pool keeps for reuse). */
export const memoryInUse = defineFunction((ctx) => liveTensorBytes(ctx.native))

/** This worker's JS heap after a full collection, in bytes (what a recording's definition takes). */
export const heapInUse = defineFunction(() => {
  Bun.gc(true)
  const { heapSize, extraMemorySize } = heapStats()
  return heapSize + extraMemorySize
})
