// A real worker answers every ident it accepts: the largest, MAX_IDENT (2^53 - 2), gets
// FetchResult(MAX_IDENT), and a recording ending at 2^53 - 1 gets Status(2^53 - 1), the largest
// uint. An ident past MAX_IDENT, in any command, and a CallRecording whose idents would end past
// 2^53 - 1 are refused with a ProtocolError naming them, and the worker goes on: a fetch of a
// poisoned value is still answered (by Status), which it never was once RequestStatus(2^53 - 1)
// had made every Status unsendable. (The check: tests/security/bounds.ts.)
import { expect, test } from "bun:test"
import { MAX_IDENT } from "../../src/protocol/fields.ts"
import { checkIdents } from "../security/bounds.ts"

test("idents past MAX_IDENT are refused naming the field, the worker goes on, and the largest idents are answered", async () => {
  expect(MAX_IDENT).toBe(2 ** 53 - 2)
  const r = await checkIdents()
  expect(r.refused.map((x) => x.reply)).toEqual([
    `RequestStatus.ident: ident ${2 ** 53 - 1} is over ${MAX_IDENT}: the Status after it (ident + 1) could not be sent`,
    `CallFunction.ident: ident ${2 ** 53 - 1} is over ${MAX_IDENT}: the Status after it (ident + 1) could not be sent`,
    `FetchValue.ident: ident ${2 ** 53 - 1} is over ${MAX_IDENT}: the Status after it (ident + 1) could not be sent`,
    `CallRecording ${2 ** 53 - 10}: recording 1 takes 10 idents, which would end past ${Number.MAX_SAFE_INTEGER}: the Status after it could not be sent`,
  ])
  expect(r.poisonedFetchAnswered).toBe(true)
  expect(r.largestAnswered).toEqual([
    { name: "FetchValue(MAX_IDENT - 20)", answered: true },
    { name: "CallRecording ending at 2^53 - 1", answered: true },
    { name: "FetchValue(MAX_IDENT)", answered: true },
  ])
  expect(r.lastStatus).toBe(2 ** 53 - 1)
}, 60_000)
