// docs/design.md's worker rules asserted directly, in one process (tests/worker/inProcess.ts): the
// ident bookkeeping behind Status, what a rank asks of its communicator when its input is
// poisoned or it sends to itself, a function's result count, and restartable Exit. Between
// real processes (the other files here) most of these show only as a peer or a fetch waiting
// out a timeout.
import { afterEach, beforeEach, describe, expect, test } from "bun:test"
import { NDSlice } from "../../src/protocol/ndslice.ts"
import { DeviceMesh } from "../../src/worker/mesh.ts"
import { RefEnv } from "../../src/worker/refs.ts"
import { sendStatus } from "../../src/worker/session.ts"
import { call, createStream, factory, fetch, mesh, numbers, reduce, ref, send } from "./build.ts"
import { inProcessLoop, inProcessWorker, type InProcessWorker } from "./inProcess.ts"

let w: InProcessWorker
beforeEach(async () => {
  w = inProcessWorker()
  await w.dispatch(createStream)
})
afterEach(() => w.close())

const failures = () => w.sent.filter((m) => m._tag === "RemoteFunctionFailed")
const statuses = () => w.sent.filter((m) => m._tag === "Status")

describe("firstUncompletedIdent and Status", () => {
  test("a command that fails synchronously still completes: firstUncompletedIdent passes it", async () => {
    // An unknown ref in the arguments fails in the handler body itself, before any Effect.
    await w.dispatch(call(7, [20], "ops.add", [ref(999), 1]))
    expect(failures().map((m) => m.ident)).toEqual([7])
    expect(w.session.firstUncompletedIdent, "a synchronously failing command did not advance firstUncompletedIdent (the controller would see it outstanding forever)").toBe(8)
  })

  test("a command that fails in its Effect (an unknown function) completes too", async () => {
    await w.dispatch(call(9, [21], "ops.nope"))
    expect(failures().map((m) => m.ident)).toEqual([9])
    expect(w.session.firstUncompletedIdent, "an asynchronously failing command did not advance firstUncompletedIdent").toBe(10)
  })

  test("Status goes out once per advance and is not re-sent while nothing advanced", async () => {
    sendStatus(w.session)
    expect(statuses(), "Status was sent before anything completed").toEqual([])
    await w.dispatch(call(0, [22], "ops.ones", [[1]]))
    sendStatus(w.session)
    sendStatus(w.session)
    sendStatus(w.session)
    expect(statuses().map((m) => m.firstUncompletedIdent), "Status was re-sent though nothing advanced").toEqual([1])
    await w.dispatch(call(1, [23], "ops.ones", [[1]]))
    sendStatus(w.session)
    expect(statuses().map((m) => m.firstUncompletedIdent)).toEqual([1, 2])
  })
})

describe("control messages", () => {
  test("RequestStatus moves firstUncompletedIdent past its ident and sends Status at once", async () => {
    await w.dispatch({ _tag: "RequestStatus", ident: 41 })
    expect(w.session.firstUncompletedIdent, "RequestStatus did not move firstUncompletedIdent past its ident").toBe(42)
    expect(statuses().map((m) => m.firstUncompletedIdent), "RequestStatus did not send Status at once").toEqual([42])
    // Never backwards: an older ident leaves it where it is.
    await w.dispatch({ _tag: "RequestStatus", ident: 3 })
    expect(w.session.firstUncompletedIdent).toBe(42)
  })

  test("a CommandGroup runs its commands in order", async () => {
    await w.dispatch({ _tag: "CommandGroup", commands: [call(0, [60], "ops.full", [[2], 3]), call(1, [61], "ops.mul", [ref(60), 2]), fetch(2, ref(61))] })
    expect(failures(), "a CommandGroup ran its commands out of order (a command ran before the one defining its input)").toEqual([])
    const got = w.sent.find((m) => m._tag === "FetchResult")
    expect(got && numbers(got.value)).toEqual([6, 6])
  })

  test("a CommandGroup's calls run as sent alone: an async function is waited for, a failing one poisons and reports at its ident", async () => {
    await w.dispatch({ _tag: "CommandGroup", commands: [
      call(0, [62], "ops.full", [[2], 3]), call(1, [63], "fns:asyncAddOne", [ref(62)]), call(2, [64], "ops.mul", [ref(63), 2]),
      call(3, [65], "fns:alwaysFails", [ref(62)]), call(4, [66], "ops.mul", [ref(65), 2]), fetch(5, ref(64)),
    ] })
    const got = w.sent.find((m) => m._tag === "FetchResult")
    expect(got && numbers(got.value), "the command after an async function in a group ran before it finished").toEqual([8, 8])
    expect(failures().map((m) => m.ident), "a failing call in a group was not reported at its own ident, alone").toEqual([3])
    expect(w.session.env.errorOf(ref(66))?.ident, "a call reading a failed one's result in a group was not poisoned by it").toBe(3)
    expect(w.session.firstUncompletedIdent).toBe(6)
  })

  test("DeleteRefs forgets the refs, and says which were unknown", async () => {
    await w.dispatch(call(0, [70], "ops.ones", [[1]]))
    await w.dispatch({ _tag: "DeleteRefs", refs: [70, 71] })
    expect(w.session.env.has(70), "DeleteRefs left the ref defined").toBe(false)
    expect(w.sent.filter((m) => m._tag === "ProtocolError").map((m) => m.message)).toEqual(["DeleteRefs: unknown refs [71]"])
  })
})

