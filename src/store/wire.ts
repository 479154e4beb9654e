/**
 * The c10d TCPStore wire format (docs/protocol.md, section 6), shared by our client and server:
 * the opcode tables of both dialects, the request vocabulary, request encoding, incremental
 * parsing with limits, and the few reply codes. No sockets here.
 *
 * Integers are little-endian; a string or byte vector is `u64 length` + bytes. Requests carry no
 * length header, so a parser must cope with a request split over many reads: `Cursor` throws
 * `INCOMPLETE` when it runs out of bytes and the caller retries once more bytes have arrived.
 */

/** Which numbering a connection speaks: torch 1.13 (SET=0) or torch 2.x (VALIDATE=0, SET=1). */
export type Dialect = "1.13" | "2.x"

/** The operations of both dialects, by name. */
export type Op =
  | "validate"
  | "set"
  | "compareSet"
  | "get"
  | "add"
  | "check"
  | "wait"
  | "getNumKeys"
  | "watchKey"
  | "deleteKey"
  | "append"
  | "multiGet"
  | "multiSet"
  | "cancelWait"
  | "ping"

/** Opcode tables: the index is the u8 on the wire (torch's QueryType enums, 1.13 and 2.x). */
const OPCODES: Record<Dialect, ReadonlyArray<Op>> = {
  "1.13": ["set", "compareSet", "get", "add", "check", "wait", "getNumKeys", "watchKey", "deleteKey"],
  "2.x": [
    "validate",
    "set",
    "compareSet",
    "get",
    "add",
    "check",
    "wait",
    "getNumKeys",
    "deleteKey",
    "append",
    "multiGet",
    "multiSet",
    "cancelWait",
    "ping",
  ],
}

/** The u8 that opens `op` in `dialect`, or -1 when the dialect lacks it. */
export const opcode = (dialect: Dialect, op: Op): number => OPCODES[dialect].indexOf(op)

/** The 2.x VALIDATE magic, `CE F7 85 3C` on the wire. */
export const VALIDATION_MAGIC = 0x3c85f7ce
export const CHECK_READY = 0
export const CHECK_NOT_READY = 1
export const STOP_WAITING = 0
export const WAIT_CANCELED = 1

/** Size limits a parser enforces before it waits for (or allocates) the bytes. */
export interface Limits {
  readonly maxKeyBytes: number
  readonly maxValueBytes: number
  /** Keys in one CHECK / WAIT / MULTI_GET / MULTI_SET. */
  readonly maxKeys: number
  /** All fields of one request together (MULTI_SET could otherwise declare terabytes). */
  readonly maxRequestBytes: number
}

/** The torch 2.x libuv server's limits, plus a cap on a whole request. */
export const SERVER_LIMITS: Limits = {
  maxKeyBytes: 8 * 1024,
  maxValueBytes: 8 * 1024 * 1024,
  maxKeys: 128 * 1024,
  maxRequestBytes: 64 * 1024 * 1024,
}

/** A client only guards against garbage lengths: torch 1.13 servers store values of any size. */
export const CLIENT_LIMITS: Limits = {
  maxKeyBytes: 1 << 30,
  maxValueBytes: 1 << 30,
  maxKeys: 1 << 24,
  maxRequestBytes: 2 ** 31,
}

/** One request, as the client encodes it and the server decodes it. Keys are raw bytes. */
export type Request =
  | { readonly op: "validate"; readonly magic: number }
  | { readonly op: "set"; readonly key: Uint8Array; readonly value: Uint8Array }
  | {
      readonly op: "compareSet"
      readonly key: Uint8Array
      readonly expected: Uint8Array
      readonly desired: Uint8Array
    }
  | { readonly op: "get"; readonly key: Uint8Array }
  | { readonly op: "add"; readonly key: Uint8Array; readonly delta: bigint }
  | { readonly op: "check"; readonly keys: ReadonlyArray<Uint8Array> }
  | { readonly op: "wait"; readonly keys: ReadonlyArray<Uint8Array> }
  | { readonly op: "getNumKeys" }
  | { readonly op: "watchKey"; readonly key: Uint8Array }
  | { readonly op: "deleteKey"; readonly key: Uint8Array }
  | { readonly op: "append"; readonly key: Uint8Array; readonly value: Uint8Array }
  | { readonly op: "multiGet"; readonly keys: ReadonlyArray<Uint8Array> }
  | {
      readonly op: "multiSet"
      readonly entries: ReadonlyArray<readonly [key: Uint8Array, value: Uint8Array]>
    }
  | { readonly op: "cancelWait" }
  | { readonly op: "ping"; readonly nonce: number }

