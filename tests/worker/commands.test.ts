// One real worker process through every single-rank message: streams, calls (built-in and
// user functions), fetches, status, refs, groups, and the failures each can report.
import { afterAll, beforeAll, describe, expect, test } from "bun:test"
import { HostTensor } from "../../src/protocol/values.ts"
import { call, createStream, fetch, host, numbers, ref } from "./build.ts"
import { startWorkers, type Harness } from "./harness.ts"

let h: Harness
let ident = 0
const next = () => ident++

beforeAll(async () => {
  h = await startWorkers({ world: 1 })
  h.send(0, createStream)
}, 40_000)
afterAll(() => h?.close())

/** Runs `fn` on rank 0 into a fresh ref and fetches it. */
const compute = async (fn: string, args: unknown[] = [], kwargs: Record<string, unknown> = {}) => {
  const result = 1000 + next()
  h.send(0, call(next(), [result], fn, args as never, { kwargs: kwargs as never }))
  const f = next()
  h.send(0, fetch(f, ref(result)))
  const r = await h.next(0, "FetchResult")
  expect(r.ident).toBe(f)
  return r.value
}

describe("a single worker", () => {
  test("introduces itself with its rank, world and pid, after the handshake", () => {
    const hello = h.received[0]![0]!
    expect(hello).toMatchObject({ _tag: "WorkerHello", rank: 0, world: 1, device: "cpu" })
    expect(hello._tag === "WorkerHello" && hello.pid).toBe(h.job.pids[0]!)
  })

  test("built-in creation and arithmetic through CallFunction", async () => {
    expect(numbers(await compute("ops.arange", [5]))).toEqual([0, 1, 2, 3, 4])
    expect(numbers(await compute("ops.full", [[2, 2], 7], { dtype: "i32" }))).toEqual([7, 7, 7, 7])
  })

  test("uploaded tensors and chained calls", async () => {
    const a = 2000 + next(), b = 2000 + next()
    h.send(0, call(next(), [a], "ops.mul", [host("f32", [3], [1, 2, 3]), 10]))
    h.send(0, call(next(), [b], "ops.add", [ref(a), ref(a)]))
    const f = next()
    h.send(0, fetch(f, [ref(a), { sum: ref(b), note: "plain values pass through" }]))
    const r = await h.next(0, "FetchResult")
    const [first, rest] = r.value as [HostTensor, { sum: HostTensor; note: string }]
    expect(numbers(first)).toEqual([10, 20, 30])
    expect(numbers(rest.sum)).toEqual([20, 40, 60])
    expect(rest.note).toBe("plain values pass through")
  })

  test("FetchValue applies a function to the value", async () => {
    const a = 3000 + next()
    h.send(0, call(next(), [a], "ops.arange", [4]))
    const f = next()
    h.send(0, fetch(f, ref(a), "ops.sum"))
    expect(numbers((await h.next(0, "FetchResult")).value)).toEqual([6])
  })

  test("FetchValue sends a host tensor a function made as it is", async () => {
    const a = 3500 + next()
    h.send(0, call(next(), [a], "ops.arange", [3]))
    const f = next()
    h.send(0, fetch(f, ref(a), "fns:onHost"))
    const r = await h.next(0, "FetchResult")
    expect(r.ident).toBe(f)
    expect(numbers((r.value as { host: unknown }).host)).toEqual([0, 1, 2])
  })

  test("a fetched value the wire cannot carry fails the fetch, saying why", async () => {
    const f = next()
    h.send(0, fetch(f, null, "fns:unsendable"))
    const failed = await h.next(0, "RemoteFunctionFailed")
    expect(failed.ident).toBe(f)
    expect(failed.error.message).toContain("does not fit in 64 bits")
    h.send(0, { _tag: "RequestStatus", ident: f })
    await h.passed(0, f)
    expect(h.seen(0, "FetchResult").some((m) => m.ident === f)).toBe(false)
  })

  test("a user function with two results, an async one, and the function context", async () => {
    const base = 4000 + next(), r1 = 4000 + next(), r2 = 4000 + next(), r3 = 4000 + next()
    h.send(0, call(next(), [base], "ops.zeros", [[2]]))
    h.send(0, call(next(), [r1, r2], "fns:twoResults", [ref(base)]))
    h.send(0, call(next(), [r3], "fns:asyncAddOne", [ref(r2)]))
    const f = next()
    h.send(0, fetch(f, [ref(r1), ref(r2), ref(r3)]))
    const [x, y, z] = (await h.next(0, "FetchResult")).value as HostTensor[]
    expect([numbers(x), numbers(y), numbers(z)]).toEqual([[1, 1], [2, 2], [3, 3]])
    const g = next()
    h.send(0, fetch(g, null, "fns:info"))
    expect((await h.next(0, "FetchResult")).value).toEqual({ rank: 0, world: 1, device: "cpu", coords: {} })
  })

  test("RequestStatus is answered with the next ident", async () => {
    const i = next()
    h.send(0, { _tag: "RequestStatus", ident: i })
    await h.passed(0, i)
    expect(h.seen(0, "Status").at(-1)!.firstUncompletedIdent).toBe(i + 1)
  })

  test("a CommandGroup runs in order", async () => {
    const a = 5000 + next(), b = 5000 + next(), f = next() + 2
    h.send(0, { _tag: "CommandGroup", commands: [
      call(f - 2, [a], "ops.ones", [[3]]),
      call(f - 1, [b], "ops.mul", [ref(a), 5]),
      fetch(f, ref(b)),
    ] })
    ident = f + 1
    expect(numbers((await h.next(0, "FetchResult")).value)).toEqual([5, 5, 5])
  })

  test("failures are reported with their real message and frames", async () => {
    const cases: Array<[string, unknown[], RegExp, string]> = [
      ["ops.nope", [], /no built-in ops\.nope/, "FunctionNotFound"],
      ["fns:alwaysFails", [], /this function always fails/, "TypeError"],
      ["fns:missing", [], /does not export "missing"/, "FunctionNotFound"],
      ["../../../etc/passwd:x", [], /not found under the allowed roots/, "FunctionNotFound"],
      ["/etc/passwd:x", [], /absolute paths are not allowed/, "FunctionNotFound"],
      ["ops.add", ["a", 1], /must be a tensor/, "OpArgumentError"],
      ["fns:twoResults", [host("f32", [1], [0])], /returned 2 tensor\(s\) for 1 result/, "ResultCountMismatch"],
      ["ops.add", [ref(987654), 1], /unknown ref 987654/, "UnknownRef"],
    ]
    for (const [fn, args, message, type] of cases) {
      const i = next()
      h.send(0, call(i, [6000 + i], fn, args as never))
      // Status after it proves whether a failure came: it would have been sent first.
      h.send(0, { _tag: "RequestStatus", ident: i })
      await h.passed(0, i)
      const failed = await h.next(0, "RemoteFunctionFailed", 1, `${fn}(${args.map((a) => Bun.inspect(a)).join(", ")}) should fail with ${type}; it reported no failure`)
      expect(failed.ident).toBe(i)
      expect(failed.error.message).toMatch(message)
      expect(failed.error.type).toBe(type)
    }
    const failed = h.seen(0, "RemoteFunctionFailed").find((m) => m.error.type === "TypeError")!
    expect(failed.error.frames.some((f) => f.file.endsWith("fixtures/fns.ts") && f.function.length > 0 && f.line > 0)).toBe(true)
  })

  test("DeleteRefs forgets refs; unknown ids are a ProtocolError and the rest still go", async () => {
    const a = 7000 + next()
    h.send(0, call(next(), [a], "ops.ones", [[1]]))
    h.send(0, { _tag: "DeleteRefs", refs: [a, 424242] })
    const p = await h.next(0, "ProtocolError")
    expect(p.message).toContain("unknown refs [424242]")
    const i = next()
    h.send(0, fetch(i, ref(a)))
    const failed = await h.next(0, "RemoteFunctionFailed")
    expect(failed.ident).toBe(i)
    expect(failed.error.message).toContain(`unknown ref ${a}`)
  })

  test("a non-default stream runs work too", async () => {
    const s = 8000 + next(), a = 8000 + next()
    h.send(0, { _tag: "CreateStream", result: ref(s), default: false })
    h.send(0, call(next(), [a], "ops.full", [[2], 3], { stream: ref(s) }))
    const f = next()
    h.send(0, fetch(f, ref(a), null, { stream: ref(s) }))
    expect(numbers((await h.next(0, "FetchResult")).value)).toEqual([3, 3])
    const bad = next()
    h.send(0, call(bad, [8999], "ops.ones", [[1]], { stream: ref(a) }))
    expect((await h.next(0, "RemoteFunctionFailed")).error.message).toContain("expected a stream")
  })
})
