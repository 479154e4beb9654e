/**
 * The wire codec: typed messages (messages.ts) to msgpack bodies and back. Framing (the
 * length prefix, torn chunks, backpressure) is framing.ts.
 *
 * A message is a msgpack array `[code, ...fields]`: the code from MESSAGE_CODES, then the
 * fields in MESSAGE_FIELDS order. CommandGroup.commands holds such arrays. Plain fields use
 * plain msgpack (unsigned integers, strings, booleans, nil for a null FetchValue.function,
 * arrays, string-keyed maps); Value trees may also hold bin (Uint8Array), bigint (int64 /
 * uint64), Refs and HostTensors. Integers above 2^32 that come from JS numbers travel as
 * float64; any uint64/int64 on the wire decodes as a bigint (accepted by integer fields when
 * it is a safe integer).
 *
 * Ext types (application types 1..5). Integers are little-endian. "u64" is an unsigned
 * 64-bit integer that must also be a safe integer (< 2^53). dtype is the index in DTYPES:
 * f32 0, f64 1, f16 2, bf16 3, i32 4, i64 5, u8 6, bool 7. ndim is at most 8.
 *
 *   1 Ref            the id as a u32 (4 bytes) when id < 2^32, else as a u64 (8 bytes).
 *   2 NDSlice        u8 ndim, u64 offset, u64 sizes[ndim], u64 strides[ndim]:
 *                    1 + 8 * (1 + 2 * ndim) bytes; the largest rank must be a safe integer.
 *   3 TensorFactory  u8 dtype, u8 device (0 cpu, 1 cuda), u8 ndim, u64 shape[ndim]:
 *                    3 + 8 * ndim bytes.
 *   4 HostTensor     u8 dtype, u8 ndim, u8 pad (0..7), u64 shape[ndim], `pad` zero bytes,
 *                    then the elements as raw little-endian bytes: exactly
 *                    numel * itemsize of them (numel of a 0-dim tensor is 1). The encoder
 *                    always writes this ext as ext 32 (0xc9, u32 big-endian length, type)
 *                    and picks `pad` so the raw bytes start at a multiple of 8 from the
 *                    start of the message body: a receiver that holds the body at an
 *                    8-aligned address can view the elements in place.
 *   5 ErrorPayload   a msgpack array [type: str, message: str, frames] or [type, message,
 *                    frames, reason: str], frames an array of [file: str, line: uint,
 *                    function: str].
 *
 * Decoding untrusted bytes goes through decodeWorkerMessage / decodeControllerMessage
 * only: they return a Result and never throw, whatever the bytes. Every field is checked by
 * hand (Effect Schema costs too much per command); a failure names the field, e.g.
 * "CallFunction.results[2]: expected Ref, got string". No container may nest deeper than
 * MAX_DEPTH, counting the message array as 1. encodeMessage runs the same checks on what
 * it is given, so whatever it encodes decodes.
 */
import { DecodeError, Decoder, Encoder, ExtData, ExtensionCodec } from "@msgpack/msgpack"
import { Result } from "effect"
import { WireError } from "./errors.ts"
import type { FrameOwnership } from "./framing.ts"
import {
  MESSAGE_CODES,
  MESSAGE_FIELDS,
  REDUCTIONS,
  type ControllerMessage,
  type Message,
  type Reduction,
  type Value,
  type WorkerMessage,
} from "./messages.ts"
import { NDSlice } from "./ndslice.ts"
import { DTYPES, ErrorPayload, HostTensor, ITEM_SIZE, Ref, TensorFactory, type Device, type DType, type Frame } from "./values.ts"

/** The deepest a container may nest in a message, the message array itself being depth 1. */
export const MAX_DEPTH = 32
/** The most dims an NDSlice, TensorFactory or HostTensor may have on the wire. */
export const MAX_NDIM = 8
/** The ext type of each wire value. */
export const EXT_TYPES = { Ref: 1, NDSlice: 2, TensorFactory: 3, HostTensor: 4, ErrorPayload: 5 } as const
/** HostTensors at least this big are not copied into the encoder's buffer (see encodeMessageParts). */
export const OUT_OF_LINE_BYTES = 64 * 1024

const DEVICES: ReadonlyArray<Device> = ["cpu", "cuda"]
const U32_MAX = 0xffff_ffff
const MAX_SAFE_BIGINT = BigInt(Number.MAX_SAFE_INTEGER)
/** The bigints the wire carries: int64 and uint64. */
export const INT64_MIN = -(1n << 63n)
export const UINT64_MAX = (1n << 64n) - 1n

// ---- ext payloads ---------------------------------------------------------------------------

/** An ext payload that failed its layout check; the validator reports it where it sits. */
class BadExt {
  constructor(readonly problem: string) {}
}

const u32At = (b: Uint8Array, at: number): number => (b[at]! | (b[at + 1]! << 8) | (b[at + 2]! << 16)) + b[at + 3]! * 0x100_0000

/** A u64 at `at`, or -1 when it is not a safe integer. */
const u64At = (b: Uint8Array, at: number): number => {
  const high = u32At(b, at + 4)
  return high > 0x1f_ffff ? -1 : high * 0x1_0000_0000 + u32At(b, at)
}

const putU64 = (b: Uint8Array, at: number, n: number): void => {
  const low = n % 0x1_0000_0000, high = (n - low) / 0x1_0000_0000
  for (let i = 0; i < 4; i++) { b[at + i] = (low >>> (8 * i)) & 0xff; b[at + 4 + i] = (high >>> (8 * i)) & 0xff }
}

