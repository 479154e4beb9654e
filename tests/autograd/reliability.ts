/**
 * The autograd area's rows of the reliability table: random programs with in-place writes at
 * random points before backward, and random pairs of overlapping views written in place, each
 * against torch 1.13's decision (inplace.ts), and log_softmax and cross_entropy of rows offset
 * far from 0 against a float64 reference (offset_rows.ts). inplace.test.ts runs the default mode.
 */
import type { Mode, ReliabilityRow } from "../reliability.ts"
import { inPlacePrograms, overlapPairs, type Tally } from "./inplace.ts"
import { offsetRows } from "./offset_rows.ts"

const COUNTS: Record<Mode, { programs: number; pairs: number; rows: number }> = { default: { programs: 300, pairs: 200, rows: 200 }, long: { programs: 5000, pairs: 5000, rows: 5000 } }
/** Seeds differ between the modes, so the long run tries programs the default one does not. */
const SEEDS: Record<Mode, number> = { default: 1, long: 100_000 }

const row = (check: string, outcome: string, t: Tally, ms: number): ReliabilityRow => ({
  area: "autograd", check, tries: t.tried, held: t.held,
  detail: `${outcome}; torch refused ${t.refusals} of ${t.tried}; ${(ms / Math.max(t.tried, 1)).toFixed(1)} ms a try${t.problems.length > 0 ? `; first problem: ${t.problems[0]}` : ""}`,
})

export const run = async (mode: Mode): Promise<ReliabilityRow[]> => {
  const { programs, pairs, rows } = COUNTS[mode], seed = SEEDS[mode]
  let start = performance.now()
  const p = await inPlacePrograms(programs, seed)
  const pMs = performance.now() - start
  start = performance.now()
  const o = await overlapPairs(pairs, seed)
  const oMs = performance.now() - start
  start = performance.now()
  const r = await offsetRows(rows, seed)
  const rMs = performance.now() - start
  return [
    row("random programs (8 steps of 59 op forms: elementwise, reductions, max's indices, where and masks, linear, layer_norm, indexing, cat, views) with in-place writes (noGrad, detach()) to leaves, intermediates, views, masks and indices at random points before backward, vs torch 1.13",
      "ours refused (reason modified-inplace) exactly where torch did, else gave torch's gradients", p, pMs),
    row("random pairs of views of one storage (disjoint, partly overlapping, the same elements in the same or another layout) written by add_, mul_, copy_, addcmul_, index_add_ or scatter_, vs torch 1.13",
      "ours refused at the call (reason overlap, nothing sent, the storage unchanged) exactly where torch did, else left the storage as torch's", o, oMs),
    {
      area: "autograd", check: "log_softmax and cross_entropy of rows offset far from 0, against an f64 reference (f32 rows of 2..2000 values offset by ±1e2..1e5)",
      tries: r.tried, held: r.held,
      detail: `every element within 4·2^-24·max(1, |ref|) + 16·2^-24·max(1, log sum); worst error ${r.worstError.toExponential(2)}, ${(r.worstRatio * 100).toFixed(0)}% of its bound; ${(rMs / Math.max(r.tried, 1)).toFixed(1)} ms a row${r.problems.length > 0 ? `; first problem: ${r.problems[0]}` : ""}`,
    },
  ]
}
