/**
 * The TCPStore server: one key/value map shared by every connection, speaking torch 1.13 or 2.x
 * per connection (told by the first bytes: a 2.x client opens with VALIDATE). Plain callbacks on Bun sockets, no
 * Effect, so the same code runs on the main thread (service.ts) or in a worker (serverThread.ts).
 *
 * Each connection parses its own buffered bytes, so a half-sent request waits alone while the
 * others are served. Behaviour follows torch's servers, with these choices:
 * - GET / MULTI_GET of a missing key closes that connection, as the 1.13 and 2.x legacy servers
 *   do (a torch client never sees it: it WAITs first); libuv's empty reply would be
 *   indistinguishable from an empty value.
 * - SET, ADD, APPEND, MULTI_SET and a storing COMPARE_SET wake waiters (libuv's list).
 * - Lengths over the limits (wire.ts SERVER_LIMITS by default), unknown opcodes, a wrong magic,
 *   ADD on a non-numeric value, WATCH_KEY (1.13, unused by torch; not implemented) and a second
 *   WAIT while one is pending close that connection only.
 * - The 1.13 callback connection never sends anything; it simply stays open.
 * - Memory is bounded, since anyone who can reach the store may use it (torch's has no
 *   authentication either): the values held (maxStoredBytes; a value, APPEND's included, is at
 *   most limits.maxValueBytes), what the connections hold together (maxBufferedBytes: requests
 *   being read, replies not yet read, each checked before it is built, pending WAITs' keys) and the number of connections
 *   (maxConnections). A request past a bound closes its connection, saying why on stderr.
 */
import type { Socket } from "bun"
import {
  ByteBuffer,
  CHECK_NOT_READY,
  CHECK_READY,
  type Dialect,
  INCOMPLETE,
  type Limits,
  parseRequest,
  type Request,
  SERVER_LIMITS,
  STOP_WAITING,
  VALIDATION_MAGIC,
  WAIT_CANCELED,
  WireViolation,
  Writer,
} from "./wire.ts"
import { SocketWriter } from "../net/socketWriter.ts"

export interface ServerOptions {
  /** Address to bind; 127.0.0.1 by default. */
  readonly host?: string
  /** 0 (the default) picks a free port; read it from the result. */
  readonly port?: number
  readonly limits?: Partial<Limits>
  /** Keys and values held, with ENTRY_OVERHEAD_BYTES per key (default MAX_STORED_BYTES). */
  readonly maxStoredBytes?: number
  /** What all connections hold together while reading, writing and waiting (default MAX_BUFFERED_BYTES). */
  readonly maxBufferedBytes?: number
  /** Connections open at once; one more is closed at once (default MAX_CONNECTIONS). */
  readonly maxConnections?: number
  /** Whether the store alone keeps this process running (default true); false: it lets the process exit once nothing else holds it. */
  readonly holdsProcess?: boolean
}

/**
 * The default bounds. A job's rendezvous needs far less: each communicator stores one address
 * per member of about 200 bytes per peer, so 64 ranks' world communicator is under 1 MiB.
 */
export const MAX_STORED_BYTES = 64 * 1024 * 1024
export const MAX_BUFFERED_BYTES = 64 * 1024 * 1024
export const MAX_CONNECTIONS = 1024
/** What a key costs beyond its bytes, so that a flood of empty values is bounded too. */
export const ENTRY_OVERHEAD_BYTES = 64

export interface RunningServer {
  readonly host: string
  readonly port: number
  /** Closes the listener and every connection. */
  readonly stop: () => void
}

/** A pending WAIT: how many of its distinct keys are still missing. */
interface Waiting {
  missing: number
  readonly keys: ReadonlyArray<string>
  /** The keys' bytes, counted against maxBufferedBytes. */
  readonly bytes: number
}

class Conn {
  dialect: Dialect | null = null
  readonly input = new ByteBuffer()
  waiting: Waiting | null = null
  /** Replies produced while handling the current batch; written together by `flush`. */
  out: Array<Uint8Array> = []
  outBytes = 0
  readonly writer: SocketWriter
  closed = false
  /** Bytes this connection was last counted as holding (see `account`). */
  held = 0
  constructor(readonly socket: Socket<Conn>) {
    this.writer = new SocketWriter(socket)
  }
}