/** `count` u64s from `at`, or a problem naming `what`. */
const readU64s = (b: Uint8Array, at: number, count: number, what: string): number[] | BadExt => {
  const out = new Array<number>(count)
  for (let i = 0; i < count; i++) {
    const n = u64At(b, at + 8 * i)
    if (n < 0) return new BadExt(`${what}[${i}] is not a safe integer`)
    out[i] = n
  }
  return out
}

const shapeText = (dtype: string, shape: ReadonlyArray<number>) => `${dtype}[${shape.join(",")}]`

/** numel * itemsize, or -1 when it is not a safe integer. */
const byteSize = (dtype: DType, shape: ReadonlyArray<number>): number => {
  let n = ITEM_SIZE[dtype]
  for (const d of shape) n *= d
  return Number.isSafeInteger(n) ? n : -1
}

const decodeRef = (p: Uint8Array): Ref | BadExt => {
  if (p.length === 4) return new Ref(u32At(p, 0))
  if (p.length === 8) {
    const id = u64At(p, 0)
    return id < 0 ? new BadExt("Ref: id is not a safe integer") : new Ref(id)
  }
  return new BadExt(`Ref: ${p.length}-byte payload (expected 4 or 8)`)
}

const encodeRef = (r: Ref): Uint8Array => {
  if (r.id <= U32_MAX) return new Uint8Array([r.id & 0xff, (r.id >>> 8) & 0xff, (r.id >>> 16) & 0xff, r.id >>> 24])
  const p = new Uint8Array(8)
  putU64(p, 0, r.id)
  return p
}

const decodeNDSlice = (p: Uint8Array): NDSlice | BadExt => {
  const ndim = p[0]
  if (ndim === undefined) return new BadExt("NDSlice: empty payload")
  if (ndim > MAX_NDIM) return new BadExt(`NDSlice: ${ndim} dims (at most ${MAX_NDIM})`)
  if (p.length !== 9 + 16 * ndim) return new BadExt(`NDSlice: ${p.length}-byte payload for ${ndim} dims (expected ${9 + 16 * ndim})`)
  const offset = u64At(p, 1)
  if (offset < 0) return new BadExt("NDSlice: offset is not a safe integer")
  const sizes = readU64s(p, 9, ndim, "NDSlice: sizes")
  if (sizes instanceof BadExt) return sizes
  const strides = readU64s(p, 9 + 8 * ndim, ndim, "NDSlice: strides")
  if (strides instanceof BadExt) return strides
  const problem = NDSlice.problem(offset, sizes, strides)
  return problem === undefined ? new NDSlice(offset, sizes, strides) : new BadExt(`NDSlice: ${problem}`)
}

const encodeNDSlice = (s: NDSlice): Uint8Array => {
  const p = new Uint8Array(9 + 16 * s.ndim)
  p[0] = s.ndim
  putU64(p, 1, s.offset)
  for (let d = 0; d < s.ndim; d++) { putU64(p, 9 + 8 * d, s.sizes[d]!); putU64(p, 9 + 8 * (s.ndim + d), s.strides[d]!) }
  return p
}

const decodeTensorFactory = (p: Uint8Array): TensorFactory | BadExt => {
  if (p.length < 3) return new BadExt(`TensorFactory: ${p.length}-byte payload`)
  const dtype = DTYPES[p[0]!], device = DEVICES[p[1]!], ndim = p[2]!
  if (dtype === undefined) return new BadExt(`TensorFactory: unknown dtype code ${p[0]}`)
  if (device === undefined) return new BadExt(`TensorFactory: unknown device code ${p[1]}`)
  if (ndim > MAX_NDIM) return new BadExt(`TensorFactory: ${ndim} dims (at most ${MAX_NDIM})`)
  if (p.length !== 3 + 8 * ndim) return new BadExt(`TensorFactory: ${p.length}-byte payload for ${ndim} dims (expected ${3 + 8 * ndim})`)
  const shape = readU64s(p, 3, ndim, "TensorFactory: shape")
  return shape instanceof BadExt ? shape : new TensorFactory(shape, dtype, device)
}

const encodeTensorFactory = (f: TensorFactory): Uint8Array => {
  const p = new Uint8Array(3 + 8 * f.shape.length)
  p[0] = DTYPES.indexOf(f.dtype); p[1] = DEVICES.indexOf(f.device); p[2] = f.shape.length
  f.shape.forEach((d, i) => putU64(p, 3 + 8 * i, d))
  return p
}

/** Set by each decode: copy tensor and bin bytes out of the frame (it is only borrowed). */
let copyTensorBytes = true

/**
 * A fresh, exactly sized copy. NOTE: not `slice()`, which on a Node Buffer is a view; and
 * allocated uninitialised, as `set` overwrites all of it at once.
 */
const copyOf = (b: Uint8Array): Uint8Array => {
  const c = Bun.allocUnsafe(b.byteLength)
  c.set(b)
  return c
}

