// User functions for the controller tests ("tests/controller/fixtures:<export>").
import { liveTensorBytes, liveTensorCount, type Tensor } from "../../ffi/tensor.ts"
import { op } from "../../src/worker/ops.ts"
import { defineFunction } from "../../src/worker/function.ts"

/** Each rank's own value: a [2, 2] tensor of (rank + 1). */
export const rankValue = defineFunction((ctx) => op(ctx, "full", [[2, 2], ctx.rank + 1]))

export const failOnRank = defineFunction((ctx, rank: number, t: unknown) => {
  if (ctx.rank === rank) throw new Error(`deliberate failure on rank ${rank}`)
  return op(ctx, "clone", [t])
})

/** Sleeps on one rank (holding its command loop) and returns a copy. */
export const slowOnRank = defineFunction(async (ctx, rank: number, ms: number, t: unknown) => {
  if (ctx.rank === rank) await Bun.sleep(ms)
  return op(ctx, "clone", [t])
})

/** Blocks one rank's whole process (no event loop) for `ms`. */
export const blockOnRank = defineFunction((ctx, rank: number, ms: number, t: unknown) => {
  if (ctx.rank === rank) Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, ms)
  return op(ctx, "clone", [t])
})

export const pid = defineFunction(() => process.pid)

/** This worker's live tensor handles, their bytes (not the reuse pool's) and its RSS. */
export const workerMemory = defineFunction((ctx) => [liveTensorCount(), liveTensorBytes(ctx.native), process.memoryUsage().rss])

/** A copy of t as f64: a function that lies when declared as returning t's dtype. */
export const asF64 = defineFunction((ctx, t: unknown) => op(ctx, "to", [t], { dtype: "f64" }))

/** A tensor's layout as the worker's shim holds it: [strides, storage offset, contiguous (1 or 0)]. */
export const layoutOf = defineFunction((_, t: unknown) => {
  const l = (t as Tensor).layout()
  return [[...l.strides], l.storageOffset, l.contiguous ? 1 : 0]
})

/** Results that share memory: t's transpose (a view of t), t itself, and one new tensor twice. */
export const transposed = defineFunction((ctx, t: unknown) => op(ctx, "t", [t]))
export const itself = defineFunction((_, t: unknown) => t)
export const twice = defineFunction((ctx, t: unknown) => {
  const y = op(ctx, "mul", [t, 2])
  return [y, y]
})
