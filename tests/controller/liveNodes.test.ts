// The graph's live commands (LiveNodes, an array from the first live ident) against a Map in
// ident order, the structure it replaced: random adds (increasing idents with jumps, now and then
// a lower one), settles, walks over ranges that settle what they visit, and compaction.
import { expect, test } from "bun:test"
import { LiveNodes, Node } from "../../src/controller/graph.ts"

const node = (ident: number) => new Node(ident, [0], undefined, `c${ident}`, undefined, 0)

test("LiveNodes gives what an ident-ordered Map gives, through random adds, deletes and walks that delete", () => {
  let x = 7
  const rand = (n: number) => ((x = (x * 1103515245 + 12345) % 2 ** 31), x % n)
  for (let round = 0; round < 12; round++) {
    const live = new LiveNodes(), model = new Map<number, Node>()
    const sorted = () => [...model.keys()].sort((a, b) => a - b)
    let next = rand(50)
    for (let step = 0; step < 2000; step++) {
      const what = rand(10)
      if (what < 5) {
        // Mostly the next ident; sometimes a jump (a recording call's range), rarely one below.
        const ident = rand(40) === 0 ? Math.max(0, next - 1 - rand(3000)) : (next += rand(8) === 0 ? 1 + rand(2000) : 1)
        const n = node(ident)
        live.set(ident, n)
        model.set(ident, n)
      } else if (what < 8 && model.size > 0) {
        const keys = sorted(), ident = rand(3) === 0 ? keys[0]! : keys[rand(keys.length)]!
        expect(live.delete(ident)).toBe(model.delete(ident))
      } else if (what === 8) {
        // A walk over [from, to) that settles every other node it visits (as advance does).
        const from = rand(next + 10), to = from + rand(3000)
        const seen: number[] = []
        live.each(from, to, (n) => {
          seen.push(n.ident)
          if (n.ident % 2 === 0) live.delete(n.ident)
        })
        const expected = sorted().filter((k) => k >= from && k < to)
        expect(seen).toEqual(expected)
        for (const k of expected) if (k % 2 === 0) model.delete(k)
      } else {
        const probe = rand(next + 10)
        expect(live.get(probe)).toBe(model.get(probe))
        expect(live.delete(probe + 0.5)).toBe(false)
      }
      expect(live.size).toBe(model.size)
    }
    expect([...live.keys()]).toEqual(sorted())
    expect([...live.values()].map((n) => n.ident)).toEqual(sorted())
    for (const k of sorted()) expect(live.has(k)).toBe(true)
  }
}, 30_000)
