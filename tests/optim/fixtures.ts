// User functions for tests/optim ("tests/optim/fixtures:<export>").
import { op } from "../../src/worker/ops.ts"
import { defineFunction } from "../../src/worker/function.ts"
import type { Tensor } from "../../src/worker/ops.ts"

/**
 * This rank's block of `full`: along each tensor dim named in `shards` (tensor dim -> mesh
 * dim), the piece at this rank's coordinate of that mesh dim (equal pieces, in order).
 */
export const block = defineFunction((ctx, full: Tensor, shards: Readonly<Record<string, string>>, sizes: Readonly<Record<string, number>>) => {
  let t = op(ctx, "clone", [full])
  for (const [dim, meshDim] of Object.entries(shards)) {
    const d = Number(dim), piece = t.shape[d]! / sizes[meshDim]!
    const next = op(ctx, "narrow", [t, d, ctx.coords[meshDim]! * piece, piece])
    t.free()
    t = next
  }
  return t
})
