/**
 * Strs that are not UTF-8, in every kind of place a message holds text: each must be refused
 * with a WireError (answered by a ProtocolError) naming the field, and the same frame with
 * valid text of the same length must decode to exactly that text. Used by malformed.test.ts
 * and the fuzz area's RELIABILITY.md row (which also sends such frames to a live worker).
 */
import { Result } from "effect"
import { decodeControllerMessage, decodeWorkerMessage, encodeMessage } from "../../src/protocol/codec.ts"
import type { WireError } from "../../src/protocol/errors.ts"
import type { Message } from "../../src/protocol/messages.ts"
import { NDSlice } from "../../src/protocol/ndslice.ts"
import { ErrorPayload, Ref, TensorFactory } from "../../src/protocol/values.ts"
import { rng } from "./lookups.ts"

/** Byte sequences that are not UTF-8, each with what makes it so. */
export const NOT_UTF8_BYTES: ReadonlyArray<readonly [string, number[]]> = [
  ["a lone continuation byte", [0x80]],
  ["0xff", [0xff]],
  ["an overlong NUL", [0xc0, 0x80]],
  ["an overlong slash (3 bytes)", [0xe0, 0x80, 0xaf]],
  ["a UTF-16 surrogate (CESU-8)", [0xed, 0xa0, 0x80]],
  ["past U+10FFFF", [0xf4, 0x90, 0x80, 0x80]],
  ["a lead byte 0xf5", [0xf5, 0x80, 0x80, 0x80]],
  ["a 3-byte sequence cut after 2", [0xe2, 0x82]],
  ["a 2-byte lead then ASCII", [0xc3, 0x41]],
]

/** A message with `text` in one place, and the name that place has in errors. */
export interface Placement {
  readonly where: string
  readonly make: (text: string) => Message
  /** A map key, not a value: the error names the map. */
  readonly key?: boolean
}

const stream = new Ref(1)
export const PLACEMENTS: ReadonlyArray<Placement> = [
  { where: "CallFunction.function", make: (t) => ({ _tag: "CallFunction", ident: 1, results: [], mutates: [], function: t, args: [], kwargs: {}, stream }) },
  { where: "CallFunction.args[1][0]", make: (t) => ({ _tag: "CallFunction", ident: 1, results: [], mutates: [], function: "f", args: [1, [t]], kwargs: {}, stream }) },
  { where: "CallFunction.kwargs.opts", key: true, make: (t) => ({ _tag: "CallFunction", ident: 1, results: [], mutates: [], function: "f", args: [], kwargs: { opts: { [t]: 1 } }, stream }) },
  { where: "CreateDeviceMesh.names[1]", make: (t) => ({ _tag: "CreateDeviceMesh", result: new Ref(2), names: ["x", t], ranks: NDSlice.contiguous([1, 1]) }) },
  { where: "FetchValue.function", make: (t) => ({ _tag: "FetchValue", ident: 1, mutates: [], function: t, object: null, stream }) },
  {
    where: "Reduce.dims[0]",
    make: (t) => ({ _tag: "Reduce", ident: 1, result: new Ref(3), tensor: new Ref(4), factory: new TensorFactory([1], "f32", "cpu"), mesh: new Ref(2), stream, dims: [t], reduction: "sum", scatter: false, inplace: false }),
  },
  { where: "CommandGroup.commands[1].FetchValue.object.k", make: (t) => ({ _tag: "CommandGroup", commands: [{ _tag: "RequestStatus", ident: 0 }, { _tag: "FetchValue", ident: 1, mutates: [], function: null, object: { k: t }, stream }] }) },
  { where: "WorkerHello.device", make: (t) => ({ _tag: "WorkerHello", rank: 0, world: 1, pid: 1, proof: new Uint8Array(32), device: t }) },
  { where: "FetchResult.value[0]", make: (t) => ({ _tag: "FetchResult", ident: 1, value: [t] }) },
  { where: "RemoteFunctionFailed.error: ErrorPayload.message", make: (t) => ({ _tag: "RemoteFunctionFailed", ident: 1, error: new ErrorPayload("E", t, []) }) },
  { where: "ProtocolError.message", make: (t) => ({ _tag: "ProtocolError", message: t }) },
]

