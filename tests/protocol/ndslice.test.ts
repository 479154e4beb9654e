// NDSlice (src/protocol/ndslice.ts) on hand-computed cases: offsets, gaps between strides,
// strides that are not nested, 0-dim slices, and the constructor's checks.
import { describe, expect, test } from "bun:test"
import { NDSlice } from "../../src/protocol/ndslice.ts"
import { checkLookups, counted, READS_PER_LOOKUP, type ReadCounter } from "./lookups.ts"

describe("contiguous", () => {
  // sizes [2, 3] from 4: strides [3, 1]; ranks 4 5 6 / 7 8 9.
  const s = NDSlice.contiguous([2, 3], 4)

  test("strides, length, ranks", () => {
    expect(s.strides).toEqual([3, 1])
    expect(s.length).toBe(6)
    expect(s.ndim).toBe(2)
    expect([...s]).toEqual([4, 5, 6, 7, 8, 9])
  })

  test("coordinates, indexOf, contains", () => {
    expect(s.coordinates(8)).toEqual([1, 1])
    expect(s.coordinates(4)).toEqual([0, 0])
    expect(s.indexOf(8)).toBe(4)
    expect(s.indexOf(3)).toBe(-1)
    expect(s.indexOf(10)).toBe(-1)
    expect(s.contains(9)).toBe(true)
    expect(s.contains(4.5)).toBe(false)
  })

  test("members along each dim", () => {
    expect(s.members(0, 8)).toEqual([5, 8])
    expect(s.members(1, 8)).toEqual([7, 8, 9])
    expect(() => s.members(2, 8)).toThrow(RangeError)
    expect(() => s.members(0, 10)).toThrow(RangeError)
  })
})

describe("offset with gaps: offset 1, sizes [2, 3], strides [10, 2]", () => {
  // Row 0: 1 3 5; row 1: 11 13 15.
  const s = new NDSlice(1, [2, 3], [10, 2])

  test("ranks in row-major order", () => {
    expect([...s]).toEqual([1, 3, 5, 11, 13, 15])
    expect(s.rankAt(3)).toBe(11)
    expect(() => s.rankAt(6)).toThrow(RangeError)
    expect(() => s.rankAt(-1)).toThrow(RangeError)
  })

  test("ranks in the gaps are not members", () => {
    for (const r of [0, 2, 4, 6, 10, 12, 14, 16, 21]) expect(s.contains(r)).toBe(false)
    expect(s.coordinates(13)).toEqual([1, 1])
    expect(s.indexOf(15)).toBe(5)
  })

  test("members", () => {
    expect(s.members(0, 13)).toEqual([3, 13])
    expect(s.members(1, 13)).toEqual([11, 13, 15])
    expect(s.members(1, 1)).toEqual([1, 3, 5])
  })
})

describe("strides that do not nest: sizes [3, 2], strides [2, 3]", () => {
  // (i, j) -> 2i + 3j: row-major (0,0)=0 (0,1)=3 (1,0)=2 (1,1)=5 (2,0)=4 (2,1)=7.
  const s = new NDSlice(0, [3, 2], [2, 3])

  test("every rank is found, including those a greedy split by the largest stride misses", () => {
    expect([...s]).toEqual([0, 3, 2, 5, 4, 7])
    expect(s.coordinates(4)).toEqual([2, 0]) // greedy: 4 = 3 + 1, then stuck
    expect(s.indexOf(4)).toBe(4)
    expect(s.coordinates(7)).toEqual([2, 1])
    for (const r of [1, 6, 8, 9]) expect(s.contains(r)).toBe(false)
  })

  test("members", () => {
    expect(s.members(0, 5)).toEqual([3, 5, 7])
    expect(s.members(1, 4)).toEqual([4, 7])
  })
})

describe("edge shapes", () => {
  test("0-dim: the single rank `offset`", () => {
    const s = new NDSlice(7, [], [])
    expect(s.length).toBe(1)
    expect([...s]).toEqual([7])
    expect(s.coordinates(7)).toEqual([])
    expect(s.contains(8)).toBe(false)
  })

  test("size-1 dims ignore their stride", () => {
    const s = new NDSlice(5, [1, 4], [100, 1])
    expect([...s]).toEqual([5, 6, 7, 8])
    expect(s.coordinates(6)).toEqual([0, 1])
    expect(s.contains(105)).toBe(false)
  })

  test("a 0-size dim: no ranks", () => {
    const s = new NDSlice(0, [2, 0], [1, 1])
    expect(s.length).toBe(0)
    expect([...s]).toEqual([])
    expect(s.contains(0)).toBe(false)
  })

  test("3 dims with an offset: indexOf inverts rankAt everywhere", () => {
    const s = new NDSlice(3, [2, 2, 3], [24, 6, 1])
    expect([...s]).toEqual([3, 4, 5, 9, 10, 11, 27, 28, 29, 33, 34, 35])
    for (let i = 0; i < s.length; i++) expect(s.indexOf(s.rankAt(i))).toBe(i)
  })
})

describe("constructor checks", () => {
  test("sizes and strides must match, and be non-negative safe integers", () => {
    expect(() => new NDSlice(0, [2], [])).toThrow("NDSlice: 1 sizes but 0 strides")
    expect(() => new NDSlice(-1, [2], [1])).toThrow("NDSlice: offset -1 is not a non-negative safe integer")
    expect(() => new NDSlice(0, [1.5], [1])).toThrow("NDSlice: size 1.5 of dim 0 is not a non-negative safe integer")
    expect(() => new NDSlice(0, [2, 2], [1, -2])).toThrow("NDSlice: stride -2 of dim 1 is not a non-negative safe integer")
    expect(() => new NDSlice(0, [2 ** 30, 2 ** 30], [2 ** 30, 1])).toThrow(/largest rank .* is not a safe integer/)
    expect(NDSlice.problem(0, [2], [1])).toBeUndefined()
  })
})

