// The dependency graph by itself (no processes): which ranks a fetch waits for, and when a
// command leaves it.
import { expect, test } from "bun:test"
import { ControllerError } from "../../src/controller/errors.ts"
import { Graph } from "../../src/controller/graph.ts"

const both = [0, 1]
/** A collective over ranks 0 and 1: each rank's result depends on both. */
const group = { peers: () => both, reads: () => true }

test("a fetch behind a long chain of rank-local commands still waits for the ranks of a collective at the chain's start", () => {
  const g = new Graph()
  g.add(0, both, [], [1], "ones")
  g.add(1, both, [1], [2], "reduce", undefined, group)
  for (let i = 2; i < 102; i++) g.add(i, both, [2], [2], "add_")
  const fetch = g.add(102, [0], [2], [], "fetch")
  expect(Object.fromEntries(g.needs(fetch, [0]))).toEqual({ 0: 102, 1: 1 })
  // Once rank 1 has passed the collective, only rank 0 is waited for.
  g.advance(1, 2)
  expect(Object.fromEntries(g.needs(fetch, [0]))).toEqual({ 0: 102 })
})

test("a fetch behind rank-local commands only waits for its own rank", () => {
  const g = new Graph()
  g.add(0, both, [], [1], "ones")
  for (let i = 1; i < 100; i++) g.add(i, both, [1], [1], "add_")
  const fetch = g.add(100, [1], [1], [], "fetch")
  expect(Object.fromEntries(g.needs(fetch, [1]))).toEqual({ 1: 100 })
})

test("a command leaves the graph once its ranks have passed it and what it depends on has settled; a failed one keeps its outcome", () => {
  const g = new Graph()
  g.add(0, both, [], [1], "ones")
  for (let i = 1; i < 50; i++) g.add(i, both, [1], [1], "add_") // a chain: each has a dependent
  for (let i = 50; i < 100; i++) g.add(i, both, [], [1000 + i], "ones") // independent ones
  const failed = g.add(100, both, [], [2], "ones")
  g.fail(failed, new ControllerError({ reason: "argument", message: "refused" }), 1)
  const after = g.add(101, both, [2], [3], "add")
  g.advance(0, 102)
  expect(g.live.size, "rank 1 has passed nothing yet").toBe(102)
  g.advance(1, 102)
  expect([...g.live.keys()], "commands every rank passed, still in the graph").toEqual([])
  expect(failed.settled && after.settled).toBe(true)
  expect(g.failureAt(after, [1])).toBeDefined()
  expect(g.failureAt(after, [0])).toBeUndefined()
})

test("a command waits for exactly the ranks that have not passed it (staged and repeated Status, a lost rank, one passed before it was added); a rank list naming a rank twice is refused", () => {
  const g = new Graph()
  g.advance(3, 5) // rank 3 passed ident 4 before it was added
  const a = g.add(4, [0, 1, 2, 3], [], [1], "ones")
  expect(g.behind(a)).toEqual([0, 1, 2])
  g.advance(0, 3) // not past it yet
  g.advance(0, 5)
  g.advance(0, 6) // past it already: counted once
  expect(g.behind(a)).toEqual([1, 2])
  g.lose(2, (node) => new ControllerError({ reason: "argument", message: `rank 2 lost at ${node.ident}` }))
  expect(g.behind(a)).toEqual([1])
  g.advance(2, 10) // a lost rank's late Status changes nothing
  expect(a.settled, "rank 1 has not passed it").toBe(false)
  g.advance(1, 5)
  expect(a.settled).toBe(true)
  expect(g.live.has(4)).toBe(false)
  expect(g.failureAt(a, [2])?.message).toBe("rank 2 lost at 4")
  expect(g.failureAt(a, [0])).toBeUndefined()
  expect(() => g.add(5, [0, 1, 1], [], [], "bad")).toThrow(/names a rank twice: \[0,1,1\]/)
})