const decodeHostTensor = (p: Uint8Array): HostTensor | BadExt => {
  if (p.length < 3) return new BadExt(`HostTensor: ${p.length}-byte payload`)
  const dtype = DTYPES[p[0]!], ndim = p[1]!, pad = p[2]!
  if (dtype === undefined) return new BadExt(`HostTensor: unknown dtype code ${p[0]}`)
  if (ndim > MAX_NDIM) return new BadExt(`HostTensor: ${ndim} dims (at most ${MAX_NDIM})`)
  if (pad > 7) return new BadExt(`HostTensor: pad ${pad} (at most 7)`)
  const start = 3 + 8 * ndim + pad
  if (p.length < start) return new BadExt(`HostTensor: ${p.length}-byte payload, shorter than its ${start}-byte header`)
  const shape = readU64s(p, 3, ndim, "HostTensor: shape")
  if (shape instanceof BadExt) return shape
  for (let i = start - pad; i < start; i++) if (p[i] !== 0) return new BadExt("HostTensor: nonzero padding")
  const expected = byteSize(dtype, shape)
  if (expected < 0) return new BadExt(`HostTensor: ${shapeText(dtype, shape)} is too large`)
  if (p.length - start !== expected) return new BadExt(`HostTensor: ${p.length - start} bytes for ${shapeText(dtype, shape)}`)
  let data = p.subarray(start)
  // A view only into an owned frame, and only when 8-aligned: users may view it as any dtype.
  if (copyTensorBytes || data.byteOffset % 8 !== 0) data = copyOf(data)
  return new HostTensor(dtype, shape, data)
}

/** Set by each encode: where large tensors went (encodeMessageParts) and how many bytes they add. */
interface OutOfLine {
  /** Position in the encoder's output of the ext 32 length to patch. */
  readonly lengthAt: number
  readonly extLength: number
  /** Position in the encoder's output where the tensor bytes belong. */
  readonly at: number
  readonly data: Uint8Array
}
let outOfLine: OutOfLine[] = []
let outOfLineBytes = 0

/** The ext payload of a tensor whose payload starts at `dataPos` in the encoder's output. */
const encodeHostTensor = (t: HostTensor, dataPos: number): Uint8Array => {
  const ndim = t.shape.length, head = 3 + 8 * ndim
  // Align within the final body, which also holds the out-of-line bytes placed before here.
  const pad = (8 - ((dataPos + outOfLineBytes + head) % 8)) % 8
  const inline = t.data.byteLength < OUT_OF_LINE_BYTES
  const p = new Uint8Array(head + pad + (inline ? t.data.byteLength : 0))
  p[0] = DTYPES.indexOf(t.dtype); p[1] = ndim; p[2] = pad
  t.shape.forEach((d, i) => putU64(p, 3 + 8 * i, d))
  if (inline) p.set(t.data, head + pad)
  else {
    // The encoder writes ext 32 with the length of `p`; encodeParts patches in the full length.
    outOfLine.push({ lengthAt: dataPos - 5, extLength: head + pad + t.data.byteLength, at: dataPos + head + pad, data: t.data })
    outOfLineBytes += t.data.byteLength
  }
  return p
}

/** ErrorPayload's inner msgpack: its own instances, as the outer ones are busy when it runs. */
const innerEncoder = new Encoder()
const innerDecoder = new Decoder()

const decodeErrorPayload = (p: Uint8Array): ErrorPayload | BadExt => {
  const bounds = scanProblem(p)
  if (bounds !== undefined) return new BadExt(`ErrorPayload: ${bounds}`)
  let inner: unknown
  try {
    inner = innerDecoder.decode(p)
  } catch (e) {
    return new BadExt(`ErrorPayload: ${msgpackProblem(e, p.length)}`)
  }
  if (!Array.isArray(inner) || (inner.length !== 3 && inner.length !== 4)) return new BadExt("ErrorPayload: expected [type, message, frames]")
  const [type, message, frames, reason] = inner as unknown[]
  if (typeof type !== "string") return new BadExt(`ErrorPayload.type: expected string, got ${describe(type)}`)
  if (typeof message !== "string") return new BadExt(`ErrorPayload.message: expected string, got ${describe(message)}`)
  if (!Array.isArray(frames)) return new BadExt(`ErrorPayload.frames: expected array, got ${describe(frames)}`)
  if (inner.length === 4 && typeof reason !== "string") return new BadExt(`ErrorPayload.reason: expected string, got ${describe(reason)}`)
  const out = new Array<Frame>(frames.length)
  for (let i = 0; i < frames.length; i++) {
    const f: unknown = frames[i]
    if (!Array.isArray(f) || f.length !== 3) return new BadExt(`ErrorPayload.frames[${i}]: expected [file, line, function]`)
    const [file, line, fn] = f as unknown[]
    if (typeof file !== "string" || typeof fn !== "string" || !isNatural(line)) return new BadExt(`ErrorPayload.frames[${i}]: expected [string, unsigned integer, string]`)
    out[i] = { file, line, function: fn }
  }
  return new ErrorPayload(type, message, out, reason as string | undefined)
}

const encodeErrorPayload = (e: ErrorPayload): Uint8Array => {
  const fields = [e.type, e.message, e.frames.map((f) => [f.file, f.line, f.function])]
  return innerEncoder.encode(e.reason === undefined ? fields : [...fields, e.reason])
}

const extensions = new ExtensionCodec()
extensions.register({ type: EXT_TYPES.Ref, encode: (v) => (v instanceof Ref ? encodeRef(v) : null), decode: decodeRef })
extensions.register({ type: EXT_TYPES.NDSlice, encode: (v) => (v instanceof NDSlice ? encodeNDSlice(v) : null), decode: decodeNDSlice })
extensions.register({ type: EXT_TYPES.TensorFactory, encode: (v) => (v instanceof TensorFactory ? encodeTensorFactory(v) : null), decode: decodeTensorFactory })
extensions.register({
  type: EXT_TYPES.HostTensor,
  // The function form gets the payload's absolute position: needed for the padding.
  encode: (v) => (v instanceof HostTensor ? (dataPos: number) => encodeHostTensor(v, dataPos) : null),
  decode: decodeHostTensor,
})
extensions.register({ type: EXT_TYPES.ErrorPayload, encode: (v) => (v instanceof ErrorPayload ? encodeErrorPayload(v) : null), decode: decodeErrorPayload })

