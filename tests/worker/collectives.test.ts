// Four real workers: Reduce in every form over the dims of a 2x2 and a 4x1 mesh, and
// SendTensor in a ring, to self, and between pairs; results against values computed here.
import { afterAll, beforeAll, describe, expect, test } from "bun:test"
import { NDSlice } from "../../src/protocol/ndslice.ts"
import type { Reduce } from "../../src/protocol/messages.ts"
import { call, createStream, factory, fetch, mesh, numbers, reduce, ref, send } from "./build.ts"
import { startWorkers, type Harness } from "./harness.ts"

const WORLD = 4
const MESH_2X2 = 2, MESH_4X1 = 3
let h: Harness
let ident = 0
const next = () => ident++
let refs = 100
const fresh = () => refs++

beforeAll(async () => {
  h = await startWorkers({ world: WORLD })
  h.send("all", createStream)
  h.send("all", mesh(MESH_2X2, ["dp", "tp"], [2, 2]))
  h.send("all", mesh(MESH_4X1, ["x", "y"], [4, 1]))
}, 60_000)
afterAll(() => h?.close())

const ranks = [0, 1, 2, 3]
/** Rank r's input: [2, 2] holding (r + 1) * [1, 2, 3, 4]. */
const inputOf = (r: number) => [1, 2, 3, 4].map((v) => v * (r + 1))

/** Defines a fresh ref holding inputOf(rank) on every rank. */
const defineInputs = (): number => {
  const t = fresh(), base = fresh(), i = next(), j = next()
  h.send("all", call(i, [base], "ops.arange", [1, 5], { kwargs: { dtype: "f32" } }))
  for (const r of ranks) h.send(r, call(j, [t], "ops.mul", [ref(base), r + 1]))
  h.send("all", call(next(), [t], "ops.reshape", [ref(t), [2, 2]]))
  return t
}

/** Every rank's value of `r`; a fetch that does not come within `timeoutMs` fails saying `because`. */
const fetchAll = async (r: number, timeoutMs?: number, because?: string): Promise<number[][]> => {
  const f = next()
  h.send("all", fetch(f, ref(r)))
  return Promise.all(ranks.map(async (rank) => numbers((await h.next(rank, "FetchResult", timeoutMs, because)).value)))
}

/** The group through each rank for dims of the 2x2 mesh (rank = 2 dp + tp). */
const groupOf = (rank: number, dims: string[]): number[] => {
  const dp = rank >> 1, tp = rank & 1
  if (dims.join() === "dp") return [tp, 2 + tp]
  if (dims.join() === "tp") return [2 * dp, 2 * dp + 1]
  return ranks
}

const combine = (op: string, xs: number[]): number =>
  op === "sum" ? xs.reduce((a, b) => a + b) : op === "prod" ? xs.reduce((a, b) => a * b)
    : op === "max" ? Math.max(...xs) : op === "min" ? Math.min(...xs) : xs.reduce((a, b) => a + b) / xs.length

const run = async (dims: string[], reduction: Reduce["reduction"], opts: { scatter?: boolean; inplace?: boolean } = {}, meshRef = MESH_2X2) => {
  const t = defineInputs(), out = fresh()
  h.send("all", reduce(next(), out, t, meshRef, dims, reduction, factory([2, 2]), opts))
  return { got: await fetchAll(out), input: await fetchAll(t) }
}

