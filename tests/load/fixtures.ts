// User functions for the load check ("tests/load/fixtures:<export>").
import { op } from "../../src/worker/ops.ts"
import { defineFunction } from "../../src/worker/function.ts"

/** Where each rank's counter starts: far enough apart that a value fetched from the wrong rank shows. */
export const COUNTER_STRIDE = 1e9

/**
 * How long a process waits after a forced collection before its RSS is read: the allocator
 * hands freed pages back a little later, and without the wait readings of the same heap
 * differed by up to 15 MiB; with it, by about 1 MiB (measured over 2M commands per worker).
 */
export const SETTLE_MS = 300

/** Each rank's counter: an f64 [1] tensor holding rank * COUNTER_STRIDE (exact in f64 up to 2^53). */
export const counter = defineFunction((ctx) => op(ctx, "full", [[1], ctx.rank * COUNTER_STRIDE], { dtype: "f64" }))

/** Collects garbage and lets the allocator settle, then names the process, so the controller can read its RSS from /proc. */
export const settledPid = defineFunction(async () => {
  Bun.gc(true)
  await Bun.sleep(SETTLE_MS)
  return process.pid
})