const encoder = new Encoder({ extensionCodec: extensions, useBigInt64: true })
const decoder = new Decoder({
  extensionCodec: extensions,
  useBigInt64: true,
  mapKeyConverter: (key) => {
    if (typeof key === "string") return key
    throw new DecodeError(`map key must be a string, got ${describe(key)}`)
  },
})

// ---- bounds, before the library allocates -----------------------------------------------------

/** Remaining items of each open container during a scan (index = depth). */
const scanStack = new Float64Array(MAX_DEPTH + 3)

/**
 * Walks the msgpack structure without building it. NOTE: the library allocates each array
 * at its declared length before reading it (5 bytes declaring 55M items cost 440 MB) and
 * has no depth limit when decoding, so this runs first: every container must fit in the
 * bytes left (each item takes at least one byte) and nest at most MAX_DEPTH + 1 deep (one
 * more than the validator allows, so that it names the field in the common case).
 * Returns the problem, or undefined when the library may go ahead.
 */
const scanProblem = (b: Uint8Array): string | undefined => {
  const n = b.length
  const truncated = `truncated message (${n} bytes)`
  let pos = 0, depth = 0, owed = 0
  while (pos < n) {
    const head = b[pos]!
    const at = pos++
    let items = 0, skip = 0
    if (head < 0x80 || head >= 0xe0 || head === 0xc0 || head === 0xc2 || head === 0xc3) skip = 0
    else if (head < 0x90) items = 2 * (head - 0x80)
    else if (head < 0xa0) items = head - 0x90
    else if (head < 0xc0) skip = head - 0xa0
    else {
      if (pos + 4 > n && head !== 0xc1) {
        // Headers read below may run past the end: check exactly.
        const need = HEADER_BYTES[head - 0xc4] ?? 0
        if (pos + need > n) return truncated
      }
      switch (head) {
        case 0xc1: return undefined // reserved: the library names it
        case 0xc4: case 0xd9: skip = 1 + b[pos]!; break
        case 0xc5: case 0xda: skip = 2 + ((b[pos]! << 8) | b[pos + 1]!); break
        case 0xc6: case 0xdb: skip = 4 + u32be(b, pos); break
        case 0xc7: skip = 2 + b[pos]!; break
        case 0xc8: skip = 3 + ((b[pos]! << 8) | b[pos + 1]!); break
        case 0xc9: skip = 5 + u32be(b, pos); break
        case 0xca: case 0xce: case 0xd2: skip = 4; break
        case 0xcb: case 0xcf: case 0xd3: skip = 8; break
        case 0xcc: case 0xd0: skip = 1; break
        case 0xcd: case 0xd1: skip = 2; break
        case 0xd4: skip = 2; break
        case 0xd5: skip = 3; break
        case 0xd6: skip = 5; break
        case 0xd7: skip = 9; break
        case 0xd8: skip = 17; break
        case 0xdc: items = (b[pos]! << 8) | b[pos + 1]!; pos += 2; break
        case 0xdd: items = u32be(b, pos); pos += 4; break
        case 0xde: items = 2 * ((b[pos]! << 8) | b[pos + 1]!); pos += 2; break
        case 0xdf: items = 2 * u32be(b, pos); pos += 4; break
      }
    }
    if (items > 0) {
      if (depth > MAX_DEPTH) return `nesting deeper than ${MAX_DEPTH} (at byte ${at})`
      depth++
      scanStack[depth] = items
      owed += items
      // Each open container but the outermost is one unfinished item of its parent.
      if (owed - (depth - 1) > n - pos) return truncated
      continue
    }
    pos += skip
    if (pos > n) return truncated
    // A whole value: it completes an item of the enclosing container, maybe closing it.
    while (depth > 0) {
      owed--
      if (--scanStack[depth]! > 0) break
      depth--
    }
    if (depth === 0) return undefined // trailing bytes are the library's to report
  }
  return truncated
}

const u32be = (b: Uint8Array, at: number): number => b[at]! * 0x100_0000 + ((b[at + 1]! << 16) | (b[at + 2]! << 8) | b[at + 3]!)

/** Bytes of length header after the type byte, for 0xc4..0xdf. */
const HEADER_BYTES: ReadonlyArray<number> = [1, 2, 4, 1, 2, 4, 4, 8, 1, 2, 4, 8, 1, 2, 4, 8, 2, 3, 5, 9, 17, 1, 2, 4, 2, 4, 2, 4]

// ---- validation -----------------------------------------------------------------------------

/** Thrown inside the validator, caught at its entry. Not an Error: nothing to capture. */
class Invalid {
  constructor(readonly where: string, readonly problem: string) {}
}

const isNatural = (v: unknown): v is number => typeof v === "number" && Number.isSafeInteger(v) && v >= 0

