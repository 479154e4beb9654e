/**
 * log_softmax and cross_entropy of f32 rows offset far from 0, on a real worker, against a
 * float64 log_softmax computed here from the same f32 values (max subtracted, Math.log of the
 * sum). Each row: a random length 2..2000, a random offset of magnitude 1e2..1e5 and either
 * sign, a random spread 1..20 around it, and one random target class.
 *
 * The bound, per element: |ours - ref| <= 4 * 2^-24 * max(1, |ref|) + 16 * 2^-24 * max(1, lse),
 * lse the row's log of the sum of exp(x - max) (at most log 2000 < 8). The first term is the
 * final subtraction's rounding and a few ulps besides; the second is the f32 sum of up to 2000
 * exponentials and its log. Neither grows with the offset: x - max is exact (x and max are
 * within a factor 2 of each other), so the only error left at the offset's magnitude is the
 * one the old `x - (max + log sum)` made, rounding max + log sum at ulp(offset) / 2 (2.4e-5 at
 * 1e3, torch's own formula being (x - max) - log sum).
 */
import { Effect, ManagedRuntime } from "effect"
import { Controller, opsOn, type Mesh, type RemoteTensor } from "../../src/controller/index.ts"
import { rng } from "../protocol/lookups.ts"
import { host } from "../worker/build.ts"
import type { Tally } from "./inplace.ts"

const EPS = 2 ** -24

/** One row's values (already f32) and its float64 log_softmax, with the log of its sum. */
const reference = (x: Float32Array): { readonly logp: number[]; readonly lse: number } => {
  let m = -Infinity
  for (const v of x) m = Math.max(m, v)
  let sum = 0
  for (const v of x) sum += Math.exp(v - m)
  const lse = Math.log(sum)
  return { logp: [...x].map((v) => v - m - lse), lse }
}

/** How far an element may be from its float64 value `ref` (see the header). */
const boundOf = (ref: number, lse: number): number => 4 * EPS * Math.max(1, Math.abs(ref)) + 16 * EPS * Math.max(1, lse)

/** The first element past the bound, described, or undefined when every one holds. */
const beyond = (ours: ReadonlyArray<number>, ref: ReadonlyArray<number>, lse: number, what: string): string | undefined => {
  for (let i = 0; i < ref.length; i++) {
    const bound = boundOf(ref[i]!, lse)
    const err = Math.abs(ours[i]! - ref[i]!)
    if (!(err <= bound)) return `${what}[${i}] = ${ours[i]}, f64 ${ref[i]} (off by ${err.toExponential(2)}, bound ${bound.toExponential(2)})`
  }
  return undefined
}

export interface OffsetRows extends Tally {
  /** The largest error seen over its element's bound, and the largest error itself. */
  worstRatio: number
  worstError: number
}

export const offsetRows = async (count: number, seed: number): Promise<OffsetRows> => {
  const rt = ManagedRuntime.make(Controller.local({ world: 1, onWorkerLine: () => {} }))
  try {
    const ctl = await rt.runPromise(Effect.service(Controller))
    const mesh: Mesh = await rt.runPromise(ctl.mesh({ dp: 1 }))
    const on = opsOn(mesh)
    const fetched = async (t: RemoteTensor): Promise<number[]> => [...(await rt.runPromise(t.fetch())).toArray()].map(Number)
    const t: OffsetRows = { tried: 0, held: 0, problems: [], refusals: 0, worstRatio: 0, worstError: 0 }
    for (let k = 0; k < count; k++) {
      const s = seed + k, next = rng(s)
      const r = 2 + Math.floor(next() * 1999)
      const offset = (next() < 0.5 ? -1 : 1) * 10 ** (2 + 3 * next()), spread = 1 + 19 * next()
      const x = Float32Array.from({ length: r }, () => offset + spread * (2 * next() - 1))
      const target = Math.floor(next() * r)
      const { logp, lse } = reference(x)
      const input = on.clone(host("f32", [1, r], [...x]) as never) as RemoteTensor
      const classes = on.clone(host("i64", [1], [target]) as never) as RemoteTensor
      const ls = on.log_softmax(input, 1) as RemoteTensor
      const ce = on.cross_entropy(input, classes, null, { reduction: "none" }) as RemoteTensor
      const ours = await fetched(ls), loss = await fetched(ce)
      for (const h of [input, classes, ls, ce]) h.release()
      t.tried++
      for (let i = 0; i < r; i++) {
        const err = Math.abs(ours[i]! - logp[i]!), bound = boundOf(logp[i]!, lse)
        t.worstRatio = Math.max(t.worstRatio, err / bound)
        t.worstError = Math.max(t.worstError, err)
      }
      const problem = beyond(ours, logp, lse, "log_softmax") ?? beyond(loss, [-logp[target]!], lse, `cross_entropy (target ${target})`)
      if (problem === undefined) t.held++
      else t.problems.push(`seed ${s}, ${r} values offset ${offset.toPrecision(4)}: ${problem}`)
    }
    return t
  } finally {
    await rt.dispose()
  }
}
