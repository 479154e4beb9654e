/**
 * What the controller on host 1 does to a 2 x 2 mesh spread over two hosts, and what each
 * result must be. Ranks are 2 * host + local, so the `host` dim crosses the veth and `local`
 * stays inside a host. The inputs are formulas of the rank (fixtures.ts builds them on the
 * workers); every expected result is computed here from those formulas, never from a worker.
 */
import type { DType } from "../../src/protocol/values.ts"

export const WORLD = 4
/** Length of the vectors reduced and gathered (16 KiB in f32: well above any framing chatter). */
export const N = 4096
/** Row length of the [k, M] inputs scattered by reduce_scatter and all_to_all. */
export const M = 257

/** Element i of rank r's vector: small integers (negatives included), exact in every dtype used. */
export const vectorValue = (rank: number, i: number): number => rank * 10 + (i % 13) - 6
/** Element [j, k] of rank r's [rows, M] input. */
export const rowValue = (rank: number, j: number, k: number): number => rank * 100 + j * 10 + (k % 7)

const hostOf = (r: number) => Math.floor(r / 2), localOf = (r: number) => r % 2
const ranks = Array.from({ length: WORLD }, (_, r) => r)
/** The members of rank r's group along `host` (across the hosts), in group order. */
const acrossHosts = (r: number) => [localOf(r), 2 + localOf(r)]
/** The members of rank r's group along `local` (inside its host). */
const withinHost = (r: number) => [2 * hostOf(r), 2 * hostOf(r) + 1]

const vector = (r: number) => Array.from({ length: N }, (_, i) => vectorValue(r, i))
const row = (r: number, j: number) => Array.from({ length: M }, (_, k) => rowValue(r, j, k))
const elementwise = (members: number[], f: (xs: number[]) => number) =>
  Array.from({ length: N }, (_, i) => f(members.map((m) => vectorValue(m, i))))
const sum = (xs: number[]) => xs.reduce((a, b) => a + b, 0)

/** One collective or send: how the controller issues it, and rank by rank what it must give. */
export interface Step {
  readonly name: string
  readonly dtype: DType
  /** The ranks whose result is fetched, in order. */
  readonly ranks: ReadonlyArray<number>
  readonly shape: ReadonlyArray<number>
  readonly expected: (rank: number) => number[]
}

export const STEPS: ReadonlyArray<Step> = [
  { name: "all_reduce sum over the world", dtype: "f32", ranks, shape: [N], expected: () => elementwise(ranks, sum) },
  { name: "all_reduce max across hosts", dtype: "i64", ranks, shape: [N], expected: (r) => elementwise(acrossHosts(r), (xs) => Math.max(...xs)) },
  { name: "all_reduce avg across hosts", dtype: "f64", ranks, shape: [N], expected: (r) => elementwise(acrossHosts(r), (xs) => sum(xs) / xs.length) },
  { name: "all_reduce sum in place within a host", dtype: "f32", ranks, shape: [N], expected: (r) => elementwise(withinHost(r), sum) },
  { name: "all_gather over the world", dtype: "f32", ranks, shape: [WORLD, N], expected: () => ranks.flatMap(vector) },
  { name: "all_gather across hosts", dtype: "i32", ranks, shape: [2, N], expected: (r) => acrossHosts(r).flatMap(vector) },
  {
    name: "reduce_scatter sum over the world", dtype: "f32", ranks, shape: [M],
    expected: (r) => Array.from({ length: M }, (_, k) => sum(ranks.map((s) => rowValue(s, r, k)))),
  },
  {
    name: "reduce_scatter sum across hosts", dtype: "f64", ranks, shape: [M],
    expected: (r) => Array.from({ length: M }, (_, k) => sum(acrossHosts(r).map((s) => rowValue(s, hostOf(r), k)))),
  },
  { name: "all_to_all over the world", dtype: "f32", ranks, shape: [WORLD, M], expected: (r) => ranks.flatMap((s) => row(s, r)) },
  { name: "all_to_all across hosts", dtype: "i64", ranks, shape: [2, M], expected: (r) => acrossHosts(r).flatMap((s) => row(s, hostOf(r))) },
  // A send goes from the rank at index i of one host's slice to index i of the other's.
  { name: "send host 1 -> host 2", dtype: "f32", ranks: [2, 3], shape: [N], expected: (r) => vector(r - 2) },
  { name: "send host 2 -> host 1", dtype: "i64", ranks: [0, 1], shape: [N], expected: (r) => vector(r + 2) },
]

/** What the controller program prints: each step's fetched values by rank, and where ranks ran. */
export interface ControllerReport {
  /** Each rank's non-loopback IPv4 addresses, as the worker itself sees them. */
  readonly placement: ReadonlyArray<ReadonlyArray<string>>
  readonly results: Readonly<Record<string, ReadonlyArray<{ readonly rank: number; readonly dtype: string; readonly shape: ReadonlyArray<number>; readonly values: ReadonlyArray<number> }>>>
  /** From every worker connected to every step fetched. */
  readonly runMs: number
}

/** What differs between one fetched result and its expectation; undefined when it matches. */
export const mismatch = (step: Step, got: ControllerReport["results"][string] | undefined): string | undefined => {
  if (got === undefined) return "no result"
  if (got.map((g) => g.rank).join() !== step.ranks.join()) return `results from ranks [${got.map((g) => g.rank)}], expected [${step.ranks}]`
  for (const g of got) {
    if (g.dtype !== step.dtype || g.shape.join() !== step.shape.join()) return `rank ${g.rank}: ${g.dtype}[${g.shape}], expected ${step.dtype}[${step.shape}]`
    const want = step.expected(g.rank)
    const i = want.findIndex((v, k) => g.values[k] !== v)
    if (g.values.length !== want.length) return `rank ${g.rank}: ${g.values.length} values, expected ${want.length}`
    if (i >= 0) return `rank ${g.rank}: element ${i} is ${g.values[i]}, expected ${want[i]}`
  }
  return undefined
}
