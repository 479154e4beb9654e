// Untrusted bytes through decodeWorkerMessage / decodeControllerMessage: every malformed input
// gives a WireError that names the problem and where, and nothing ever throws.
import { Decoder, Encoder, ExtData } from "@msgpack/msgpack"
import { describe, expect, test } from "bun:test"
import { Result } from "effect"
import { decodeControllerMessage, decodeWorkerMessage, encodeMessage, MAX_DEPTH } from "../../src/protocol/codec.ts"
import { WireError } from "../../src/protocol/errors.ts"
import { MESSAGE_CODES, MESSAGE_FIELDS, MESSAGES, type Message } from "../../src/protocol/messages.ts"
import { NDSlice } from "../../src/protocol/ndslice.ts"
import { ErrorPayload, HostTensor, Ref, TensorFactory } from "../../src/protocol/values.ts"
import { decodeAny, expectedProblem, NOT_UTF8_BYTES, PLACEMENTS, withText } from "./notUtf8.ts"

// Raw msgpack, ext payloads kept as ExtData: how a test writes bytes the codec would never make.
const raw = new Encoder({ useBigInt64: true })
const rawDecoder = new Decoder({ useBigInt64: true })
const bytesOf = (wire: unknown): Uint8Array => raw.encode(wire)
const wireOf = (m: Message): unknown[] => rawDecoder.decode(Result.getOrThrow(encodeMessage(m))) as unknown[]

const isWorkerBound = (code: number) => code < 64
const decode = (bytes: Uint8Array, code = 1): Result.Result<Message, WireError> => (isWorkerBound(code) ? decodeWorkerMessage(bytes) : decodeControllerMessage(bytes))

/** The error's message; fails the test if decoding succeeded or the error is not a WireError. */
const problem = (bytes: Uint8Array, code = 1): string => {
  const r = decode(bytes, code)
  if (Result.isSuccess(r)) throw new Error(`decoded: ${String(r.success._tag)}`)
  expect(r.failure).toBeInstanceOf(WireError)
  expect(r.failure.fatal).toBe(false)
  return r.failure.message
}
const wireProblem = (wire: unknown[]) => problem(bytesOf(wire), wire[0] as number)

const u64 = (n: bigint): number[] => Array.from({ length: 8 }, (_, i) => Number((n >> BigInt(8 * i)) & 0xffn))
const ext = (type: number, bytes: number[]) => new ExtData(type, new Uint8Array(bytes))

const samples: Message[] = [
  { _tag: "CallFunction", ident: 7, results: [new Ref(10), new Ref(11)], mutates: [], function: "ops.neg", args: [new Ref(4), { k: [1, "a"] }], kwargs: { b: true }, stream: new Ref(1) },
  { _tag: "CommandGroup", commands: [{ _tag: "RequestStatus", ident: 3 }, { _tag: "DeleteRefs", refs: [1, 2] }] },
  { _tag: "FetchResult", ident: 9, value: [new HostTensor("f32", [3], new Uint8Array(12).fill(7)), "x"] },
  { _tag: "RemoteFunctionFailed", ident: 4, error: new ErrorPayload("E", "boom", [{ file: "a.ts", line: 3, function: "f" }]) },
  { _tag: "CreateDeviceMesh", result: new Ref(2), names: ["x", "y"], ranks: new NDSlice(0, [2, 2], [2, 1]) },
]

describe("truncation", () => {
  for (const m of samples) {
    test(`${m._tag} cut at every byte`, () => {
      const bytes = Result.getOrThrow(encodeMessage(m))
      expect(Result.isSuccess(decode(bytes, MESSAGE_CODES[m._tag]))).toBe(true)
      for (let n = 0; n < bytes.length; n++)
        expect(problem(bytes.subarray(0, n), MESSAGE_CODES[m._tag])).toBe(n === 0 ? "empty message" : `truncated message (${n} bytes)`)
    })
  }

  test("trailing bytes", () => {
    const bytes = Result.getOrThrow(encodeMessage({ _tag: "Exit" }))
    expect(problem(new Uint8Array([...bytes, 0xc0]))).toStartWith("trailing bytes after the message")
  })
})

