// The codec (src/protocol/codec.ts): every message round-trips, the documented byte layouts
// hold, tensors decode as views of owned frames, and encoding refuses what the wire can't carry.
import { Decoder, Encoder, ExtensionCodec } from "@msgpack/msgpack"
import { describe, expect, test } from "bun:test"
import { Result } from "effect"
import {
  decodeControllerMessage,
  decodeWorkerMessage,
  encodeMessage,
  encodeMessageParts,
  MAX_DEPTH,
  OUT_OF_LINE_BYTES,
} from "../../src/protocol/codec.ts"
import { WireError } from "../../src/protocol/errors.ts"
import { encodingExtensions } from "../../src/protocol/ext.ts"
import { MESSAGE_CODES, type ControllerMessage, type Message, type Value, type WorkerMessage } from "../../src/protocol/messages.ts"
import { NDSlice } from "../../src/protocol/ndslice.ts"
import { DTYPES, ErrorPayload, HostTensor, ITEM_SIZE, Ref, SharedTensor, TensorFactory, type DType } from "../../src/protocol/values.ts"

/** Bytes that differ per position and per seed, so a shifted or mixed-up copy shows. */
const pattern = (n: number, seed: number): Uint8Array => Uint8Array.from({ length: n }, (_, i) => (i * 31 + seed * 7 + 1) & 0xff)

const tensor = (dtype: DType, shape: number[], seed = 1): HostTensor =>
  new HostTensor(dtype, shape, pattern(shape.reduce((a, b) => a * b, 1) * ITEM_SIZE[dtype], seed))

/** One HostTensor per dtype and shape kind: 0-dim, 0 elements, odd sizes, 3 dims. */
const everyTensor: HostTensor[] = DTYPES.flatMap((dtype, i) => [
  tensor(dtype, [], i),
  tensor(dtype, [0], i),
  tensor(dtype, [3, 0, 2], i),
  tensor(dtype, [5], i),
  tensor(dtype, [2, 3, 7], i),
])

const nested: Value = {
  ints: [0, 1, -1, 127, 128, 255, 65536, -40000, 2 ** 32, 2 ** 40, Number.MAX_SAFE_INTEGER, -(2 ** 45)],
  floats: [1.5, -0.25, 1e300, Number.NaN, Number.POSITIVE_INFINITY],
  big: [0n, 2n ** 63n, -(2n ** 63n), 2n ** 64n - 1n],
  text: ["", "ascii", "ünïcødé ✓", "x".repeat(300)],
  flags: [true, false, null],
  bin: new Uint8Array([0, 1, 2, 255]),
  refs: [new Ref(0), new Ref(2 ** 32 - 1), new Ref(2 ** 32), new Ref(Number.MAX_SAFE_INTEGER)],
  deep: { a: [{ b: [[{ c: "leaf" }]] }] },
  "odd key": { "": 1, "with space": 2 },
  empty: [[], {}],
}

const callFunction: WorkerMessage = {
  _tag: "CallFunction",
  ident: 12,
  results: [new Ref(100), new Ref(101)],
  mutates: [new Ref(7)],
  function: "ops.add",
  args: [new Ref(5), 2.5, [new Ref(6), "x"], tensor("f32", [2, 2])],
  kwargs: { alpha: 1, out: null, opts: nested },
  stream: new Ref(1),
}

