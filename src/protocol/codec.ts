/**
 * The message codec: typed messages (messages.ts) to msgpack bodies and back, walking each
 * message's declared fields. Framing (the length prefix, torn chunks, backpressure) is
 * framing.ts; ext payloads ext.ts; the pre-scan scan.ts; the field checks validate.ts and
 * fields.ts.
 *
 * A message is a msgpack array `[code, ...fields]`: its code, then its fields in declared
 * order. CommandGroup.commands holds such arrays. Plain fields use plain msgpack (unsigned
 * integers, strings, booleans, nil for a null FetchValue.function, arrays, string-keyed
 * maps); Value trees may also hold bin (Uint8Array), bigint (int64 / uint64), Refs and
 * HostTensors. Integers above 2^32 that come from JS numbers travel as float64; any
 * uint64/int64 on the wire decodes as a bigint (accepted by integer fields when it is a safe
 * integer). A FloatNumber travels as float64, and a float64 or float32 sent to a worker whose
 * value is an integer within 32 bits decodes as one (isWireFloat), so the ops' promotion sees
 * the float a client sent (Python's 2.0). Every str must be UTF-8.
 *
 * Decoding untrusted bytes goes through decodeWorkerMessage / decodeControllerMessage
 * only: they return a Result and never throw, whatever the bytes; a failure names the
 * field, e.g. "CallFunction.results[2]: expected Ref, got string". No container may nest
 * deeper than MAX_DEPTH, counting the message array as 1. Encoding checks each field for
 * what the wire cannot carry as it builds the message array (it does not decode it again).
 */
import { DecodeError, Decoder, Encoder } from "@msgpack/msgpack"
import { Result } from "effect"
import type { DecodeContext, EncodeContext, OutOfLine } from "./context.ts"
import { WireError } from "./errors.ts"
import { decodingExtensions, encodingExtensions, EXT_TYPES, msgpackProblem, REF_EXT_BYTES, writeRefExt } from "./ext.ts"
import type { FrameOwnership } from "./framing.ts"
import { CONTROLLER_MESSAGES, WORKER_MESSAGES, type ControllerMessage, type Message, type MessageSpec, type Tag, type WorkerMessage } from "./messages.ts"
import { markBadStrings, scan, scanStack } from "./scan.ts"
import { BAD_KEY, BadExt, describe, Invalid, isWireFloat, MAX_DEPTH, U32_MAX } from "./validate.ts"
import { FloatNumber, Ref } from "./values.ts"

export { MAX_DEPTH } from "./validate.ts"
export { OUT_OF_LINE_BYTES } from "./ext.ts"

/** Which side's messages a decoder accepts. */
type Direction = "worker" | "controller"

/** Builds the message from its checked wire array (its length already checked). */
type BuildMessage = (a: ReadonlyArray<unknown>, depth: number, ctx: DecodeContext) => Record<string, unknown>
/** Builds the checked wire array of a message. */
type BuildWire = (m: Record<string, unknown>, depth: number, ctx: EncodeContext) => unknown[]

/** A message's declaration, ready for the codec. */
interface Entry {
  readonly tag: Tag
  readonly code: number
  readonly direction: Direction
  readonly fieldCount: number
  /** Its fields less the optional ones at the end: the fewest a message array may hold. */
  readonly requiredCount: number
  readonly rule: ((m: never) => readonly [string, string] | undefined) | undefined
  readonly decode: BuildMessage
  readonly encode: BuildWire
}

/**
 * The per-message decode and encode functions, generated from the declaration when the
 * module loads. NOTE: generated rather than one loop over the fields, because a loop stores
 * and reads properties by computed names and calls every kind from one site, which JSC
 * cannot specialise: that made small commands several times slower (bench/codec.ts). Generated, each is an
 * object literal or array literal with constant names, as the hand-written decoders were.
 */