/** Thrown by `Cursor` when the buffered bytes end inside the item being read. */
export const INCOMPLETE: unique symbol = Symbol("INCOMPLETE")

/** The peer broke the protocol (unknown opcode, a length over the limits, bad magic). */
export class WireViolation extends Error {}

/** Reads fields from `buf[pos, end)`; `start` is where the current request began. */
export class Cursor {
  private readonly view: DataView
  readonly start: number

  constructor(
    readonly buf: Uint8Array,
    public pos: number,
    readonly end: number,
    readonly limits: Limits,
  ) {
    this.view = new DataView(buf.buffer, buf.byteOffset, buf.byteLength)
    this.start = pos
  }

  private need(n: number) {
    if (this.end - this.pos < n) throw INCOMPLETE
  }

  u8(): number {
    this.need(1)
    return this.buf[this.pos++]!
  }

  u32(): number {
    this.need(4)
    const v = this.view.getUint32(this.pos, true)
    this.pos += 4
    return v
  }

  i64(): bigint {
    this.need(8)
    const v = this.view.getBigInt64(this.pos, true)
    this.pos += 8
    return v
  }

  /** A u64 length or count, refused above `max` before anything that size is awaited. */
  size(max: number, what: string): number {
    this.need(8)
    const lo = this.view.getUint32(this.pos, true)
    const hi = this.view.getUint32(this.pos + 4, true)
    const n = hi * 2 ** 32 + lo
    if (n > max) throw new WireViolation(`${what} of ${n} exceeds the limit of ${max}`)
    this.pos += 8
    return n
  }

  /** `u64 len` + bytes, as a view into the buffer (copy it to keep it). */
  blob(max: number, what: string): Uint8Array {
    const n = this.size(max, what)
    if (this.pos + n - this.start > this.limits.maxRequestBytes) {
      throw new WireViolation(`request exceeds the limit of ${this.limits.maxRequestBytes} bytes`)
    }
    this.need(n)
    const v = this.buf.subarray(this.pos, this.pos + n)
    this.pos += n
    return v
  }

  key(): Uint8Array {
    return this.blob(this.limits.maxKeyBytes, "key length")
  }

  value(): Uint8Array {
    return this.blob(this.limits.maxValueBytes, "value length")
  }

  keyList(): Array<Uint8Array> {
    const n = this.size(this.limits.maxKeys, "key count")
    const keys = new Array<Uint8Array>(n)
    for (let i = 0; i < n; i++) keys[i] = this.key()
    return keys
  }
}

/** Parses one request in `dialect`; throws INCOMPLETE or WireViolation. */
export const parseRequest = (c: Cursor, dialect: Dialect): Request => {
  const code = c.u8()
  const op = OPCODES[dialect][code]
  switch (op) {
    case "validate":
      return { op, magic: c.u32() }
    case "set":
    case "append":
      return { op, key: c.key(), value: c.value() }
    case "compareSet":
      return { op, key: c.key(), expected: c.value(), desired: c.value() }
    case "get":
    case "watchKey":
    case "deleteKey":
      return { op, key: c.key() }
    case "add":
      return { op, key: c.key(), delta: c.i64() }
    case "check":
    case "wait":
    case "multiGet":
      return { op, keys: c.keyList() }
    case "multiSet": {
      const n = c.size(c.limits.maxKeys, "key count")
      const entries = new Array<readonly [Uint8Array, Uint8Array]>(n)
      for (let i = 0; i < n; i++) entries[i] = [c.key(), c.value()]
      return { op, entries }
    }
    case "getNumKeys":
    case "cancelWait":
      return { op }
    case "ping":
      return { op, nonce: c.u32() }
  }
  throw new WireViolation(`unknown ${dialect} opcode ${code}`)
}