/** How a wrong value is named in a message: its msgpack kind, or its ext type. */
const describe = (v: unknown): string => {
  switch (typeof v) {
    case "number": return Number.isInteger(v) ? `integer ${v}` : `float ${v}`
    case "string": return "string"
    case "object":
      if (v === null) return "nil"
      if (Array.isArray(v)) return "array"
      if (v instanceof Uint8Array) return "bin"
      if (v instanceof ExtData) return `ext type ${v.type}`
      if (v instanceof Date) return "timestamp"
      if (Object.getPrototypeOf(v) === Object.prototype || Object.getPrototypeOf(v) === null) return "map"
      return v.constructor?.name ?? "object"
    default: return typeof v
  }
}

const mismatch = (where: string, expected: string, v: unknown): Invalid =>
  new Invalid(where, v instanceof BadExt ? v.problem : `expected ${expected}, got ${describe(v)}`)

const tooDeep = (where: string) => new Invalid(where, `nesting deeper than ${MAX_DEPTH}`)

const uint = (v: unknown, where: string): number => {
  if (isNatural(v)) return v
  if (typeof v === "bigint" && v >= 0n && v <= MAX_SAFE_BIGINT) return Number(v)
  throw mismatch(where, "unsigned integer", v)
}

const str = (v: unknown, where: string): string => {
  if (typeof v === "string") return v
  throw mismatch(where, "string", v)
}

const bool = (v: unknown, where: string): boolean => {
  if (typeof v === "boolean") return v
  throw mismatch(where, "boolean", v)
}

const isRef = (v: unknown): v is Ref => v instanceof Ref && isNatural(v.id)

const ref = (v: unknown, where: string): Ref => {
  if (isRef(v)) return v
  throw mismatch(where, "Ref", v)
}

const array = (v: unknown, where: string, depth: number): ReadonlyArray<unknown> => {
  if (!Array.isArray(v)) throw mismatch(where, "array", v)
  if (depth > MAX_DEPTH) throw tooDeep(where)
  return v
}

const refs = (v: unknown, where: string, depth: number): ReadonlyArray<Ref> => {
  const a = array(v, where, depth)
  for (let i = 0; i < a.length; i++) if (!isRef(a[i])) throw mismatch(`${where}[${i}]`, "Ref", a[i])
  return a as ReadonlyArray<Ref>
}

const uints = (v: unknown, where: string, depth: number): ReadonlyArray<number> => {
  const a = array(v, where, depth)
  for (let i = 0; i < a.length; i++) if (!isNatural(a[i])) return a.map((x, j) => uint(x, `${where}[${j}]`))
  return a as ReadonlyArray<number>
}

const strs = (v: unknown, where: string, depth: number): ReadonlyArray<string> => {
  const a = array(v, where, depth)
  for (let i = 0; i < a.length; i++) if (typeof a[i] !== "string") throw mismatch(`${where}[${i}]`, "string", a[i])
  return a as ReadonlyArray<string>
}

const reduction = (v: unknown, where: string): Reduction => {
  if ((REDUCTIONS as ReadonlyArray<unknown>).includes(v)) return v as Reduction
  throw typeof v === "string" ? new Invalid(where, `unknown reduction "${v}" (one of ${REDUCTIONS.join(", ")})`) : mismatch(where, "string", v)
}

const shapeProblem = (shape: unknown): string | undefined => {
  if (!Array.isArray(shape)) return `shape is ${describe(shape)}`
  if (shape.length > MAX_NDIM) return `${shape.length} dims (at most ${MAX_NDIM})`
  return shape.every(isNatural) ? undefined : `bad shape [${shape.join(",")}]`
}

const ndslice = (v: unknown, where: string): NDSlice => {
  if (v instanceof NDSlice) {
    if (v.ndim > MAX_NDIM) throw new Invalid(where, `NDSlice: ${v.ndim} dims (at most ${MAX_NDIM})`)
    return v
  }
  throw mismatch(where, "NDSlice", v)
}

const factory = (v: unknown, where: string): TensorFactory => {
  if (!(v instanceof TensorFactory)) throw mismatch(where, "TensorFactory", v)
  if (!DTYPES.includes(v.dtype)) throw new Invalid(where, `TensorFactory: unknown dtype ${String(v.dtype)}`)
  if (!DEVICES.includes(v.device)) throw new Invalid(where, `TensorFactory: unknown device ${String(v.device)}`)
  const problem = shapeProblem(v.shape)
  if (problem !== undefined) throw new Invalid(where, `TensorFactory: ${problem}`)
  return v
}

const errorPayload = (v: unknown, where: string): ErrorPayload => {
  if (!(v instanceof ErrorPayload)) throw mismatch(where, "ErrorPayload", v)
  if (typeof v.type !== "string" || typeof v.message !== "string" || !Array.isArray(v.frames) || (v.reason !== undefined && typeof v.reason !== "string"))
    throw new Invalid(where, "ErrorPayload: type, message and reason (if any) must be strings, frames an array")
  v.frames.forEach((f: Frame, i) => {
    if (typeof f !== "object" || f === null || typeof f.file !== "string" || !isNatural(f.line) || typeof f.function !== "string") throw new Invalid(`${where}.frames[${i}]`, "expected {file: string, line: unsigned integer, function: string}")
  })
  return v
}

/** Why a value that is not an object (a bigint past 64 bits, undefined, a function) cannot go on the wire, or undefined. */
export const scalarProblem = (v: unknown): string | undefined => {
  switch (typeof v) {
    case "number":
    case "string":
    case "boolean":
      return undefined
    case "bigint":
      return v >= INT64_MIN && v <= UINT64_MAX ? undefined : `bigint ${v} does not fit in 64 bits`
    default:
      return `expected a value, got ${typeof v}`
  }
}

