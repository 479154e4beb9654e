// The DependentOnError rules on two real workers: a root failure is reported once, and
// everything downstream of it (through args, kwargs, mutated inputs, chains, collectives)
// is poisoned without another report, while the mesh keeps running.
import { afterAll, beforeAll, describe, expect, test } from "bun:test"
import { call, createStream, factory, fetch, mesh, numbers, reduce, ref } from "./build.ts"
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
    expect(numbers((await h.next(0, "FetchResult")).value)).toEqual([2, 2, 2])
    await expectPoisoned(1, reduced)
    await h.passed(0, r)
    expect(failures(0).length).toBe(before[0]!)
    const reportedBy1 = failures(1).slice(before[1]!)
    expect(reportedBy1.map((m) => m.ident)).toEqual([failing])
    expect(reportedBy1[0]!.error.message).toContain("deliberate failure on rank 1")
  })
})
