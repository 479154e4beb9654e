// Which error a program sees when a worker dies in a collective, and when: its peers'
// CommErrors race the loss to the controller, and whichever comes first, the error names the
// rank that died; a fetch the loss poisons fails at once, not when the survivors pass it.
// Driven here message by message against the real Core (no processes), since between real
// processes one order is much more common than the other (kill.ts runs those).
import { describe, expect, test } from "bun:test"
import { Effect, Result } from "effect"
import { Core } from "../../src/controller/core.ts"
import { RemoteError, WorkerLost } from "../../src/controller/errors.ts"
import type { WorkerLink } from "../../src/controller/listener.ts"
import { ErrorPayload, Ref } from "../../src/protocol/values.ts"

const link = (rank: number): WorkerLink => ({
  hello: { _tag: "WorkerHello", rank, world: 2, pid: 1000 + rank, proof: new Uint8Array(32), device: "cpu" },
  host: "127.0.0.1",
  send: () => true,
  sendEncoded: () => true,
  sendRawForTestsOnly: () => {},
  close: () => {},
})

/** A two-rank core, a reduce over both ranks, and a pending fetch of its result on rank 0. */
const setUp = () => {
  const problems: string[] = []
  const core = new Core({ world: 2, captureSites: false, onProblem: (p) => problems.push(p) })
  core.admit(link(0))
  core.admit(link(1))
  const result = new Ref(7)
  const reduce = core.command([0, 1], "reduce sum over x", [], [result.id], undefined, (ident) => ({ _tag: "RequestStatus", ident }), { peers: () => [0, 1], reads: () => true })
  const fetched = Effect.runPromise(Effect.flip(core.fetch([0], [result.id], "fetch", undefined, (ident) => ({ _tag: "RequestStatus", ident }))))
  const report = (type: string, message: string, reason?: string) =>
    core.onMessage(0, { _tag: "RemoteFunctionFailed", ident: reduce.ident, error: new ErrorPayload(type, message, [], reason) })
  // Rank 0 has passed the reduce and the fetch (it reports its status after the failure).
  const passed = () => core.onMessage(0, { _tag: "Status", firstUncompletedIdent: reduce.ident + 2 })
  return { core, reduce, fetched, report, passed, problems }
}

describe("a peer's CommError and the loss of rank 1", () => {
  test("the CommError first, then the loss: WorkerLost naming rank 1", async () => {
    const { core, fetched, report, passed } = setUp()
    report("CommError", "shim_all_reduce: Connection closed by peer", "peer-lost")
    passed()
    core.onExit({ rank: 1, status: 137, signal: "SIGKILL" })
    const error = await fetched
    expect(error).toBeInstanceOf(WorkerLost)
    expect(error).toMatchObject({ rank: 1, status: 137, signal: "SIGKILL" })
  })

  test("the loss first, then the CommError: WorkerLost naming rank 1", async () => {
    const { core, fetched, report, passed } = setUp()
    core.onDisconnect(1)
    report("CommError", "shim_all_reduce: Connection closed by peer", "peer-lost")
    passed()
    const error = await fetched
    expect(error).toBeInstanceOf(WorkerLost)
    expect(error).toMatchObject({ rank: 1, status: undefined })
  })

  test("a failure that is not a CommError stays the root: RemoteError from rank 0", async () => {
    const { core, fetched, report, passed } = setUp()
    report("FunctionFailed", "deliberate")
    passed()
    core.onDisconnect(1)
    const error = await fetched
    expect(error).toBeInstanceOf(RemoteError)
    expect(error).toMatchObject({ rank: 0, type: "FunctionFailed" })
  })

  test("a CommError that blames the call, not a peer (reason invalid), stays the root: RemoteError from rank 0", async () => {
    const { core, fetched, report, passed } = setUp()
    report("CommError", "Reduce: reduce_scatter needs dim 0 of x to equal the group size 2", "invalid")
    passed()
    core.onDisconnect(1)
    const error = await fetched
    expect(error).toBeInstanceOf(RemoteError)
    expect(error).toMatchObject({ rank: 0, type: "CommError", kind: "invalid" })
  })

  test("a CommError on a command the lost rank had passed stays: RemoteError from rank 0", async () => {
    const { core, fetched, report, passed } = setUp()
    core.onMessage(1, { _tag: "Status", firstUncompletedIdent: 1 })
    report("CommError", "shim_all_reduce: timed out", "timeout")
    passed()
    const error = await fetched
    core.onDisconnect(1)
    expect(error).toBeInstanceOf(RemoteError)
    expect(error).toMatchObject({ rank: 0, type: "CommError" })
  })
})