const workerSamples: WorkerMessage[] = [
  { _tag: "SharedSegment", segment: 2, path: "/proc/77/fd/9", bytes: 3 << 20, check: new Uint8Array(16).fill(0x3c), minBytes: 262144 },
  { _tag: "SegmentFree", segment: 2 },
  { _tag: "UploadSegment", segment: 3, path: "/proc/77/fd/10", bytes: 8 << 20, check: new Uint8Array(16).fill(0x5a) },
  { _tag: "CallFunction", ident: 9, results: [new Ref(4)], mutates: [], function: "ops.clone", args: [new SharedTensor(3, 64, "f16", [2, 0, 7])], kwargs: { x: new SharedTensor(3, 4160, "bool", []) }, stream: new Ref(1) },
  { _tag: "CreateDeviceMesh", result: new Ref(3), names: ["host", "gpu"], ranks: new NDSlice(4, [2, 3], [10, 2]) },
  { _tag: "CreateStream", result: new Ref(1), default: true },
  { _tag: "CreateStream", result: new Ref(2), default: false },
  {
    _tag: "DefineRecording", recording: 3, idents: 2, formals: [5, 6], params: [9], results: [100],
    commands: [{ ...callFunction, ident: 0 }, { _tag: "BorrowFirstUse", borrow: 4 }, { ...callFunction, ident: 1, args: [new Ref(100), new Ref(9)] }],
  },
  { _tag: "CallRecording", ident: 40, recording: 3, results: [new Ref(200)], actuals: [new Ref(11), new Ref(12)], params: [0.125] },
  { _tag: "DeleteRecording", recording: 3 },
  { _tag: "PeerLost", rank: 2 },
  { _tag: "Withheld", ident: 41, refs: [new Ref(7), new Ref(8)] },
  callFunction,
  // A user function's declared results, one undeclared.
  { ...callFunction, function: "fns:pair", declared: [{ dtype: "bf16", shape: [2, 0, 3] }, null] },
  { _tag: "CallFunction", ident: 0, results: [], mutates: [], function: "mod/x.ts:f", args: everyTensor, kwargs: {}, stream: new Ref(2) },
  { _tag: "FetchValue", ident: 13, mutates: [], function: null, object: new Ref(100), stream: new Ref(1) },
  { _tag: "FetchValue", ident: 2 ** 40, mutates: [new Ref(9)], function: "ops.sum", object: [new Ref(100), { k: nested }], stream: new Ref(1) },
  { _tag: "RequestStatus", ident: 14 },
  { _tag: "Exit" },
  { _tag: "CommandGroup", commands: [] },
  {
    _tag: "CommandGroup",
    commands: [
      callFunction,
      { _tag: "DeleteRefs", refs: [100, 101] },
      { _tag: "CommandGroup", commands: [{ _tag: "RequestStatus", ident: 15 }, { _tag: "Exit" }] },
    ],
  },
  { _tag: "DeleteRefs", refs: [] },
  { _tag: "DeleteRefs", refs: [0, 1, 2 ** 33] },
  { _tag: "BorrowCreate", result: new Ref(20), tensor: new Ref(5), from: new Ref(1), to: new Ref(2), alreadyBorrowed: false },
  { _tag: "BorrowFirstUse", borrow: 20 },
  { _tag: "BorrowLastUse", borrow: 20 },
  { _tag: "BorrowDrop", borrow: 20 },
  {
    _tag: "Reduce", ident: 16, result: new Ref(30), tensor: new Ref(5), factory: new TensorFactory([4, 8], "bf16", "cuda"),
    mesh: new Ref(3), stream: new Ref(1), dims: ["gpu"], reduction: "avg", scatter: false, inplace: true,
  },
  {
    _tag: "Reduce", ident: 17, result: new Ref(31), tensor: new Ref(5), factory: new TensorFactory([], "i64", "cpu"),
    mesh: new Ref(3), stream: new Ref(1), dims: ["host", "gpu"], reduction: "stack", scatter: true, inplace: false,
  },
  {
    _tag: "SendTensor", ident: 18, result: new Ref(40), fromRanks: NDSlice.contiguous([2, 2]), toRanks: new NDSlice(8, [2, 2], [1, 4]),
    tensor: new Ref(5), factory: new TensorFactory([0, 3], "u8", "cpu"), stream: new Ref(2),
  },
  { _tag: "SaveShards", ident: 19, dir: "run/.tmp-3-ab", tensors: [new Ref(5), new Ref(6)], names: ["w", "b"], writers: [[0, 1], [0]], stream: new Ref(2) },
  { _tag: "CommitCheckpoint", ident: 20, dir: "run", tmp: "run/.tmp-3-ab", version: "3", manifest: "{\"format\":1}", keep: 2 },
  { _tag: "ReadCheckpoint", ident: 21, path: "run", version: null },
  { _tag: "LoadShards", ident: 22, results: [new Ref(41)], sources: [[[0, "run/3/rank-0.safetensors", "w", [0, 0], [2, 4], "123", ["f32", "ab12"]]]], stream: new Ref(2) },
  { _tag: "ControllerProof", nonce: new Uint8Array(32).fill(1), proof: new Uint8Array(32).fill(2) },
  { _tag: "DropCheckpoint", ident: 23, tmp: "run/.tmp-3-ab" },
]

