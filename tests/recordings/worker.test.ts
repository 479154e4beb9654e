// DefineRecording and CallRecording on one worker, in this process (tests/worker/inProcess.ts):
// a call binds, runs and forgets, leaving only its results in the environment (1,000 calls
// included), takes its idents, poisons what a poisoned actual reaches, and bad input is refused
// with a ProtocolError while everything defined stays. DeleteRecording forgets a recording: its
// calls after are refused, deleting one it does not hold is refused, and defining and deleting
// 1,000 leaves the worker as it was. A built-in prepared on a call's first run of it (prepared.ts)
// runs that way only while its inputs are as prepared: another shape or dtype, a poisoned input, or a
// kernel failure on later calls give what they give outside a recording; so does add's alpha.
import { afterEach, beforeEach, describe, expect, test } from "bun:test"
import { liveTensorBytes } from "../../ffi/tensor.ts"
import type { CallRecording, DefineRecording } from "../../src/protocol/messages.ts"
import { HostTensor } from "../../src/protocol/values.ts"
import { call, createStream, fetch, host, numbers, ref } from "../worker/build.ts"
import { inProcessWorker, type InProcessWorker } from "../worker/inProcess.ts"

let w: InProcessWorker
beforeEach(async () => {
  w = inProcessWorker()
  await w.dispatch(createStream)
})
afterEach(() => w.close())

// Formal 100 and param 101; temporaries 102, 103; result 104. y = (x + p) * 2 + 1
const define: DefineRecording = {
  _tag: "DefineRecording", recording: 1, idents: 3, formals: [100], params: [101], results: [104],
  commands: [call(0, [102], "ops.add", [ref(100), ref(101)]), call(1, [103], "ops.mul", [ref(102), 2]), call(2, [104], "ops.add", [ref(103), 1])],
}
const callIt = (ident: number, result: number, actual: number, param: number): CallRecording => ({
  _tag: "CallRecording", ident, recording: 1, results: [ref(result)], actuals: [ref(actual)], params: [param],
})
const value = async (id: number, ident: number) => {
  await w.dispatch(fetch(ident, ref(id)))
  const r = w.sent.findLast((m) => m._tag === "FetchResult")
  return r?._tag === "FetchResult" && r.ident === ident ? numbers(r.value) : undefined
}
const problems = () => w.sent.flatMap((m) => (m._tag === "ProtocolError" ? [m.message] : []))