describe("a fetch that a lost worker poisons", () => {
  test("fails at once, while rank 0 has not passed it; rank 0's late result is dropped quietly", async () => {
    const { core, reduce, fetched, passed, problems } = setUp()
    let settled = false
    void fetched.then(() => (settled = true))
    core.onExit({ rank: 1, status: 137, signal: "SIGKILL" })
    await Bun.sleep(0)
    expect(settled).toBe(true)
    expect(await fetched).toMatchObject({ _tag: "WorkerLost", rank: 1, ident: reduce.ident })
    core.onMessage(0, { _tag: "FetchResult", ident: reduce.ident + 1, value: 1 })
    passed()
    expect(problems).toEqual([])
  })
})

describe("a loss and the results that do not need the lost rank", () => {
  test("a fetch in flight on rank 0 alone, issued before rank 1 was lost, still completes with rank 0's value", async () => {
    const core = new Core({ world: 2, captureSites: false })
    core.admit(link(0))
    core.admit(link(1))
    const t = new Ref(3)
    const made = core.command([0], "ones on rank 0", [], [t.id], undefined, (ident) => ({ _tag: "RequestStatus", ident }))
    const both = core.command([0, 1], "ones on both", [], [4], undefined, (ident) => ({ _tag: "RequestStatus", ident }))
    const fetched = Effect.runPromise(Effect.result(core.fetch([0], [t.id], "fetch on rank 0", undefined, (ident) => ({ _tag: "RequestStatus", ident }))))
    core.onExit({ rank: 1, status: 137, signal: "SIGKILL" })
    expect(core.graph.failureAt(both, [1])?._tag, "the command that needed rank 1 did not fail with WorkerLost there").toBe("WorkerLost")
    expect(core.graph.failureAt(both, [0]), "a loss failed rank 0's result of a command that did not need rank 1").toBeUndefined()
    expect(core.graph.failureAt(made, [0]), "a loss failed a command on a mesh without the lost rank").toBeUndefined()
    core.onMessage(0, { _tag: "FetchResult", ident: made.ident + 2, value: 42 })
    core.onMessage(0, { _tag: "Status", firstUncompletedIdent: made.ident + 3 })
    const outcome = await fetched
    expect(Result.isSuccess(outcome) ? outcome.success : outcome.failure, "a loss failed a result in flight on a mesh that does not include the lost rank").toEqual([42])
  })

  test("a collective rank 1 had passed before it was lost does not fail there: rank 0's result of it completes", async () => {
    const core = new Core({ world: 2, captureSites: false })
    core.admit(link(0))
    core.admit(link(1))
    const reduce = core.command([0, 1], "reduce sum over x", [], [4], undefined, (ident) => ({ _tag: "RequestStatus", ident }), { peers: () => [0, 1], reads: () => true })
    const fetched = Effect.runPromise(Effect.result(core.fetch([0], [4], "fetch on rank 0", undefined, (ident) => ({ _tag: "RequestStatus", ident }))))
    core.onMessage(1, { _tag: "Status", firstUncompletedIdent: reduce.ident + 1 })
    core.onExit({ rank: 1, status: 137, signal: "SIGKILL" })
    expect(core.graph.failureAt(reduce, [0]), "a loss failed a collective the lost rank had already passed").toBeUndefined()
    core.onMessage(0, { _tag: "FetchResult", ident: reduce.ident + 1, value: 6 })
    core.onMessage(0, { _tag: "Status", firstUncompletedIdent: reduce.ident + 2 })
    const outcome = await fetched
    expect(Result.isSuccess(outcome) ? outcome.success : outcome.failure, "a loss failed rank 0's result of a collective rank 1 had completed").toEqual([6])
  })
})