const controllerSamples: ControllerMessage[] = [
  { _tag: "SegmentMapped", segment: 2, problem: null },
  { _tag: "SegmentMapped", segment: 3, problem: "not a memfd" },
  { _tag: "FetchShared", ident: 41, segment: 2, dtype: "bf16", shape: [3, 0, 5] },
  { _tag: "UploadTaken", segment: 3, offsets: [64, 4160] },
  { _tag: "WorkerHello", rank: 3, world: 8, pid: 4242, proof: new Uint8Array(32).fill(0xa5), device: "cuda:3" },
  { _tag: "WorkerChallenge", rank: 3, world: 8, nonce: new Uint8Array(32).fill(0x5a) },
  { _tag: "Status", firstUncompletedIdent: 19 },
  { _tag: "FetchResult", ident: 13, value: null },
  { _tag: "FetchResult", ident: 14, value: nested },
  { _tag: "FetchResult", ident: 15, value: everyTensor },
  { _tag: "FetchResult", ident: 16, value: tensor("f64", [OUT_OF_LINE_BYTES / 8 + 3], 9) },
  { _tag: "RemoteFunctionFailed", ident: 12, error: new ErrorPayload("TypeError", "bad operand", [{ file: "src/ops/x.ts", line: 41, function: "add" }, { file: "w.ts", line: 0, function: "" }]) },
  { _tag: "RemoteFunctionFailed", ident: 13, error: new ErrorPayload("", "", []) },
  { _tag: "Restarted", restarts: 2 },
  { _tag: "ProtocolError", message: "CallFunction.results[2]: expected Ref, got string" },
]

const encoded = (m: Message): Uint8Array => Result.getOrThrow(encodeMessage(m))

/** Every HostTensor in a value tree, in order. */
const tensorsIn = (v: unknown): HostTensor[] =>
  v instanceof HostTensor ? [v] : Array.isArray(v) ? v.flatMap(tensorsIn) : v !== null && typeof v === "object" && !(v instanceof Uint8Array) && !(v instanceof Ref) ? Object.values(v).flatMap(tensorsIn) : []

/** The same bytes, at `offset` in a fresh buffer. */
const placedAt = (bytes: Uint8Array, offset: number): Uint8Array => {
  const b = new Uint8Array(offset + bytes.length)
  b.set(bytes, offset)
  return b.subarray(offset)
}

describe("round trip", () => {
  test("the samples cover all 38 messages", () => {
    const tags = new Set([...workerSamples, ...controllerSamples].map((m) => m._tag))
    expect(([...tags] as string[]).sort()).toEqual(Object.keys(MESSAGE_CODES).sort())
    expect(tags.size).toBe(38)
  })

  for (const m of workerSamples) {
    test(`${m._tag} (worker-bound), borrowed and owned`, () => {
      const bytes = encoded(m)
      expect(Result.getOrThrow(decodeWorkerMessage(bytes))).toStrictEqual(m)
      expect(Result.getOrThrow(decodeWorkerMessage(bytes, "owned"))).toStrictEqual(m)
    })
  }
  for (const m of controllerSamples) {
    test(`${m._tag} (controller-bound), borrowed and owned`, () => {
      const bytes = encoded(m)
      expect(Result.getOrThrow(decodeControllerMessage(bytes))).toStrictEqual(m)
      expect(Result.getOrThrow(decodeControllerMessage(bytes, "owned"))).toStrictEqual(m)
    })
  }

  test("integers above 2^32 stay numbers; 64-bit bigints stay bigints", () => {
    const m = Result.getOrThrow(decodeControllerMessage(encoded({ _tag: "FetchResult", ident: 2 ** 50, value: [2 ** 40, 5n] }))) as unknown as { ident: number; value: unknown[] }
    expect(m.ident).toBe(2 ** 50)
    expect(typeof m.value[0]).toBe("number")
    expect(m.value[1]).toBe(5n)
  })

  test("CallFunction's optional declared field: left off when absent, so frames without it are what they were", () => {
    const { declared: _, ...plain } = workerSamples.find((m) => m._tag === "CallFunction" && m.declared !== undefined) as Extract<WorkerMessage, { _tag: "CallFunction" }>
    const wire = (m: Message) => new Decoder({ useBigInt64: true, extensionCodec: new ExtensionCodec() }).decode(encoded(m)) as unknown[]
    expect(wire(plain).length).toBe(1 + 7)
    expect(wire({ ...plain, declared: [null, { dtype: "i64", shape: [] }] }).at(-1)).toEqual([null, ["i64", []]])
    const decoded = Result.getOrThrow(decodeWorkerMessage(encoded(plain)))
    expect("declared" in decoded).toBe(false)
  })

  test("parts written back to back are exactly the contiguous encoding", () => {
    const big = tensor("f32", [OUT_OF_LINE_BYTES / 4 + 1], 3), big2 = tensor("u8", [OUT_OF_LINE_BYTES * 2 + 5], 4)
    const m: ControllerMessage = { _tag: "FetchResult", ident: 1, value: { a: [big, tensor("i32", [3])], b: "between", c: big2, d: [1, 2, 3] } }
    const parts = Result.getOrThrow(encodeMessageParts(m))
    const joined = new Uint8Array(parts.reduce((n, p) => n + p.length, 0))
    parts.reduce((at, p) => (joined.set(p, at), at + p.length), 0)
    expect<Uint8Array>(joined).toEqual(encoded(m))
    // The large tensors are parts of their own, not copied: the very bytes of HostTensor.data.
    expect(parts.filter((p) => p === big.data || p === big2.data).length).toBe(2)
    expect(Result.getOrThrow(decodeControllerMessage(joined))).toStrictEqual(m)
  })
})