describe("message shape", () => {
  test("unknown codes, non-arrays, the wrong direction", () => {
    expect(wireProblem([99])).toBe("unknown message code 99")
    expect(wireProblem([0, 1])).toBe("unknown message code 0")
    expect(problem(bytesOf(["CallFunction"]))).toBe("message code: expected integer, got string")
    expect(problem(bytesOf({ a: 1 }))).toBe("expected a message array [code, ...fields], got map")
    expect(problem(bytesOf(3))).toBe("expected a message array [code, ...fields], got integer 3")
    expect(problem(bytesOf([]))).toBe("empty message array (expected [code, ...fields])")
    expect(problem(bytesOf([65, 1]), 1)).toBe("Status (code 65) is not accepted by the worker")
    expect(problem(bytesOf([6]), 64)).toBe("Exit (code 6) is not accepted by the controller")
    expect(wireProblem([7, [[66, 1, null]]])).toBe("CommandGroup.commands[0]: FetchResult (code 66) is not accepted by the worker")
  })

  for (const tag of Object.keys(MESSAGE_CODES) as Message["_tag"][]) {
    test(`${tag} with one field too few or too many`, () => {
      // Optional fields end a message: it may leave them off, down to its required ones.
      const n = MESSAGE_FIELDS[tag].length, required = MESSAGES[tag].fields.filter(([, kind]) => !kind.optional).length
      const code = MESSAGE_CODES[tag], expected = required === n ? `${n}` : `${required} to ${n}`
      expect(wireProblem([code, ...Array(n + 1).fill(0)])).toBe(`${tag}: expected ${expected} fields, got ${n + 1}`)
      if (required > 0) expect(wireProblem([code, ...Array(required - 1).fill(0)])).toBe(`${tag}: expected ${expected} fields, got ${required - 1}`)
    })
  }

  test("map keys must be strings; __proto__ is refused", () => {
    expect(problem(new Uint8Array([0x93, 0x42, 0x01, 0x81, 0x01, 0x02]), 66)).toBe("malformed msgpack: map key must be a string, got integer 1")
    const proto = [...new TextEncoder().encode("__proto__")]
    expect(problem(new Uint8Array([0x93, 0x42, 0x01, 0x81, 0xa9, ...proto, 0x01]), 66)).toBe("malformed msgpack: The key __proto__ is not allowed")
  })

  test("a reserved type byte", () => {
    expect(problem(new Uint8Array([0x92, 0x05, 0xc1]))).toBe("malformed msgpack: Unrecognized type byte: 0xc1")
  })

  test("uint64 integers are accepted while safe", () => {
    const ok = decodeWorkerMessage(bytesOf([5, 2n ** 40n]))
    expect(Result.getOrThrow(ok)).toEqual({ _tag: "RequestStatus", ident: 2 ** 40 })
    expect(wireProblem([5, 2n ** 60n])).toBe("RequestStatus.ident: expected unsigned integer, got bigint")
  })
})

// For every field of every message: a value of the wrong type, and the error it must give
// (the part after "<Message>.<field>").
const badField: { readonly [K in Message["_tag"]]: { readonly [F in (typeof MESSAGE_FIELDS)[K][number]]: readonly [unknown, string] } } = (() => {
  const ref = ["oops", ": expected Ref, got string"] as const
  const uint = [-1, ": expected unsigned integer, got integer -1"] as const
  const text = [7, ": expected string, got integer 7"] as const
  const flag = [0, ": expected boolean, got integer 0"] as const
  const refList = [[new ExtData(1, new Uint8Array(4)), 2], "[1]: expected Ref, got integer 2"] as const
  const textList = [["a", 1], "[1]: expected string, got integer 1"] as const
  const anyValue = [[1, { k: new Date(0) }], "[1].k: expected a value, got timestamp"] as const
  return {
    CreateDeviceMesh: { result: ref, names: [{ a: 1 }, ": expected array, got map"], ranks: [[2, 1], ": expected NDSlice, got array"] },
    CreateStream: { result: ref, default: flag },
    CallFunction: {
      ident: uint, results: refList, mutates: [{}, ": expected array, got map"], function: text, args: ["a", ": expected array, got string"], kwargs: [[1], ": expected map, got array"], stream: ref,
      declared: [[null, ["f99", [2]]], '[1][0]: unknown dtype "f99" (one of f32, f64, f16, bf16, i32, i64, u8, bool)'],
      mesh: ref, dims: textList,
    },
    FetchValue: { ident: [1.5, ": expected unsigned integer, got float 1.5"], mutates: refList, function: [false, ": expected string, got boolean"], object: anyValue, stream: ref },
    RequestStatus: { ident: uint },
    Exit: {},
    CommandGroup: { commands: [[[5, 1], [99]], "[1]: unknown message code 99"] },
    DeleteRefs: { refs: [[1, "a"], "[1]: expected unsigned integer, got string"] },
    BorrowCreate: { result: ref, tensor: ref, from: ref, to: ref, alreadyBorrowed: flag },
    BorrowFirstUse: { borrow: uint },
    BorrowLastUse: { borrow: uint },
    BorrowDrop: { borrow: uint },
    Reduce: {
      ident: uint, result: ref, tensor: ref, factory: [new ExtData(1, new Uint8Array(4)), ": expected TensorFactory, got Ref"], mesh: ref, stream: ref,
      dims: textList, reduction: ["median", ': unknown reduction "median" (one of sum, prod, min, max, avg, stack)'], scatter: flag, inplace: flag,
    },
    SendTensor: { ident: uint, result: ref, fromRanks: [null, ": expected NDSlice, got nil"], toRanks: ["0..3", ": expected NDSlice, got string"], tensor: ref, factory: [3, ": expected TensorFactory, got integer 3"], stream: ref },
    DefineRecording: { recording: uint, idents: uint, formals: [[1, "a"], "[1]: expected unsigned integer, got string"], params: [7, ": expected array, got integer 7"], results: [[-2], "[0]: expected unsigned integer, got integer -2"], commands: [[[99]], "[0]: unknown message code 99"] },
    CallRecording: { ident: uint, recording: ["r", ": expected unsigned integer, got string"], results: refList, actuals: [{}, ": expected array, got map"], params: [{ k: 1 }, ": expected array, got map"] },
    DeleteRecording: { recording: uint },
    PeerLost: { rank: uint },
    Withheld: { ident: uint, refs: refList },
    SaveShards: { ident: uint, dir: text, tensors: refList, names: textList, writers: ["a", ": expected array, got string"], stream: ref },
    CommitCheckpoint: { ident: uint, dir: text, tmp: text, version: text, manifest: text, keep: uint },
    ReadCheckpoint: { ident: uint, path: text, version: [1, ": expected string, got integer 1"] },
    LoadShards: { ident: uint, results: refList, sources: [{}, ": expected array, got map"], stream: ref },
    DropCheckpoint: { ident: uint, tmp: text },
    SharedSegment: { segment: uint, path: text, bytes: uint, check: [new Uint8Array(15), ": 15 bytes, expected 16"], minBytes: uint },
    SegmentFree: { segment: uint },
    UploadSegment: { segment: uint, path: text, bytes: uint, check: [new Uint8Array(17), ": 17 bytes, expected 16"] },
    UploadTaken: { segment: uint, offsets: [[64, -1], "[1]: expected unsigned integer, got integer -1"] },
    SegmentMapped: { segment: uint, problem: [false, ": expected string, got boolean"] },
    FetchShared: { ident: uint, segment: uint, dtype: ["f99", ': unknown dtype "f99" (one of f32, f64, f16, bf16, i32, i64, u8, bool)'], shape: [[1, "a"], "[1]: expected unsigned integer, got string"] },
    WorkerHello: { rank: uint, world: uint, pid: uint, proof: [new Uint8Array(31), ": 31 bytes, expected 32"], device: [null, ": expected string, got nil"] },
    WorkerChallenge: { rank: uint, world: uint, nonce: ["n", ": expected bin, got string"] },
    ControllerProof: { nonce: [new Uint8Array(33), ": 33 bytes, expected 32"], proof: [null, ": expected bin, got nil"] },
    Status: { firstUncompletedIdent: uint },
    FetchResult: { ident: uint, value: anyValue },
    RemoteFunctionFailed: { ident: uint, error: ["boom", ": expected ErrorPayload, got string"] },
    Restarted: { restarts: uint },
    ProtocolError: { message: [new Uint8Array(1), ": expected string, got bin"] },
  }
})()

