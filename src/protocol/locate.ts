/**
 * Where a frame's large tensor lies, from the first bytes of the frame: so a receiver can read a
 * CallFunction's host tensor straight from the socket into the tensor it will make, with no frame
 * buffer between (FrameReader's `direct` option, framing.ts; the worker's side, src/worker/direct.ts). A pure walk over msgpack, never trusted:
 * the body is still decoded and checked whole (codec.ts) once it is in, and what was read
 * straight is used only where the decoded message has a HostTensor exactly there.
 */
import { OUT_OF_LINE_BYTES, EXT_TYPES } from "./ext.ts"
import { MESSAGE_CODES } from "./messages.ts"
import { DTYPES, ITEM_SIZE, type DType } from "./values.ts"

/** The first host tensor of a CallFunction in a frame: its elements' place in the body, dtype and shape. */
export interface Located {
  readonly at: number
  readonly bytes: number
  readonly dtype: DType
  readonly shape: ReadonlyArray<number>
}

/** More bytes are needed to tell; or the frame holds no such tensor (or not one to read straight). */
export type Locate = Located | "more" | "none"

const CALL = MESSAGE_CODES.CallFunction, GROUP = MESSAGE_CODES.CommandGroup
/** Deeper than this, a frame is not walked (codec.ts refuses past MAX_DEPTH anyway). */
const MAX_WALK_DEPTH = 32
/**
 * Past this many values walked, a frame's tensor is not looked for: a batch of many small
 * commands then costs its reader a short walk, not one over every command (an upload batched
 * behind a few commands is still found).
 */
const MAX_WALK_VALUES = 1024

/**
 * The first HostTensor (ext 32 of type HostTensor, OUT_OF_LINE_BYTES or more, its elements
 * 8-aligned) inside a CallFunction that is the frame's message or one command of its
 * CommandGroup: only there is a host tensor used once, when its command runs (a recording's, say,
 * is uploaded on every call and must stay in its frame).
 */