describe("byte layout (as documented in codec.ts)", () => {
  const hex = (b: Uint8Array) => Buffer.from(b).toString("hex")

  test("RequestStatus is [5, ident]", () => {
    expect(hex(encoded({ _tag: "RequestStatus", ident: 300 }))).toBe("92" + "05" + "cd012c")
  })

  test("Ref: ext 1, u32 LE below 2^32, u64 LE from 2^32", () => {
    expect(hex(encoded({ _tag: "CreateStream", result: new Ref(0x01020304), default: true }))).toBe("93" + "02" + "d601" + "04030201" + "c3")
    expect(hex(encoded({ _tag: "CreateStream", result: new Ref(2 ** 32 + 5), default: false }))).toBe("93" + "02" + "d701" + "0500000001000000" + "c2")
  })

  test("Refs written straight into the buffer give the bytes of the library's ext path (random ids, a CommandGroup's nesting and a growing buffer)", () => {
    // The reference: the library's own encoder with the ext codec alone (encodeRef's payload through an ExtData).
    const reference = new Encoder({ extensionCodec: encodingExtensions(), context: { outOfLine: [], outOfLineBytes: 0, command: () => [] }, useBigInt64: true })
    let x = 12345
    const rand = () => ((x = (x * 1103515245 + 12345) % 2 ** 31) / 2 ** 31)
    const id = () => [0, 1, 255, 256, 2 ** 32 - 1, 2 ** 32, Number.MAX_SAFE_INTEGER][Math.floor(rand() * 7)]! * (rand() < 0.5 ? 1 : 0) + (rand() < 0.5 ? Math.floor(rand() * 2 ** 32) : Math.floor(rand() * Number.MAX_SAFE_INTEGER))
    for (let round = 0; round < 200; round++) {
      const refs = Array.from({ length: 1 + Math.floor(rand() * 700) }, () => new Ref(Math.min(id(), Number.MAX_SAFE_INTEGER)))
      const code = MESSAGE_CODES.Withheld
      expect(hex(encoded({ _tag: "Withheld", ident: round, refs }))).toBe(hex(reference.encode([code, round, refs])))
      const group: WorkerMessage = { _tag: "CommandGroup", commands: refs.slice(0, 20).map((r, i) => ({ _tag: "CreateStream", result: r, default: i % 2 === 0 })) }
      expect(hex(encoded(group))).toBe(hex(reference.encode([MESSAGE_CODES.CommandGroup, refs.slice(0, 20).map((r, i) => [MESSAGE_CODES.CreateStream, r, i % 2 === 0])])))
    }
  })

  test("NDSlice: ext 2, u8 ndim then u64 LE offset, sizes, strides", () => {
    const body = encoded({ _tag: "CreateDeviceMesh", result: new Ref(1), names: ["a", "b"], ranks: new NDSlice(3, [2, 5], [7, 1]) })
    const u64 = (n: number) => n.toString(16).padStart(2, "0") + "00000000000000"
    // 1 + 8 * 5 = 41 bytes: ext 8 (c7), length 0x29, type 2.
    expect(hex(body)).toBe("94" + "01" + "d601" + "01000000" + "92" + "a161" + "a162" + "c7" + "29" + "02" + "02" + [3, 2, 5, 7, 1].map(u64).join(""))
  })

  test("TensorFactory: ext 3, dtype, device, ndim, u64 LE shape", () => {
    const body = encoded({
      _tag: "Reduce", ident: 1, result: new Ref(1), tensor: new Ref(1), factory: new TensorFactory([6], "i32", "cuda"),
      mesh: new Ref(1), stream: new Ref(1), dims: [], reduction: "sum", scatter: false, inplace: false,
    })
    // 3 + 8 = 11 bytes: ext 8 (c7), length 0x0b, type 3; dtype i32 = 4, device cuda = 1, ndim 1.
    expect(hex(body)).toContain("c7" + "0b" + "03" + "04" + "01" + "01" + "0600000000000000")
  })

  test("HostTensor: ext 32, dtype, ndim, pad, u64 LE shape, zero pad, raw bytes at a multiple of 8", () => {
    for (const lead of ["", "x", "xyz", "a longer string...."]) {
      const t = tensor("f16", [3], 5)
      const body = encoded({ _tag: "FetchResult", ident: 1, value: [lead, t] })
      const ext = body.indexOf(0xc9) // nothing before it holds that byte
      expect(body[ext]).toBe(0xc9)
      const length = new DataView(body.buffer, body.byteOffset).getUint32(ext + 1)
      expect(body[ext + 5]).toBe(4) // ext type
      const payload = body.subarray(ext + 6, ext + 6 + length)
      const pad = payload[2]!
      expect([payload[0], payload[1]]).toEqual([2, 1]) // f16 = 2, one dim
      expect(hex(payload.subarray(3, 11))).toBe("0300000000000000")
      expect([...payload.subarray(11, 11 + pad)].every((b) => b === 0)).toBe(true)
      expect((ext + 6 + 11 + pad) % 8).toBe(0)
      expect(payload.subarray(11 + pad)).toEqual(t.data)
      expect(length).toBe(11 + pad + 6)
    }
  })

  test("ErrorPayload: ext 5 holding msgpack [type, message, [[file, line, function]]]", () => {
    const body = encoded({ _tag: "RemoteFunctionFailed", ident: 2, error: new ErrorPayload("E", "m", [{ file: "f", line: 9, function: "g" }]) })
    // fixarray 3 of "E", "m", [[ "f", 9, "g" ]] = 1 + 2 + 2 + 1 + 1 + 2 + 1 + 2 = 12 bytes: ext 8 (c7), length 0x0c, type 5.
    expect(hex(body)).toBe("93" + "43" + "02" + "c70c05" + "93a145a16d9193a16609a167")
  })
})

