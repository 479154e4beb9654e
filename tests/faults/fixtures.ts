// User functions for the fault tests ("tests/faults/fixtures:<export>").
import { op } from "../../src/worker/ops.ts"
import { defineFunction } from "../../src/worker/function.ts"

/** The worker's process id, so a test can kill that exact process. */
export const pid = defineFunction(() => process.pid)

/** Blocks one rank's whole process (no event loop, no socket reads) for `ms`, then copies `t`. */
export const blockOnRank = defineFunction((ctx, rank: number, ms: number, t: unknown) => {
  if (ctx.rank === rank) Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, ms)
  return op(ctx, "clone", [t])
})

/** Holds every rank's process for `ms` (a long command), defining nothing. */
export const hold = defineFunction((_ctx, ms: number) => {
  Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, ms)
})

/** The worker's tensor memory: bytes in use and the limit its shim enforces. */
export const memory = defineFunction((ctx) => [ctx.native.memoryUsage().inUse, ctx.native.memoryUsage().limit])