describe("a fetch waits only for the ranks its value depends on (rank 1 silent, as if stopped)", () => {
  const rankLocal = (core: Core, ref: number) => core.command([0, 1], "ones on both", [], [ref], undefined, (ident) => ({ _tag: "RequestStatus", ident }))
  const both = { peers: () => [0, 1], reads: () => true }

  test("rank 0's result of a rank-local command on both ranks: answered once rank 0 alone has passed it", async () => {
    const core = new Core({ world: 2, captureSites: false })
    core.admit(link(0))
    core.admit(link(1))
    const made = rankLocal(core, 3)
    const fetched = Effect.runPromise(core.fetch([0], [3], "fetch", undefined, (ident) => ({ _tag: "RequestStatus", ident })))
    core.onMessage(0, { _tag: "FetchResult", ident: made.ident + 1, value: 5 })
    core.onMessage(0, { _tag: "Status", firstUncompletedIdent: made.ident + 2 })
    const outcome = await Promise.race([fetched, Bun.sleep(100).then(() => "still waiting for rank 1")])
    expect(outcome, "a fetch of rank 0's own value waited for rank 1").toEqual([5])
  })

  test("rank 0's result of a rank-local command that reads a collective: answered once rank 1 has passed the collective, not the rank-local command", async () => {
    const core = new Core({ world: 2, captureSites: false })
    core.admit(link(0))
    core.admit(link(1))
    const reduce = core.command([0, 1], "reduce sum over x", [], [3], undefined, (ident) => ({ _tag: "RequestStatus", ident }), both)
    const made = core.command([0, 1], "add one on both", [3], [4], undefined, (ident) => ({ _tag: "RequestStatus", ident }))
    const fetched = Effect.runPromise(core.fetch([0], [4], "fetch", undefined, (ident) => ({ _tag: "RequestStatus", ident })))
    core.onMessage(1, { _tag: "Status", firstUncompletedIdent: reduce.ident + 1 })
    core.onMessage(0, { _tag: "FetchResult", ident: made.ident + 1, value: 5 })
    core.onMessage(0, { _tag: "Status", firstUncompletedIdent: made.ident + 2 })
    const outcome = await Promise.race([fetched, Bun.sleep(100).then(() => "still waiting for rank 1 to pass its own rank-local command")])
    expect(outcome, "a fetch of rank 0's value waited for rank 1's share of a rank-local command").toEqual([5])
  })

  test("rank 0's result of a collective with rank 1 waits for rank 1; with a deadline it fails naming rank 1", async () => {
    const core = new Core({ world: 2, captureSites: false })
    core.admit(link(0))
    core.admit(link(1))
    rankLocal(core, 3)
    const reduce = core.command([0, 1], "reduce sum over x", [3], [4], undefined, (ident) => ({ _tag: "RequestStatus", ident }), both)
    const fetched = Effect.runPromise(Effect.result(core.fetch([0], [4], "fetch", undefined, (ident) => ({ _tag: "RequestStatus", ident }), 150)))
    core.onMessage(0, { _tag: "FetchResult", ident: reduce.ident + 1, value: 5 })
    core.onMessage(0, { _tag: "Status", firstUncompletedIdent: reduce.ident + 2 })
    const outcome = await Promise.race([fetched, Bun.sleep(2000).then(() => "no answer after the deadline")])
    if (typeof outcome === "string" || Result.isSuccess(outcome)) throw new Error(`a fetch of a collective's result did not wait for rank 1, or its deadline did not fire: ${Bun.inspect(outcome)}`)
    expect(outcome.failure).toMatchObject({ _tag: "DeadlineExceeded", deadlineMs: 150, behind: [{ rank: 1, ident: 0, label: "ones on both" }] })
  })

  test("a failure on rank 1 poisons rank 1's result of a rank-local command, and rank 0's of a collective, but not rank 0's own", async () => {
    const core = new Core({ world: 2, captureSites: false })
    core.admit(link(0))
    core.admit(link(1))
    const made = rankLocal(core, 3)
    const reduce = core.command([0, 1], "reduce sum over x", [3], [4], undefined, (ident) => ({ _tag: "RequestStatus", ident }), both)
    core.onMessage(1, { _tag: "RemoteFunctionFailed", ident: made.ident, error: new ErrorPayload("FunctionFailed", "deliberate", []) })
    // Both settle: their outcomes per rank are final.
    for (const r of [0, 1]) core.onMessage(r, { _tag: "Status", firstUncompletedIdent: reduce.ident + 1 })
    expect(reduce.settled).toBe(true)
    expect(core.graph.failureAt(made, [1])).toBeInstanceOf(RemoteError)
    expect(core.graph.failureAt(made, [0]), "rank 1's failure poisoned rank 0's own result").toBeUndefined()
    expect(core.graph.failureAt(reduce, [0]), "rank 0's share of a collective with rank 1's poisoned input was not poisoned").toMatchObject({ _tag: "RemoteError", rank: 1 })
  })
})