const validExample: { readonly [K in Message["_tag"]]: Extract<Message, { _tag: K }> } = {
  CreateDeviceMesh: samples[4] as Extract<Message, { _tag: "CreateDeviceMesh" }>,
  CreateStream: { _tag: "CreateStream", result: new Ref(1), default: true },
  CallFunction: { ...(samples[0] as Extract<Message, { _tag: "CallFunction" }>), declared: [null, null], mesh: new Ref(3), dims: ["tp"] },
  FetchValue: { _tag: "FetchValue", ident: 1, mutates: [], function: "f", object: [1], stream: new Ref(1) },
  RequestStatus: { _tag: "RequestStatus", ident: 1 },
  Exit: { _tag: "Exit" },
  CommandGroup: samples[1] as Extract<Message, { _tag: "CommandGroup" }>,
  DeleteRefs: { _tag: "DeleteRefs", refs: [1] },
  BorrowCreate: { _tag: "BorrowCreate", result: new Ref(1), tensor: new Ref(2), from: new Ref(3), to: new Ref(4), alreadyBorrowed: true },
  BorrowFirstUse: { _tag: "BorrowFirstUse", borrow: 1 },
  BorrowLastUse: { _tag: "BorrowLastUse", borrow: 1 },
  BorrowDrop: { _tag: "BorrowDrop", borrow: 1 },
  Reduce: {
    _tag: "Reduce", ident: 1, result: new Ref(1), tensor: new Ref(2), factory: new TensorFactory([2], "f32", "cpu"), mesh: new Ref(3),
    stream: new Ref(4), dims: ["x"], reduction: "sum", scatter: false, inplace: false,
  },
  SendTensor: {
    _tag: "SendTensor", ident: 1, result: new Ref(1), fromRanks: NDSlice.contiguous([2]), toRanks: NDSlice.contiguous([2], 2), tensor: new Ref(2),
    factory: new TensorFactory([2], "f32", "cpu"), stream: new Ref(3),
  },
  DefineRecording: { _tag: "DefineRecording", recording: 1, idents: 1, formals: [2], params: [3], results: [4], commands: [samples[0] as Extract<Message, { _tag: "CallFunction" }>] },
  CallRecording: { _tag: "CallRecording", ident: 5, recording: 1, results: [new Ref(6)], actuals: [new Ref(7)], params: [0.5] },
  DeleteRecording: { _tag: "DeleteRecording", recording: 1 },
  PeerLost: { _tag: "PeerLost", rank: 1 },
  Withheld: { _tag: "Withheld", ident: 1, refs: [new Ref(1)] },
  SaveShards: { _tag: "SaveShards", ident: 1, dir: "d", tensors: [new Ref(1)], names: ["w"], writers: [[0]], stream: new Ref(2) },
  CommitCheckpoint: { _tag: "CommitCheckpoint", ident: 1, dir: "d", tmp: "d/.tmp", version: "v", manifest: "{}", keep: 2 },
  ReadCheckpoint: { _tag: "ReadCheckpoint", ident: 1, path: "d", version: null },
  LoadShards: { _tag: "LoadShards", ident: 1, results: [new Ref(1)], sources: [[[0, "f", "k", [0], [2], null]]], stream: new Ref(2) },
  DropCheckpoint: { _tag: "DropCheckpoint", ident: 1, tmp: "d/.tmp-v" },
  SharedSegment: { _tag: "SharedSegment", segment: 1, path: "/proc/1/fd/3", bytes: 1 << 20, check: new Uint8Array(16).fill(5), minBytes: 0 },
  SegmentFree: { _tag: "SegmentFree", segment: 1 },
  UploadSegment: { _tag: "UploadSegment", segment: 2, path: "/proc/1/fd/4", bytes: 2 << 20, check: new Uint8Array(16).fill(6) },
  UploadTaken: { _tag: "UploadTaken", segment: 2, offsets: [64, 4160] },
  SegmentMapped: { _tag: "SegmentMapped", segment: 1, problem: null },
  FetchShared: { _tag: "FetchShared", ident: 1, segment: 1, dtype: "f32", shape: [2, 3] },
  WorkerHello: { _tag: "WorkerHello", rank: 0, world: 1, pid: 1, proof: new Uint8Array(32), device: "cpu" },
  WorkerChallenge: { _tag: "WorkerChallenge", rank: 0, world: 1, nonce: new Uint8Array(32).fill(7) },
  ControllerProof: { _tag: "ControllerProof", nonce: new Uint8Array(32).fill(1), proof: new Uint8Array(32).fill(2) },
  Status: { _tag: "Status", firstUncompletedIdent: 1 },
  FetchResult: samples[2] as Extract<Message, { _tag: "FetchResult" }>,
  RemoteFunctionFailed: samples[3] as Extract<Message, { _tag: "RemoteFunctionFailed" }>,
  Restarted: { _tag: "Restarted", restarts: 1 },
  ProtocolError: { _tag: "ProtocolError", message: "m" },
}

