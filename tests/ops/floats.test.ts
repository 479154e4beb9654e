// Numbers that are floats: msgpack float64 (Python's 2.0) keeps its type from the wire to the
// ops' promotion on a real worker, float(2) says the same in TypeScript (encoded as float64),
// and compile's signature tells float(2) from 2. torch 1.13's answers: i64 * 2.0 is f32, i64 * 2
// i64, i64 ** 2.0 f32, and i64 == 2.0 compares in f32 (16777217 == 16777216.0 is True there).
import { afterAll, beforeAll, describe, expect, test } from "bun:test"
import { Effect, ManagedRuntime, Result } from "effect"
import { compile, Controller, float, opsOn, param, type Mesh, type RemoteTensor } from "../../src/controller/index.ts"
import { decodeControllerMessage, decodeWorkerMessage, encodeMessage } from "../../src/protocol/codec.ts"
import type { CallFunction, Value } from "../../src/protocol/messages.ts"
import { FloatNumber, HostTensor } from "../../src/protocol/values.ts"
import { call, createStream, fetch, host, numbers, ref } from "../worker/build.ts"
import { startWorkers, type Harness } from "../worker/harness.ts"

const hex = (b: Uint8Array) => Buffer.from(b).toString("hex")
const F64_2_5 = "cb4004000000000000"
/** msgpack float64 of v, as Python's msgpack writes a float. */
const float64 = (v: number) => { const b = Buffer.alloc(9); b[0] = 0xcb; b.writeDoubleBE(v, 1); return b.toString("hex") }

/** The bytes of `m` with its one float64 2.5 replaced by float64 `v` (what a Python client sends for `v` as a float). */
const withFloat = (m: CallFunction, v: number): Uint8Array => {
  const text = hex(Result.getOrThrow(encodeMessage(m)))
  expect(text.split(F64_2_5).length).toBe(2)
  return Buffer.from(text.replace(F64_2_5, float64(v)), "hex")
}

describe("the wire keeps a float a float", () => {
  test("a worker decodes an integral float64 or float32 within 32 bits as a FloatNumber, an integer as a number", () => {
    const m = call(1, [2], "ops.mul", [2.5, 3])
    const decoded = (bytes: Uint8Array) => (Result.getOrThrow(decodeWorkerMessage(bytes)) as CallFunction).args
    expect(decoded(withFloat(m, 2))).toEqual([new FloatNumber(2), 3])
    expect(decoded(withFloat(m, -(2 ** 31)))).toEqual([new FloatNumber(-(2 ** 31)), 3])
    expect(decoded(withFloat(m, 0.5))).toEqual([0.5, 3])
    // Past 32 bits this encoder writes JS integers as float64 too: there a float64 is an integer.
    expect(decoded(withFloat(m, 2 ** 32))).toEqual([2 ** 32, 3])
    const f32 = Buffer.from(hex(Result.getOrThrow(encodeMessage(m))).replace(F64_2_5, "ca40000000"), "hex")
    expect(decoded(f32)).toEqual([new FloatNumber(2), 3])
    // A message's integer field takes an integral float as its value, as it did before floats were kept; a fraction stays refused.
    const status = (v: number) => decodeWorkerMessage(Buffer.from(hex(Result.getOrThrow(encodeMessage({ _tag: "RequestStatus", ident: 7 }))).replace(/07$/, float64(v)), "hex"))
    expect(Result.getOrThrow(status(7))).toEqual({ _tag: "RequestStatus", ident: 7 })
    const refused = status(7.5)
    expect(Result.isFailure(refused) && refused.failure.message).toBe("RequestStatus.ident: expected unsigned integer, got float 7.5")
  })

  test("the controller's decoder keeps plain numbers (a worker's replies hold no FloatNumber)", () => {
    const bytes = Result.getOrThrow(encodeMessage({ _tag: "FetchResult", ident: 1, value: [2.5] }))
    const value = (Result.getOrThrow(decodeControllerMessage(Buffer.from(hex(bytes).replace(F64_2_5, float64(2)), "hex"))) as unknown as { value: Value[] }).value
    expect(value).toEqual([2])
    expect(value[0]).not.toBeInstanceOf(FloatNumber)
  })

  test("float(2) is encoded as float64 2.0, plain 2 as an integer; past 32 bits float() is refused", () => {
    expect(hex(Result.getOrThrow(encodeMessage(call(1, [], "ops.mul", [float(2)]))))).toContain(float64(2))
    expect(hex(Result.getOrThrow(encodeMessage(call(1, [], "ops.mul", [2]))))).not.toContain("cb")
    const refused = encodeMessage(call(1, [], "ops.mul", [float(2 ** 40)]))
    expect(Result.isFailure(refused) && refused.failure.message).toBe("CallFunction.args[0]: float(1099511627776): an integral float past 32 bits cannot be told from an integer on the wire")
  })
})

