// A user function's declared results (CallFunction.declared) on two real workers: what a
// function returns is checked against them, a lie fails the command at its root naming both
// (declared and returned), poisons what it would have defined and nothing else, and the mesh
// goes on; a direct client's malformed declaration is refused with a ProtocolError naming the field.
import { Decoder, Encoder } from "@msgpack/msgpack"
import { afterAll, beforeAll, describe, expect, test } from "bun:test"
import { Result } from "effect"
import { encodeMessage } from "../../src/protocol/codec.ts"
import type { CallFunction } from "../../src/protocol/messages.ts"
import { call, createStream, fetch, host, numbers, ref } from "./build.ts"
import { startWorkers, type Harness } from "./harness.ts"

let h: Harness
let ident = 0
const next = () => ident++
let refs = 100
const fresh = () => refs++

beforeAll(async () => {
  h = await startWorkers({ world: 2 })
  h.send("all", createStream)
}, 40_000)
afterAll(() => h?.close())

const x = host("f32", [3], [1, 2, 3])
const declare = (m: CallFunction, declared: CallFunction["declared"]): CallFunction => ({ ...m, declared })

/** Fetches `r` on `rank`: its values, or "poisoned" when Status passes the fetch without a FetchResult. */
const fetched = async (rank: number, r: number): Promise<number[] | "poisoned"> => {
  const f = next()
  h.send(rank, fetch(f, ref(r)))
  h.send(rank, { _tag: "RequestStatus", ident: f })
  await h.passed(rank, f)
  const got = h.seen(rank, "FetchResult").find((m) => m.ident === f)
  return got === undefined ? "poisoned" : numbers(got.value)
}

describe("declared results", () => {
  test("an honest function passes: its results are defined as declared", async () => {
    const [a, b] = [fresh(), fresh()]
    h.send("all", declare(call(next(), [a, b], "fns:twoResults", [x]), [{ dtype: "f32", shape: [3] }, null]))
    for (const rank of [0, 1]) {
      expect(await fetched(rank, a)).toEqual([2, 3, 4])
      expect(await fetched(rank, b)).toEqual([3, 4, 5])
    }
    expect(h.seen(0, "RemoteFunctionFailed")).toEqual([])
  })

  test("a lying function fails at its root naming both; what depends on it is poisoned; the mesh goes on", async () => {
    const before = [0, 1].map((r) => h.seen(r, "RemoteFunctionFailed").length)
    const lied = fresh(), downstream = fresh(), after = fresh(), wrongShape = fresh()
    const root = next()
    h.send("all", declare(call(root, [lied], "fns:castTo", [x, "f64"]), [{ dtype: "f32", shape: [3] }]))
    h.send("all", call(next(), [downstream], "ops.neg", [ref(lied)]))
    const shapeRoot = next()
    h.send("all", declare(call(shapeRoot, [wrongShape], "fns:castTo", [x, "f32"]), [{ dtype: "f32", shape: [1, 3] }]))
    h.send("all", declare(call(next(), [after], "fns:castTo", [x, "i64"]), [{ dtype: "i64", shape: [3] }]))
    for (const rank of [0, 1]) {
      expect(await fetched(rank, lied)).toBe("poisoned")
      expect(await fetched(rank, downstream)).toBe("poisoned")
      expect(await fetched(rank, wrongShape)).toBe("poisoned")
      expect(await fetched(rank, after)).toEqual([1, 2, 3])
      const failed = h.seen(rank, "RemoteFunctionFailed").slice(before[rank])
      // Once per root: the poisoned neg reports nothing.
      expect(failed.map((m) => [m.ident, m.error.type, m.error.message])).toEqual([
        [root, "ResultMismatch", "fns:castTo result 0: declared f32[3], returned f64[3]"],
        [shapeRoot, "ResultMismatch", "fns:castTo result 0: declared f32[1, 3], returned f32[3]"],
      ])
    }
    expect(h.exits).toEqual([])
  })

  test("a direct client's malformed declaration is a ProtocolError naming the field; the worker goes on", async () => {
    const wire = new Decoder().decode(Result.getOrThrow(encodeMessage(call(next(), [fresh()], "fns:castTo", [x, "f32"])))) as unknown[]
    const before = h.seen(0, "ProtocolError").length
    const raw = new Encoder()
    h.links[0]!.sendRawForTestsOnly(raw.encode([...wire, [["f17", [3]]]]))
    h.links[0]!.sendRawForTestsOnly(raw.encode([...wire, [["f32", [3]], null]]))
    h.links[0]!.sendRawForTestsOnly(raw.encode([...wire, [["f32", [3]]], "mesh", ["tp"], "extra"]))
    const ok = fresh()
    h.send(0, declare(call(next(), [ok], "fns:castTo", [x, "f32"]), [{ dtype: "f32", shape: [3] }]))
    expect(await fetched(0, ok)).toEqual([1, 2, 3])
    expect(h.seen(0, "ProtocolError").slice(before).map((p) => p.message)).toEqual([
      'CallFunction.declared[0][0]: unknown dtype "f17" (one of f32, f64, f16, bf16, i32, i64, u8, bool)',
      "CallFunction.declared: 2 declarations for 1 results",
      "CallFunction: expected 7 to 10 fields, got 11",
    ])
  })
})