/** Builds one message with a single allocation per growth; `bytes()` returns what was written. */
export class Writer {
  private buf: Uint8Array
  private view: DataView
  private len = 0

  constructor(capacity = 64) {
    this.buf = new Uint8Array(capacity)
    this.view = new DataView(this.buf.buffer)
  }

  private reserve(n: number) {
    if (this.len + n <= this.buf.byteLength) return
    const grown = new Uint8Array(Math.max(this.buf.byteLength * 2, this.len + n))
    grown.set(this.buf.subarray(0, this.len))
    this.buf = grown
    this.view = new DataView(grown.buffer)
  }

  u8(v: number): this {
    this.reserve(1)
    this.buf[this.len++] = v
    return this
  }

  u32(v: number): this {
    this.reserve(4)
    this.view.setUint32(this.len, v, true)
    this.len += 4
    return this
  }

  i64(v: bigint): this {
    this.reserve(8)
    this.view.setBigInt64(this.len, v, true)
    this.len += 8
    return this
  }

  size(n: number): this {
    this.reserve(8)
    this.view.setUint32(this.len, n % 2 ** 32, true)
    this.view.setUint32(this.len + 4, Math.floor(n / 2 ** 32), true)
    this.len += 8
    return this
  }

  blob(b: Uint8Array): this {
    this.size(b.byteLength)
    this.reserve(b.byteLength)
    this.buf.set(b, this.len)
    this.len += b.byteLength
    return this
  }

  bytes(): Uint8Array {
    return this.buf.subarray(0, this.len)
  }
}

/** Appends `req` to `w` in `dialect`; the caller checks that the dialect has the op. */
export const writeRequest = (w: Writer, dialect: Dialect, req: Request): Writer => {
  const code = opcode(dialect, req.op)
  if (code < 0) throw new Error(`${req.op} does not exist in the ${dialect} dialect`)
  w.u8(code)
  switch (req.op) {
    case "validate":
      return w.u32(req.magic)
    case "set":
    case "append":
      return w.blob(req.key).blob(req.value)
    case "compareSet":
      return w.blob(req.key).blob(req.expected).blob(req.desired)
    case "get":
    case "watchKey":
    case "deleteKey":
      return w.blob(req.key)
    case "add":
      return w.blob(req.key).i64(req.delta)
    case "check":
    case "wait":
    case "multiGet":
      w.size(req.keys.length)
      for (const k of req.keys) w.blob(k)
      return w
    case "multiSet":
      w.size(req.entries.length)
      for (const [k, v] of req.entries) w.blob(k).blob(v)
      return w
    case "getNumKeys":
    case "cancelWait":
      return w
    case "ping":
      return w.u32(req.nonce)
  }
}

/** Accumulates bytes from a socket until a parser has consumed them. */
export class ByteBuffer {
  buf = new Uint8Array(4096)
  start = 0
  end = 0

  get length(): number {
    return this.end - this.start
  }

  append(chunk: Uint8Array) {
    const n = chunk.byteLength
    if (this.end + n > this.buf.byteLength) {
      const live = this.end - this.start
      if (2 * (live + n) <= this.buf.byteLength) {
        this.buf.copyWithin(0, this.start, this.end)
      } else {
        const grown = new Uint8Array(Math.max(this.buf.byteLength * 2, live + n))
        grown.set(this.buf.subarray(this.start, this.end))
        this.buf = grown
      }
      this.start = 0
      this.end = live
    }
    this.buf.set(chunk, this.end)
    this.end += n
  }

  cursor(limits: Limits): Cursor {
    return new Cursor(this.buf, this.start, this.end, limits)
  }

  consumeTo(pos: number) {
    this.start = pos
    if (this.start < this.end) return
    this.start = this.end = 0
    // NOTE: drop a buffer grown for one large value, so an idle connection holds little.
    if (this.buf.byteLength > 1 << 20) this.buf = new Uint8Array(4096)
  }
}
