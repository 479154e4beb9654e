/**
 * Codec and framing throughput: small commands (one CallFunction, and 64 in a CommandGroup)
 * encoded and decoded per second, and a 64 MiB f32 FetchResult frame in GB/s. Decoding
 * means bytes -> checked, typed message. Each row is the median of ROUNDS timed rounds after
 * WARMUP untimed ones; `ok` counts the round's outputs that checked out.
 *
 *   node_modules/.bin/bun run bench/codec.ts
 */
import { Result } from "effect"
import { decodeControllerMessage, decodeWorkerMessage, encodeMessage, encodeMessageParts } from "../src/protocol/codec.ts"
import { FrameReader, type FrameOwnership } from "../src/protocol/framing.ts"
import type { ControllerMessage, WorkerMessage } from "../src/protocol/messages.ts"
import { HostTensor, Ref } from "../src/protocol/values.ts"

const WARMUP = 2
const ROUNDS = 7

interface Round {
  /** Units of work done (messages, bytes). */
  readonly work: number
  readonly ok: number
  readonly total: number
}

interface Row {
  readonly name: string
  readonly unit: string
  readonly copies: string
  readonly median: number
  readonly min: number
  readonly max: number
  readonly ok: number
  readonly total: number
}

const rows: Row[] = []

/** Runs `round` WARMUP + ROUNDS times; rates are work / second, divided by `scale` for the unit. */
const measure = (name: string, unit: string, scale: number, copies: string, round: () => Round) => {
  for (let i = 0; i < WARMUP; i++) round()
  const rates: number[] = []
  let ok = 0, total = 0
  for (let i = 0; i < ROUNDS; i++) {
    const start = Bun.nanoseconds()
    const r = round()
    const seconds = (Bun.nanoseconds() - start) / 1e9
    rates.push(r.work / seconds / scale)
    ok += r.ok
    total += r.total
  }
  rates.sort((a, b) => a - b)
  rows.push({ name, unit, copies, median: rates[Math.floor(ROUNDS / 2)]!, min: rates[0]!, max: rates[ROUNDS - 1]!, ok, total })
}

// ---- small commands -------------------------------------------------------------------------

const call = (ident: number): WorkerMessage => ({
  _tag: "CallFunction", ident, results: [new Ref(1000 + ident)], mutates: [], function: "ops.neg", args: [new Ref(ident)], kwargs: {}, stream: new Ref(1),
})
const single = call(12345)
const singleBytes = Result.getOrThrow(encodeMessage(single))
const group: WorkerMessage = { _tag: "CommandGroup", commands: Array.from({ length: 64 }, (_, i) => call(i)) }
const groupBytes = Result.getOrThrow(encodeMessage(group))

const SMALL = 200_000
const GROUPS = 4_000

measure("CallFunction encode", "M msg/s", 1e6, "-", () => {
  let ok = 0
  for (let i = 0; i < SMALL; i++) {
    const r = encodeMessage(single)
    if (Result.isSuccess(r) && r.success.length === singleBytes.length) ok++
  }
  return { work: SMALL, ok, total: SMALL }
})

measure("CallFunction decode", "M msg/s", 1e6, "-", () => {
  let ok = 0
  for (let i = 0; i < SMALL; i++) {
    const r = decodeWorkerMessage(singleBytes)
    if (Result.isSuccess(r) && r.success._tag === "CallFunction" && r.success.ident === 12345 && r.success.args[0] instanceof Ref) ok++
  }
  return { work: SMALL, ok, total: SMALL }
})

measure("CommandGroup(64 CallFunction) encode", "M cmd/s", 1e6, "-", () => {
  let ok = 0
  for (let i = 0; i < GROUPS; i++) {
    const r = encodeMessage(group)
    if (Result.isSuccess(r) && r.success.length === groupBytes.length) ok++
  }
  return { work: GROUPS * 64, ok, total: GROUPS }
})

measure("CommandGroup(64 CallFunction) decode", "M cmd/s", 1e6, "-", () => {
  let ok = 0
  for (let i = 0; i < GROUPS; i++) {
    const r = decodeWorkerMessage(groupBytes)
    if (Result.isSuccess(r) && r.success._tag === "CommandGroup" && r.success.commands.length === 64) {
      const last = r.success.commands[63]!
      if (last._tag === "CallFunction" && last.ident === 63) ok++
    }
  }
  return { work: GROUPS * 64, ok, total: GROUPS }
})

// ---- a 64 MiB tensor frame ------------------------------------------------------------------

const TENSOR_BYTES = 64 * 1024 * 1024
const FRAMES = 6
const data = new Uint8Array(TENSOR_BYTES)
for (let i = 0; i < TENSOR_BYTES; i += 4093) data[i] = (i >>> 12) & 0xff
data[TENSOR_BYTES - 1] = 0x5a
const tensorMessage: ControllerMessage = { _tag: "FetchResult", ident: 7, value: new HostTensor("f32", [TENSOR_BYTES / 4], data) }
const tensorBody = Result.getOrThrow(encodeMessage(tensorMessage))

