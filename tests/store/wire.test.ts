// The wire codec alone: opcode numbers and byte layouts of torch's TCPStore, requests split at
// every byte, and limits that refuse a length before its bytes exist.
import { describe, expect, test } from "bun:test"
import {
  ByteBuffer,
  Cursor,
  type Dialect,
  INCOMPLETE,
  opcode,
  parseRequest,
  type Request,
  SERVER_LIMITS,
  WireViolation,
  Writer,
  writeRequest,
} from "../../src/store/wire.ts"
import { bytes, str, u32, u64 } from "./helpers.ts"

const enc = (s: string) => new TextEncoder().encode(s)
const encode = (dialect: Dialect, req: Request) => writeRequest(new Writer(), dialect, req).bytes()
const parse = (dialect: Dialect, b: Uint8Array) => {
  const c = new Cursor(b, 0, b.byteLength, SERVER_LIMITS)
  const req = parseRequest(c, dialect)
  return { req, consumed: c.pos }
}

describe("opcode tables", () => {
  test("1.13 numbering", () => {
    const ops = ["set", "compareSet", "get", "add", "check", "wait", "getNumKeys", "watchKey", "deleteKey"] as const
    expect(ops.map((op) => opcode("1.13", op))).toEqual([0, 1, 2, 3, 4, 5, 6, 7, 8])
    expect(opcode("1.13", "validate")).toBe(-1)
    expect(opcode("1.13", "cancelWait")).toBe(-1)
  })
  test("2.x numbering", () => {
    const ops = [
      ...["validate", "set", "compareSet", "get", "add", "check", "wait", "getNumKeys"],
      ...["deleteKey", "append", "multiGet", "multiSet", "cancelWait", "ping"],
    ] as const
    expect(ops.map((op) => opcode("2.x", op))).toEqual([0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13])
    expect(opcode("2.x", "watchKey")).toBe(-1)
  })
})

describe("byte layouts", () => {
  test("the captured 1.13 SET /k v1", () => {
    const two = [2, 0, 0, 0, 0, 0, 0, 0]
    const expected = bytes(0x00, two, [0x2f, 0x6b], two, [0x76, 0x31])
    expect(encode("1.13", { op: "set", key: enc("/k"), value: enc("v1") })).toEqual(expected)
    const { req } = parse("1.13", expected)
    expect(req.op).toBe("set")
    if (req.op === "set") expect([req.key, req.value]).toEqual([enc("/k"), enc("v1")])
  })
  test("the same request in 2.x starts with 0x01; WAIT 0x06, GET 0x03", () => {
    expect(encode("2.x", { op: "set", key: enc("/k"), value: enc("v1") })[0]).toBe(1)
    expect(encode("2.x", { op: "wait", keys: [enc("/k")] })).toEqual(bytes(6, u64(1), str("/k")))
    expect(encode("1.13", { op: "wait", keys: [enc("/k")] })).toEqual(bytes(5, u64(1), str("/k")))
    expect(encode("2.x", { op: "get", key: enc("/k") })).toEqual(bytes(3, str("/k")))
  })
  test("VALIDATE + PING is the probe 00 CE F7 85 3C 0D <nonce>", () => {
    const w = new Writer()
    writeRequest(w, "2.x", { op: "validate", magic: 0x3c85f7ce })
    writeRequest(w, "2.x", { op: "ping", nonce: 0x01020304 })
    expect(w.bytes()).toEqual(bytes(0x00, 0xce, 0xf7, 0x85, 0x3c, 0x0d, 4, 3, 2, 1))
  })
  test("ADD carries an i64 delta; COMPARE_SET three blobs; MULTI_SET a count and pairs", () => {
    const minus2 = [0xfe, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff]
    expect(encode("1.13", { op: "add", key: enc("/c"), delta: -2n })).toEqual(bytes(3, str("/c"), minus2))
    const cas = encode("2.x", { op: "compareSet", key: enc("/c"), expected: enc(""), desired: enc("x") })
    expect(cas).toEqual(bytes(2, str("/c"), str(""), str("x")))
    const multi = encode("2.x", { op: "multiSet", entries: [[enc("/a"), enc("1")]] })
    expect(multi).toEqual(bytes(11, u64(1), str("/a"), str("1")))
  })
})