export const locateTensor = (b: Uint8Array): Locate => {
  /** Per open container: values left in it, values read, what it is, and whether it lies in a CallFunction. */
  const stack: Array<{ left: number; read: number; readonly kind: "message" | "commands" | "command" | "other"; call: boolean }> = []
  let at = 0, values = 0
  /** The frame's message code, once read. */
  let messageCode = -1
  /** One value at the innermost level is done (a scalar of code `value`, or a container closed). */
  const done = (value: number | undefined) => {
    const top = stack.at(-1)
    if (top === undefined) return
    // A message's or a command's first value is its code.
    if (top.read === 0 && (top.kind === "message" || top.kind === "command")) top.call = value === CALL
    top.read++
    if (--top.left === 0) {
      stack.pop()
      done(undefined)
    }
  }
  const open = (n: number, isArray: boolean): boolean => {
    if (stack.length >= MAX_WALK_DEPTH) return false
    const top = stack.at(-1)
    const kind = top === undefined ? "message"
      : top.kind === "message" && top.read === 1 && isArray && messageCode === GROUP ? "commands"
      : top.kind === "commands" && isArray ? "command" : "other"
    if (n === 0) return done(undefined), true
    stack.push({ left: n, read: 0, kind, call: kind === "other" ? top!.call : false })
    return true
  }
  const u16 = (i: number) => (b[i]! << 8) | b[i + 1]!
  const u32 = (i: number) => b[i]! * 0x100_0000 + ((b[i + 1]! << 16) | (b[i + 2]! << 8) | b[i + 3]!)
  const need = (n: number) => at + n <= b.length
  while (true) {
    if ((at > 0 && stack.length === 0) || ++values > MAX_WALK_VALUES) return "none"
    if (!need(1)) return "more"
    const t = b[at]!
    if (t <= 0x7f) {
      const top = stack.at(-1)
      if (top?.kind === "message" && top.read === 0) messageCode = t
      at += 1
      done(t)
      continue
    }
    if (t >= 0xe0 || t === 0xc0 || t === 0xc2 || t === 0xc3) { at += 1; done(undefined); continue }
    if ((t & 0xf0) === 0x90 || (t & 0xf0) === 0x80) {
      const isArray = (t & 0xf0) === 0x90, n = t & 0x0f
      at += 1
      if (!open(isArray ? n : 2 * n, isArray)) return "none"
      continue
    }
    if (t === 0xdc || t === 0xdd || t === 0xde || t === 0xdf) {
      const wide = t === 0xdd || t === 0xdf, isArray = t === 0xdc || t === 0xdd
      if (!need(wide ? 5 : 3)) return "more"
      const n = wide ? u32(at + 1) : u16(at + 1)
      at += wide ? 5 : 3
      if (!open(isArray ? n : 2 * n, isArray)) return "none"
      continue
    }
    const fixed = FIXED[t]
    if (fixed !== undefined) { if (!need(fixed)) return "more"; at += fixed; done(undefined); continue }
    if ((t & 0xe0) === 0xa0) { if (!need(1 + (t & 0x1f))) return "more"; at += 1 + (t & 0x1f); done(undefined); continue }
    // Sized: str, bin, ext: the width of the length, and an ext's type byte after it.
    const width = t === 0xd9 || t === 0xc4 || t === 0xc7 ? 1 : t === 0xda || t === 0xc5 || t === 0xc8 ? 2 : t === 0xdb || t === 0xc6 || t === 0xc9 ? 4 : 0
    if (width === 0) return "none"
    const ext = t === 0xc7 || t === 0xc8 || t === 0xc9 ? 1 : 0
    if (!need(1 + width + ext)) return "more"
    const length = width === 1 ? b[at + 1]! : width === 2 ? u16(at + 1) : u32(at + 1)
    if (t === 0xc9 && b[at + 5] === EXT_TYPES.HostTensor && length >= OUT_OF_LINE_BYTES && stack.at(-1)?.call === true) return hostTensorAt(b, at + 6, length)
    if (!need(1 + width + ext + length)) return "more"
    at += 1 + width + ext + length
    done(undefined)
  }
}

/** Sizes of the fixed-size msgpack values by their first byte (floats, ints, fixext). */
const FIXED: Readonly<Record<number, number>> = { 0xca: 5, 0xcb: 9, 0xcc: 2, 0xcd: 3, 0xce: 5, 0xcf: 9, 0xd0: 2, 0xd1: 3, 0xd2: 5, 0xd3: 9, 0xd4: 3, 0xd5: 4, 0xd6: 6, 0xd7: 10, 0xd8: 18 }

/** A HostTensor ext payload of `length` from `p`: where its elements are, or why it is not one to read straight. */
const hostTensorAt = (b: Uint8Array, p: number, length: number): Locate => {
  if (p + 3 > b.length) return "more"
  const dtype = DTYPES[b[p]!], ndim = b[p + 1]!, pad = b[p + 2]!
  if (dtype === undefined || ndim > 8 || pad > 7) return "none"
  if (p + 3 + 8 * ndim > b.length) return "more"
  const shape: number[] = []
  for (let d = 0, q = p + 3; d < ndim; d++, q += 8) {
    const low = b[q]! + b[q + 1]! * 0x100 + b[q + 2]! * 0x1_0000 + b[q + 3]! * 0x100_0000
    const high = b[q + 4]! + b[q + 5]! * 0x100 + b[q + 6]! * 0x1_0000 + b[q + 7]! * 0x100_0000
    if (high > 0x1f_ffff) return "none"
    shape.push(high * 0x1_0000_0000 + low)
  }
  const at = p + 3 + 8 * ndim + pad, bytes = length - (3 + 8 * ndim + pad)
  if (bytes !== shape.reduce((x, y) => x * y, ITEM_SIZE[dtype]) || at % 8 !== 0) return "none"
  return { at, bytes, dtype, shape }
}