describe("recordings on a worker", () => {
  test("a call computes its results with this call's actual and param, and takes its idents", async () => {
    await w.dispatch(call(0, [10], "ops.ones", [[2]]))
    await w.dispatch(define)
    await w.dispatch(callIt(1, 11, 10, 3))
    expect(await value(11, 4)).toEqual([9, 9])
    expect(w.session.firstUncompletedIdent).toBe(5)
    await w.dispatch(callIt(5, 12, 11, -1))
    expect(await value(12, 8)).toEqual([17, 17])
    expect(problems()).toEqual([])
  })

  test("1,000 calls leave the environment as it was but for their results: temporaries, formals and params are forgotten", async () => {
    await w.dispatch(call(0, [10], "ops.ones", [[2]]))
    await w.dispatch(define)
    const before = w.session.env.size
    const inUse = liveTensorBytes(w.session.native)
    let ident = 1
    for (let i = 0; i < 1000; i++) {
      await w.dispatch(callIt(ident, 20, 10, i))
      ident += 3
    }
    // One result ref (20), redefined by each call; nothing else.
    expect(w.session.env.size).toBe(before + 1)
    // The one result (8 bytes) and the temporary the mul's prepared call keeps for the next call
    // (8 bytes) at most: the shim counts the whole process, where earlier tests' tensors may be collected meanwhile.
    expect(w.session.recordings.get(1)!.prepared[1]?.spare?.length, "the prepared mul keeps its output for the next call").toBe(1)
    expect(liveTensorBytes(w.session.native) - inUse).toBeLessThanOrEqual(16)
    expect(await value(20, ident)).toEqual([(1 + 999) * 2 + 1, (1 + 999) * 2 + 1])
    // Deleting the recording frees what it kept.
    await w.dispatch({ _tag: "DeleteRecording", recording: 1 })
    expect(liveTensorBytes(w.session.native) - inUse).toBeLessThanOrEqual(8)
  })

  test("a poisoned actual poisons the results without a report; the call still completes", async () => {
    await w.dispatch(call(0, [10], "ops.nope"))
    const reports = w.sent.filter((m) => m._tag === "RemoteFunctionFailed").length
    await w.dispatch(define)
    await w.dispatch(callIt(1, 11, 10, 3))
    expect(w.sent.filter((m) => m._tag === "RemoteFunctionFailed").length).toBe(reports)
    expect(w.session.env.errorOf(ref(11))?.ident).toBe(0)
    expect(w.session.firstUncompletedIdent).toBe(4)
  })

  test("a command that fails inside is reported against its own ident (the call's ident + its index)", async () => {
    await w.dispatch({ ...define, recording: 2, commands: [define.commands[0]!, call(1, [103], "ops.nope", [ref(102)]), define.commands[2]!] })
    await w.dispatch(call(0, [10], "ops.ones", [[2]]))
    await w.dispatch({ ...callIt(40, 11, 10, 3), recording: 2 })
    expect(w.sent.filter((m) => m._tag === "RemoteFunctionFailed").map((m) => m._tag === "RemoteFunctionFailed" && m.ident)).toEqual([41])
    expect(w.session.env.errorOf(ref(11))?.ident).toBe(41)
  })

  test("bad input is refused with a ProtocolError, and what was defined stays", async () => {
    await w.dispatch(call(0, [10], "ops.ones", [[2]]))
    await w.dispatch(callIt(1, 11, 10, 3))
    await w.dispatch({ ...define, recording: 3, commands: [fetch(0, ref(100))] })
    await w.dispatch({ ...define, recording: 4, idents: 2 })
    await w.dispatch(define)
    await w.dispatch({ ...callIt(1, 11, 10, 3), params: [] })
    expect(problems()).toEqual([
      "CallRecording 1: unknown recording 1",
      "DefineRecording 3: a recording holds CallFunction, Reduce, SendTensor, BorrowCreate, BorrowFirstUse, BorrowLastUse, BorrowDrop with idents below 3, not FetchValue 0",
      "DefineRecording 4: a recording holds CallFunction, Reduce, SendTensor, BorrowCreate, BorrowFirstUse, BorrowLastUse, BorrowDrop with idents below 2, not CallFunction 2",
      "CallRecording 1: 1 actuals, 0 params and 1 results for recording 1's 1, 1 and 1",
    ])
    expect(await value(10, 9)).toEqual([1, 1])
    await w.dispatch(callIt(10, 11, 10, 0))
    expect(await value(11, 13)).toEqual([3, 3])
  })

  test("DeleteRecording forgets a recording: a later call, and deleting it again, are refused by name; the rest goes on", async () => {
    await w.dispatch(call(0, [10], "ops.ones", [[2]]))
    await w.dispatch(define)
    await w.dispatch({ ...define, recording: 2 })
    await w.dispatch(callIt(1, 11, 10, 3))
    await w.dispatch({ _tag: "DeleteRecording", recording: 1 })
    await w.dispatch(callIt(4, 12, 10, 3))
    await w.dispatch({ _tag: "DeleteRecording", recording: 1 })
    await w.dispatch({ _tag: "DeleteRecording", recording: 99 })
    expect(problems()).toEqual(["CallRecording 4: unknown recording 1", "DeleteRecording: unknown recording 1", "DeleteRecording: unknown recording 99"])
    // What the call before the delete defined stays, and so does the other recording.
    expect(await value(11, 5)).toEqual([9, 9])
    await w.dispatch({ ...callIt(6, 13, 10, 0), recording: 2 })
    expect(await value(13, 9)).toEqual([3, 3])
  })

  test("defining and deleting 1,000 recordings leaves the worker as it was", async () => {
    await w.dispatch(call(0, [10], "ops.ones", [[2]]))
    const env = w.session.env.size, recordings = w.session.recordings.size
    for (let i = 0; i < 1000; i++) {
      await w.dispatch({ ...define, recording: 100 + i })
      await w.dispatch({ ...callIt(1 + 3 * i, 20, 10, i), recording: 100 + i })
      await w.dispatch({ _tag: "DeleteRecording", recording: 100 + i })
    }
    expect(w.session.recordings.size).toBe(recordings)
    expect(w.session.env.size).toBe(env + 1)
    expect(problems()).toEqual([])
  })

  test("a prepared built-in with an input of another shape runs the usual way, giving that shape's result", async () => {
    await w.dispatch(call(0, [10], "ops.ones", [[2]]))
    await w.dispatch(call(1, [11], "ops.ones", [[3]]))
    await w.dispatch(define)
    await w.dispatch(callIt(2, 12, 10, 1))
    // The first reads the param (a number its rule may check): it always goes the usual way.
    expect(w.session.recordings.get(1)!.prepared.map((p) => p !== null && p !== undefined)).toEqual([false, true, true])
    await w.dispatch(callIt(5, 13, 11, 1))
    expect(await value(13, 8)).toEqual([5, 5, 5])
    expect(await value(12, 9)).toEqual([5, 5])
    expect(problems()).toEqual([])
  })

  test("a prepared built-in with an input of another dtype, the same shape, gives that dtype's result, as outside a recording", async () => {
    await w.dispatch(call(0, [10], "ops.clone", [host("f32", [2], [1.5, 2.5])]))
    await w.dispatch(call(1, [11], "ops.clone", [host("i32", [2], [3, 4])]))
    await w.dispatch(call(2, [12], "ops.clone", [host("f64", [2], [0.25, 1e300])]))
    await w.dispatch(define)
    await w.dispatch(callIt(3, 13, 10, 1))
    expect(w.session.recordings.get(1)!.prepared.map((p) => p !== null && p !== undefined)).toEqual([false, true, true])
    await w.dispatch(callIt(6, 14, 11, 1))
    await w.dispatch(callIt(9, 15, 12, 1))
    // Outside a recording: (x + 1) * 2 + 1 in each input's dtype.
    const fetched = async (id: number, ident: number) => {
      await w.dispatch(fetch(ident, ref(id)))
      const r = w.sent.findLast((m) => m._tag === "FetchResult")
      return r?._tag === "FetchResult" && r.ident === ident && r.value instanceof HostTensor ? { dtype: r.value.dtype, values: numbers(r.value) } : undefined
    }
    expect(await fetched(14, 12)).toEqual({ dtype: "i32", values: [9, 11] })
    expect(await fetched(15, 13)).toEqual({ dtype: "f64", values: [3.5, 2e300 + 3] })
    expect(await fetched(13, 14)).toEqual({ dtype: "f32", values: [6, 8] })
    expect(problems()).toEqual([])
  })

  test("a prepared add and sub with a number and alpha other than 1 scale the number on every call, as outside a recording", async () => {
    await w.dispatch(call(0, [10], "ops.ones", [[2]]))
    // y = (x + 3 * 1) - 0.5 * 2
    await w.dispatch({
      _tag: "DefineRecording", recording: 2, idents: 2, formals: [100], params: [], results: [102],
      commands: [call(0, [101], "ops.add", [ref(100), 1], { kwargs: { alpha: 3 } }), call(1, [102], "ops.sub", [ref(101), 2], { kwargs: { alpha: 0.5 } })],
    })
    const scaled = (ident: number, result: number): CallRecording => ({ _tag: "CallRecording", ident, recording: 2, results: [ref(result)], actuals: [ref(10)], params: [] })
    await w.dispatch(scaled(1, 11))
    await w.dispatch(scaled(3, 12))
    await w.dispatch(scaled(5, 13))
    expect([await value(11, 7), await value(12, 8), await value(13, 9)], "a prepared call dropped alpha").toEqual([[3, 3], [3, 3], [3, 3]])
    expect(problems()).toEqual([])
  })

  test("after prepared calls, a poisoned actual still poisons the results without a report", async () => {
    await w.dispatch(call(0, [10], "ops.ones", [[2]]))
    await w.dispatch(call(1, [11], "ops.nope"))
    const reports = w.sent.filter((m) => m._tag === "RemoteFunctionFailed").length
    await w.dispatch(define)
    await w.dispatch(callIt(2, 12, 10, 1))
    await w.dispatch(callIt(5, 13, 11, 1))
    expect(w.sent.filter((m) => m._tag === "RemoteFunctionFailed").length).toBe(reports)
    expect(w.session.env.errorOf(ref(13))?.ident).toBe(1)
    expect(await value(12, 8)).toEqual([5, 5])
  })

  test("a temporary's memory is kept from call to call: the next call writes the same tensor with its own values", async () => {
    await w.dispatch(call(0, [10], "ops.ones", [[2]]))
    await w.dispatch(define)
    await w.dispatch(callIt(1, 11, 10, 3))
    const mul = w.session.recordings.get(1)!.prepared[1]!
    const kept = mul.spare?.[0]
    expect(kept, "the prepared mul's output was not kept for the next call").toBeDefined()
    await w.dispatch(callIt(4, 12, 10, 5))
    expect(mul.spare?.[0], "the next call did not write the kept temporary (a new tensor was made)").toBe(kept)
    expect(await value(12, 7), "a kept temporary was not rewritten by the next call").toEqual([13, 13])
    expect(await value(11, 8), "an earlier call's result changed under a later call").toEqual([9, 9])
    expect(problems()).toEqual([])
  })

  test("an output that a result holds, or whose memory a result views, is not reused: earlier results keep their values", async () => {
    await w.dispatch(call(0, [10], "ops.ones", [[2, 2]]))
    await w.dispatch(call(1, [20], "ops.mul", [ref(10), 5]))
    // The results: the add itself (held by the call's result ref), and a reshape viewing the mul's memory.
    const held: DefineRecording = {
      _tag: "DefineRecording", recording: 2, idents: 3, formals: [100], params: [], results: [103, 104],
      commands: [call(0, [102], "ops.mul", [ref(100), 2]), call(1, [103], "ops.add", [ref(102), 1]), call(2, [104], "ops.reshape", [ref(102), [4]])],
    }
    await w.dispatch(held)
    const callHeld = (ident: number, results: [number, number], actual: number): CallRecording => ({
      _tag: "CallRecording", ident, recording: 2, results: results.map(ref), actuals: [ref(actual)], params: [],
    })
    await w.dispatch(callHeld(2, [11, 12], 10))
    await w.dispatch(callHeld(5, [13, 14], 20))
    await w.dispatch(callHeld(8, [15, 16], 10))
    const prepared = w.session.recordings.get(2)!.prepared
    expect(prepared.slice(0, 2).map((p) => p !== null && p !== undefined), "the mul and the add run prepared").toEqual([true, true])
    expect(await value(11, 11), "a result held by its call's result ref was reused by a later call").toEqual([3, 3, 3, 3])
    expect(await value(12, 12), "a temporary a result views was reused by a later call").toEqual([2, 2, 2, 2])
    expect(await value(13, 13)).toEqual([11, 11, 11, 11])
    expect(await value(14, 14)).toEqual([10, 10, 10, 10])
    expect(problems()).toEqual([])
  })

  test("a prepared built-in's kernel failing on a later call is reported against its own ident and poisons its result", async () => {
    await w.dispatch(call(0, [10], "ops.clone", [host("i64", [1], [1])]))
    await w.dispatch(call(1, [11], "ops.clone", [host("i64", [1], [99])]))
    await w.dispatch(call(2, [12], "ops.ones", [[4, 2]]))
    await w.dispatch({ _tag: "DefineRecording", recording: 7, idents: 2, formals: [100, 101], params: [], results: [103], commands: [call(0, [102], "ops.embedding", [ref(100), ref(101)]), call(1, [103], "ops.mul", [ref(102), 3])] })
    const embed = (ident: number, result: number, idx: number): CallRecording => ({ _tag: "CallRecording", ident, recording: 7, results: [ref(result)], actuals: [ref(idx), ref(12)], params: [] })
    await w.dispatch(embed(3, 13, 10))
    expect(await value(13, 5)).toEqual([3, 3])
    await w.dispatch(embed(6, 14, 11))
    const failed = w.sent.filter((m) => m._tag === "RemoteFunctionFailed")
    expect(failed.map((m) => m._tag === "RemoteFunctionFailed" && m.ident)).toEqual([6])
    expect(w.session.env.errorOf(ref(14))?.ident).toBe(6)
    expect(w.session.firstUncompletedIdent).toBe(8)
  })
})