describe("a wrong type in each field", () => {
  for (const tag of Object.keys(MESSAGE_CODES) as Message["_tag"][]) {
    const fields: ReadonlyArray<string> = MESSAGE_FIELDS[tag]
    if (fields.length === 0) continue
    test(tag, () => {
      const wire = wireOf(validExample[tag])
      expect(Result.isSuccess(decode(bytesOf(wire), MESSAGE_CODES[tag]))).toBe(true)
      fields.forEach((field, i) => {
        const [bad, expected] = (badField[tag] as Record<string, readonly [unknown, string]>)[field]!
        const broken = [...wire]
        broken[i + 1] = bad
        expect(wireProblem(broken)).toBe(`${tag}.${field}${expected}`)
      })
    })
  }

  test("the same error inside a CommandGroup names the command", () => {
    const call = wireOf(samples[0]!)
    call[2] = [new ExtData(1, new Uint8Array(4)), new ExtData(1, new Uint8Array(4)), "r"]
    expect(wireProblem([7, [[6], call]])).toBe("CommandGroup.commands[1].CallFunction.results[2]: expected Ref, got string")
  })

  test("cross-field checks", () => {
    const mesh = wireOf(samples[4]!)
    mesh[2] = ["only"]
    expect(wireProblem(mesh)).toBe("CreateDeviceMesh.names: 1 names for a 2-dim NDSlice")
    mesh[2] = ["x", "x"]
    expect(wireProblem(mesh)).toBe("CreateDeviceMesh.names: repeated name in [x, x]")
    const send = wireOf(validExample.SendTensor)
    send[4] = wireOf({ _tag: "CreateDeviceMesh", result: new Ref(1), names: ["a"], ranks: NDSlice.contiguous([3]) })[3]
    expect(wireProblem(send)).toBe("SendTensor.toRanks: 3 ranks for 2 in fromRanks")
    expect(wireProblem([...wireOf(samples[0]!), [["f32", [2]]]])).toBe("CallFunction.declared: 1 declarations for 2 results")
    const mesh3 = new ExtData(1, new Uint8Array(4))
    expect(wireProblem([...wireOf(samples[0]!), [null, null], mesh3])).toBe("CallFunction.dims: a mesh without the dims of its group")
    expect(wireProblem([...wireOf(samples[0]!), [null, null], mesh3, []])).toBe("CallFunction.dims: [] is not a set of one or more dims")
    expect(wireProblem([...wireOf(samples[0]!), [null, null], mesh3, ["tp", "tp"]])).toBe("CallFunction.dims: [tp, tp] is not a set of one or more dims")
  })

  test("a declaration: [dtype, shape] or nil per result", () => {
    const call = wireOf(samples[0]!)
    expect(wireProblem([...call, [["f32", [2, -1]], null]])).toBe("CallFunction.declared[0][1][1]: expected unsigned integer, got integer -1")
    expect(wireProblem([...call, [["f32"], null]])).toBe("CallFunction.declared[0]: expected [dtype, shape] or nil, got an array of 1")
    expect(wireProblem([...call, [null, ["i64", Array(9).fill(1)]]])).toBe("CallFunction.declared[1][1]: 9 dims (at most 8)")
    expect(wireProblem([...call, "f32"])).toBe("CallFunction.declared: expected array, got string")
  })
})