const compile = (tag: string, { code, fields }: MessageSpec): { decode: BuildMessage; encode: BuildWire } => {
  const key = (name: string) => JSON.stringify(name)
  // Each field's functions and name are the generated code's own variables: direct calls.
  const names = [...fields.flatMap((_, i) => [`d${i}`, `e${i}`, `w${i}`]), "Invalid"]
  const values = [...fields.flatMap(([name, kind]) => [kind.decode, kind.encode, `${tag}.${name}`]), Invalid]
  const decodeOne = (i: number) => `d${i}(a[${i + 1}], w${i}, depth + 1, ctx)`
  const encodeOne = (name: string, i: number) => `e${i}(m[${key(name)}], w${i}, depth + 1, ctx)`
  const required = fields.filter(([, kind]) => !kind.optional).length
  // An optional field left off is absent from the message; one sent needs every optional field before it.
  const decoded = fields.slice(0, required).map(([name], i) => `, ${key(name)}: ${decodeOne(i)}`)
  const encoded = fields.slice(0, required).map(([name], i) => `, ${encodeOne(name, i)}`)
  const optional = fields.slice(required).map(([name], j) => [name, required + j] as const)
  const decodeOptional = optional.map(([name, i]) => `if (a.length > ${i + 1}) m[${key(name)}] = ${decodeOne(i)};`)
  const encodeOptional = optional.map(([name, i]) =>
    `if (m[${key(name)}] !== undefined) { if (a.length !== ${i + 1}) throw new Invalid(w${i}, "given without the optional fields before it"); a.push(${encodeOne(name, i)}) }`)
  const make = (body: string) => new Function(...names, `"use strict"; return ${body}`)(...values)
  return optional.length === 0
    ? { decode: make(`(a, depth, ctx) => ({ _tag: ${key(tag)}${decoded.join("")} })`), encode: make(`(m, depth, ctx) => [${code}${encoded.join("")}]`) }
    : {
      decode: make(`(a, depth, ctx) => { const m = { _tag: ${key(tag)}${decoded.join("")} }; ${decodeOptional.join(" ")} return m }`),
      encode: make(`(m, depth, ctx) => { const a = [${code}${encoded.join("")}]; ${encodeOptional.join(" ")} return a }`),
    }
}

const entries = (table: Readonly<Record<string, MessageSpec>>, direction: Direction): Entry[] =>
  Object.entries(table).map(([tag, m]) => ({
    tag: tag as Tag,
    code: m.code,
    direction,
    fieldCount: m.fields.length,
    requiredCount: m.fields.filter(([, kind]) => !kind.optional).length,
    rule: m.rule as Entry["rule"],
    ...compile(tag, m),
  }))

const ALL = [...entries(WORKER_MESSAGES, "worker"), ...entries(CONTROLLER_MESSAGES, "controller")]
const BY_CODE: Array<Entry | undefined> = []
for (const e of ALL) BY_CODE[e.code] = e
const BY_TAG: { readonly [tag: string]: Entry | undefined } = Object.fromEntries(ALL.map((e) => [e.tag, e]))

/** Applies the message's cross-field rule, if it has one. */
const checkRule = (e: Entry, m: Record<string, unknown>): void => {
  const broken = e.rule?.(m as never)
  if (broken !== undefined) throw new Invalid(`${e.tag}.${broken[0]}`, broken[1])
}

// ---- decoding -------------------------------------------------------------------------------

/** Checks one message array (at `depth`) and builds the message. */
const decodeMessageArray = (v: unknown, direction: Direction, depth: number, ctx: DecodeContext): Message => {
  if (!Array.isArray(v)) throw new Invalid("", `expected a message array [code, ...fields], got ${describe(v)}`)
  if (depth > MAX_DEPTH) throw new Invalid("", `nesting deeper than ${MAX_DEPTH}`)
  if (v.length === 0) throw new Invalid("", "empty message array (expected [code, ...fields])")
  const code: unknown = v[0]
  const e = typeof code === "number" ? BY_CODE[code] : undefined
  if (e === undefined) throw new Invalid("", typeof code === "number" ? `unknown message code ${code}` : `message code: expected integer, got ${code instanceof BadExt ? code.problem : describe(code)}`)
  if (e.direction !== direction) throw new Invalid("", `${e.tag} (code ${code}) is not accepted by the ${direction}`)
  if (v.length < e.requiredCount + 1 || v.length > e.fieldCount + 1)
    throw new Invalid(e.tag, `expected ${e.requiredCount === e.fieldCount ? e.fieldCount : `${e.requiredCount} to ${e.fieldCount}`} fields, got ${v.length - 1}`)
  const m = e.decode(v, depth, ctx)
  if (e.rule !== undefined) checkRule(e, m)
  return m as unknown as Message
}

/** The library's float readers, which a worker's decoder wraps (they are private to its types). */
interface FloatReaders {
  readF32(): number | FloatNumber
  readF64(): number | FloatNumber
}

/**
 * Makes `decoder` read an integral float within 32 bits as a FloatNumber (a fraction is a float
 * as it is): a float the client sent stays a float. NOTE: set on the instance, as the
 * library's readers are private; they run only for float heads, so other values cost nothing.
 */
const keepFloats = (decoder: Decoder<DecodeContext>): void => {
  const readers = decoder as unknown as FloatReaders, f32 = readers.readF32, f64 = readers.readF64
  const wrap = (v: number | FloatNumber) => (typeof v === "number" && Number.isInteger(v) && isWireFloat(v) ? new FloatNumber(v) : v)
  readers.readF32 = function (this: FloatReaders) { return wrap(f32.call(this)) }
  readers.readF64 = function (this: FloatReaders) { return wrap(f64.call(this)) }
}