const ONE_BYTE = [new Uint8Array([0]), new Uint8Array([1])] as const
const MAGIC_BYTES = [0xce, 0xf7, 0x85, 0x3c]
const MAX_I64 = (1n << 63n) - 1n
const MIN_I64 = -(1n << 63n)

/** Keys are raw bytes; latin1 maps each byte to one char, so the map key is exact. */
const keyOf = (bytes: Uint8Array): string =>
  Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength).toString("latin1")

const sameBytes = (a: Uint8Array, b: Uint8Array): boolean => {
  if (a.byteLength !== b.byteLength) return false
  for (let i = 0; i < a.byteLength; i++) if (a[i] !== b[i]) return false
  return true
}

const utf8 = new TextEncoder()
const ascii = new TextDecoder()

const isSpace = (c: number) => c === 0x20 || (c >= 0x09 && c <= 0x0d)

/** A counter's value the way C `stoll` reads it: spaces, a sign, digits, trailing bytes ignored. */
const parseCounter = (v: Uint8Array, key: string): bigint => {
  let i = 0
  while (i < v.byteLength && isSpace(v[i]!)) i++
  const signed = v[i] === 0x2b || v[i] === 0x2d
  const negative = v[i] === 0x2d
  if (signed) i++
  const first = i
  while (i < v.byteLength && v[i]! >= 0x30 && v[i]! <= 0x39) i++
  if (i === first) throw new WireViolation(`ADD on key ${key} whose value is not a number`)
  const magnitude = BigInt(ascii.decode(v.subarray(first, i)))
  const n = negative ? -magnitude : magnitude
  if (n > MAX_I64 || n < MIN_I64) throw new WireViolation(`ADD on key ${key}: value out of range`)
  return n
}

/** A connection would take the connections past maxBufferedBytes: its unsent replies are dropped. */
class OverBudget extends WireViolation {}