describe("bad ext payloads", () => {
  const at = (where: "Ref" | "NDSlice" | "TensorFactory" | "HostTensor" | "ErrorPayload" | "value", payload: ExtData): string => {
    switch (where) {
      case "Ref": return wireProblem([3, 1, [], [], "f", [], {}, payload])
      case "NDSlice": return wireProblem([1, ext(1, [1, 0, 0, 0]), ["a"], payload])
      case "TensorFactory": return wireProblem([13, 1, ext(1, [1, 0, 0, 0]), ext(1, [1, 0, 0, 0]), payload, ext(1, [1, 0, 0, 0]), ext(1, [1, 0, 0, 0]), ["a"], "sum", false, false])
      case "ErrorPayload": return wireProblem([67, 1, payload])
      default: return wireProblem([66, 1, ["lead", payload]])
    }
  }
  const mp = (v: unknown) => [...raw.encode(v)]
  const cases: ReadonlyArray<readonly [string, "Ref" | "NDSlice" | "TensorFactory" | "HostTensor" | "ErrorPayload" | "value", ExtData, string]> = [
    ["Ref, 3 bytes", "Ref", ext(1, [1, 2, 3]), "CallFunction.stream: Ref: 3-byte payload (expected 4 or 8)"],
    ["Ref, empty", "Ref", ext(1, []), "CallFunction.stream: Ref: 0-byte payload (expected 4 or 8)"],
    ["Ref, unsafe u64", "Ref", ext(1, u64(2n ** 53n)), "CallFunction.stream: Ref: id is not a safe integer"],
    ["Ref inside a value", "value", ext(1, [1]), "FetchResult.value[1]: Ref: 1-byte payload (expected 4 or 8)"],
    ["NDSlice, empty", "NDSlice", ext(2, []), "CreateDeviceMesh.ranks: NDSlice: empty payload"],
    ["NDSlice, 9 dims", "NDSlice", ext(2, [9, ...Array(152).fill(0)]), "CreateDeviceMesh.ranks: NDSlice: 9 dims (at most 8)"],
    ["NDSlice, short", "NDSlice", ext(2, [1, ...u64(0n), ...u64(2n)]), "CreateDeviceMesh.ranks: NDSlice: 17-byte payload for 1 dims (expected 25)"],
    ["NDSlice, unsafe offset", "NDSlice", ext(2, [1, ...u64(2n ** 60n), ...u64(2n), ...u64(1n)]), "CreateDeviceMesh.ranks: NDSlice: offset is not a safe integer"],
    ["NDSlice, unsafe stride", "NDSlice", ext(2, [1, ...u64(0n), ...u64(2n), ...u64(2n ** 63n)]), "CreateDeviceMesh.ranks: NDSlice: strides[0] is not a safe integer"],
    ["NDSlice, unsafe largest rank", "NDSlice", ext(2, [1, ...u64(0n), ...u64(2n ** 52n), ...u64(4n)]), `CreateDeviceMesh.ranks: NDSlice: largest rank ${(2 ** 52 - 1) * 4} is not a safe integer`],
    ["NDSlice inside a value", "value", ext(2, [0, ...u64(3n)]), "FetchResult.value[1]: expected a value, got NDSlice"],
    ["TensorFactory, 2 bytes", "TensorFactory", ext(3, [0, 0]), "Reduce.factory: TensorFactory: 2-byte payload"],
    ["TensorFactory, dtype 8", "TensorFactory", ext(3, [8, 0, 0]), "Reduce.factory: TensorFactory: unknown dtype code 8"],
    ["TensorFactory, device 2", "TensorFactory", ext(3, [0, 2, 0]), "Reduce.factory: TensorFactory: unknown device code 2"],
    ["TensorFactory, 9 dims", "TensorFactory", ext(3, [0, 0, 9]), "Reduce.factory: TensorFactory: 9 dims (at most 8)"],
    ["TensorFactory, long", "TensorFactory", ext(3, [0, 0, 1, ...u64(3n), 0]), "Reduce.factory: TensorFactory: 12-byte payload for 1 dims (expected 11)"],
    ["TensorFactory, unsafe dim", "TensorFactory", ext(3, [0, 0, 1, ...u64(2n ** 64n - 1n)]), "Reduce.factory: TensorFactory: shape[0] is not a safe integer"],
    ["HostTensor, 10 bytes for f32[3]", "value", ext(4, [0, 1, 0, ...u64(3n), ...Array(10).fill(1)]), "FetchResult.value[1]: HostTensor: 10 bytes for f32[3]"],
    ["HostTensor, 2 bytes", "value", ext(4, [0, 1]), "FetchResult.value[1]: HostTensor: 2-byte payload"],
    ["SharedTensor, 17 bytes", "value", ext(6, Array(17).fill(0)), "FetchResult.value[1]: SharedTensor: 17-byte payload"],
    ["SharedTensor, dtype 8", "value", ext(6, [8, 0, ...u64(1n), ...u64(64n)]), "FetchResult.value[1]: SharedTensor: unknown dtype code 8"],
    ["SharedTensor, 9 dims", "value", ext(6, [0, 9, ...u64(1n), ...u64(64n)]), "FetchResult.value[1]: SharedTensor: 9 dims (at most 8)"],
    ["SharedTensor, short shape", "value", ext(6, [0, 1, ...u64(1n), ...u64(64n), 3]), "FetchResult.value[1]: SharedTensor: 19-byte payload for 1 dims (expected 26)"],
    ["SharedTensor, unsafe offset", "value", ext(6, [0, 0, ...u64(1n), ...u64(2n ** 60n)]), "FetchResult.value[1]: SharedTensor: [segment, offset][1] is not a safe integer"],
    ["SharedTensor, too large", "value", ext(6, [5, 2, ...u64(1n), ...u64(64n), ...u64(2n ** 40n), ...u64(2n ** 40n)]), "FetchResult.value[1]: SharedTensor: i64[1099511627776,1099511627776] is too large"],
    ["HostTensor, dtype 8", "value", ext(4, [8, 0, 0, 1]), "FetchResult.value[1]: HostTensor: unknown dtype code 8"],
    ["HostTensor, 9 dims", "value", ext(4, [0, 9, 0]), "FetchResult.value[1]: HostTensor: 9 dims (at most 8)"],
    ["HostTensor, pad 8", "value", ext(4, [6, 0, 8, ...Array(9).fill(0)]), "FetchResult.value[1]: HostTensor: pad 8 (at most 7)"],
    ["HostTensor, header cut", "value", ext(4, [6, 2, 0, ...u64(1n)]), "FetchResult.value[1]: HostTensor: 11-byte payload, shorter than its 19-byte header"],
    ["HostTensor, nonzero pad", "value", ext(4, [6, 1, 2, ...u64(1n), 0, 1, 5]), "FetchResult.value[1]: HostTensor: nonzero padding"],
    ["HostTensor, unsafe dim", "value", ext(4, [6, 1, 0, ...u64(2n ** 53n)]), "FetchResult.value[1]: HostTensor: shape[0] is not a safe integer"],
    ["HostTensor, too many elements", "value", ext(4, [0, 2, 0, ...u64(2n ** 40n), ...u64(2n ** 40n)]), "FetchResult.value[1]: HostTensor: f32[1099511627776,1099511627776] is too large"],
    ["ErrorPayload, not msgpack", "ErrorPayload", ext(5, [0xc1]), "RemoteFunctionFailed.error: ErrorPayload: malformed msgpack: Unrecognized type byte: 0xc1"],
    ["ErrorPayload, cut", "ErrorPayload", ext(5, mp(["t", "m", []]).slice(0, 3)), "RemoteFunctionFailed.error: ErrorPayload: truncated message (3 bytes)"],
    ["ErrorPayload, a map", "ErrorPayload", ext(5, mp({ type: "t" })), "RemoteFunctionFailed.error: ErrorPayload: expected [type, message, frames]"],
    ["ErrorPayload, type", "ErrorPayload", ext(5, mp([1, "m", []])), "RemoteFunctionFailed.error: ErrorPayload.type: expected string, got integer 1"],
    ["ErrorPayload, message", "ErrorPayload", ext(5, mp(["t", null, []])), "RemoteFunctionFailed.error: ErrorPayload.message: expected string, got nil"],
    ["ErrorPayload, frames", "ErrorPayload", ext(5, mp(["t", "m", {}])), "RemoteFunctionFailed.error: ErrorPayload.frames: expected array, got map"],
    ["ErrorPayload, a frame", "ErrorPayload", ext(5, mp(["t", "m", [["f", 1, "g"], ["f", -1, "g"]]])), "RemoteFunctionFailed.error: ErrorPayload.frames[1]: expected [string, unsigned integer, string]"],
    ["unknown ext type", "value", ext(9, [1, 2]), "FetchResult.value[1]: expected a value, got ext type 9"],
    ["timestamp", "value", ext(-1, [0, 0, 0, 0]), "FetchResult.value[1]: expected a value, got timestamp"],
  ]
  for (const [name, where, payload, expected] of cases) test(name, () => expect(at(where, payload)).toBe(expected))
})

