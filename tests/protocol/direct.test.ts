// Direct reads: a frame's first CallFunction host tensor is found from the frame's first bytes
// (locate.ts) and its elements read straight into memory given for it, with the frame left
// whole otherwise: for random tensors, chunkings and the commands around it, the bytes given are
// the tensor's and the decoded message is the one read without direct reads. A tensor is read
// straight only where it is used once (a CallFunction's, alone or in a CommandGroup), never in
// a recording's commands, a fetch, a small frame, or one past the frame's first 64 KiB; a prefix that stops short asks for more.
import { expect, test } from "bun:test"
import { Result } from "effect"
import { decodeWorkerMessage, encodeMessageParts } from "../../src/protocol/codec.ts"
import { FrameReader, FrameWriter, type FrameOwnership } from "../../src/protocol/framing.ts"
import { locateTensor, type Located } from "../../src/protocol/locate.ts"
import type { WorkerMessage } from "../../src/protocol/messages.ts"
import { DTYPES, HostTensor, ITEM_SIZE, Ref, type DType } from "../../src/protocol/values.ts"

let seed = 0xd1ec7
const random = () => ((seed = (seed * 1103515245 + 12345) >>> 0) / 2 ** 32)
const host = (dtype: DType, shape: number[]) =>
  new HostTensor(dtype, shape, Uint8Array.from({ length: shape.reduce((a, b) => a * b, ITEM_SIZE[dtype]) }, () => Math.floor(random() * 256) & (dtype === "bool" ? 1 : 0xff)))
const call = (args: unknown[], ident = 1): WorkerMessage =>
  ({ _tag: "CallFunction", ident, results: [new Ref(2)], mutates: [], function: "ops.clone", args, kwargs: { k: 1 }, stream: new Ref(1) }) as WorkerMessage

/** The frame of `m` (length prefix and body) as the socket carries it. */
const frameOf = (m: WorkerMessage): Uint8Array => {
  const out: Uint8Array[] = []
  new FrameWriter({ write: (b) => (out.push(b.slice()), b.byteLength) }).write(Result.getOrThrow(encodeMessageParts(m)))
  return Buffer.concat(out)
}

/** Reads `frame` in random chunks, with or without direct reads: the decoded message, and what direct reads were asked and given. */
const read = (frame: Uint8Array, direct: boolean) => {
  const asked: Located[] = [], given: Uint8Array[] = []
  let got: { body: Uint8Array; ownership: FrameOwnership } | undefined
  const reader = new FrameReader((body, ownership) => void (got = { body, ownership }), direct ? {
    direct: (_body, located) => {
      asked.push(located)
      const into = new Uint8Array(located.bytes)
      given.push(into)
      return into
    },
  } : {})
  for (let at = 0; at < frame.byteLength;) {
    const n = 1 + Math.floor(random() * (random() < 0.3 ? 64 : 150_000))
    expect(reader.push(frame.subarray(at, at + n))).toBeUndefined()
    at += n
  }
  return { ...got!, asked, given }
}

/** The message decoded from a body, with a tensor read straight put back where it lies (to compare with the plain read). */
const decoded = (r: ReturnType<typeof read>) => {
  if (r.asked.length > 0) r.body.set(r.given[0]!, r.asked[0]!.at)
  return Result.getOrThrow(decodeWorkerMessage(r.body, r.ownership))
}

test("a CallFunction's tensor is read straight, bit for bit, whatever the chunking, alone or in a CommandGroup after other commands", () => {
  for (let trial = 0; trial < 40; trial++) {
    const dtype = DTYPES[Math.floor(random() * DTYPES.length)]!
    const rows = 1 + Math.floor(random() * 64)
    const t = host(dtype, [rows, Math.ceil((64 * 1024 + Math.floor(random() * 300_000)) / ITEM_SIZE[dtype] / rows)])
    const small = host("f32", [3])
    const inner = call([small, [t, host("u8", [70_000])], "x"], 7)
    const m: WorkerMessage = random() < 0.5 ? inner : { _tag: "CommandGroup", commands: [{ _tag: "FetchValue", ident: 5, mutates: [], function: null, object: host("u8", [300]), stream: new Ref(1) }, { _tag: "DeleteRefs", refs: [1, 2] }, inner] }
    const frame = frameOf(m)
    const direct = read(frame, true), plain = read(frame, false)
    expect(direct.asked.length).toBe(1)
    expect({ dtype: direct.asked[0]!.dtype, shape: direct.asked[0]!.shape }).toEqual({ dtype, shape: t.shape })
    expect(Buffer.compare(direct.given[0]!, t.data)).toBe(0)
    const mine = decoded(direct)
    // The decoded HostTensor lies where the tensor was read from (what the worker matches on).
    const args = (m._tag === "CommandGroup" ? (mine as Extract<WorkerMessage, { _tag: "CommandGroup" }>).commands[2]! : mine) as Extract<WorkerMessage, { _tag: "CallFunction" }>
    expect(((args.args[1] as unknown[])[0] as HostTensor).data.byteOffset).toBe(direct.asked[0]!.at)
    expect(mine).toEqual(decoded(plain))
  }
})

test("no direct read for a recording's commands, a fetch's value, a tensor under the threshold, a small frame, or past 64 KiB in", () => {
  const t = host("f32", [40_000])
  const cases: WorkerMessage[] = [
    { _tag: "DefineRecording", recording: 1, idents: 1, formals: [], params: [], results: [2], commands: [call([t])] },
    { _tag: "FetchValue", ident: 3, mutates: [], function: null, object: t, stream: new Ref(1) },
    call([host("u8", [60_000]), host("u8", [60_000])]),
    call([host("f32", [3])]),
    // Behind 300 small commands: past the walk's 1024 values, not looked for (a batch of many small commands costs a short walk).
    { _tag: "CommandGroup", commands: [...Array.from({ length: 300 }, (_, i) => call([new Ref(i), 1], i)), call([t])] },
    // Its tensor past the first 64 KiB of the frame: not looked for that far.
    { _tag: "CommandGroup", commands: [{ _tag: "FetchValue", ident: 5, mutates: [], function: null, object: host("u8", [80_000]), stream: new Ref(1) }, call([t])] },
  ]
  for (const m of cases) {
    const r = read(frameOf(m), true)
    expect({ m: m._tag, asked: r.asked.length }).toEqual({ m: m._tag, asked: 0 })
    expect(decoded(r)).toEqual(decoded(read(frameOf(m), false)))
  }
})

test("a prefix that stops short asks for more; a body that is not a message is not walked", () => {
  const body = Buffer.concat(Result.getOrThrow(encodeMessageParts(call([host("f32", [1 << 16])]))))
  const at = (locateTensor(body) as Located).at
  // Its header ends at most 7 pad bytes before its elements.
  for (let n = 0; n < at - 7; n += 1 + Math.floor(random() * 7)) expect(locateTensor(body.subarray(0, n))).toBe("more")
  expect(locateTensor(body.subarray(0, at))).toMatchObject({ at, dtype: "f32", shape: [1 << 16] })
  expect(locateTensor(Uint8Array.from([0x07]))).toBe("none")
  expect(locateTensor(Uint8Array.from([0xc1, 1, 2]))).toBe("none")
  // 40 nested arrays: past the walk's depth, so not walked.
  expect(locateTensor(Uint8Array.from([...new Array(40).fill(0x91), 0x01]))).toBe("none")
})