/** Why a HostTensor cannot go on the wire (dtype, shape, byte count), or undefined. */
export const hostTensorProblem = (t: HostTensor): string | undefined => {
  if (!DTYPES.includes(t.dtype)) return `HostTensor: unknown dtype ${String(t.dtype)}`
  const problem = shapeProblem(t.shape)
  if (problem !== undefined) return `HostTensor: ${problem}`
  if (!(t.data instanceof Uint8Array)) return `HostTensor: data is ${describe(t.data)}, not a Uint8Array`
  const expected = byteSize(t.dtype, t.shape)
  if (expected !== t.data.byteLength) return `HostTensor: ${t.data.byteLength} bytes for ${shapeText(t.dtype, t.shape)}`
  if (expected > U32_MAX - (3 + 8 * MAX_NDIM + 7)) return `HostTensor: ${expected} bytes is more than one ext can carry`
  return undefined
}

// Value trees are checked by returning FAILED (rather than throwing) so the success path
// costs one comparison per node; the path is collected on the way out.
const FAILED = Symbol("invalid value")
let failedPath: Array<string | number> = []
let failedProblem = ""
const failValue = (problem: string): typeof FAILED => {
  failedPath = []
  failedProblem = problem
  return FAILED
}
const valueInvalid = (where: string): Invalid => {
  let path = where
  for (let i = failedPath.length - 1; i >= 0; i--) {
    const k = failedPath[i]!
    path += typeof k === "number" ? `[${k}]` : /^[A-Za-z_$][\w$]*$/.test(k) ? `.${k}` : `[${JSON.stringify(k)}]`
  }
  return new Invalid(path, failedProblem)
}

/** `v` as a Value (bin copied out of a borrowed frame), or FAILED. `depth`: v's own depth. */
const checkValue = (v: unknown, depth: number): unknown => {
  switch (typeof v) {
    case "number":
    case "string":
    case "boolean":
      return v
    case "bigint": {
      const problem = scalarProblem(v)
      return problem === undefined ? v : failValue(problem)
    }
    case "object": {
      if (v === null) return v
      if (Array.isArray(v)) {
        if (depth > MAX_DEPTH) return failValue(`nesting deeper than ${MAX_DEPTH}`)
        for (let i = 0; i < v.length; i++) {
          const x: unknown = v[i], y = checkValue(x, depth + 1)
          if (y !== x) {
            if (y === FAILED) { failedPath.push(i); return FAILED }
            v[i] = y
          }
        }
        return v
      }
      if (v instanceof Ref) return isNatural(v.id) ? v : failValue(`Ref id ${v.id} is not a non-negative safe integer`)
      if (v instanceof HostTensor) {
        const problem = hostTensorProblem(v)
        return problem === undefined ? v : failValue(problem)
      }
      if (v instanceof Uint8Array) return copyTensorBytes ? copyOf(v) : v
      if (v instanceof BadExt) return failValue(v.problem)
      const proto: unknown = Object.getPrototypeOf(v)
      if (proto === Object.prototype || proto === null) {
        if (depth > MAX_DEPTH) return failValue(`nesting deeper than ${MAX_DEPTH}`)
        const map = v as Record<string, unknown>
        for (const key in map) {
          if (key === "__proto__") return failValue("map key __proto__ is not allowed")
          const x = map[key], y = checkValue(x, depth + 1)
          if (y !== x) {
            if (y === FAILED) { failedPath.push(key); return FAILED }
            map[key] = y
          }
        }
        return v
      }
      return failValue(`expected a value, got ${describe(v)}`)
    }
    default:
      return failValue(scalarProblem(v)!)
  }
}

const value = (v: unknown, where: string, depth: number): Value => {
  const checked = checkValue(v, depth)
  if (checked === FAILED) throw valueInvalid(where)
  return checked as Value
}

const valueArray = (v: unknown, where: string, depth: number): ReadonlyArray<Value> => {
  if (!Array.isArray(v)) throw mismatch(where, "array", v)
  return value(v, where, depth) as ReadonlyArray<Value>
}

const valueMap = (v: unknown, where: string, depth: number): { readonly [key: string]: Value } => {
  if (typeof v !== "object" || v === null || Array.isArray(v) || v instanceof Ref || v instanceof HostTensor || v instanceof Uint8Array || v instanceof BadExt) throw mismatch(where, "map", v)
  return value(v, where, depth) as { readonly [key: string]: Value }
}

// ---- messages -------------------------------------------------------------------------------

/** Checks the fields of one message array (its length already checked) and builds the message. */
type MessageDecoder = (a: ReadonlyArray<unknown>, depth: number) => Message

