// User functions for the gpt tests ("tests/gpt/fixtures:<export>").
import type { Tensor } from "../../ffi/tensor.ts"
import { op } from "../../src/worker/ops.ts"
import { defineFunction } from "../../src/worker/function.ts"

/** Row `rank` of `whole` ([world, ...]): each rank's own values, chosen on the controller. */
export const rankRow = defineFunction((ctx, whole: Tensor) => {
  using row = op(ctx, "select", [whole, 0, ctx.rank])
  return op(ctx, "clone", [row])
})

/** A copy of `t`, except on rank `rank`, where it fails. */
export const failOnRank = defineFunction((ctx, t: Tensor, rank: number) => {
  if (ctx.rank === rank) throw new Error(`deliberate failure on rank ${rank}`)
  return op(ctx, "clone", [t])
})
