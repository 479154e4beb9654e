// One worker session in this process, over the cpu shim and a one-member communicator,
// counting what each command allocates: every tensor it makes ends up held by a ref or
// freed, and every event is destroyed once its borrow no longer needs it, on the success
// path and on each failure path (poisoned inputs, unknown refs, bad shapes, a stream gone).
import { afterAll, describe, expect, spyOn, test } from "bun:test"
import { Effect } from "effect"
import { Comm } from "../../ffi/comm.ts"
import { Communicators } from "../../src/comm/communicators.ts"
import { loadNative } from "../../ffi/native.ts"
import { Event } from "../../ffi/stream.ts"
import { Tensor } from "../../ffi/tensor.ts"
import type { ControllerMessage, WorkerMessage } from "../../src/protocol/messages.ts"
import { NDSlice } from "../../src/protocol/ndslice.ts"
import { FunctionTable } from "../../src/worker/functions.ts"
import { makeDispatch } from "../../src/worker/handlers/index.ts"
import { closeSession, makeSession } from "../../src/worker/session.ts"
import { call, createStream, factory, fetch, host, mesh, reduce, ref, send, STREAM } from "./build.ts"
import { FIXTURES } from "./harness.ts"

const native = loadNative("cpu")
const soloComm = () => {
  const comm = Comm.create(native, 0, 1, 5000, "")
  comm.connect([comm.address()])
  return comm
}

const tensors: Tensor[] = []
const events = new Set<Event>()
const empty = Tensor.empty.bind(Tensor), create = Event.create.bind(Event)
const view = Tensor.prototype.view, destroy = Event.prototype.destroy
const spies = [
  spyOn(Tensor, "empty").mockImplementation((n, dtype, shape) => {
    const t = empty(n, dtype, shape)
    tensors.push(t)
    return t
  }),
  spyOn(Tensor.prototype, "view").mockImplementation(function (this: Tensor, shape) {
    const t = view.call(this, shape)
    tensors.push(t)
    return t
  }),
  spyOn(Event, "create").mockImplementation((n) => {
    const e = create(n)
    events.add(e)
    return e
  }),
  spyOn(Event.prototype, "destroy").mockImplementation(function (this: Event) {
    events.delete(this)
    destroy.call(this)
  }),
]

const sent: ControllerMessage[] = []
const session = makeSession({
  rank: 0, world: 1, native, comms: new Communicators(soloComm(), () => Effect.sync(soloComm)),
  functions: new FunctionTable([FIXTURES]), send: (m) => void sent.push(m),
})
const dispatch = makeDispatch(session)
afterAll(() => {
  closeSession(session)
  for (const s of spies) s.mockRestore()
})

/** Runs `m`; returns what it sent but Status, after checking it left no tensor unheld and no event unowned. */
const run = async (m: WorkerMessage): Promise<string[]> => {
  const before = sent.length
  await Effect.runPromise(dispatch(m))
  const leaked = tensors.filter((t) => !t.freed && !session.env.isHeld(t))
  const owned = new Set([...session.borrows.values()].flatMap((b) => [b?.created, b?.lastUse]))
  expect({ leakedTensors: leaked.map(String), leakedEvents: [...events].filter((e) => !owned.has(e)).length }).toEqual({ leakedTensors: [], leakedEvents: 0 })
  // Status (sent before user functions and collectives, docs/protocol.md) says nothing of memory.
  return sent.slice(before).filter((x) => x._tag !== "Status").map((x) => (x._tag === "RemoteFunctionFailed" ? `${x._tag} ${x.error.type}` : x._tag))
}

let ident = 0
const T = 10, BAD = 11, OTHER = 12, MESH = 13
const one = NDSlice.contiguous([1])

describe("what a command allocates is held or freed", () => {
  test("calls and fetches: uploads, results, function outputs, count mismatches", async () => {
    await run(createStream)
    await run(mesh(MESH, ["x"], [1]))
    expect(await run(call(ident++, [T], "ops.ones", [[2]]))).toEqual([])
    expect(await run(call(ident++, [BAD], "fns:alwaysFails"))).toEqual(["RemoteFunctionFailed TypeError"])
    expect(await run(fetch(ident++, ref(T), "ops.sum"))).toEqual(["FetchResult"])
    expect(await run(fetch(ident++, host("f32", [2], [1, 2]), "ops.neg"))).toEqual(["FetchResult"])
    expect(await run(call(ident++, [20], "ops.add", [host("f32", [2], [1, 2]), ref(999)]))).toEqual(["RemoteFunctionFailed UnknownRef"])
    expect(await run(call(ident++, [20, 21], "ops.ones", [[2]]))).toEqual(["RemoteFunctionFailed ResultCountMismatch"])
    expect(await run(call(ident++, [20, 21], "ops.reshape", [ref(T), [2]]))).toEqual(["RemoteFunctionFailed ResultCountMismatch"])
    expect(await run(fetch(ident++, ref(T), "fns:alwaysFails"))).toEqual(["RemoteFunctionFailed TypeError"])
  })

  test("every Reduce form, with a good, a poisoned and an unknown input", async () => {
    const forms = [{}, { inplace: true }, { scatter: true }, { inplace: true, scatter: true }]
    for (const input of ["good", "poisoned", "unknown"] as const) {
      for (const reduction of ["sum", "stack"] as const) {
        for (const opts of forms) {
          // A failing in-place form poisons its input: each form gets its own.
          const i = ident++, tensor = 1000 + i
          if (input === "good") await run(call(ident++, [tensor], "ops.ones", [[1]]))
          if (input === "poisoned") await run(call(ident++, [tensor], "ops.neg", [ref(BAD)]))
          await run(reduce(i, "inplace" in opts ? tensor : 30, tensor, MESH, ["x"], reduction, factory([1]), opts))
        }
      }
    }
  })

  test("SendTensor to oneself, with a good, a poisoned and an unknown input, and one other than its factory (in shape, in dtype)", async () => {
    expect(await run(send(ident++, 40, one, one, T, factory([2])))).toEqual([])
    expect(await run(send(ident++, 41, one, one, BAD, factory([2])))).toEqual([])
    expect(await run(send(ident++, 42, one, one, 999, factory([2])))).toEqual(["RemoteFunctionFailed UnknownRef"])
    expect(await run(send(ident++, 43, one, one, T, factory([3])))).toEqual(["RemoteFunctionFailed InputMismatch"])
    expect(await run(send(ident++, 44, one, one, T, factory([2], "f64"))), "an input of the factory's shape but another dtype was sent as it is").toEqual(["RemoteFunctionFailed InputMismatch"])
  })

  test("a Reduce whose input has its factory's shape but another dtype joins with zeros and fails with InputMismatch", async () => {
    expect(await run(reduce(ident++, 45, T, MESH, ["x"], "sum", factory([2], "f64"))), "an input of another dtype than the factory joined the collective").toEqual(["RemoteFunctionFailed InputMismatch"])
  })

  test("a borrow dropped after its stream was deleted still destroys its event", async () => {
    await run({ _tag: "CreateStream", result: ref(OTHER), default: false })
    await run({ _tag: "BorrowCreate", result: ref(50), tensor: ref(T), from: STREAM, to: ref(OTHER), alreadyBorrowed: false })
    await run({ _tag: "BorrowFirstUse", borrow: 50 })
    await run({ _tag: "DeleteRefs", refs: [OTHER] })
    expect(await run({ _tag: "BorrowDrop", borrow: 50 })).toEqual(["ProtocolError"])
  })
})
