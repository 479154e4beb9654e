// User functions for the checkpoint tests ("tests/checkpoint/fixtures:<export>").
import { op } from "../../src/ops/kernels.ts"
import { defineFunction } from "../../src/ops/function.ts"

/** A tensor of normal values that differ on every rank (seeded by `seed` and the rank). */
export const rankRandn = defineFunction((ctx, shape: number[], seed: number) => op(ctx, "randn", [shape], { seed: seed * 1000 + ctx.rank }))

/** This process's id, to kill it. */
export const pid = defineFunction(() => process.pid)