export const isWorkerBound = (m: Message): boolean => ["CallFunction", "CreateDeviceMesh", "FetchValue", "Reduce", "CommandGroup"].includes(m._tag)

export const decodeAny = (bytes: Uint8Array, m: Message): Result.Result<Message, WireError> => (isWorkerBound(m) ? decodeWorkerMessage(bytes) : decodeControllerMessage(bytes))

/** What the codec must answer for text that is not UTF-8 at `p`. */
export const expectedProblem = (p: Placement): string => (p.key ? `${p.where}: map key not valid UTF-8` : `${p.where}: not valid UTF-8`)

/**
 * `p`'s message with `bytes` as its text: encoded with a placeholder str of the same byte
 * length (DEL characters, found with their str header), whose bytes are then overwritten.
 */
export const withText = (p: Placement, bytes: ReadonlyArray<number>): Uint8Array => {
  const n = bytes.length
  const body = Result.getOrThrow(encodeMessage(p.make("\u007f".repeat(n))))
  const header = n < 32 ? [0xa0 + n] : n < 256 ? [0xd9, n] : [0xda, n >> 8, n & 0xff]
  const at = Buffer.from(body).indexOf(Buffer.from([...header, ...new Array<number>(n).fill(0x7f)]))
  if (at < 0) throw new Error(`placeholder not found for ${p.where}`)
  body.set(bytes, at + header.length)
  return body
}

export interface NotUtf8Check {
  readonly tries: number
  /** Tries where the bad text was refused naming its field, and valid text in its place decoded intact. */
  readonly held: number
  readonly failures: ReadonlyArray<string>
}

/** Some valid text, ASCII and multi-byte, as UTF-8 bytes. */
const validText = (next: () => number, length: number): number[] => {
  const alphabet = ["a", "Z", "~", "ü", "✓", "€", "𝄞", "中"]
  let s = ""
  while (s.length < length) s += alphabet[Math.floor(next() * alphabet.length)]!
  return [...new TextEncoder().encode(s)]
}

/** One random try: a placement, bytes with one bad sequence inside valid text (long sometimes). */
export const randomCase = (next: () => number): { placement: Placement; bad: number[]; good: number[]; what: string } => {
  const placement = PLACEMENTS[Math.floor(next() * PLACEMENTS.length)]!
  const [what, seq] = NOT_UTF8_BYTES[Math.floor(next() * NOT_UTF8_BYTES.length)]!
  // Past 200 bytes the library decodes with TextDecoder instead of its own loop: both are covered.
  const before = validText(next, next() < 0.2 ? 150 + Math.floor(next() * 200) : Math.floor(next() * 8))
  const after = what.includes("cut") ? [] : validText(next, Math.floor(next() * 8))
  const bad = [...before, ...seq, ...after]
  // Valid text of exactly the same byte length, for the control.
  const good = [...before, ...new Array<number>(seq.length).fill(0x61), ...after]
  return { placement, bad, good, what }
}

/** `tries` random cases through the codec. */
export const checkNotUtf8 = (o: { readonly tries: number; readonly seed: number }): NotUtf8Check => {
  const next = rng(o.seed)
  let held = 0
  const failures: string[] = []
  for (let i = 0; i < o.tries; i++) {
    const { placement, bad, good, what } = randomCase(next)
    const sample = placement.make("")
    const refused = decodeAny(withText(placement, bad), sample)
    const control = decodeAny(withText(placement, good), sample)
    const controlOk = Result.isSuccess(control) && JSON.stringify(control.success) === JSON.stringify(placement.make(new TextDecoder().decode(new Uint8Array(good))))
    const refusedOk = Result.isFailure(refused) && refused.failure.message === expectedProblem(placement)
    if (refusedOk && controlOk) held++
    else if (failures.length < 5) failures.push(`${what} at ${placement.where}: ${Result.isFailure(refused) ? refused.failure.message : "accepted"}${controlOk ? "" : "; valid text in its place did not decode intact"}`)
  }
  return { tries: o.tries, held, failures }
}
