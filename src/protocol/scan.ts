/**
 * The pre-scan: walks a msgpack body's structure without building it, before the library
 * decodes it. NOTE: the library allocates each array at its declared length before reading
 * it (5 bytes declaring 55M items cost 440 MB), has no depth limit when decoding, and takes
 * any bytes as a str (invalid UTF-8 comes out as Latin-1 or U+FFFD), so this runs first:
 * every container must fit in the bytes left (each item takes at least one byte) and nest at
 * most MAX_DEPTH + 1 deep (one more than the validator allows, so that it names the field in
 * the common case), and every str must be UTF-8.
 *
 * A str that is not UTF-8 is not refused here, where its field is unknown: markBadStrings
 * rewrites it as an ext NOT_UTF8 marker, which decodes as a BadExt that the field's check
 * reports by name (validate.ts).
 */
import { MAX_DEPTH, NOT_UTF8 } from "./validate.ts"

const NOT_UTF8_TYPE_BYTE = 0x80

/** Where the strs that are not UTF-8 (and any genuine ext -128) sit: [start, end) of each value. */
export class BadStrings {
  readonly spans: number[] = []
  /** Per span: NOT_UTF8.marker for a str, NOT_UTF8.genuine for an ext -128. */
  readonly kinds: number[] = []
  /** Whether any span is a str. */
  strs = false
}

/** Scratch for scan: the items left in each open container (index = depth). */
export type ScanStack = Float64Array

export const scanStack = (): ScanStack => new Float64Array(MAX_DEPTH + 3)

/**
 * The problem with `b`'s structure, or undefined when the library may decode it, or the
 * strs in it that are not UTF-8 (then decode markBadStrings(b, ...) instead).
 */
export const scan = (b: Uint8Array, stack: ScanStack): string | undefined | BadStrings => {
  const first = walk(b, stack, undefined)
  // Rare: walk again, noting every bad str and every genuine ext -128 (which the markers would shadow).
  return first === BAD_STR ? walk(b, stack, new BadStrings()) : first
}

/** What walk returns without `marks` on the first str that is not UTF-8. */
const BAD_STR = new BadStrings()

/**
 * The walk behind scan. Without `marks` (the common case: one pass, no bookkeeping per value)
 * it stops at the first bad str; with them it notes each bad str and genuine ext -128.
 */
const walk = (b: Uint8Array, stack: ScanStack, marks: BadStrings | undefined): string | undefined | BadStrings => {
  const n = b.length
  let pos = 0, depth = 0, owed = 0
  while (pos < n) {
    const head = b[pos]!
    const at = pos++
    let items = 0, skip = 0
    if (head < 0x80 || head >= 0xe0 || head === 0xc0 || head === 0xc2 || head === 0xc3) skip = 0
    else if (head < 0x90) items = 2 * (head - 0x80)
    else if (head < 0xa0) items = head - 0x90
    else if (head < 0xc0) {
      skip = head - 0xa0
      // The common case, so inline: ASCII (one test for all its bytes), or the full check.
      const end = pos + skip
      let high = 0
      if (end <= n) for (let i = pos; i < end; i++) high |= b[i]!
      if (high >= 0x80 && !isUtf8(b, pos, end)) {
        if (marks === undefined) return BAD_STR
        note(marks, at, pos + skip, NOT_UTF8.marker)
      }
    } else {
      if (pos + 4 > n && head !== 0xc1) {
        // Headers read below may run past the end: check exactly.
        const need = HEADER_BYTES[head - 0xc4] ?? 0
        if (pos + need > n) return truncated(n)
      }
      // Where a long str's bytes start.
      let text = -1
      switch (head) {
        case 0xc1: return undefined // reserved: the library names it
        case 0xc4: skip = 1 + b[pos]!; break
        case 0xc5: skip = 2 + ((b[pos]! << 8) | b[pos + 1]!); break
        case 0xc6: skip = 4 + u32be(b, pos); break
        case 0xd9: skip = 1 + b[pos]!; text = pos + 1; break
        case 0xda: skip = 2 + ((b[pos]! << 8) | b[pos + 1]!); text = pos + 2; break
        case 0xdb: skip = 4 + u32be(b, pos); text = pos + 4; break
        case 0xc7: skip = 2 + b[pos]!; if (marks !== undefined) genuine(b, marks, at, pos + 1, pos + skip); break
        case 0xc8: skip = 3 + ((b[pos]! << 8) | b[pos + 1]!); if (marks !== undefined) genuine(b, marks, at, pos + 2, pos + skip); break
        case 0xc9: skip = 5 + u32be(b, pos); if (marks !== undefined) genuine(b, marks, at, pos + 4, pos + skip); break
        case 0xca: case 0xce: case 0xd2: skip = 4; break
        case 0xcb: case 0xcf: case 0xd3: skip = 8; break
        case 0xcc: case 0xd0: skip = 1; break
        case 0xcd: case 0xd1: skip = 2; break
        case 0xd4: skip = 2; if (marks !== undefined) genuine(b, marks, at, pos, pos + skip); break
        case 0xd5: skip = 3; if (marks !== undefined) genuine(b, marks, at, pos, pos + skip); break
        case 0xd6: skip = 5; if (marks !== undefined) genuine(b, marks, at, pos, pos + skip); break
        case 0xd7: skip = 9; if (marks !== undefined) genuine(b, marks, at, pos, pos + skip); break
        case 0xd8: skip = 17; if (marks !== undefined) genuine(b, marks, at, pos, pos + skip); break
        case 0xdc: items = (b[pos]! << 8) | b[pos + 1]!; pos += 2; break
        case 0xdd: items = u32be(b, pos); pos += 4; break
        case 0xde: items = 2 * ((b[pos]! << 8) | b[pos + 1]!); pos += 2; break
        case 0xdf: items = 2 * u32be(b, pos); pos += 4; break
      }
      if (text >= 0 && !isText(b, text, pos + skip)) {
        if (marks === undefined) return BAD_STR
        note(marks, at, pos + skip, NOT_UTF8.marker)
      }
    }
    if (items > 0) {
      if (depth > MAX_DEPTH) return `nesting deeper than ${MAX_DEPTH} (at byte ${at})`
      depth++
      stack[depth] = items
      owed += items
      // Each open container but the outermost is one unfinished item of its parent.
      if (owed - (depth - 1) > n - pos) return truncated(n)
      continue
    }
    pos += skip
    if (pos > n) return truncated(n)
    // A whole value: it completes an item of the enclosing container, maybe closing it.
    while (depth > 0) {
      owed--
      if (--stack[depth]! > 0) break
      depth--
    }
    if (depth === 0) break // trailing bytes are the library's to report
  }
  if (depth > 0 || pos === 0) return truncated(n)
  return marks?.strs ? marks : undefined
}

