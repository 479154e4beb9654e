/**
 * NDSlice lookups checked against brute force: random slices (nesting strides or not,
 * repeated strides, stride 0, size 1, up to 8 dims), every rank from 0 to past the last,
 * with the reads of sizes and strides counted as steps. Used by ndslice.test.ts and by the
 * fuzz area's RELIABILITY.md row.
 */
import { NDSlice } from "../../src/protocol/ndslice.ts"

/** mulberry32: a small seeded generator, so a failure can be replayed. */
export const rng = (seed: number) => () => {
  seed = (seed + 0x6d2b79f5) | 0
  let t = Math.imul(seed ^ (seed >>> 15), 1 | seed)
  t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t
  return ((t ^ (t >>> 14)) >>> 0) / 4294967296
}

/** Counts reads; past `budget` a read throws, so an exponential lookup fails at once. */
export interface ReadCounter { reads: number; budget: number }

export const counted = (values: number[], counter: ReadCounter): number[] =>
  new Proxy(values, {
    get(target, key, receiver) {
      if (++counter.reads > counter.budget) throw new Error(`NDSlice lookup read its sizes and strides more than ${counter.budget} times`)
      return Reflect.get(target, key, receiver)
    },
  })

/**
 * The rule `coordinates` documents, by brute force over every coordinate: of those that land
 * on a rank, the one whose dims, taken largest stride first (size-1 and stride-0 dims stay
 * 0), count highest. Returns rank -> coordinates.
 */
export const expectedCoordinates = (s: NDSlice): Map<number, number[]> => {
  const order = [...s.sizes.keys()].filter((d) => s.sizes[d]! > 1 && s.strides[d]! > 0).sort((a, b) => s.strides[b]! - s.strides[a]!)
  const ahead = (a: number[], b: number[]) => { for (const d of order) if (a[d] !== b[d]) return a[d]! > b[d]!; return false }
  const best = new Map<number, number[]>()
  for (let i = 0; i < s.length; i++) {
    const coords = new Array<number>(s.ndim)
    let rest = i
    for (let d = s.ndim - 1; d >= 0; d--) { coords[d] = rest % s.sizes[d]!; rest = Math.floor(rest / s.sizes[d]!) }
    if (s.sizes.some((_, d) => !order.includes(d) && coords[d] !== 0)) continue
    const rank = s.rankAt(i), held = best.get(rank)
    if (held === undefined || ahead(coords, held)) best.set(rank, coords)
  }
  return best
}

/** Reads allowed per lookup, index building included: polynomial, where backtracking took millions. */
export const READS_PER_LOOKUP = 20_000

export interface LookupCheck {
  /** Random slices, and the stride-2 case. */
  readonly slices: number
  readonly lookups: number
  /** Lookups that gave the expected coordinates within the read budget. */
  readonly held: number
  readonly maxReads: number
  readonly failures: ReadonlyArray<string>
}

/** A random slice: half with nesting strides (maybe with gaps), half with small random ones. */
const randomSlice = (next: () => number): NDSlice => {
  const ndim = 1 + Math.floor(next() * 8)
  const sizes = Array.from({ length: ndim }, () => 1 + Math.floor(next() * (ndim > 5 ? 3 : 4)))
  const strides = next() < 0.5
    ? NDSlice.contiguous(sizes).strides.map((x) => x * (1 + Math.floor(next() * 2)))
    : Array.from({ length: ndim }, () => Math.floor(next() * 5))
  return new NDSlice(Math.floor(next() * 3), sizes, strides)
}

/**
 * The large case, 8 dims of stride 2 and size 16 (4 * 10^9 coordinates, so no brute force):
 * the even ranks up to 240, each filled greedily from dim 0.
 */
const strideTwo = (): [NDSlice, Map<number, number[]>] => {
  const expected = new Map<number, number[]>()
  for (let k = 0; k <= 120; k++) expected.set(2 * k, Array.from({ length: 8 }, (_, d) => Math.max(0, Math.min(15, k - 15 * d))))
  return [new NDSlice(0, Array(8).fill(16), Array(8).fill(2)), expected]
}

/**
 * `slices` random slices and the stride-2 case, every rank from 0 to two past the last, each
 * against brute force.
 */
export const checkLookups = (o: { readonly slices: number; readonly seed: number }): LookupCheck => {
  const next = rng(o.seed)
  let lookups = 0, held = 0, maxReads = 0
  const failures: string[] = []
  for (let n = 0; n <= o.slices; n++) {
    const [plain, expected] = n === o.slices ? strideTwo() : ((s) => [s, expectedCoordinates(s)] as const)(randomSlice(next))
    const counter: ReadCounter = { reads: 0, budget: Infinity }
    const s = new NDSlice(plain.offset, counted([...plain.sizes], counter), counted([...plain.strides], counter))
    const last = plain.sizes.reduce((r, size, d) => r + Math.max(0, size - 1) * plain.strides[d]!, plain.offset)
    for (let r = 0; r <= last + 2; r++) {
      lookups++
      counter.reads = 0
      counter.budget = READS_PER_LOOKUP
      let got: number[] | undefined | Error
      try { got = s.coordinates(r) } catch (e) { got = e as Error }
      maxReads = Math.max(maxReads, counter.reads)
      const want = expected.get(r)
      if (!(got instanceof Error) && JSON.stringify(got) === JSON.stringify(want)) held++
      else if (failures.length < 5) failures.push(`${plain}: rank ${r} gave ${got instanceof Error ? got.message : JSON.stringify(got)}, expected ${JSON.stringify(want)}`)
    }
  }
  return { slices: o.slices, lookups, held, maxReads, failures }
}
