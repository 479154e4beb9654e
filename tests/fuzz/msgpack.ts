/**
 * A msgpack structure map for the fuzzer: where each value of an encoded message starts and
 * ends, its kind, and where its length field and ext type byte sit, so mutations can aim at
 * the structure (a length, a type byte, one field) rather than at random bytes.
 */

export type Kind = "int" | "nil" | "bool" | "float" | "str" | "bin" | "array" | "map" | "ext" | "reserved"

export interface MsgNode {
  readonly start: number
  readonly end: number
  readonly kind: Kind
  /** The length field's offset and width; width 0 when the length sits in the type byte (fix types) or there is none. */
  readonly lengthAt: number
  readonly lengthBytes: number
  /** The ext type byte's offset, -1 for other kinds. */
  readonly extTypeAt: number
  /** str, bin, ext: the first payload byte. */
  readonly payloadAt: number
  /** Array items, or map keys and values alternating. */
  readonly children: ReadonlyArray<MsgNode>
}

const be = (b: Uint8Array, at: number, width: number): number => {
  let n = 0
  for (let i = 0; i < width; i++) n = n * 256 + b[at + i]!
  return n
}

/** One value starting at `at`; throws RangeError when the bytes are not well-formed msgpack. */
const parseAt = (b: Uint8Array, at: number): MsgNode => {
  const head = b[at]
  if (head === undefined) throw new RangeError(`no value at byte ${at}`)
  const leaf = (kind: Kind, size: number): MsgNode => ({ start: at, end: at + size, kind, lengthAt: at, lengthBytes: 0, extTypeAt: -1, payloadAt: at + 1, children: [] })
  const sized = (kind: "str" | "bin", lengthBytes: number, length: number): MsgNode => {
    const payloadAt = at + 1 + lengthBytes
    return { start: at, end: payloadAt + length, kind, lengthAt: at + 1, lengthBytes, extTypeAt: -1, payloadAt, children: [] }
  }
  const ext = (lengthBytes: number, length: number): MsgNode => {
    const extTypeAt = at + 1 + lengthBytes
    return { start: at, end: extTypeAt + 1 + length, kind: "ext", lengthAt: at + 1, lengthBytes, extTypeAt, payloadAt: extTypeAt + 1, children: [] }
  }
  const container = (kind: "array" | "map", lengthBytes: number, count: number): MsgNode => {
    const items = kind === "map" ? 2 * count : count
    const children: MsgNode[] = []
    let pos = at + 1 + lengthBytes
    for (let i = 0; i < items; i++) {
      const child = parseAt(b, pos)
      children.push(child)
      pos = child.end
    }
    return { start: at, end: pos, kind, lengthAt: lengthBytes === 0 ? at : at + 1, lengthBytes, extTypeAt: -1, payloadAt: at + 1 + lengthBytes, children }
  }
  if (head < 0x80 || head >= 0xe0) return leaf("int", 1)
  if (head < 0x90) return container("map", 0, head - 0x80)
  if (head < 0xa0) return container("array", 0, head - 0x90)
  if (head < 0xc0) return sized("str", 0, head - 0xa0)
  switch (head) {
    case 0xc0: return leaf("nil", 1)
    case 0xc1: return leaf("reserved", 1)
    case 0xc2: case 0xc3: return leaf("bool", 1)
    case 0xc4: return sized("bin", 1, be(b, at + 1, 1))
    case 0xc5: return sized("bin", 2, be(b, at + 1, 2))
    case 0xc6: return sized("bin", 4, be(b, at + 1, 4))
    case 0xc7: return ext(1, be(b, at + 1, 1))
    case 0xc8: return ext(2, be(b, at + 1, 2))
    case 0xc9: return ext(4, be(b, at + 1, 4))
    case 0xca: return leaf("float", 5)
    case 0xcb: return leaf("float", 9)
    case 0xcc: case 0xd0: return leaf("int", 2)
    case 0xcd: case 0xd1: return leaf("int", 3)
    case 0xce: case 0xd2: return leaf("int", 5)
    case 0xcf: case 0xd3: return leaf("int", 9)
    case 0xd4: case 0xd5: case 0xd6: case 0xd7: case 0xd8: {
      const length = 1 << (head - 0xd4)
      return { start: at, end: at + 2 + length, kind: "ext", lengthAt: at, lengthBytes: 0, extTypeAt: at + 1, payloadAt: at + 2, children: [] }
    }
    case 0xd9: return sized("str", 1, be(b, at + 1, 1))
    case 0xda: return sized("str", 2, be(b, at + 1, 2))
    case 0xdb: return sized("str", 4, be(b, at + 1, 4))
    case 0xdc: return container("array", 2, be(b, at + 1, 2))
    case 0xdd: return container("array", 4, be(b, at + 1, 4))
    case 0xde: return container("map", 2, be(b, at + 1, 2))
    default: return container("map", 4, be(b, at + 1, 4)) // 0xdf
  }
}

/** The structure of one encoded value; throws RangeError unless `b` is exactly one well-formed value. */
export const parseMsgpack = (b: Uint8Array): MsgNode => {
  const root = parseAt(b, 0)
  if (root.end !== b.length) throw new RangeError(`value ends at ${root.end} of ${b.length} bytes`)
  return root
}

/** Every node, depth first, the root first. */
export const allNodes = (root: MsgNode): MsgNode[] => {
  const out: MsgNode[] = []
  const visit = (n: MsgNode) => {
    out.push(n)
    for (const c of n.children) visit(c)
  }
  visit(root)
  return out
}