/** Made only on failure: building it for every scan cost about a quarter of a small message's scan. */
const truncated = (n: number): string => `truncated message (${n} bytes)`

/** Adds the value at [start, end) to `marks`. */
const note = (marks: BadStrings, start: number, end: number, kind: number): void => {
  marks.spans.push(start, end)
  marks.kinds.push(kind)
  if (kind === NOT_UTF8.marker) marks.strs = true
}

/** Notes the ext at [start, end) when it is a genuine ext -128, its type byte at `type`. */
const genuine = (b: Uint8Array, marks: BadStrings, start: number, type: number, end: number): void => {
  if (end <= b.length && b[type] === NOT_UTF8_TYPE_BYTE) note(marks, start, end, NOT_UTF8.genuine)
}

/** Whether b[from, to) is UTF-8: ASCII (one test for all its bytes, the common case), or the full check. */
const isText = (b: Uint8Array, from: number, to: number): boolean => {
  // Past the end, the walk reports the value as truncated instead.
  if (to > b.length) return true
  let high = 0
  for (let i = from; i < to; i++) high |= b[i]!
  return high < 0x80 || isUtf8(b, from, to)
}

/** `b` with each span of `marks` replaced by its fixext 1 NOT_UTF8 marker. */
export const markBadStrings = (b: Uint8Array, marks: BadStrings): Uint8Array => {
  const out = new Uint8Array(b.length + 3 * marks.kinds.length)
  let from = 0, to = 0
  for (let i = 0; i < marks.kinds.length; i++) {
    const start = marks.spans[2 * i]!, end = marks.spans[2 * i + 1]!
    out.set(b.subarray(from, start), to)
    to += start - from
    out.set([0xd4, NOT_UTF8_TYPE_BYTE, marks.kinds[i]!], to)
    to += 3
    from = end
  }
  out.set(b.subarray(from), to)
  return out.subarray(0, to + b.length - from)
}

/** Whether b[from, to) is well-formed UTF-8 (no overlongs, surrogates or code points past U+10FFFF). */
const isUtf8 = (b: Uint8Array, from: number, to: number): boolean => {
  let i = from
  while (i < to) {
    const c = b[i]!
    if (c < 0x80) { i++; continue }
    const tail = c >= 0xc2 && c <= 0xdf ? 1 : c >= 0xe0 && c <= 0xef ? 2 : c >= 0xf0 && c <= 0xf4 ? 3 : 0
    if (tail === 0 || i + tail >= to) return false
    // The second byte's range is narrower after E0 (overlong), ED (surrogates), F0 and F4.
    const second = b[i + 1]!
    const low = c === 0xe0 ? 0xa0 : c === 0xf0 ? 0x90 : 0x80
    const high = c === 0xed ? 0x9f : c === 0xf4 ? 0x8f : 0xbf
    if (second < low || second > high) return false
    for (let k = 2; k <= tail; k++) if ((b[i + k]! & 0xc0) !== 0x80) return false
    i += tail + 1
  }
  return true
}

const u32be = (b: Uint8Array, at: number): number => b[at]! * 0x100_0000 + ((b[at + 1]! << 16) | (b[at + 2]! << 8) | b[at + 3]!)

/** Bytes of length header after the type byte, for 0xc4..0xdf. */
const HEADER_BYTES: ReadonlyArray<number> = [1, 2, 4, 1, 2, 4, 4, 8, 1, 2, 4, 8, 1, 2, 4, 8, 2, 3, 5, 9, 17, 1, 2, 4, 2, 4, 2, 4]