describe("Reduce over a 2x2 mesh", () => {
  for (const [dims, reduction] of [[["dp"], "sum"], [["tp"], "sum"], [["dp", "tp"], "sum"], [["tp"], "max"], [["dp"], "min"], [["tp"], "prod"], [["dp"], "avg"]] as const) {
    test(`all_reduce ${reduction} over ${dims.join("+")}`, async () => {
      const { got } = await run([...dims], reduction)
      for (const r of ranks) {
        const group = groupOf(r, [...dims])
        expect(got[r]!).toEqual([0, 1, 2, 3].map((i) => combine(reduction, group.map((g) => inputOf(g)[i]!))))
      }
    })
  }

  test("in place: the input itself holds the sum", async () => {
    const { got, input } = await run(["tp"], "sum", { inplace: true })
    for (const r of ranks) {
      const expected = [0, 1, 2, 3].map((i) => combine("sum", groupOf(r, ["tp"]).map((g) => inputOf(g)[i]!)))
      expect(got[r]!).toEqual(expected)
      expect(input[r]!).toEqual(expected)
    }
  })

  test("stack gathers [group size, ...shape] in group order", async () => {
    const { got } = await run(["dp"], "stack")
    for (const r of ranks) expect(got[r]!).toEqual(groupOf(r, ["dp"]).flatMap(inputOf))
  })

  test("reduce with scatter is a reduce_scatter of dim 0", async () => {
    const { got } = await run(["tp"], "sum", { scatter: true })
    for (const r of ranks) {
      const group = groupOf(r, ["tp"]), me = group.indexOf(r)
      expect(got[r]!).toEqual([0, 1].map((i) => combine("sum", group.map((g) => inputOf(g)[2 * me + i]!))))
    }
  })

  test("stack with scatter is an all_to_all", async () => {
    const { got } = await run(["tp"], "stack", { scatter: true })
    for (const r of ranks) {
      const group = groupOf(r, ["tp"]), me = group.indexOf(r)
      expect(got[r]!).toEqual(group.flatMap((g) => inputOf(g).slice(2 * me, 2 * me + 2)))
    }
  })

  test("a 4x1 mesh: all four along x, and each alone along y", async () => {
    const { got } = await run(["x"], "sum", {}, MESH_4X1)
    for (const r of ranks) expect(got[r]!).toEqual([0, 1, 2, 3].map((i) => combine("sum", ranks.map((g) => inputOf(g)[i]!))))
    const alone = await run(["y"], "sum", {}, MESH_4X1)
    for (const r of ranks) expect(alone.got[r]!).toEqual(inputOf(r))
  })

  test("an unknown dim fails the Reduce on every rank, and the mesh goes on", async () => {
    const t = defineInputs(), i = next()
    h.send("all", reduce(i, fresh(), t, MESH_2X2, ["nope"], "sum", factory([2, 2])))
    for (const r of ranks) expect((await h.next(r, "RemoteFunctionFailed")).error.message).toContain('no dim "nope"')
    const { got } = await run(["tp"], "sum")
    expect(got[0]!).toEqual([0, 1, 2, 3].map((i) => inputOf(0)[i]! + inputOf(1)[i]!))
  })
})

describe("SendTensor", () => {
  test("a ring, in two steps: 0->1->2->3, then 3->0", async () => {
    const t = defineInputs(), out = fresh()
    h.send("all", send(next(), out, new NDSlice(0, [3], [1]), new NDSlice(1, [3], [1]), t, factory([2, 2])))
    h.send("all", send(next(), out, new NDSlice(3, [1], [1]), new NDSlice(0, [1], [1]), t, factory([2, 2])))
    const got = await fetchAll(out)
    for (const r of ranks) expect(got[r]!).toEqual(inputOf((r + 3) % 4))
  })

  test("to oneself is a copy", async () => {
    const t = defineInputs(), out = fresh()
    h.send("all", send(next(), out, NDSlice.contiguous([4]), NDSlice.contiguous([4]), t, factory([2, 2])))
    const got = await fetchAll(out, 5000, "a send to oneself did not complete (a recv from itself waits out the comm timeout)")
    for (const r of ranks) expect(got[r]!).toEqual(inputOf(r))
    h.send("all", call(next(), [], "ops.fill_", [ref(t), 0], { mutates: [t] }))
    expect((await fetchAll(out))[2]!).toEqual(inputOf(2))
  })

  test("a rank whose input is poisoned sends zeros, and what it receives from a peer in the same step is still good", async () => {
    // 0 -> 1 -> 2 in one step, rank 1's input poisoned: rank 2 gets zeros, rank 1 rank 0's tensor.
    const t = defineInputs(), bad = fresh(), out = fresh()
    h.send(1, call(next(), [bad], "fns:alwaysFails"))
    h.send(1, call(next(), [t], "ops.add", [ref(t), ref(bad)], { mutates: [t] }))
    const s = next()
    h.send("all", send(s, out, new NDSlice(0, [2], [1]), new NDSlice(1, [2], [1]), t, factory([2, 2])))
    const f = next()
    h.send([1, 2], fetch(f, ref(out)))
    h.send([1, 2], { _tag: "RequestStatus", ident: f })
    await Promise.all([h.passed(1, f), h.passed(2, f)])
    // Each answer came before its Status, if at all.
    const got = (rank: number, because: string) => h.next(rank, "FetchResult", 1, because).then((m) => [m.ident, numbers(m.value)])
    expect(await got(1, "a rank whose send input was poisoned lost what it received from its peer")).toEqual([f, inputOf(0)])
    expect(await got(2, "a poisoned send input did not reach its peer")).toEqual([f, [0, 0, 0, 0]])
  })

  test("pairs: even ranks to odd ones, while every rank also sends in the next step", async () => {
    const t = defineInputs(), out = fresh()
    h.send("all", send(next(), out, new NDSlice(0, [2], [2]), new NDSlice(1, [2], [2]), t, factory([2, 2])))
    h.send("all", send(next(), out, new NDSlice(1, [2], [2]), new NDSlice(0, [2], [2]), t, factory([2, 2])))
    const got = await fetchAll(out)
    for (const r of ranks) expect(got[r]!).toEqual(inputOf(r ^ 1))
  })
})