describe("nesting", () => {
  const nestedArrays = (levels: number): unknown => {
    let v: unknown = 1
    for (let i = 0; i < levels; i++) v = [v]
    return v
  }

  test(`values: ${MAX_DEPTH - 1} levels under FetchResult pass, ${MAX_DEPTH} do not`, () => {
    // The message array is depth 1, so its value may hold MAX_DEPTH - 1 nested containers.
    expect(Result.isSuccess(decodeControllerMessage(bytesOf([66, 1, nestedArrays(MAX_DEPTH - 1)])))).toBe(true)
    expect(wireProblem([66, 1, nestedArrays(MAX_DEPTH)])).toBe(`FetchResult.value${"[0]".repeat(MAX_DEPTH - 1)}: nesting deeper than ${MAX_DEPTH}`)
    let map: unknown = { leaf: 1 }
    for (let i = 1; i < MAX_DEPTH; i++) map = { m: map }
    expect(wireProblem([66, 1, map])).toBe(`FetchResult.value${".m".repeat(MAX_DEPTH - 1)}: nesting deeper than ${MAX_DEPTH}`)
  })

  test("CommandGroups: 16 nested pass, 17 do not", () => {
    // Group k (from 0) sits at depth 1 + 2k and its commands array at 2 + 2k: group 15's
    // commands are at depth 32, group 16 itself at 33.
    const groups = (n: number): unknown[] => (n === 1 ? [7, []] : [7, [groups(n - 1)]])
    expect(Result.isSuccess(decodeWorkerMessage(bytesOf(groups(16))))).toBe(true)
    expect(wireProblem(groups(17))).toBe(`${Array(16).fill("CommandGroup.commands[0]").join(".")}: nesting deeper than ${MAX_DEPTH}`)
  })

  test("a million nested arrays are refused before they are built", () => {
    const bytes = new Uint8Array(3 + 1_000_000 + 1)
    bytes.set([0x93, 0x42, 0x01])
    bytes.fill(0x91, 3, 3 + 1_000_000)
    bytes[bytes.length - 1] = 0xc0
    // Byte 3 opens depth 2, so byte 35 would open depth 34: past the scan's MAX_DEPTH + 1.
    expect(problem(bytes, 66)).toBe(`nesting deeper than ${MAX_DEPTH} (at byte 35)`)
    expect(problem(bytes.subarray(3))).toBe(`nesting deeper than ${MAX_DEPTH} (at byte 33)`)
  })
})

