// The DependentOnError rules on two real workers: a root failure is reported once, and
// everything downstream of it (through args, kwargs, mutated inputs, chains, collectives)
// is poisoned without another report, while the mesh keeps running.
import { afterAll, beforeAll, describe, expect, test } from "bun:test"
import { NDSlice } from "../../src/protocol/ndslice.ts"
import { call, createStream, factory, fetch, mesh, numbers, reduce, ref, send } from "./build.ts"
import { startWorkers, type Harness } from "./harness.ts"

let h: Harness
let ident = 0
const next = () => ident++
let refs = 100
const fresh = () => refs++

beforeAll(async () => {
  h = await startWorkers({ world: 2 })
  h.send("all", createStream)
  h.send("all", mesh(2, ["x"], [2]))
}, 40_000)
afterAll(() => h?.close())

const failures = (rank: number) => h.seen(rank, "RemoteFunctionFailed")

/** Sends `fetch` of `r` on `rank`, then proves by Status that no FetchResult came for it. */
const expectPoisoned = async (rank: number, r: number) => {
  const f = next()
  h.send(rank, fetch(f, ref(r)))
  h.send(rank, { _tag: "RequestStatus", ident: f })
  await h.passed(rank, f)
  expect(h.seen(rank, "FetchResult").some((m) => m.ident === f)).toBe(false)
}

describe("DependentOnError", () => {
  test("a root failure is reported once, and poisons users through args, kwargs and chains of three", async () => {
    const before = failures(0).length
    const root = fresh(), viaArgs = fresh(), viaKwargs = fresh(), second = fresh(), third = fresh()
    const rootIdent = next()
    h.send(0, call(rootIdent, [root], "fns:alwaysFails"))
    h.send(0, call(next(), [viaArgs], "ops.neg", [ref(root)]))
    h.send(0, call(next(), [viaKwargs], "ops.sum", [ref(root)], { kwargs: { dim: ref(root) } }))
    h.send(0, call(next(), [second], "ops.add", [ref(viaArgs), 1]))
    h.send(0, call(next(), [third], "ops.mul", [ref(second), 2]))
    for (const r of [viaArgs, viaKwargs, second, third]) await expectPoisoned(0, r)
    const reported = failures(0).slice(before)
    expect(reported.map((m) => m.ident)).toEqual([rootIdent])
  })

  test("a failing call poisons what it mutates; a call with a poisoned input poisons its mutates too", async () => {
    const before = failures(0).length
    const t = fresh(), u = fresh(), bad = fresh()
    h.send(0, call(next(), [t], "ops.ones", [[2]]))
    h.send(0, call(next(), [u], "ops.ones", [[2]]))
    const failing = next()
    h.send(0, call(failing, [], "fns:alwaysFails", [ref(t)], { mutates: [t] }))
    await expectPoisoned(0, t)
    h.send(0, call(next(), [bad], "fns:alwaysFails"))
    h.send(0, call(next(), [], "ops.add_", [ref(u), ref(bad)], { mutates: [u] }))
    await expectPoisoned(0, u)
    expect(failures(0).slice(before).length).toBe(2)
  })

  test("a function failing on one rank, then a reduce that still completes on every rank", async () => {
    const before = [failures(0).length, failures(1).length]
    const t = fresh(), partly = fresh(), reduced = fresh()
    h.send("all", call(next(), [t], "ops.ones", [[3]]))
    const failing = next()
    h.send("all", call(failing, [partly], "fns:failOnRank", [1, ref(t)]))
    const r = next()
    h.send("all", reduce(r, reduced, partly, 2, ["x"], "sum", factory([3])))
    const f = next()
    h.send(0, fetch(f, ref(reduced)))
    // rank 0 holds 2s; rank 1 joined with zeros from the factory.
    const got = await h.next(0, "FetchResult", 5000, "rank 1, whose input is poisoned, did not join the reduce with zeros (rank 0 is still waiting in it)")
    expect(numbers(got.value)).toEqual([2, 2, 2])
    await expectPoisoned(1, reduced)
    await h.passed(0, r)
    expect(failures(0).length).toBe(before[0]!)
    const reportedBy1 = failures(1).slice(before[1]!)
    expect(reportedBy1.map((m) => m.ident)).toEqual([failing])
    expect(reportedBy1[0]!.error.message).toContain("deliberate failure on rank 1")
  })

  test("a rank that cannot read its input at all still joins the reduce and the send, so its peer neither waits out the comm timeout nor loses the communicator", async () => {
    // Rank 1 never defined `t`: its Reduce and SendTensor fail at the root there, while rank 0's
    // go through with rank 1's factory zeros (the harness's comm timeout is 10 s).
    const t = fresh(), reduced = fresh(), moved = fresh(), before = failures(1).length
    h.send(0, call(next(), [t], "ops.ones", [[2]]))
    const started = performance.now()
    const r = next(), s = next()
    h.send("all", reduce(r, reduced, t, 2, ["x"], "sum", factory([2])))
    h.send("all", send(s, moved, new NDSlice(1, [1], [1]), new NDSlice(0, [1], [1]), t, factory([2])))
    const f = next()
    h.send(0, fetch(f, [ref(reduced), ref(moved)]))
    const [sum, got] = (await h.next(0, "FetchResult")).value as unknown[]
    expect(performance.now() - started).toBeLessThan(5000)
    expect(numbers(sum)).toEqual([1, 1])
    expect(numbers(got)).toEqual([0, 0])
    await expectPoisoned(1, reduced)
    const reported = failures(1).slice(before)
    expect(reported.map((m) => [m.ident, m.error.type, m.error.message])).toEqual([[r, "UnknownRef", `unknown ref ${t}`], [s, "UnknownRef", `unknown ref ${t}`]])
    // The communicator still works for the next reduce.
    const u = fresh(), again = fresh()
    h.send("all", call(next(), [u], "ops.full", [[2], 3]))
    h.send("all", reduce(next(), again, u, 2, ["x"], "sum", factory([2])))
    const g = next()
    h.send(1, fetch(g, ref(again)))
    expect(numbers((await h.next(1, "FetchResult")).value)).toEqual([6, 6])
  }, 20_000)
})
