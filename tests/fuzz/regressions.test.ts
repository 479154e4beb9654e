// Sequences the fuzzer found that ended a worker, replayed on their own. Each is valid wire
// input that a controller could send by mistake; the worker must refuse it and go on.
import { afterAll, beforeAll, describe, expect, test } from "bun:test"
import type { WorkerMessage } from "../../src/protocol/messages.ts"
import { call, createStream, fetch, numbers, ref } from "../worker/build.ts"
import { startWorkers, type Harness } from "../worker/harness.ts"

let h: Harness
let ident = 0
beforeAll(async () => {
  h = await startWorkers({ world: 1 })
  h.send(0, createStream)
}, 40_000)
afterAll(() => h?.close())

/** A tensor, a side stream, and a borrow of the tensor from `from` to `to` (refs from `base`). */
const borrowSetup = (base: number, fromSide: boolean): WorkerMessage[] => {
  const side = ref(base + 1), tensor = base + 2
  return [
    { _tag: "CreateStream", result: side, default: false },
    call(ident++, [tensor], "ops.ones", [[2]]),
    { _tag: "BorrowCreate", result: ref(base + 3), tensor: ref(tensor), from: fromSide ? side : ref(1), to: fromSide ? ref(1) : side, alreadyBorrowed: false },
  ]
}

describe("borrow steps after a stream of the borrow was deleted", () => {
  const cases: Array<[string, number, boolean, (borrow: number, side: number) => WorkerMessage[], string]> = [
    ["BorrowFirstUse after `to` was deleted", 100, false, (b, side) => [{ _tag: "DeleteRefs", refs: [side] }, { _tag: "BorrowFirstUse", borrow: b }], "BorrowFirstUse"],
    ["BorrowLastUse after `to` was deleted", 200, false, (b, side) => [{ _tag: "BorrowFirstUse", borrow: b }, { _tag: "DeleteRefs", refs: [side] }, { _tag: "BorrowLastUse", borrow: b }], "BorrowLastUse"],
    ["BorrowDrop after `from` was deleted", 300, true, (b, side) => [{ _tag: "BorrowFirstUse", borrow: b }, { _tag: "BorrowLastUse", borrow: b }, { _tag: "DeleteRefs", refs: [side] }, { _tag: "BorrowDrop", borrow: b }], "BorrowDrop"],
  ]
  test.each(cases)("%s is refused, and the worker goes on", async (_name, base, fromSide, steps, step) => {
    const before = h.seen(0, "ProtocolError").length
    for (const m of [...borrowSetup(base, fromSide), ...steps(base + 3, base + 1)]) h.send(0, m)
    const probe = ident++
    h.send(0, call(probe, [base + 9], "ops.full", [[2], 4]))
    h.send(0, fetch(ident++, ref(base + 9)))
    const reply = await h.next(0, "FetchResult", 3000).catch((e: Error) => e)
    expect(h.exits).toEqual([])
    expect(reply instanceof Error ? reply.message.split("\n")[0] : numbers(reply.value)).toEqual([4, 4])
    expect(h.seen(0, "ProtocolError").slice(before).some((p) => p.message.includes(step))).toBe(true)
  }, 20_000)
})