describe("refs", () => {
  test("a value under several refs lives until its last ref goes (a borrow's alias, an in-place result)", async () => {
    await w.dispatch(call(0, [80], "ops.full", [[2], 7]))
    await w.dispatch({ _tag: "BorrowCreate", result: ref(81), tensor: ref(80), from: ref(1), to: ref(1), alreadyBorrowed: false })
    await w.dispatch({ _tag: "DeleteRefs", refs: [80] })
    await w.dispatch(fetch(1, ref(81)))
    expect(failures(), "deleting one ref of a value freed it under the other").toEqual([])
    const got = w.sent.find((m) => m._tag === "FetchResult")
    expect(got && numbers(got.value)).toEqual([7, 7])
  })

  test("forgotten refs are undefined at once and compacted away later, the live ones kept: 200,000 defined and deleted around 10 live", () => {
    const env = new RefEnv()
    for (let i = 0; i < 10; i++) env.define(ref(i), i * 10)
    for (let i = 0; i < 200_000; i++) {
      env.define(ref(100 + i), i)
      if (i % 3 === 0) env.define(ref(100 + i), i + 1) // redefined before it goes
      expect(env.delete(100 + i)).toBe(true)
    }
    expect(env.delete(150), "a forgotten ref was deleted again").toBe(false)
    expect(env.has(150) || env.peek(150) !== undefined, "a forgotten ref is still defined").toBe(false)
    expect(env.size, "the env's size counts forgotten refs").toBe(10)
    expect(Array.from({ length: 10 }, (_, i) => env.peek(i)), "compaction lost a live ref").toEqual(Array.from({ length: 10 }, (_, i) => i * 10))
    // Its map holds at most the live refs and the slack of forgotten ones.
    expect((env as unknown as { values: Map<number, unknown> }).values.size, "forgotten refs were never compacted away").toBeLessThanOrEqual(10 + 10 + (1 << 16) + 1)
    // A ref forgotten lately (its entry still there) defined again counts once.
    env.define(ref(100 + 199_999), 7)
    expect([env.peek(100 + 199_999), env.size], "a ref defined again after it was forgotten is not counted live once").toEqual([7, 11])
  })
})

describe("meshes", () => {
  test("a mesh dim's group is the ranks along that dim, through this rank", () => {
    // A 2x3 mesh of ranks 10..15 (row-major), seen from rank 14 at (1, 1).
    const m = new DeviceMesh(5, ["dp", "tp"], NDSlice.contiguous([2, 3], 10), 14, [1, 1], w.session.comms)
    expect(m.members(["tp"]), "the group along tp is not the ranks of this rank's row").toEqual([13, 14, 15])
    expect(m.members(["dp"]), "the group along dp is not the ranks of this rank's column").toEqual([11, 14])
    expect(m.members(["dp", "tp"])).toEqual([10, 11, 12, 13, 14, 15])
    expect(m.members(["tp", "dp"])).toEqual([10, 13, 11, 14, 12, 15])
  })
})

describe("what a rank asks of its communicator", () => {
  test("a rank whose input is poisoned joins the all_reduce with factory zeros, and its result is that poison", async () => {
    await w.dispatch(mesh(2, ["x"], [1]))
    await w.dispatch(call(0, [30], "fns:alwaysFails"))
    await w.dispatch(reduce(1, 31, 30, 2, ["x"], "sum", factory([3])))
    const joined = w.calls.filter((c) => c.op === "allReduce")
    expect(joined.length, "a rank with a poisoned input skipped the collective instead of joining with zeros (its peers would wait out the comm timeout)").toBe(1)
    expect(joined[0]!.input, "a rank with a poisoned input joined with something other than the factory's zeros").toEqual([0, 0, 0])
    // Poisoned, not reported again: the fetch fails silently, like every dependent of a root failure.
    await w.dispatch(fetch(2, ref(31)))
    expect(failures().map((m) => m.ident)).toEqual([0])
    expect(w.sent.some((m) => m._tag === "FetchResult")).toBe(false)
    expect(w.session.firstUncompletedIdent).toBe(3)
  })

  test("a rank that cannot read its input at all joins with zeros too, and reports why", async () => {
    await w.dispatch(mesh(2, ["x"], [1]))
    await w.dispatch(reduce(0, 31, 404, 2, ["x"], "stack", factory([2])))
    expect(w.calls.map((c) => [c.op, c.input]), "a rank with an unknown input did not join the all_gather with zeros").toEqual([["allGather", [0, 0]]])
    expect(failures().map((m) => [m.ident, m.error.type])).toEqual([[0, "UnknownRef"]])
  })

  test("a send to oneself is a copy, and posts no p2p op (the Python worker also posted a recv)", async () => {
    await w.dispatch(call(0, [40], "ops.full", [[2], 5]))
    await w.dispatch(send(1, 41, NDSlice.contiguous([1]), NDSlice.contiguous([1]), 40, factory([2])))
    const posted = w.calls.filter((c) => c.op === "p2p").flatMap((c) => c.p2p!)
    expect(posted, "a send to oneself posted p2p ops (a recv from itself never matches and waits out the comm timeout)").toEqual([])
    expect(failures()).toEqual([])
    await w.dispatch(fetch(2, ref(41)))
    const got = w.sent.find((m) => m._tag === "FetchResult")
    expect(got && numbers(got.value)).toEqual([5, 5])
  })
})