/**
 * A Decoder and the context its ext codecs see; `marked`: for bytes markBadStrings rewrote;
 * `direction`: whose messages it decodes (a worker's keeps floats, see keepFloats).
 */
const decoderWith = (marked: boolean, direction: Direction) => {
  const context: DecodeContext = { copyBytes: true, command: (wire, depth, ctx) => decodeMessageArray(wire, "worker", depth, ctx) as WorkerMessage, scanStack: scanStack() }
  const decoder = new Decoder<DecodeContext>({
    extensionCodec: decodingExtensions(marked),
    context,
    useBigInt64: true,
    mapKeyConverter: (key) => {
      if (typeof key === "string") return key
      // A key that was not UTF-8: reported where its map sits (validate.ts).
      if (key instanceof BadExt) return BAD_KEY
      throw new DecodeError(`map key must be a string, got ${describe(key)}`)
    },
  })
  if (direction === "worker") keepFloats(decoder)
  return { context, decoder }
}
const DECODERS: Readonly<Record<Direction, { readonly plain: ReturnType<typeof decoderWith>; readonly marked: ReturnType<typeof decoderWith> }>> = {
  worker: { plain: decoderWith(false, "worker"), marked: decoderWith(true, "worker") },
  controller: { plain: decoderWith(false, "controller"), marked: decoderWith(true, "controller") },
}

const invalidError = (e: Invalid): WireError =>
  new WireError({ message: e.where === "" ? e.problem : `${e.where}: ${e.problem}`, fatal: false })

const decodeWith = <M extends Message>(bytes: Uint8Array, ownership: FrameOwnership, direction: Direction): Result.Result<M, WireError> => {
  if (bytes.length === 0) return Result.fail(new WireError({ message: "empty message", fatal: false }))
  const { plain, marked } = DECODERS[direction]
  const scanned = scan(bytes, plain.context.scanStack)
  if (typeof scanned === "string") return Result.fail(new WireError({ message: scanned, fatal: false }))
  // Strs that are not UTF-8 decode as markers that their fields' checks name.
  const { context, decoder } = scanned === undefined ? plain : marked
  const body = scanned === undefined ? bytes : markBadStrings(bytes, scanned)
  context.copyBytes = ownership !== "owned"
  let wire: unknown
  try {
    wire = decoder.decode(body)
  } catch (e) {
    return Result.fail(new WireError({ message: msgpackProblem(e, bytes.length), fatal: false }))
  }
  try {
    return Result.succeed(decodeMessageArray(wire, direction, 1, context) as M)
  } catch (e) {
    return Result.fail(e instanceof Invalid ? invalidError(e) : new WireError({ message: `cannot decode: ${String(e)}`, fatal: false }))
  }
}

/**
 * Decodes and checks a message sent to a worker (codes below 64). Never throws. With
 * "borrowed" bytes (valid only for now, e.g. a small frame from FrameReader) tensor and bin
 * bytes are copied out; with "owned" bytes they are views into `bytes` when 8-aligned.
 */
export const decodeWorkerMessage = (bytes: Uint8Array, ownership: FrameOwnership = "borrowed"): Result.Result<WorkerMessage, WireError> =>
  decodeWith<WorkerMessage>(bytes, ownership, "worker")

/** Decodes and checks a message sent to the controller (codes 64..69); as decodeWorkerMessage. */
export const decodeControllerMessage = (bytes: Uint8Array, ownership: FrameOwnership = "borrowed"): Result.Result<ControllerMessage, WireError> =>
  decodeWith<ControllerMessage>(bytes, ownership, "controller")

// ---- encoding -------------------------------------------------------------------------------

/** `m` as its checked wire array; `direction`: the side it must be for (a CommandGroup's commands). */
const toWire = (m: unknown, direction: Direction | undefined, depth: number, ctx: EncodeContext): unknown[] => {
  const tag = (m as { _tag?: unknown } | null)?._tag
  const e = typeof tag === "string" && Object.hasOwn(BY_TAG, tag) ? BY_TAG[tag] : undefined
  if (e === undefined) throw new Invalid("", `cannot encode ${String(tag)}: not a message`)
  if (direction !== undefined && e.direction !== direction) throw new Invalid("", `${e.tag} (code ${e.code}) is not accepted by the ${direction}`)
  const a = e.encode(m as Record<string, unknown>, depth, ctx)
  if (e.rule !== undefined) checkRule(e, m as Record<string, unknown>)
  return a
}