describe("lookups on many layouts, against brute force", () => {
  test("300 random slices of 1 to 8 dims (nesting or not, repeated strides, stride 0, size 1): every rank up to past the last", () => {
    const r = checkLookups({ slices: 300, seed: 7 })
    expect(r.failures).toEqual([])
    expect(r.held).toBe(r.lookups)
    expect(r.lookups).toBeGreaterThan(3000)
  })

  test("a non-nesting slice too large to index (600 x 600, strides 3 and 5)", () => {
    const s = new NDSlice(2, [600, 600], [3, 5])
    const direct = new Map<number, number[]>()
    // Largest stride first, counting down: the first coordinates met for a rank are the ones expected.
    for (let j = 599; j >= 0; j--) for (let i = 599; i >= 0; i--) if (!direct.has(2 + 3 * i + 5 * j)) direct.set(2 + 3 * i + 5 * j, [i, j])
    for (let r = 0; r <= 2 + 599 * 8 + 2; r++) {
      const got = s.coordinates(r), want = direct.get(r)
      if (got?.[0] !== want?.[0] || got?.[1] !== want?.[1]) expect({ rank: r, got }).toEqual({ rank: r, got: want })
    }
  })
})

describe("lookups take a bounded number of steps (reads of sizes and strides)", () => {
  test(`8 dims of stride 2 (sizes 16, coordinates do not nest): every rank 0..250 within ${READS_PER_LOOKUP} reads each (backtracking: millions)`, () => {
    const counter: ReadCounter = { reads: 0, budget: Infinity }
    const s = new NDSlice(0, counted(Array(8).fill(16), counter), counted(Array(8).fill(2), counter))
    counter.reads = 0
    counter.budget = 251 * READS_PER_LOOKUP
    const found = Array.from({ length: 251 }, (_, r) => s.coordinates(r))
    // Even ranks up to 2 * 8 * 15 are in, filled greedily from dim 0; odd ranks are not.
    expect(found.filter((c) => c !== undefined).length).toBe(121)
    expect(found[95]).toBeUndefined()
    expect(found[80]).toEqual([15, 15, 10, 0, 0, 0, 0, 0])
    expect(found[240]).toEqual(Array(8).fill(15))
  })

  test("8 dims of size 2, stride 2 (indexed): 1000 lookups within 50 reads each", () => {
    const counter: ReadCounter = { reads: 0, budget: Infinity }
    const s = new NDSlice(1, counted(Array(8).fill(2), counter), counted(Array(8).fill(2), counter))
    counter.reads = 0
    counter.budget = 1000 * 50
    for (let i = 0; i < 1000; i++) expect(s.contains(i % 20)).toBe(i % 20 % 2 === 1 && i % 20 <= 17)
    expect(s.coordinates(7)).toEqual([1, 1, 1, 0, 0, 0, 0, 0])
  })

  test("a nested slice of 10^15 ranks: O(ndim) per lookup, 200 reads for 5 dims", () => {
    const counter: ReadCounter = { reads: 0, budget: Infinity }
    const sizes = Array(5).fill(1000)
    const s = new NDSlice(3, counted(sizes, counter), counted([...NDSlice.contiguous(sizes).strides], counter))
    counter.reads = 0
    counter.budget = 100 * 200
    for (let i = 0; i < 100; i++) {
      const rank = 3 + i * 7_919_000_011
      expect(s.rankAt(s.indexOf(rank))).toBe(rank)
    }
  })
})

describe("geometry: rankOf, fix, flatten", () => {
  // sizes [2, 3] from 4: ranks 4 5 6 / 7 8 9.
  const s = NDSlice.contiguous([2, 3], 4)

  test("rankOf: the rank at coordinates, refusing one outside its dim", () => {
    expect([s.rankOf([0, 0]), s.rankOf([1, 2]), s.rankOf([0, 2])]).toEqual([4, 9, 6])
    expect(() => s.rankOf([2, 0])).toThrow("NDSlice: coordinate 2 of dim 0 is outside 0..1")
    expect(() => s.rankOf([0, 1.5])).toThrow("coordinate 1.5 of dim 1")
    expect(() => s.rankOf([0])).toThrow("1 coordinates for 2 dims")
  })

  test("fix: a dim fixed goes away, the others keep their strides", () => {
    const row = s.fix([1, undefined]), column = s.fix([undefined, 2])
    expect([...row]).toEqual([7, 8, 9])
    expect([row.offset, row.sizes, row.strides]).toEqual([7, [3], [1]])
    expect([...column]).toEqual([6, 9])
    expect([column.sizes, column.strides]).toEqual([[2], [3]])
    expect([...s.fix([1, 0])]).toEqual([7])
    expect(() => s.fix([undefined, 3])).toThrow("coordinate 3 of dim 1 is outside 0..2")
  })

  test("flatten: nested dims become one, in the same order; others refuse", () => {
    const flat = s.flatten()
    expect([flat.offset, flat.sizes, flat.strides]).toEqual([4, [6], [1]])
    expect([...flat]).toEqual([...s])
    expect([...s.fix([undefined, 1]).flatten()]).toEqual([5, 8])
    expect(() => new NDSlice(0, [2, 2], [1, 2]).flatten()).toThrow("dims 0 and 1 do not nest")
    expect([...new NDSlice(3, [], []).flatten()]).toEqual([3])
  })
})