describe("a rank the controller reported lost", () => {
  test("a send to it fails at once, posting no p2p op", async () => {
    await w.dispatch(call(0, [40], "ops.full", [[2], 5]))
    await w.dispatch({ _tag: "PeerLost", rank: 3 })
    await w.dispatch(send(1, 41, NDSlice.contiguous([1]), new NDSlice(3, [1], [1]), 40, factory([2])))
    expect(w.calls.filter((c) => c.op === "p2p"), "a send to a rank reported lost went to the transport").toEqual([])
    expect(failures().map((m) => [m.ident, m.error.type, m.error.reason, m.error.message])).toEqual([[1, "CommError", "peer-lost", "SendTensor 1 needs rank 3, which the controller reported lost (group of ranks [3])"]])
  })

  test("Withheld defines the command's refs as failed at its ident and reports nothing", async () => {
    await w.dispatch({ _tag: "Withheld", ident: 4, refs: [ref(50)] })
    expect(w.session.firstUncompletedIdent).toBe(5)
    await w.dispatch(call(5, [51], "ops.add", [ref(50), 1]))
    await w.dispatch(fetch(6, ref(51)))
    expect(failures(), "a command reading a withheld result failed at its root (UnknownRef) instead of depending on the withheld command").toEqual([])
    expect(w.sent.some((m) => m._tag === "FetchResult")).toBe(false)
  })
})

describe("a function's results", () => {
  test("a user function returning more tensors than declared fails with ResultCountMismatch, defining none", async () => {
    await w.dispatch(call(0, [50], "ops.zeros", [[1]]))
    await w.dispatch(call(1, [51], "fns:twoResults", [ref(50)]))
    const failed = failures()
    expect(failed.map((m) => m.ident), "a function returning two tensors for one result was not refused").toEqual([1])
    expect(failed[0]!.error.type).toBe("ResultCountMismatch")
    expect(failed[0]!.error.message).toContain("returned 2 tensor(s) for 1 result(s)")
    expect(w.session.env.errorOf(ref(51))?.ident).toBe(1)
  })

  test("and fewer tensors than declared the same way", async () => {
    await w.dispatch(call(0, [52, 53, 54], "ops.ones", [[1]]))
    expect(failures().map((m) => [m.ident, m.error.type])).toEqual([[0, "ResultCountMismatch"]])
  })
})

describe("restartable Exit", () => {
  test("starts a fresh state: refs and idents from before are gone, and Restarted is sent", async () => {
    const loop = inProcessLoop({ restartable: true })
    try {
      loop.send(createStream, call(0, [10], "ops.full", [[1], 9]), fetch(1, ref(10)))
      await loop.next((m) => (m._tag === "FetchResult" ? m : undefined), "the first session did not answer its fetch")
      loop.send({ _tag: "Exit" })
      expect((await loop.next((m) => (m._tag === "Restarted" ? m : undefined), "a restartable Exit sent no Restarted")).restarts).toBe(1)
      loop.send(createStream, fetch(0, ref(10)))
      const answer = await loop.next((m) => (m._tag === "FetchResult" || m._tag === "RemoteFunctionFailed" ? m : undefined), "the fresh session did not answer a fetch")
      expect(answer._tag, "a restartable Exit kept the old state: a ref from before the restart was still defined").toBe("RemoteFunctionFailed")
      expect(answer._tag === "RemoteFunctionFailed" && answer.error.message).toContain("unknown ref 10")
      // Idents start again from 0: the first Status of the fresh session is for ident 0.
      loop.send({ _tag: "RequestStatus", ident: 0 })
      expect((await loop.next((m) => (m._tag === "Status" ? m : undefined), "the fresh session sent no Status")).firstUncompletedIdent).toBe(1)
    } finally {
      await loop.close()
    }
  })
})