const MESSAGE_DECODERS: { readonly [K in Message["_tag"]]: (a: ReadonlyArray<unknown>, depth: number) => Extract<Message, { _tag: K }> } = {
  CreateDeviceMesh: (a, d) => {
    const result = ref(a[1], "CreateDeviceMesh.result")
    const names = strs(a[2], "CreateDeviceMesh.names", d + 1), ranks = ndslice(a[3], "CreateDeviceMesh.ranks")
    if (names.length !== ranks.ndim) throw new Invalid("CreateDeviceMesh.names", `${names.length} names for a ${ranks.ndim}-dim NDSlice`)
    if (new Set(names).size !== names.length) throw new Invalid("CreateDeviceMesh.names", `repeated name in [${names.join(", ")}]`)
    return { _tag: "CreateDeviceMesh", result, names, ranks }
  },
  CreateStream: (a) => ({ _tag: "CreateStream", result: ref(a[1], "CreateStream.result"), default: bool(a[2], "CreateStream.default") }),
  CallFunction: (a, d) => ({
    _tag: "CallFunction",
    ident: uint(a[1], "CallFunction.ident"),
    results: refs(a[2], "CallFunction.results", d + 1),
    mutates: refs(a[3], "CallFunction.mutates", d + 1),
    function: str(a[4], "CallFunction.function"),
    args: valueArray(a[5], "CallFunction.args", d + 1),
    kwargs: valueMap(a[6], "CallFunction.kwargs", d + 1),
    stream: ref(a[7], "CallFunction.stream"),
  }),
  FetchValue: (a, d) => ({
    _tag: "FetchValue",
    ident: uint(a[1], "FetchValue.ident"),
    mutates: refs(a[2], "FetchValue.mutates", d + 1),
    function: a[3] === null ? null : str(a[3], "FetchValue.function"),
    object: value(a[4], "FetchValue.object", d + 1),
    stream: ref(a[5], "FetchValue.stream"),
  }),
  RequestStatus: (a) => ({ _tag: "RequestStatus", ident: uint(a[1], "RequestStatus.ident") }),
  Exit: () => ({ _tag: "Exit" }),
  CommandGroup: (a, d) => {
    const wire = array(a[1], "CommandGroup.commands", d + 1)
    const commands = new Array<WorkerMessage>(wire.length)
    for (let i = 0; i < wire.length; i++) {
      try {
        commands[i] = decodeMessageArray(wire[i], WORKER_BOUND, d + 2) as WorkerMessage
      } catch (e) {
        throw e instanceof Invalid ? new Invalid(`CommandGroup.commands[${i}]${e.where === "" ? "" : `.${e.where}`}`, e.problem) : e
      }
    }
    return { _tag: "CommandGroup", commands }
  },
  DeleteRefs: (a, d) => ({ _tag: "DeleteRefs", refs: uints(a[1], "DeleteRefs.refs", d + 1) }),
  BorrowCreate: (a) => ({
    _tag: "BorrowCreate",
    result: ref(a[1], "BorrowCreate.result"),
    tensor: ref(a[2], "BorrowCreate.tensor"),
    from: ref(a[3], "BorrowCreate.from"),
    to: ref(a[4], "BorrowCreate.to"),
    alreadyBorrowed: bool(a[5], "BorrowCreate.alreadyBorrowed"),
  }),
  BorrowFirstUse: (a) => ({ _tag: "BorrowFirstUse", borrow: uint(a[1], "BorrowFirstUse.borrow") }),
  BorrowLastUse: (a) => ({ _tag: "BorrowLastUse", borrow: uint(a[1], "BorrowLastUse.borrow") }),
  BorrowDrop: (a) => ({ _tag: "BorrowDrop", borrow: uint(a[1], "BorrowDrop.borrow") }),
  Reduce: (a, d) => ({
    _tag: "Reduce",
    ident: uint(a[1], "Reduce.ident"),
    result: ref(a[2], "Reduce.result"),
    tensor: ref(a[3], "Reduce.tensor"),
    factory: factory(a[4], "Reduce.factory"),
    mesh: ref(a[5], "Reduce.mesh"),
    stream: ref(a[6], "Reduce.stream"),
    dims: strs(a[7], "Reduce.dims", d + 1),
    reduction: reduction(a[8], "Reduce.reduction"),
    scatter: bool(a[9], "Reduce.scatter"),
    inplace: bool(a[10], "Reduce.inplace"),
  }),
  SendTensor: (a) => {
    const fromRanks = ndslice(a[3], "SendTensor.fromRanks"), toRanks = ndslice(a[4], "SendTensor.toRanks")
    if (fromRanks.length !== toRanks.length) throw new Invalid("SendTensor.toRanks", `${toRanks.length} ranks for ${fromRanks.length} in fromRanks`)
    return {
      _tag: "SendTensor",
      ident: uint(a[1], "SendTensor.ident"),
      result: ref(a[2], "SendTensor.result"),
      fromRanks,
      toRanks,
      tensor: ref(a[5], "SendTensor.tensor"),
      factory: factory(a[6], "SendTensor.factory"),
      stream: ref(a[7], "SendTensor.stream"),
    }
  },
  WorkerHello: (a) => ({
    _tag: "WorkerHello",
    rank: uint(a[1], "WorkerHello.rank"),
    world: uint(a[2], "WorkerHello.world"),
    pid: uint(a[3], "WorkerHello.pid"),
    token: str(a[4], "WorkerHello.token"),
    device: str(a[5], "WorkerHello.device"),
  }),
  Status: (a) => ({ _tag: "Status", firstUncompletedIdent: uint(a[1], "Status.firstUncompletedIdent") }),
  FetchResult: (a, d) => ({ _tag: "FetchResult", ident: uint(a[1], "FetchResult.ident"), value: value(a[2], "FetchResult.value", d + 1) }),
  RemoteFunctionFailed: (a) => ({ _tag: "RemoteFunctionFailed", ident: uint(a[1], "RemoteFunctionFailed.ident"), error: errorPayload(a[2], "RemoteFunctionFailed.error") }),
  Restarted: (a) => ({ _tag: "Restarted", restarts: uint(a[1], "Restarted.restarts") }),
  ProtocolError: (a) => ({ _tag: "ProtocolError", message: str(a[1], "ProtocolError.message") }),
}