describe("tensor ownership", () => {
  const m: ControllerMessage = { _tag: "FetchResult", ident: 1, value: { small: tensor("f32", [3]), big: tensor("f32", [OUT_OF_LINE_BYTES], 2), bytes: new Uint8Array([9, 8]) } }
  const bytes = encoded(m)

  test("from an owned, aligned frame tensors are views of the frame", () => {
    const owned = placedAt(bytes, 0)
    const value = (Result.getOrThrow(decodeControllerMessage(owned, "owned")) as { value: Record<string, HostTensor> }).value
    for (const t of [value.small!, value.big!]) {
      expect(t.data.buffer).toBe(owned.buffer)
      expect(t.data.byteOffset % 8).toBe(0)
      expect(new Float32Array(t.data.buffer, t.data.byteOffset, t.data.byteLength / 4).length).toBe(t.shape[0]!)
    }
    // Writing through the frame shows through the view: it is the same memory.
    const big = value.big!
    owned[big.data.byteOffset] = owned[big.data.byteOffset]! ^ 0xff
    expect(big.data[0]).toBe(owned[big.data.byteOffset]!)
  })

  test("from a borrowed frame, tensors and bin are copies", () => {
    const borrowed = placedAt(bytes, 0)
    const value = (Result.getOrThrow(decodeControllerMessage(borrowed)) as { value: Record<string, HostTensor | Uint8Array> }).value
    for (const v of Object.values(value)) {
      const data = v instanceof HostTensor ? v.data : v
      expect(data.buffer).not.toBe(borrowed.buffer)
      expect(data.byteOffset % 8).toBe(0)
    }
    expect(Result.getOrThrow(decodeControllerMessage(borrowed))).toStrictEqual(m)
  })

  test("an owned frame at a misaligned offset still gives aligned (copied) tensor bytes", () => {
    for (const offset of [1, 3, 4, 7]) {
      const shifted = placedAt(bytes, offset)
      const value = (Result.getOrThrow(decodeControllerMessage(shifted, "owned")) as { value: Record<string, HostTensor> }).value
      expect(value.big!.data.byteOffset % 8).toBe(0)
      expect(value.big!.data.buffer).not.toBe(shifted.buffer)
      expect(value.big!.data).toEqual((m.value as Record<string, HostTensor>).big!.data)
    }
  })

  test("a tensor's bytes are aligned within the body however much comes before it", () => {
    for (let lead = 0; lead < 24; lead++) {
      const body = encoded({ _tag: "FetchResult", ident: lead, value: ["p".repeat(lead), tensor("f64", [2], lead), tensor("u8", [lead], lead), tensor("i64", [1])] })
      const value = (Result.getOrThrow(decodeControllerMessage(body, "owned")) as unknown as { value: unknown[] }).value
      for (const t of tensorsIn(value)) {
        expect(t.data.buffer).toBe(body.buffer)
        expect(t.data.byteOffset % 8).toBe(0)
      }
    }
  })
})