const encoding: EncodeContext = { outOfLine: [], outOfLineBytes: 0, command: (m, depth, ctx) => toWire(m, "worker", depth, ctx) }
const encoder = new Encoder<EncodeContext>({ extensionCodec: encodingExtensions(), context: encoding, useBigInt64: true })

/** The library's writers and buffer (private to its types). */
interface ObjectWriter {
  encodeObject(v: unknown, depth: number): void
  encodeArray(v: ReadonlyArray<unknown>, depth: number): void
  encodeNumberAsFloat(v: number): void
  ensureBufferSizeToWrite(size: number): void
  bytes: Uint8Array
  pos: number
}

/**
 * Makes `encoder` write a FloatNumber as float64 whatever its value, and the objects most of a
 * command is without asking the ext codec: an array at once, a Ref (below 2^32) straight into
 * the buffer (the same bytes its ext gives). NOTE: set on the instance, as the library's
 * writers are private.
 */
const writeDirect = (encoder: Encoder<EncodeContext>): void => {
  const writer = encoder as unknown as ObjectWriter, encodeObject = writer.encodeObject
  writer.encodeObject = function (this: ObjectWriter, v: unknown, depth: number) {
    if (Array.isArray(v)) this.encodeArray(v, depth)
    else if (v instanceof Ref && v.id <= U32_MAX) {
      this.ensureBufferSizeToWrite(REF_EXT_BYTES)
      writeRefExt(this.bytes, this.pos, v.id)
      this.pos += REF_EXT_BYTES
    } else if (v instanceof FloatNumber) this.encodeNumberAsFloat(v.value)
    else encodeObject.call(this, v, depth)
  }
}
writeDirect(encoder)

/**
 * The body of `m` as the encoder's output (valid until the next encode) plus the large
 * tensors left out of it, with the ext lengths patched to include them.
 */
const encodeParts = (m: Message): Result.Result<{ readonly body: Uint8Array; readonly outOfLine: ReadonlyArray<OutOfLine>; readonly length: number }, WireError> => {
  encoding.outOfLine = []
  encoding.outOfLineBytes = 0
  try {
    const body = encoder.encodeSharedRef(toWire(m, undefined, 1, encoding))
    const { outOfLine } = encoding
    const length = body.length + encoding.outOfLineBytes
    if (length > U32_MAX) return Result.fail(new WireError({ message: `${m._tag}: ${length} bytes does not fit in one frame`, fatal: false }))
    const view = new DataView(body.buffer, body.byteOffset, body.byteLength)
    for (const o of outOfLine) {
      if (body[o.lengthAt - 1] !== 0xc9 || body[o.lengthAt + 4] !== EXT_TYPES.HostTensor) throw new Error("HostTensor was not written as ext 32")
      view.setUint32(o.lengthAt, o.extLength)
    }
    return Result.succeed({ body, outOfLine, length })
  } catch (e) {
    const error = e instanceof Invalid ? invalidError(e) : new WireError({ message: `cannot encode ${String(m?._tag)}: ${e instanceof Error ? e.message : String(e)}`, fatal: false })
    return Result.fail(error)
  } finally {
    encoding.outOfLine = []
    encoding.outOfLineBytes = 0
  }
}

/**
 * Encodes a message as one contiguous msgpack body (tensor bytes copied once). Fails with
 * a WireError naming the field when `m` holds something the wire cannot carry.
 */
export const encodeMessage = (m: Message): Result.Result<Uint8Array, WireError> =>
  Result.map(encodeParts(m), ({ body, outOfLine, length }) => {
    if (outOfLine.length === 0) return body.slice()
    const out = Bun.allocUnsafe(length) // uninitialised: the loop below writes every byte
    let from = 0, to = 0
    for (const o of outOfLine) {
      out.set(body.subarray(from, o.at), to)
      to += o.at - from
      out.set(o.data, to)
      to += o.data.byteLength
      from = o.at
    }
    out.set(body.subarray(from), to)
    return out
  })

/**
 * Encodes a message as the parts of one body, to be written back to back (FrameWriter):
 * tensors of OUT_OF_LINE_BYTES or more are their own parts, views of HostTensor.data, so
 * they are not copied at all; keep them unchanged until written. The other parts are fresh.
 */
export const encodeMessageParts = (m: Message): Result.Result<ReadonlyArray<Uint8Array>, WireError> =>
  Result.map(encodeParts(m), ({ body, outOfLine }) => {
    const parts: Uint8Array[] = []
    let from = 0
    for (const o of outOfLine) {
      if (o.at > from) parts.push(body.slice(from, o.at))
      if (o.data.byteLength > 0) parts.push(o.data)
      from = o.at
    }
    if (body.length > from) parts.push(body.slice(from))
    return parts
  })
