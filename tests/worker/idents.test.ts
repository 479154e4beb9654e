// A real worker answers every ident it accepts: the largest, MAX_IDENT (2^53 - 2), gets
// FetchResult(MAX_IDENT) and then Status(2^53 - 1), the largest uint. An ident past it, in any
// command, and a CallRecording whose idents would end past 2^53 - 1 are refused with a
// ProtocolError naming them, and the worker goes on: a fetch of a poisoned value is still
// answered (by Status), which it never was once RequestStatus(2^53 - 1) had made every Status
// unsendable.
import { encode } from "@msgpack/msgpack"
import { afterAll, beforeAll, expect, test } from "bun:test"
import { encodeMessage } from "../../src/protocol/codec.ts"
import { MAX_IDENT } from "../../src/protocol/fields.ts"
import type { WorkerMessage } from "../../src/protocol/messages.ts"
import { call, createStream, fetch, numbers, ref } from "./build.ts"
import { startWorkers, type Harness } from "./harness.ts"

let h: Harness
beforeAll(async () => {
  h = await startWorkers({ world: 1 })
  h.send(0, createStream)
}, 40_000)
afterAll(() => h?.close())

/**
 * `msg` as a frame body whose ident (the array's second element) is `ident`: encoded with ident
 * 0, then patched, since the controller's own encoder refuses an ident past MAX_IDENT.
 */
const withIdent = (msg: WorkerMessage, ident: number): Uint8Array => {
  const r = encodeMessage({ ...msg, ident: 0 } as WorkerMessage)
  if (r._tag === "Failure") throw new Error(r.failure.message)
  const body = r.success
  if (body[2] !== 0) throw new Error("expected [code, 0, ...] with a fixarray and a positive fixint code")
  return Buffer.concat([body.subarray(0, 2), encode(ident), body.subarray(3)])
}

/** The next ProtocolError from rank 0. */
const refusal = async () => (await h.next(0, "ProtocolError", 5000, "an ident the worker cannot answer is refused")).message

test("idents past MAX_IDENT are refused naming the field; a CallRecording ending past 2^53 - 1 too; the worker goes on", async () => {
  expect(MAX_IDENT).toBe(2 ** 53 - 2)
  h.links[0]!.sendRawForTestsOnly(withIdent({ _tag: "RequestStatus", ident: 0 }, 2 ** 53 - 1))
  expect(await refusal()).toContain(`RequestStatus.ident: ident ${2 ** 53 - 1} is over ${MAX_IDENT}`)
  h.links[0]!.sendRawForTestsOnly(withIdent(call(0, [10], "ops.zeros", [[2]]), 2 ** 53 - 1))
  expect(await refusal()).toContain("CallFunction.ident: ident")
  h.links[0]!.sendRawForTestsOnly(withIdent(fetch(0, 1), 2 ** 53 - 1))
  expect(await refusal()).toContain("FetchValue.ident: ident")

  // A poisoned value's fetch is answered by Status alone: it needs Status to be sendable.
  h.send(0, call(1, [11], "ops.no_such_op"))
  expect((await h.next(0, "RemoteFunctionFailed", 5000)).ident).toBe(1)
  h.send(0, fetch(2, ref(11)))
  await h.passed(0, 2, 5000, "a fetch of a poisoned value is answered by Status after refused idents")

  h.send(0, { _tag: "DefineRecording", recording: 1, idents: 10, formals: [], params: [], results: [20], commands: [call(0, [20], "ops.zeros", [[2]])] })
  h.send(0, { _tag: "CallRecording", ident: 2 ** 53 - 10, recording: 1, results: [ref(21)], actuals: [], params: [] })
  expect(await refusal()).toContain(`CallRecording ${2 ** 53 - 10}: recording 1 takes 10 idents, which would end past ${Number.MAX_SAFE_INTEGER}`)
})

test("the largest idents are answered: a fetch at MAX_IDENT - 20, a recording ending at 2^53 - 1, a fetch at MAX_IDENT", async () => {
  h.send(0, call(3, [12], "ops.full", [[2], 3]))
  h.send(0, fetch(MAX_IDENT - 20, ref(12)))
  const first = await h.next(0, "FetchResult", 5000)
  expect(first.ident).toBe(MAX_IDENT - 20)
  expect(numbers(first.value)).toEqual([3, 3])
  h.send(0, { _tag: "CallRecording", ident: 2 ** 53 - 11, recording: 1, results: [ref(22)], actuals: [], params: [] })
  await h.passed(0, MAX_IDENT, 5000, "a recording whose idents end at 2^53 - 1 runs and is reported")
  expect(h.seen(0, "Status").at(-1)!.firstUncompletedIdent).toBe(2 ** 53 - 1)
  h.send(0, fetch(MAX_IDENT, ref(22)))
  const last = await h.next(0, "FetchResult", 5000)
  expect(last.ident).toBe(MAX_IDENT)
  expect(numbers(last.value)).toEqual([0, 0])
  expect(h.seen(0, "ProtocolError").length).toBe(4)
})
