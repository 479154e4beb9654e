/**
 * Ext payloads: the wire values besides plain msgpack data (values.ts), each its own msgpack
 * ext type, and the ExtensionCodecs that carry them (one for encoding, one for decoding: the
 * library hands each its call's context).
 *
 * Ext types (application types 1..6). Integers are little-endian. "u64" is an unsigned
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
 *   6 SharedTensor   u8 dtype, u8 ndim, u64 segment, u64 offset, u64 shape[ndim]:
 *                    18 + 8 * ndim bytes (the bytes lie in an upload segment, not here).
 *
 * A payload that fails its layout check decodes as a BadExt, which the field's check reports
 * where it sits (validate.ts).
 */
import { Decoder, Encoder, ExtData, ExtensionCodec, type ExtensionCodecType } from "@msgpack/msgpack"
import type { DecodeContext, EncodeContext } from "./context.ts"
import { NDSlice } from "./ndslice.ts"
import { markBadStrings, scan } from "./scan.ts"
import { BadExt, byteSize, copyOf, expected, isNatural, MAX_NDIM, NOT_UTF8, shapeText, U32_MAX } from "./validate.ts"
import { DTYPES, ErrorPayload, HostTensor, Ref, SharedTensor, TensorFactory, type Device, type Frame } from "./values.ts"

/** The ext type of each wire value. */
export const EXT_TYPES = { Ref: 1, NDSlice: 2, TensorFactory: 3, HostTensor: 4, ErrorPayload: 5, SharedTensor: 6 } as const
/** HostTensors at least this big are not copied into the encoder's buffer (see encodeMessageParts). */
export const OUT_OF_LINE_BYTES = 64 * 1024
export const DEVICES: ReadonlyArray<Device> = ["cpu", "cuda"]

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

const decodeRef = (p: Uint8Array): Ref | BadExt => {
  if (p.length === 4) return new Ref(u32At(p, 0))
  if (p.length === 8) {
    const id = u64At(p, 0)
    return id < 0 ? new BadExt("Ref: id is not a safe integer") : new Ref(id)
  }
  return new BadExt(`Ref: ${p.length}-byte payload (expected 4 or 8)`)
}

/**
 * Writes a Ref whose id fits in a u32 as its whole ext (fixext 4, 6 bytes) at `at` of `b`, as
 * the encoder would from encodeRef's payload: the codec's writer does it in place, with no
 * payload array and ExtData per Ref (3-4 of each per command were a tenth of issuing one).
 */
export const writeRefExt = (b: Uint8Array, at: number, id: number): void => {
  b[at] = 0xd6
  b[at + 1] = EXT_TYPES.Ref
  b[at + 2] = id & 0xff
  b[at + 3] = (id >>> 8) & 0xff
  b[at + 4] = (id >>> 16) & 0xff
  b[at + 5] = id >>> 24
}
export const REF_EXT_BYTES = 6

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

const decodeSharedTensor = (p: Uint8Array): SharedTensor | BadExt => {
  if (p.length < 18) return new BadExt(`SharedTensor: ${p.length}-byte payload`)
  const dtype = DTYPES[p[0]!], ndim = p[1]!
  if (dtype === undefined) return new BadExt(`SharedTensor: unknown dtype code ${p[0]}`)
  if (ndim > MAX_NDIM) return new BadExt(`SharedTensor: ${ndim} dims (at most ${MAX_NDIM})`)
  if (p.length !== 18 + 8 * ndim) return new BadExt(`SharedTensor: ${p.length}-byte payload for ${ndim} dims (expected ${18 + 8 * ndim})`)
  const head = readU64s(p, 2, 2, "SharedTensor: [segment, offset]")
  if (head instanceof BadExt) return head
  const shape = readU64s(p, 18, ndim, "SharedTensor: shape")
  if (shape instanceof BadExt) return shape
  if (byteSize(dtype, shape) < 0) return new BadExt(`SharedTensor: ${shapeText(dtype, shape)} is too large`)
  return new SharedTensor(head[0]!, head[1]!, dtype, shape)
}

const encodeSharedTensor = (t: SharedTensor): Uint8Array => {
  const p = new Uint8Array(18 + 8 * t.shape.length)
  p[0] = DTYPES.indexOf(t.dtype); p[1] = t.shape.length
  putU64(p, 2, t.segment); putU64(p, 10, t.offset)
  t.shape.forEach((d, i) => putU64(p, 18 + 8 * i, d))
  return p
}

const decodeHostTensor = (p: Uint8Array, ctx: DecodeContext): HostTensor | BadExt => {
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
  if (ctx.copyBytes || data.byteOffset % 8 !== 0) data = copyOf(data)
  return new HostTensor(dtype, shape, data)
}

/** The ext payload of a tensor whose payload starts at `dataPos` in the encoder's output. */
const encodeHostTensor = (t: HostTensor, dataPos: number, ctx: EncodeContext): Uint8Array => {
  const ndim = t.shape.length, head = 3 + 8 * ndim
  // Align within the final body, which also holds the out-of-line bytes placed before here.
  const pad = (8 - ((dataPos + ctx.outOfLineBytes + head) % 8)) % 8
  const inline = t.data.byteLength < OUT_OF_LINE_BYTES
  const p = new Uint8Array(head + pad + (inline ? t.data.byteLength : 0))
  p[0] = DTYPES.indexOf(t.dtype); p[1] = ndim; p[2] = pad
  t.shape.forEach((d, i) => putU64(p, 3 + 8 * i, d))
  if (inline) p.set(t.data, head + pad)
  else {
    // The encoder writes ext 32 with the length of `p`; encodeParts patches in the full length.
    ctx.outOfLine.push({ lengthAt: dataPos - 5, extLength: head + pad + t.data.byteLength, at: dataPos + head + pad, data: t.data })
    ctx.outOfLineBytes += t.data.byteLength
  }
  return p
}


