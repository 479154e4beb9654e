/**
 * A user function the workers run ("examples/gpt/shards:block"): each rank keeps its own block
 * of a whole tensor the controller sent to all of them (initial weights, a step's batch), so the
 * mesh starts from exactly the numbers the torch twin is handed.
 */
import { op } from "../../src/worker/ops.ts"
import { defineFunction } from "../../src/worker/function.ts"
import type { Tensor } from "../../ffi/tensor.ts"

/** This rank's block of `whole`: starting at `offsets[rank]`, of `shape` (a copy it owns). */
export const block = defineFunction((ctx, whole: Tensor, offsets: ReadonlyArray<ReadonlyArray<number>>, shape: ReadonlyArray<number>) => {
  const at = offsets[ctx.rank]
  if (at === undefined) throw new RangeError(`no block offsets for rank ${ctx.rank}`)
  // Narrow (a view where it can be) along each dim the block cuts, then copy: the block owns its memory.
  const views: Tensor[] = []
  const cut = shape.reduce<Tensor>((t, n, d) => (n === t.shape[d] ? t : (views.push(op(ctx, "narrow", [t, d, at[d]!, n])), views.at(-1)!)), whole)
  const out = op(ctx, "clone", [cut])
  for (const v of views) v[Symbol.dispose]()
  return out
})

/** Checks a batch's rows before use; in the demo one rank finds a token out of range. */
export const checkRows = defineFunction((ctx, x: Tensor, badRank: number) => {
  if (ctx.rank === badRank) throw new RangeError(`rank ${ctx.rank}'s rows (dp=${ctx.coords.dp}) hold a token outside the vocabulary`)
  return op(ctx, "clone", [x])
})