describe("declared sizes are checked before anything is allocated", () => {
  // Each item takes at least a byte, so a container that declares more than the bytes left is cut.
  const timed = (bytes: Uint8Array, code = 66): [string, number] => {
    const t = performance.now()
    const p = problem(bytes, code)
    return [p, performance.now() - t]
  }

  test("5 bytes declaring an array of 55 million items", () => {
    const [p, ms] = timed(new Uint8Array([0xdd, 0x03, 0x48, 0xa4, 0xaa]))
    expect(p).toBe("truncated message (5 bytes)")
    expect(ms).toBeLessThan(50) // the library alone spends ~300 ms and 440 MB on it
  })

  test("a chain of arrays each declaring 65535 items", () => {
    const chain = new Uint8Array(3 + 600)
    chain.set([0x93, 0x42, 0x01])
    for (let i = 0; i < 200; i++) chain.set([0xdc, 0xff, 0xff], 3 + 3 * i)
    expect(timed(chain)[0]).toBe(`truncated message (${chain.length} bytes)`)
  })

  test("a map declaring more entries than bytes, and strings, bins and exts past the end", () => {
    expect(timed(new Uint8Array([0x93, 0x42, 0x01, 0xdf, 0x00, 0x10, 0x00, 0x00, 0xc0, 0xc0]))[0]).toBe("truncated message (10 bytes)")
    for (const head of [[0xdb, 0x7f, 0, 0, 0], [0xc6, 0xff, 0xff, 0xff, 0xff], [0xc9, 0x10, 0, 0, 0, 4], [0xd8, 4]])
      expect(timed(new Uint8Array([0x93, 0x42, 0x01, ...head]))[0]).toBe(`truncated message (${3 + head.length} bytes)`)
  })

  test("inside an ErrorPayload too", () => {
    const payload = new ExtData(5, new Uint8Array([0xdd, 0x03, 0x48, 0xa4, 0xaa]))
    expect(wireProblem([67, 1, payload])).toBe("RemoteFunctionFailed.error: ErrorPayload: truncated message (5 bytes)")
  })
})