/** ErrorPayload's inner msgpack: its own instances, as the outer ones are busy when it runs. */
const innerEncoder = new Encoder()
const innerDecoder = new Decoder()
/** For inner bytes that markBadStrings rewrote: knows only the marker. */
const innerMarkedDecoder = new Decoder({ extensionCodec: markerOnly() })

/** What a msgpack decode failure means, in words. */
export const msgpackProblem = (e: unknown, length: number): string => {
  const text = e instanceof Error ? e.message : String(e)
  if (e instanceof RangeError) return text.startsWith("Extra ") ? `trailing bytes after the message (${text})` : `truncated message (${length} bytes)`
  return `malformed msgpack: ${text}`
}

const decodeErrorPayload = (p: Uint8Array, ctx: DecodeContext): ErrorPayload | BadExt => {
  const scanned = scan(p, ctx.scanStack)
  if (typeof scanned === "string") return new BadExt(`ErrorPayload: ${scanned}`)
  let inner: unknown
  try {
    inner = scanned === undefined ? innerDecoder.decode(p) : innerMarkedDecoder.decode(markBadStrings(p, scanned))
  } catch (e) {
    return new BadExt(`ErrorPayload: ${msgpackProblem(e, p.length)}`)
  }
  if (!Array.isArray(inner) || (inner.length !== 3 && inner.length !== 4)) return new BadExt("ErrorPayload: expected [type, message, frames]")
  const [type, message, frames, reason] = inner as unknown[]
  if (typeof type !== "string") return new BadExt(`ErrorPayload.type: ${expected("string", type)}`)
  if (typeof message !== "string") return new BadExt(`ErrorPayload.message: ${expected("string", message)}`)
  if (!Array.isArray(frames)) return new BadExt(`ErrorPayload.frames: ${expected("array", frames)}`)
  if (inner.length === 4 && typeof reason !== "string") return new BadExt(`ErrorPayload.reason: ${expected("string", reason)}`)
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


/** The payload of ext type NOT_UTF8.type that markBadStrings writes in place of a bad str. */
function decodeNotUtf8(p: Uint8Array): BadExt | ExtData {
  return (p.length === 1 && p[0] === NOT_UTF8.marker ? new BadExt(NOT_UTF8.problem) : new ExtData(NOT_UTF8.type, p))
}

function markerOnly(): ExtensionCodec {
  const c = new ExtensionCodec()
  c.register({ type: NOT_UTF8.type, encode: () => null, decode: decodeNotUtf8 })
  return c
}

/**
 * The ext codec a Decoder uses; `marked`: also the marker of strings that are not UTF-8, for
 * the bytes markBadStrings rewrote.
 */
export const decodingExtensions = (marked: boolean): ExtensionCodec<DecodeContext> => {
  const c = new ExtensionCodec<DecodeContext>()
  const none = () => null
  c.register({ type: EXT_TYPES.Ref, encode: none, decode: decodeRef })
  c.register({ type: EXT_TYPES.NDSlice, encode: none, decode: decodeNDSlice })
  c.register({ type: EXT_TYPES.TensorFactory, encode: none, decode: decodeTensorFactory })
  c.register({ type: EXT_TYPES.HostTensor, encode: none, decode: (p, _type, ctx) => decodeHostTensor(p, ctx) })
  c.register({ type: EXT_TYPES.ErrorPayload, encode: none, decode: (p, _type, ctx) => decodeErrorPayload(p, ctx) })
  c.register({ type: EXT_TYPES.SharedTensor, encode: none, decode: decodeSharedTensor })
  if (marked) c.register({ type: NOT_UTF8.type, encode: none, decode: decodeNotUtf8 })
  return c
}

/**
 * The encoder's ext codec. NOTE: not an ExtensionCodec: that one asks the timestamp codec and
 * then each registered type in turn for every array and map too; this one answers by class,
 * and at once for the arrays and maps that most values of a command are.
 */
export const encodingExtensions = (): ExtensionCodecType<EncodeContext> => ({
  tryToEncode: (v, ctx) => {
    if (Array.isArray(v)) return null
    if (v instanceof Ref) return new ExtData(EXT_TYPES.Ref, encodeRef(v))
    if (v instanceof HostTensor) return new ExtData(EXT_TYPES.HostTensor, (dataPos: number) => encodeHostTensor(v, dataPos, ctx))
    if (v instanceof NDSlice) return new ExtData(EXT_TYPES.NDSlice, encodeNDSlice(v))
    if (v instanceof TensorFactory) return new ExtData(EXT_TYPES.TensorFactory, encodeTensorFactory(v))
    if (v instanceof ErrorPayload) return new ExtData(EXT_TYPES.ErrorPayload, encodeErrorPayload(v))
    if (v instanceof SharedTensor) return new ExtData(EXT_TYPES.SharedTensor, encodeSharedTensor(v))
    return null
  },
  decode: () => undefined,
})