type Tag = Message["_tag"]
/** Per code: the message's tag, decoder and field count. */
const BY_CODE: Array<{ readonly tag: Tag; readonly decode: MessageDecoder; readonly fields: number } | undefined> = []
for (const tag of Object.keys(MESSAGE_CODES) as Tag[])
  BY_CODE[MESSAGE_CODES[tag]] = { tag, decode: MESSAGE_DECODERS[tag], fields: MESSAGE_FIELDS[tag].length }

/** Which codes a side accepts: the worker 1..14, the controller 64..69. */
interface Direction {
  readonly name: string
  readonly accepts: (code: number) => boolean
}
const WORKER_BOUND: Direction = { name: "worker", accepts: (code) => code >= 1 && code < 64 }
const CONTROLLER_BOUND: Direction = { name: "controller", accepts: (code) => code >= 64 }
const EITHER: Direction = { name: "either side", accepts: () => true }

const decodeMessageArray = (v: unknown, direction: Direction, depth: number): Message => {
  if (!Array.isArray(v)) throw new Invalid("", `expected a message array [code, ...fields], got ${describe(v)}`)
  if (depth > MAX_DEPTH) throw new Invalid("", `nesting deeper than ${MAX_DEPTH}`)
  if (v.length === 0) throw new Invalid("", "empty message array (expected [code, ...fields])")
  const code: unknown = v[0]
  const entry = typeof code === "number" ? BY_CODE[code] : undefined
  if (entry === undefined) throw new Invalid("", typeof code === "number" ? `unknown message code ${code}` : `message code: expected integer, got ${describe(code)}`)
  if (!direction.accepts(code as number)) throw new Invalid("", `${entry.tag} (code ${code}) is not accepted by the ${direction.name}`)
  if (v.length !== entry.fields + 1) throw new Invalid(entry.tag, `expected ${entry.fields} fields, got ${v.length - 1}`)
  return entry.decode(v, depth)
}

const invalidError = (e: Invalid): WireError =>
  new WireError({ message: e.where === "" ? e.problem : `${e.where}: ${e.problem}`, fatal: false })

/** What a msgpack decode failure means, in words. */
const msgpackProblem = (e: unknown, length: number): string => {
  const text = e instanceof Error ? e.message : String(e)
  if (e instanceof RangeError) return text.startsWith("Extra ") ? `trailing bytes after the message (${text})` : `truncated message (${length} bytes)`
  return `malformed msgpack: ${text}`
}

const decodeWith = <M extends Message>(bytes: Uint8Array, ownership: FrameOwnership, direction: Direction): Result.Result<M, WireError> => {
  if (bytes.length === 0) return Result.fail(new WireError({ message: "empty message", fatal: false }))
  const bounds = scanProblem(bytes)
  if (bounds !== undefined) return Result.fail(new WireError({ message: bounds, fatal: false }))
  copyTensorBytes = ownership !== "owned"
  let wire: unknown
  try {
    wire = decoder.decode(bytes)
  } catch (e) {
    return Result.fail(new WireError({ message: msgpackProblem(e, bytes.length), fatal: false }))
  }
  try {
    return Result.succeed(decodeMessageArray(wire, direction, 1) as M)
  } catch (e) {
    return Result.fail(e instanceof Invalid ? invalidError(e) : new WireError({ message: `cannot decode: ${String(e)}`, fatal: false }))
  }
}

/**
 * Decodes and checks a message sent to a worker (codes 1..14). Never throws. With
 * "borrowed" bytes (valid only for now, e.g. a small frame from FrameReader) tensor and bin
 * bytes are copied out; with "owned" bytes they are views into `bytes` when 8-aligned.
 */
export const decodeWorkerMessage = (bytes: Uint8Array, ownership: FrameOwnership = "borrowed"): Result.Result<WorkerMessage, WireError> =>
  decodeWith<WorkerMessage>(bytes, ownership, WORKER_BOUND)

/** Decodes and checks a message sent to the controller (codes 64..69); as decodeWorkerMessage. */
export const decodeControllerMessage = (bytes: Uint8Array, ownership: FrameOwnership = "borrowed"): Result.Result<ControllerMessage, WireError> =>
  decodeWith<ControllerMessage>(bytes, ownership, CONTROLLER_BOUND)

// ---- encoding -------------------------------------------------------------------------------

const toWire = (m: Message): unknown[] => {
  const fields: ReadonlyArray<string> = MESSAGE_FIELDS[m._tag]
  const a = new Array<unknown>(fields.length + 1)
  a[0] = MESSAGE_CODES[m._tag]
  for (let i = 0; i < fields.length; i++) a[i + 1] = (m as unknown as Record<string, unknown>)[fields[i]!]
  if (m._tag === "CommandGroup" && Array.isArray(m.commands)) a[1] = m.commands.map(toWire)
  return a
}

/**
 * The body of `m` as the encoder's output (valid until the next encode) plus the large
 * tensors left out of it, with the ext lengths patched to include them.
 */
const encodeParts = (m: Message): Result.Result<{ readonly body: Uint8Array; readonly outOfLine: ReadonlyArray<OutOfLine>; readonly length: number }, WireError> => {
  outOfLine = []
  outOfLineBytes = 0
  copyTensorBytes = false
  try {
    const wire = toWire(m)
    decodeMessageArray(wire, EITHER, 1)
    const body = encoder.encodeSharedRef(wire)
    const length = body.length + outOfLineBytes
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
    outOfLine = []
    outOfLineBytes = 0
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
