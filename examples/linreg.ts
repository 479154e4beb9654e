/**
 * User functions for the demo: each rank's shard of a linear-regression problem. Workers
 * import this module by name ("examples/linreg:<export>") from MONARCH_FUNCTION_PATH.
 */
import { op } from "../src/worker/ops.ts"
import { defineFunction } from "../src/worker/function.ts"

/** The weight of global feature k that training should recover. */
export const trueWeight = (k: number) => 0.1 * (k + 1)

/**
 * This rank's shard: `n` samples (seeded by dp and tp) of the `h` features its tp coordinate
 * owns, and those features' part of the target, X @ w_true.
 */
export const makeShard = defineFunction((ctx, n: number, h: number) => {
  const { dp = 0, tp = 0 } = ctx.coords
  const x = op(ctx, "randn", [[n, h]], { seed: 1000 * dp + tp })
  using k = op(ctx, "arange", [tp * h + 1, (tp + 1) * h + 1])
  using scaled = op(ctx, "mul", [k, 0.1])
  using wTrue = op(ctx, "reshape", [scaled, [h, 1]])
  return [x, op(ctx, "matmul", [x, wTrue])]
})

/** Checks a shard before use; in the demo one rank finds a corrupt row. */
export const checkShard = defineFunction((ctx, x: unknown, badRank: number) => {
  if (ctx.rank === badRank) throw new RangeError(`shard (dp=${ctx.coords.dp}, tp=${ctx.coords.tp}) has a corrupt row`)
  return op(ctx, "clone", [x])
})