describe("incremental parsing", () => {
  const samples: Array<[Dialect, Request]> = [
    ["1.13", { op: "compareSet", key: enc("/key"), expected: enc("old"), desired: enc("new") }],
    ["1.13", { op: "add", key: enc("init/"), delta: 1n }],
    ["2.x", { op: "multiSet", entries: [[enc("/a"), enc("1")], [enc("/bb"), new Uint8Array(300)]] }],
    ["2.x", { op: "check", keys: [enc("/a"), enc("/b")] }],
    ["2.x", { op: "ping", nonce: 77 }],
  ]
  const cases = samples.map(([d, r]) => [d, r.op, r] as const)
  test.each(cases)("%s %s split at every byte parses once whole", (dialect, _op, req) => {
    const whole = encode(dialect, req)
    for (let cut = 0; cut < whole.byteLength; cut++) {
      const buf = new ByteBuffer()
      buf.append(whole.subarray(0, cut))
      let thrown: unknown = "nothing"
      try {
        parseRequest(buf.cursor(SERVER_LIMITS), dialect)
      } catch (e) {
        thrown = e
      }
      expect(thrown).toBe(INCOMPLETE)
      buf.append(whole.subarray(cut))
      const c = buf.cursor(SERVER_LIMITS)
      expect(parseRequest(c, dialect)).toEqual(req)
      expect(c.pos - buf.start).toBe(whole.byteLength)
    }
  })
  test("two requests in one chunk parse one after the other", () => {
    const a = encode("2.x", { op: "get", key: enc("/a") })
    const b = encode("2.x", { op: "getNumKeys" })
    const both = new Uint8Array([...a, ...b])
    const c = new Cursor(both, 0, both.byteLength, SERVER_LIMITS)
    expect(parseRequest(c, "2.x").op).toBe("get")
    expect(parseRequest(c, "2.x").op).toBe("getNumKeys")
    expect(c.pos).toBe(both.byteLength)
  })
})

describe("limits", () => {
  const violation = (dialect: Dialect, b: Uint8Array) => {
    try {
      parse(dialect, b)
    } catch (e) {
      return e
    }
    return undefined
  }
  test("a key length over the limit is refused from its 8 length bytes alone", () => {
    const e = violation("1.13", bytes(0, u64(2 ** 40)))
    expect(e).toBeInstanceOf(WireViolation)
    expect(String(e)).toContain("key length")
  })
  test("value length, key count and whole request size", () => {
    expect(violation("2.x", bytes(1, str("/k"), u64(SERVER_LIMITS.maxValueBytes + 1)))).toBeInstanceOf(WireViolation)
    expect(violation("2.x", bytes(5, u64(SERVER_LIMITS.maxKeys + 1)))).toBeInstanceOf(WireViolation)
    const small = { ...SERVER_LIMITS, maxRequestBytes: 100 }
    const b = bytes(11, u64(2), str("/a"), u64(60), new Array(60).fill(0), str("/b"), u64(60))
    expect(() => parseRequest(new Cursor(b, 0, b.byteLength, small), "2.x")).toThrow(WireViolation)
  })
  test("the 1.13 reading of the probe is an absurd key length (so a 1.13 server drops it)", () => {
    const probe = bytes(0x00, 0xce, 0xf7, 0x85, 0x3c, 0x0d, u32(0x00ff0000))
    expect(violation("1.13", probe)).toBeInstanceOf(WireViolation)
  })
  test("unknown opcodes", () => {
    expect(violation("1.13", bytes(9))).toBeInstanceOf(WireViolation)
    expect(violation("2.x", bytes(14))).toBeInstanceOf(WireViolation)
  })
})
