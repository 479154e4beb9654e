// Borrow sequences on a real worker: Create / FirstUse / LastUse / Drop across two streams,
// a borrow of a poisoned tensor, and steps naming an unknown borrow.
import { afterAll, beforeAll, describe, expect, test } from "bun:test"
import { call, createStream, fetch, numbers, ref, STREAM } from "./build.ts"
import { startWorkers, type Harness } from "./harness.ts"

let h: Harness
let ident = 0
const next = () => ident++
const OTHER = ref(2)

beforeAll(async () => {
  h = await startWorkers({ world: 1 })
  h.send(0, createStream)
  h.send(0, { _tag: "CreateStream", result: OTHER, default: false })
}, 40_000)
afterAll(() => h?.close())

const borrow = (result: number, tensor: number, alreadyBorrowed = false) =>
  ({ _tag: "BorrowCreate", result: ref(result), tensor: ref(tensor), from: STREAM, to: OTHER, alreadyBorrowed }) as const

describe("borrows", () => {
  test("the whole sequence: the alias is used on the other stream, then dropped", async () => {
    const t = 10, b = 11, u = 12
    h.send(0, call(next(), [t], "ops.full", [[3], 4]))
    h.send(0, borrow(b, t))
    h.send(0, { _tag: "BorrowFirstUse", borrow: b })
    h.send(0, call(next(), [u], "ops.mul", [ref(b), 2], { stream: OTHER }))
    h.send(0, { _tag: "BorrowLastUse", borrow: b })
    h.send(0, { _tag: "BorrowDrop", borrow: b })
    h.send(0, { _tag: "DeleteRefs", refs: [b] })
    const f = next()
    h.send(0, fetch(f, [ref(t), ref(u)]))
    const [orig, doubled] = (await h.next(0, "FetchResult")).value as unknown[]
    expect(numbers(orig)).toEqual([4, 4, 4])
    expect(numbers(doubled)).toEqual([8, 8, 8])
  })

  test("a dropped borrow that was never used, and one already borrowed, need no events", async () => {
    const t = 20, b = 21, c = 22
    h.send(0, call(next(), [t], "ops.ones", [[2]]))
    h.send(0, borrow(b, t))
    h.send(0, { _tag: "BorrowDrop", borrow: b })
    h.send(0, borrow(c, t, true))
    const f = next()
    h.send(0, fetch(f, ref(c), null, { stream: OTHER }))
    expect(numbers((await h.next(0, "FetchResult")).value)).toEqual([1, 1])
    expect(h.seen(0, "ProtocolError")).toEqual([])
  })

  test("borrowing a poisoned tensor poisons the alias; its steps are no-ops", async () => {
    const bad = 30, b = 31
    const root = next()
    h.send(0, call(root, [bad], "fns:alwaysFails"))
    h.send(0, borrow(b, bad))
    h.send(0, { _tag: "BorrowFirstUse", borrow: b })
    h.send(0, { _tag: "BorrowLastUse", borrow: b })
    h.send(0, { _tag: "BorrowDrop", borrow: b })
    const f = next()
    h.send(0, fetch(f, ref(b)))
    h.send(0, { _tag: "RequestStatus", ident: f })
    await h.passed(0, f)
    expect(h.seen(0, "FetchResult").some((m) => m.ident === f)).toBe(false)
    expect(h.seen(0, "RemoteFunctionFailed").map((m) => m.ident)).toEqual([root])
    expect(h.seen(0, "ProtocolError")).toEqual([])
  })

  test("steps naming an unknown borrow are refused, and the worker goes on", async () => {
    h.send(0, { _tag: "BorrowFirstUse", borrow: 999 })
    expect((await h.next(0, "ProtocolError")).message).toBe("BorrowFirstUse: unknown borrow 999")
    h.send(0, { _tag: "BorrowDrop", borrow: 998 })
    expect((await h.next(0, "ProtocolError")).message).toBe("BorrowDrop: unknown borrow 998")
    h.send(0, borrow(41, 4040))
    expect((await h.next(0, "ProtocolError")).message).toContain("unknown ref 4040")
  })
})