/** Starts listening; throws when the address cannot be bound. */
export const startServer = (options: ServerOptions = {}): RunningServer => {
  const host = options.host ?? "127.0.0.1"
  const limits: Limits = { ...SERVER_LIMITS, ...options.limits }
  const maxStoredBytes = options.maxStoredBytes ?? MAX_STORED_BYTES
  const maxBufferedBytes = options.maxBufferedBytes ?? MAX_BUFFERED_BYTES
  const maxConnections = options.maxConnections ?? MAX_CONNECTIONS
  const data = new Map<string, Uint8Array>()
  let storedBytes = 0, bufferedBytes = 0, connections = 0
  const entryBytes = (key: string, value: Uint8Array) => key.length + value.byteLength + ENTRY_OVERHEAD_BYTES
  const waiters = new Map<string, Set<Conn>>()
  /** Connections with replies queued during the current callback. */
  const dirty = new Set<Conn>()

  const queue = (conn: Conn, bytes: Uint8Array) => {
    conn.out.push(bytes)
    conn.outBytes += bytes.byteLength
    dirty.add(conn)
  }

  const flush = () => {
    for (const conn of dirty) {
      const out = conn.out
      conn.out = []
      conn.outBytes = 0
      if (out.length === 1) conn.writer.write(out[0]!)
      else if (out.length > 1) conn.writer.write(Buffer.concat(out))
      account(conn)
    }
    dirty.clear()
  }

  const dropWait = (conn: Conn) => {
    const w = conn.waiting
    if (w === null) return
    conn.waiting = null
    for (const k of w.keys) {
      const set = waiters.get(k)
      if (set === undefined) continue
      set.delete(conn)
      if (set.size === 0) waiters.delete(k)
    }
  }

  /**
   * Counts what `conn` holds now (input being parsed, replies the socket has not taken, a
   * WAIT's keys); true when every connection together holds more than maxBufferedBytes.
   */
  const account = (conn: Conn): boolean => {
    const now = conn.closed ? 0 : conn.input.buf.byteLength + conn.outBytes + conn.writer.pendingBytes + (conn.waiting?.bytes ?? 0)
    bufferedBytes += now - conn.held
    conn.held = now
    return bufferedBytes > maxBufferedBytes
  }

  /** Stores a value and answers every WAIT whose last missing key this was. */
  const store = (key: string, value: Uint8Array) => {
    if (value.byteLength > limits.maxValueBytes)
      throw new WireViolation(`a value of ${value.byteLength} bytes for key ${key} is over the ${limits.maxValueBytes}-byte maximum`)
    const old = data.get(key)
    const next = storedBytes - (old === undefined ? 0 : entryBytes(key, old)) + entryBytes(key, value)
    if (next > storedBytes && next > maxStoredBytes)
      throw new WireViolation(`the store is full: it holds ${storedBytes} bytes of its ${maxStoredBytes}, and ${value.byteLength} more for key ${key} would pass that (ServerOptions.maxStoredBytes)`)
    storedBytes = next
    data.set(key, value)
    const set = waiters.get(key)
    if (set === undefined) return
    waiters.delete(key)
    for (const conn of set) {
      const w = conn.waiting!
      if (--w.missing > 0) continue
      conn.waiting = null
      queue(conn, ONE_BYTE[STOP_WAITING])
    }
  }

  const lookup = (bytes: Uint8Array): Uint8Array => {
    const key = keyOf(bytes)
    const v = data.get(key)
    if (v === undefined) throw new WireViolation(`GET of missing key ${key}`)
    return v
  }

  /**
   * `bytes`, once it is known that a reply that long leaves every connection together within
   * maxBufferedBytes: checked before the reply is built, so that one short request naming a
   * large value many times (MULTI_GET) cannot make the store hold more than its bound.
   */
  const replyRoom = (bytes: number): number => {
    if (bufferedBytes + bytes > maxBufferedBytes)
      throw new OverBudget(`a reply of ${bytes} bytes would take the connections past the ${maxBufferedBytes} bytes they may hold together (ServerOptions.maxBufferedBytes); they hold ${bufferedBytes}`)
    return bytes
  }

  const handle = (conn: Conn, req: Request) => {
    switch (req.op) {
      case "validate":
        if (req.magic !== VALIDATION_MAGIC) throw new WireViolation(`bad validation magic ${req.magic}`)
        return
      case "set":
        return store(keyOf(req.key), req.value.slice())
      case "compareSet": {
        const key = keyOf(req.key)
        const current = data.get(key)
        let reply: Uint8Array
        if (current === undefined ? req.expected.byteLength === 0 : sameBytes(current, req.expected)) {
          store(key, req.desired.slice())
          reply = req.desired
        } else {
          // A missing key with a non-empty `expected` answers `expected` itself, as torch does.
          reply = current ?? req.expected
        }
        return queue(conn, new Writer(replyRoom(reply.byteLength + 8)).blob(reply).bytes())
      }
      case "get": {
        const v = lookup(req.key)
        return queue(conn, new Writer(replyRoom(v.byteLength + 8)).blob(v).bytes())
      }
      case "add": {
        const key = keyOf(req.key)
        const current = data.get(key)
        const next = BigInt.asIntN(64, (current === undefined ? 0n : parseCounter(current, key)) + req.delta)
        store(key, utf8.encode(next.toString()))
        return queue(conn, new Writer(8).i64(next).bytes())
      }
      case "check": {
        const ready = req.keys.every((k) => data.has(keyOf(k)))
        return queue(conn, ONE_BYTE[ready ? CHECK_READY : CHECK_NOT_READY])
      }
      case "wait": {
        if (conn.waiting !== null) throw new WireViolation("WAIT while another WAIT is pending")
        const missing = [...new Set(req.keys.map(keyOf))].filter((k) => !data.has(k))
        if (missing.length === 0) return queue(conn, ONE_BYTE[STOP_WAITING])
        conn.waiting = { missing: missing.length, keys: missing, bytes: missing.reduce((n, k) => n + k.length, 0) }
        for (const k of missing) {
          const set = waiters.get(k)
          if (set === undefined) waiters.set(k, new Set([conn]))
          else set.add(conn)
        }
        return
      }
      case "getNumKeys":
        return queue(conn, new Writer(8).i64(BigInt(data.size)).bytes())
      case "deleteKey": {
        const key = keyOf(req.key), old = data.get(key)
        if (old !== undefined) storedBytes -= entryBytes(key, old)
        return queue(conn, new Writer(8).i64(data.delete(key) ? 1n : 0n).bytes())
      }
      case "append": {
        const key = keyOf(req.key)
        const current = data.get(key)
        return store(key, current === undefined ? req.value.slice() : Buffer.concat([current, req.value]))
      }
      case "multiGet": {
        const values = req.keys.map(lookup)
        const w = new Writer(replyRoom(values.reduce((n, v) => n + v.byteLength + 8, 0)))
        for (const v of values) w.blob(v)
        return queue(conn, w.bytes())
      }
      case "multiSet":
        for (const [k, v] of req.entries) store(keyOf(k), v.slice())
        return
      case "cancelWait":
        dropWait(conn)
        return queue(conn, ONE_BYTE[WAIT_CANCELED])
      case "ping":
        return queue(conn, new Writer(4).u32(req.nonce).bytes())
      case "watchKey":
        throw new WireViolation("WATCH_KEY is not implemented")
    }
  }

  /** Decides the dialect from the first bytes; false while too few have arrived. */
  const detect = (conn: Conn): boolean => {
    const { buf, start, length } = conn.input
    if (buf[start] !== 0) {
      conn.dialect = "1.13"
      return true
    }
    if (length < 5) return false
    const validate = MAGIC_BYTES.every((b, i) => buf[start + 1 + i] === b)
    conn.dialect = validate ? "2.x" : "1.13"
    return true
  }

  /** Closes `conn` after the replies queued for it, unless it is closed for holding too much. */
  const close = (conn: Conn, why: unknown) => {
    conn.closed = true
    dropWait(conn)
    if (why instanceof OverBudget) {
      conn.out = []
      conn.outBytes = 0
    }
    flush()
    account(conn)
    conn.socket.end()
  }

  const receive = (conn: Conn, chunk: Uint8Array) => {
    conn.input.append(chunk)
    if (account(conn))
      throw new OverBudget(`its ${conn.held} bytes of requests and unread replies would take the connections past the ${maxBufferedBytes} bytes they may hold together (ServerOptions.maxBufferedBytes)`)
    if (conn.dialect === null && !detect(conn)) return
    const dialect = conn.dialect!
    while (conn.input.length > 0) {
      const c = conn.input.cursor(limits)
      let req: Request
      try {
        req = parseRequest(c, dialect)
      } catch (e) {
        if (e === INCOMPLETE) return
        throw e
      }
      handle(conn, req)
      conn.input.consumeTo(c.pos)
      // Replies not read yet count too: a client that asks and never reads is stopped here.
      if (account(conn))
        throw new OverBudget(`its ${conn.held} bytes of requests and unread replies would take the connections past the ${maxBufferedBytes} bytes they may hold together (ServerOptions.maxBufferedBytes)`)
    }
  }

  const listener = Bun.listen<Conn>({
    hostname: host,
    port: options.port ?? 0,
    socket: {
      binaryType: "uint8array",
      open(socket) {
        socket.setNoDelay(true)
        if (options.holdsProcess === false) socket.unref()
        const conn = (socket.data = new Conn(socket))
        if (++connections <= maxConnections) return void account(conn)
        console.warn(`store server: closing a new connection: ${maxConnections} are open (ServerOptions.maxConnections)`)
        conn.closed = true
        socket.end()
      },
      data(socket, chunk) {
        const conn = socket.data
        if (conn.closed) return
        try {
          receive(conn, chunk)
        } catch (e) {
          // NOTE: the client only sees the connection close, so say why here.
          console.warn(`store server: closing a connection: ${e instanceof WireViolation ? e.message : e}`)
          return close(conn, e)
        } finally {
          flush()
          account(conn)
        }
      },
      drain(socket) {
        socket.data.writer.drain()
        account(socket.data)
      },
      close(socket) {
        const conn = socket.data
        conn.closed = true
        connections--
        dropWait(conn)
        account(conn)
      },
    },
  })
  if (options.holdsProcess === false) listener.unref()

  return {
    host,
    port: listener.port,
    stop: () => {
      listener.stop(true)
      data.clear()
      storedBytes = 0
      waiters.clear()
    },
  }
}