describe("random input", () => {
  /** mulberry32: a small seeded generator, so a failure can be replayed. */
  const rng = (seed: number) => () => {
    seed = (seed + 0x6d2b79f5) | 0
    let t = Math.imul(seed ^ (seed >>> 15), 1 | seed)
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296
  }

  /** Decodes `bytes` both ways: must not throw; a success must encode again. */
  const survive = (bytes: Uint8Array): "ok" | "refused" => {
    let outcome: "ok" | "refused" = "refused"
    const results: Array<Result.Result<Message, WireError>> = [decodeWorkerMessage(bytes), decodeWorkerMessage(bytes, "owned"), decodeControllerMessage(bytes)]
    for (const r of results) {
      if (Result.isSuccess(r)) {
        outcome = "ok"
        expect(Result.isSuccess(encodeMessage(r.success))).toBe(true)
      } else {
        expect(r.failure).toBeInstanceOf(WireError)
        expect(r.failure.message.length).toBeGreaterThan(0)
        expect(r.failure.fatal).toBe(false)
      }
    }
    return outcome
  }

  test("3000 random byte strings", () => {
    const next = rng(1234)
    let ok = 0
    for (let i = 0; i < 3000; i++) {
      const bytes = Uint8Array.from({ length: Math.floor(next() * 64) }, () => Math.floor(next() * 256))
      // Often start like a message, so the checks past the first byte get exercised too.
      if (bytes.length > 1 && next() < 0.5) { bytes[0] = 0x90 + Math.floor(next() * 12); bytes[1] = Math.floor(next() * 16) }
      if (survive(bytes) === "ok") ok++
    }
    expect(ok).toBeLessThan(3000)
  })

  test("3000 mutations of valid messages", () => {
    const next = rng(99)
    const valid = samples.map((m) => Result.getOrThrow(encodeMessage(m)))
    const outcomes = { ok: 0, refused: 0 }
    for (let i = 0; i < 3000; i++) {
      const bytes = valid[i % valid.length]!.slice()
      const edits = 1 + Math.floor(next() * 3)
      for (let e = 0; e < edits; e++) bytes[Math.floor(next() * bytes.length)] = Math.floor(next() * 256)
      outcomes[survive(bytes)]++
    }
    // Both kinds happen: mutations that are still valid, and ones that are caught.
    expect(outcomes.ok).toBeGreaterThan(0)
    expect(outcomes.refused).toBeGreaterThan(0)
  })
})

describe("strs that are not UTF-8 are refused, naming the field", () => {
  for (const placement of PLACEMENTS) {
    test(placement.where, () => {
      const sample = placement.make("")
      for (const [what, bytes] of NOT_UTF8_BYTES) {
        const r = decodeAny(withText(placement, [0x61, ...bytes]), sample)
        expect({ what, problem: Result.isFailure(r) ? r.failure.message : "accepted" }).toEqual({ what, problem: expectedProblem(placement) })
      }
      // Valid text of every width still decodes, to exactly itself.
      const text = "aü€𝄞"
      expect(Result.getOrThrow(decodeAny(withText(placement, [...new TextEncoder().encode(text)]), sample))).toStrictEqual(placement.make(text) as never)
    })
  }

  test("a long str (decoded by the library with TextDecoder) with one bad byte", () => {
    const fetch = PLACEMENTS.find((p) => p.where === "FetchResult.value[0]")!
    const bytes = [...new TextEncoder().encode("x".repeat(300)), 0xff]
    expect(problem(withText(fetch, bytes), 66)).toBe("FetchResult.value[0]: not valid UTF-8")
  })

  test("a genuine ext -128 next to a bad str is still named as what it is", () => {
    const call = wireOf(samples[0]!)
    call[5] = [new ExtData(-128, new Uint8Array([0])), "\u007f"]
    const bytes = bytesOf(call)
    bytes[bytes.lastIndexOf(0x7f)] = 0xff
    expect(problem(bytes)).toBe("CallFunction.args[0]: expected a value, got ext type -128")
  })

  test("encoding refuses lone surrogates, which UTF-8 cannot carry", () => {
    const refusal = (m: Message) => {
      const r = encodeMessage(m)
      return Result.isFailure(r) ? r.failure.message : "encoded"
    }
    const lone = "a\ud800"
    expect(refusal({ _tag: "ProtocolError", message: lone })).toBe("ProtocolError.message: string with a lone surrogate (not encodable as UTF-8)")
    expect(refusal({ _tag: "FetchResult", ident: 1, value: { k: [lone] } })).toBe("FetchResult.value.k[0]: string with a lone surrogate (not encodable as UTF-8)")
    expect(refusal({ _tag: "FetchResult", ident: 1, value: { [lone]: 1 } })).toBe("FetchResult.value: map key: string with a lone surrogate (not encodable as UTF-8)")
    expect(refusal({ _tag: "CreateDeviceMesh", result: new Ref(1), names: [lone], ranks: NDSlice.contiguous([1]) })).toBe("CreateDeviceMesh.names[0]: string with a lone surrogate (not encodable as UTF-8)")
  })
})