describe("encoding refuses what the wire cannot carry", () => {
  const refused = (m: unknown): string => {
    const r = encodeMessage(m as Message)
    if (Result.isSuccess(r)) throw new Error("encoded")
    expect(r.failure).toBeInstanceOf(WireError)
    return r.failure.message
  }
  const fetch = (value: unknown) => refused({ _tag: "FetchResult", ident: 1, value })

  test("values of other types, named by path", () => {
    expect(fetch({ a: [1, undefined] })).toBe("FetchResult.value.a[1]: expected a value, got undefined")
    expect(fetch([new Date(0)])).toBe("FetchResult.value[0]: expected a value, got timestamp")
    expect(fetch({ "x y": new Float32Array(2) })).toBe('FetchResult.value["x y"]: expected a value, got Float32Array')
    expect(fetch(new Map())).toBe("FetchResult.value: expected a value, got Map")
    expect(fetch([() => 1])).toBe("FetchResult.value[0]: expected a value, got function")
    expect(fetch([2n ** 64n])).toBe(`FetchResult.value[0]: bigint ${2n ** 64n} does not fit in 64 bits`)
    expect(fetch(new NDSlice(0, [1], [1]))).toBe("FetchResult.value: expected a value, got NDSlice")
  })

  test("bad refs, tensors and fields", () => {
    expect(fetch([new Ref(-1)])).toBe("FetchResult.value[0]: Ref id -1 is not a non-negative safe integer")
    expect(fetch(new HostTensor("f32", [3], new Uint8Array(10)))).toBe("FetchResult.value: HostTensor: 10 bytes for f32[3]")
    expect(fetch(new HostTensor("f32", [1, 1, 1, 1, 1, 1, 1, 1, 1], new Uint8Array(4)))).toBe("FetchResult.value: HostTensor: 9 dims (at most 8)")
    expect(refused({ _tag: "RequestStatus", ident: 1.5 })).toBe("RequestStatus.ident: expected unsigned integer, got float 1.5")
    expect(refused({ _tag: "CallFunction", ident: 1, results: [new Ref(1), 3], mutates: [], function: "f", args: [], kwargs: {}, stream: new Ref(1) }))
      .toBe("CallFunction.results[1]: expected Ref, got integer 3")
    expect(refused({ _tag: "Nope" })).toStartWith("cannot encode Nope")
    expect(refused({ _tag: "CommandGroup", commands: [{ _tag: "Status", firstUncompletedIdent: 1 }] }))
      .toBe("CommandGroup.commands[0]: Status (code 65) is not accepted by the worker")
  })

  test(`nesting deeper than ${MAX_DEPTH}`, () => {
    let v: Value = 1
    for (let i = 0; i < MAX_DEPTH; i++) v = [v]
    expect(fetch(v)).toBe(`FetchResult.value${"[0]".repeat(MAX_DEPTH - 1)}: nesting deeper than ${MAX_DEPTH}`)
  })
})