describe("a float64 from a client to a real worker gives torch's dtype", () => {
  let h: Harness
  beforeAll(async () => {
    h = await startWorkers({ world: 1 })
    h.send(0, createStream)
  }, 60_000)
  afterAll(() => h?.close())

  let ident = 10
  /** ops.<op>(x, v) with v sent as `encoded` ("float": msgpack float64, "int": an integer), fetched. */
  const run = async (op: string, x: HostTensor, v: number, encoded: "float" | "int"): Promise<HostTensor> => {
    const id = (ident += 4), result = 1000 + id
    const m = call(id, [result], `ops.${op}`, [x, encoded === "float" ? 2.5 : v])
    if (encoded === "float") h.links[0]!.sendRawForTestsOnly(withFloat(m, v))
    else h.send(0, m)
    h.send(0, fetch(id + 1, ref(result)))
    const got = await h.until(() => h.seen(0, "FetchResult").find((r) => r.ident === id + 1) ?? h.seen(0, "RemoteFunctionFailed").find((r) => r.ident === id), 20_000, `the result of ${op}`)
    if (got._tag === "RemoteFunctionFailed") throw new Error(got.error.message)
    return got.value as HostTensor
  }
  const i64 = host("i64", [3], [1, -2, 3])

  test("i64 * 2.0 is f32, i64 * 2 stays i64", async () => {
    const f = await run("mul", i64, 2, "float")
    expect([f.dtype, numbers(f)]).toEqual(["f32", [2, -4, 6]])
    const i = await run("mul", i64, 2, "int")
    expect([i.dtype, numbers(i)]).toEqual(["i64", [2, -4, 6]])
  }, 30_000)

  test("i64 ** 2.0 and i64 + 2.0 are f32; i64 ** 2 stays i64", async () => {
    expect((await run("pow", i64, 2, "float")).dtype).toBe("f32")
    expect((await run("add", i64, 2, "float")).dtype).toBe("f32")
    expect((await run("pow", i64, 2, "int")).dtype).toBe("i64")
  }, 30_000)

  test("a fetched float64 2.0 comes back (a float in a fetched value is not refused)", async () => {
    const id = (ident += 4)
    const bytes = hex(Result.getOrThrow(encodeMessage(fetch(id, [2.5, 3]))))
    h.links[0]!.sendRawForTestsOnly(Buffer.from(bytes.replace(F64_2_5, float64(2)), "hex"))
    const got = await h.until(() => h.seen(0, "FetchResult").find((r) => r.ident === id) ?? h.seen(0, "RemoteFunctionFailed").find((r) => r.ident === id), 20_000, "the fetched value")
    expect(got._tag === "FetchResult" && got.value).toEqual([2, 3])
  }, 30_000)

  test("i64 == 2.0 compares in f32, as torch's (16777217 == 16777216.0 holds there)", async () => {
    const big = host("i64", [2], [16777217, 3])
    expect(numbers(await run("eq", big, 16777216, "float"))).toEqual([1, 0])
    expect(numbers(await run("eq", big, 16777216, "int"))).toEqual([0, 0])
  }, 30_000)
})

describe("float() in TypeScript", () => {
  let rt: ManagedRuntime.ManagedRuntime<Controller, unknown>
  let mesh: Mesh
  beforeAll(async () => {
    rt = ManagedRuntime.make(Controller.local({ world: 1, onWorkerLine: () => {} }))
    const ctl = await rt.runPromise(Effect.service(Controller))
    mesh = await rt.runPromise(ctl.mesh({ dp: 1 }))
  }, 60_000)
  afterAll(() => rt?.dispose())
  const read = async (t: RemoteTensor) => {
    const host = await rt.runPromise(t.fetch())
    return { meta: t.dtype, fetched: host.dtype, values: Array.from(host.toArray() as ArrayLike<number | bigint>, Number) }
  }

  test("x.mul(float(2)), ops.pow(x, float(2)) and x.add(float(1)) of an i64 x are f32 on the controller and the worker; x.mul(2) stays i64", async () => {
    const on = opsOn(mesh), x = on.arange(3)
    expect(await read(x.mul(float(2)))).toEqual({ meta: "f32", fetched: "f32", values: [0, 2, 4] })
    expect(await read(on.pow(x, float(2)))).toEqual({ meta: "f32", fetched: "f32", values: [0, 1, 4] })
    expect(await read(x.add(float(1)))).toEqual({ meta: "f32", fetched: "f32", values: [1, 2, 3] })
    expect(await read(x.mul(2))).toEqual({ meta: "i64", fetched: "i64", values: [0, 2, 4] })
    expect(await read(on.where(x.gt(0), float(1), 0))).toEqual({ meta: "f32", fetched: "f32", values: [0, 1, 1] })
    // A floating tensor with a float number keeps its dtype, in the types too.
    const typed: RemoteTensor<"f16"> = on.ones([2], { dtype: "f16" }).mul(float(2))
    expect(await read(typed)).toEqual({ meta: "f16", fetched: "f16", values: [2, 2] })
  }, 30_000)

  test("an in-place op of an integer tensor with float(2) is refused at the call, as torch's i64.mul_(2.0)", () => {
    const x = opsOn(mesh).arange(3)
    expect(() => x.mul_(float(2))).toThrow("result type f32 can't be cast to the input's i64")
    expect(() => x.mul(float(2 ** 40))).toThrow("float(1099511627776): an integral float past 32 bits cannot be told from an integer on the wire")
  })

  test("compile's signature tells float(2) from 2: each traces, and each replay keeps its dtype", async () => {
    const step = compile((x: RemoteTensor, v: number | FloatNumber) => x.mul(v), { onRetrace: () => {} })
    const x = opsOn(mesh).arange(3)
    const dtypes: Array<string | undefined> = []
    for (const v of [2, float(2), 2, float(2)]) dtypes.push((await rt.runPromise(step(x, v))).dtype)
    expect(dtypes).toEqual(["i64", "f32", "i64", "f32"])
    expect(step.traces).toBe(2)
    // A replay parameter is an integer or a fraction (its kind is in the signature): a float of integral value is a plain argument.
    expect(() => param(float(2) as never)).toThrow("param(float(2)): a replay parameter is an integer or a fraction; pass float(2) as a plain argument")
  }, 30_000)
})