/** The decoded tensor has the right shape and bytes; `view`: it must (not) share `frame`'s memory. */
const tensorOk = (r: Result.Result<ControllerMessage, unknown>, frame: Uint8Array, view: boolean): boolean => {
  if (!Result.isSuccess(r) || r.success._tag !== "FetchResult" || !(r.success.value instanceof HostTensor)) return false
  const t = r.success.value
  return t.shape[0] === TENSOR_BYTES / 4 && t.data.length === TENSOR_BYTES && t.data[4093] === data[4093] && t.data[TENSOR_BYTES - 1] === 0x5a &&
    t.data.byteOffset % 8 === 0 && (t.data.buffer === frame.buffer) === view
}

measure("64 MiB f32 FetchResult encode, parts", "GB/s", 1e9, "0", () => {
  let ok = 0
  for (let i = 0; i < FRAMES; i++) {
    const r = encodeMessageParts(tensorMessage)
    if (Result.isSuccess(r) && r.success.some((p) => p === data) && r.success.reduce((n, p) => n + p.length, 0) === tensorBody.length) ok++
  }
  return { work: FRAMES * TENSOR_BYTES, ok, total: FRAMES }
})

measure("64 MiB f32 FetchResult encode, contiguous", "GB/s", 1e9, "1", () => {
  let ok = 0
  for (let i = 0; i < FRAMES; i++) {
    const r = encodeMessage(tensorMessage)
    if (Result.isSuccess(r) && r.success.length === tensorBody.length && r.success[r.success.length - 1] === 0x5a) ok++
  }
  return { work: FRAMES * TENSOR_BYTES, ok, total: FRAMES }
})

measure("64 MiB f32 FetchResult decode, owned frame", "GB/s", 1e9, "0", () => {
  let ok = 0
  for (let i = 0; i < FRAMES; i++) if (tensorOk(decodeControllerMessage(tensorBody, "owned"), tensorBody, true)) ok++
  return { work: FRAMES * TENSOR_BYTES, ok, total: FRAMES }
})

measure("64 MiB f32 FetchResult decode, borrowed frame", "GB/s", 1e9, "1", () => {
  let ok = 0
  for (let i = 0; i < FRAMES; i++) if (tensorOk(decodeControllerMessage(tensorBody, "borrowed"), tensorBody, false)) ok++
  return { work: FRAMES * TENSOR_BYTES, ok, total: FRAMES }
})

// As off a socket: 64 KiB chunks -> FrameReader (one copy into the frame) -> decode (a view).
const CHUNK = 64 * 1024
const stream = new Uint8Array(4 + tensorBody.length)
new DataView(stream.buffer).setUint32(0, tensorBody.length)
stream.set(tensorBody, 4)
const chunks = Array.from({ length: Math.ceil(stream.length / CHUNK) }, (_, i) => stream.subarray(i * CHUNK, (i + 1) * CHUNK))

/** A reader that lives as long as its connection would; with `recycle`, frames go back once checked. */
const frameReading = (recycle: boolean) => {
  let ok = 0
  const reader: FrameReader = new FrameReader((frame: Uint8Array, ownership: FrameOwnership) => {
    if (ownership === "owned" && tensorOk(decodeControllerMessage(frame, ownership), frame, true)) ok++
    if (recycle) reader.recycle(frame)
  })
  return (): Round => {
    ok = 0
    for (let i = 0; i < FRAMES; i++) for (const c of chunks) reader.push(c)
    return { work: FRAMES * TENSOR_BYTES, ok, total: FRAMES }
  }
}

measure("64 MiB f32 frame: 64 KiB chunks -> FrameReader -> decode", "GB/s", 1e9, "1", frameReading(false))
measure("  same, frames recycled after use", "GB/s", 1e9, "1", frameReading(true))

// ---- table ----------------------------------------------------------------------------------

const fmt = (n: number) => (n >= 1000 ? n.toExponential(2) : n >= 10 ? n.toFixed(1) : n.toFixed(2))
const header = [["case", "unit", "median", "min", "max", "payload copies", "ok"], ["", "", "", "", "", "", "(of total)"]]
const body = rows.map((r) => [r.name, r.unit, fmt(r.median), fmt(r.min), fmt(r.max), r.copies, `${r.ok}/${r.total}`])
const widths = header[0]!.map((_, c) => Math.max(...[...header, ...body].map((line) => line[c]!.length)))
const line = (cells: string[]) => cells.map((cell, c) => (c === 0 ? cell.padEnd(widths[c]!) : cell.padStart(widths[c]!))).join("  ")
console.log(`# bun ${Bun.version}, @msgpack/msgpack codec; ${WARMUP} warmup + ${ROUNDS} timed rounds per row (median, min, max)`)
console.log(`# CallFunction: ${singleBytes.length} bytes; CommandGroup of 64: ${groupBytes.length} bytes; tensor frame: ${tensorBody.length} bytes`)
for (const h of header) console.log(line(h))
for (const b of body) console.log(line(b))
const failed = rows.filter((r) => r.ok !== r.total)
if (failed.length > 0) {
  console.error(`wrong results in: ${failed.map((r) => r.name).join(", ")}`)
  process.exitCode = 1
}
