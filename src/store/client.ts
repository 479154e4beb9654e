/**
 * The TCPStore client: one connection to a torch-compatible server (ours or torch's), one
 * request at a time, in the 1.13 or 2.x dialect (told, or detected by a probe).
 *
 * Like torch's client it prefixes every key with "/" and implements a blocking get as WAIT then
 * GET. A timed-out WAIT must not leave a late STOP_WAITING in the stream: on 2.x the client sends
 * CANCEL_WAIT and reads the reply(ies); on 1.13, which cannot cancel, it closes the connection and
 * the next request reconnects. Any request interrupted mid-flight also closes the connection.
 */
import type { Socket, SocketHandler } from "bun"
import { Clock, Duration, Effect, type Scope, Semaphore } from "effect"
import type { StoreApi, StoreValue } from "./api.ts"
import { StoreError, StoreTimeout } from "./errors.ts"
import {
  ByteBuffer,
  CHECK_READY,
  CLIENT_LIMITS,
  type Cursor,
  type Dialect,
  INCOMPLETE,
  opcode,
  type Request,
  STOP_WAITING,
  VALIDATION_MAGIC,
  WAIT_CANCELED,
  WireViolation,
  Writer,
  writeRequest,
} from "./wire.ts"
import { SocketWriter } from "../net/socketWriter.ts"

export interface ClientOptions {
  /** 127.0.0.1 by default. */
  readonly host?: string
  readonly port: number
  /** Default timeout of get / wait / multiGet (torch's default: 300 s); 0 waits forever. */
  readonly timeout?: Duration.Input
  /** How long to keep retrying to connect, since the server may start later; default `timeout`. */
  readonly connectTimeout?: Duration.Input
  /** "auto" (the default) probes the server once and remembers its answer. */
  readonly dialect?: Dialect | "auto"
}

export interface TcpStoreClient extends StoreApi {
  /** The dialect in use, found while connecting. */
  readonly dialect: Dialect
  /** A 2.x PING round trip. */
  readonly ping: Effect.Effect<void, StoreError>
}

type ReadResult<T> =
  | { readonly _tag: "Value"; readonly value: T }
  | { readonly _tag: "TimedOut" }
  | { readonly _tag: "Closed"; readonly detail: string }

interface Reader {
  readonly parse: (c: Cursor) => unknown
  readonly done: (r: ReadResult<unknown>) => void
  timer: ReturnType<typeof setTimeout> | undefined
}

const TIMED_OUT: ReadResult<never> = { _tag: "TimedOut" }

/** A connection and the dialect it speaks. */
interface Live {
  readonly conn: Connection
  readonly dialect: Dialect
}

/** One TCP connection: writes with backpressure and at most one reply being awaited. */
class Connection {
  private readonly input = new ByteBuffer()
  private socket: Socket<Connection> | null = null
  private writer: SocketWriter | null = null
  private reader: Reader | null = null
  /** Why the connection is unusable, once it is. */
  failure: string | null = null

  static open(host: string, port: number): Promise<Connection> {
    const conn = new Connection()
    return Bun.connect<Connection>({ hostname: host, port, data: conn, socket: Connection.handlers }).then((socket) => {
      conn.socket = socket
      conn.writer = new SocketWriter(socket)
      return conn
    })
  }

  static readonly handlers: SocketHandler<Connection> = {
    binaryType: "uint8array",
    open(socket) {
      socket.setNoDelay(true)
      socket.data.socket = socket
    },
    data(socket, chunk) {
      socket.data.input.append(chunk)
      socket.data.pump()
    },
    drain(socket) {
      socket.data.writer?.drain()
    },
    close(socket, error) {
      socket.data.fail(error === undefined ? "closed by the server (ours closes a connection on a GET of a missing key or a request past its limits, saying which in its log)" : `connection error: ${error.message}`)
    },
  }

  /** Sends bytes; false when the connection is already gone. */
  write(bytes: Uint8Array): boolean {
    if (this.failure !== null || this.writer === null) return false
    return this.writer.write(bytes)
  }

  /** Awaits one reply parsed by `parse`, giving up after `timeoutMs` (the stream is then unchanged). */
  read<T>(parse: (c: Cursor) => T, timeoutMs: number, done: (r: ReadResult<T>) => void) {
    if (this.failure !== null) return done({ _tag: "Closed", detail: this.failure })
    const reader: Reader = { parse, done: done as (r: ReadResult<unknown>) => void, timer: undefined }
    if (Number.isFinite(timeoutMs)) {
      reader.timer = setTimeout(() => {
        if (this.reader !== reader) return
        this.reader = null
        done(TIMED_OUT)
      }, timeoutMs)
    }
    this.reader = reader
    this.pump()
  }

  private pump() {
    const reader = this.reader
    if (reader === null) return
    const c = this.input.cursor(CLIENT_LIMITS)
    let value: unknown
    try {
      value = reader.parse(c)
    } catch (e) {
      if (e === INCOMPLETE) return
      if (e instanceof WireViolation) return this.close(`bad reply: ${e.message}`)
      throw e
    }
    this.input.consumeTo(c.pos)
    this.reader = null
    clearTimeout(reader.timer)
    reader.done({ _tag: "Value", value })
  }

  private fail(detail: string) {
    this.failure ??= detail
    const reader = this.reader
    if (reader === null) return
    this.reader = null
    clearTimeout(reader.timer)
    reader.done({ _tag: "Closed", detail: this.failure })
  }

  close(detail: string) {
    this.fail(detail)
    this.socket?.end()
  }
}

// Reply parsers. Values are copied out: the input buffer is reused.
const u8 = (c: Cursor) => c.u8()
const u32 = (c: Cursor) => c.u32()
const i64 = (c: Cursor) => c.i64()
const blob = (c: Cursor) => c.value().slice()
const blobs = (n: number) => (c: Cursor) => Array.from({ length: n }, () => c.value().slice())

const utf8 = new TextEncoder()
/** Torch's client puts "/" before every user key. */
const wireKey = (key: string) => utf8.encode(`/${key}`)
const toBytes = (v: StoreValue) => (typeof v === "string" ? utf8.encode(v) : v)

/** Milliseconds of a timeout; 0 and Infinity mean no timeout, as in torch. */
const toMillis = (d: Duration.Input): number => {
  const ms = Duration.toMillis(Duration.fromInputUnsafe(d))
  return ms === 0 ? Infinity : ms
}

/**
 * Connects (retrying until the connect timeout), settles the dialect, and returns the client;
 * the connection closes with the scope.
 */
export const makeClient = Effect.fnUntraced(function* (options: ClientOptions) {
  const host = options.host ?? "127.0.0.1"
  const port = options.port
  const address = `${host}:${port}`
  const defaultTimeoutMs = toMillis(options.timeout ?? "300 seconds")
  const connectTimeoutMs = toMillis(options.connectTimeout ?? options.timeout ?? "300 seconds")
  /** Unknown until the first probe answers (when not given); every reconnection reuses it. */
  let known: Dialect | undefined = options.dialect === "auto" ? undefined : options.dialect
  let live: Live | null = null
  let closed = false
  const lock = yield* Semaphore.make(1)

  const failure = (reason: StoreError["reason"], detail: string) =>
    new StoreError({ reason, detail: `${detail} (${address})` })

  const openOnce = Effect.callback<Connection, string>((resume) => {
    let abandoned = false
    Connection.open(host, port).then(
      (c) => (abandoned ? c.close("abandoned") : resume(Effect.succeed(c))),
      (e: Error & { code?: string }) => resume(Effect.fail(`${e.code ?? "connect"}: ${e.message}`)),
    )
    return Effect.sync(() => {
      abandoned = true
    })
  })

  const receive = <T>(c: Connection, parse: (c: Cursor) => T, timeoutMs: number) =>
    Effect.callback<ReadResult<T>>((resume) => {
      c.read(parse, timeoutMs, (r) => resume(Effect.succeed(r)))
      return Effect.sync(() => c.close("interrupted while awaiting a reply"))
    })

  /** A reply with no timeout: a lost connection is a StoreError. */
  const reply = <T>(c: Connection, what: string, parse: (c: Cursor) => T) =>
    Effect.flatMap(receive(c, parse, Infinity), (r) =>
      r._tag === "Value"
        ? Effect.succeed(r.value)
        : Effect.fail(failure("ConnectionLost", `${what}: ${r._tag === "Closed" ? r.detail : "no reply"}`)),
    )

  const send = (c: Connection, dialect: Dialect, req: Request) =>
    c.write(writeRequest(new Writer(), dialect, req).bytes())
      ? Effect.void
      : Effect.fail(failure("ConnectionLost", `sending ${req.op}: ${c.failure ?? "not connected"}`))

  /**
   * One connection attempt plus the handshake. Fails with a message when it is worth retrying;
   * an auto probe that the server drops settles the dialect as 1.13 and reconnects at once.
   */
  const attempt = (deadline: number): Effect.Effect<Live, string> =>
    Effect.gen(function* () {
      const c = yield* openOnce
      if (known === "1.13") return { conn: c, dialect: known }
      // VALIDATE + PING in ONE write: a 1.13 server reads it as a SET with an absurd key length
      // and drops the connection; a partial write would instead block that single-threaded server.
      // NOTE: bits 16..23 of the nonce are the top byte of that length; 0xff makes it > 2^63.
      const nonce = ((Math.random() * 2 ** 32) | 0xff0000) >>> 0
      const w = new Writer()
      writeRequest(w, "2.x", { op: "validate", magic: VALIDATION_MAGIC })
      writeRequest(w, "2.x", { op: "ping", nonce })
      c.write(w.bytes())
      const r = yield* receive(c, u32, Math.max(deadline - (yield* Clock.currentTimeMillis), 1))
      if (r._tag === "Value" && r.value === nonce) {
        known = "2.x"
        return { conn: c, dialect: known }
      }
      c.close("handshake failed")
      if (r._tag === "Closed" && known === undefined) {
        known = "1.13"
        return { conn: yield* openOnce, dialect: known }
      }
      if (r._tag === "Value") return yield* Effect.fail(`PING echoed ${r.value}, sent ${nonce}`)
      return yield* Effect.fail(r._tag === "Closed" ? `handshake: ${r.detail}` : "no reply to PING")
    })

  /** Connects, retrying with backoff until the connect timeout; the server may not be up yet. */
  const establish = Effect.gen(function* () {
    const deadline = (yield* Clock.currentTimeMillis) + connectTimeoutMs
    let backoffMs = 10
    for (;;) {
      const r = yield* Effect.result(attempt(deadline))
      if (r._tag === "Success") return r.success
      const left = deadline - (yield* Clock.currentTimeMillis)
      if (left <= 0) {
        return yield* failure("Connect", `no connection within ${connectTimeoutMs} ms; last error: ${r.failure}`)
      }
      yield* Effect.sleep(Math.min(backoffMs, left))
      backoffMs = Math.min(backoffMs * 2, 1000)
    }
  })

  /** Runs one operation alone on a live connection, reconnecting first if the last one died. */
  const run = <A, E>(body: (c: Connection, dialect: Dialect) => Effect.Effect<A, E>) =>
    lock.withPermits(1)(
      Effect.gen(function* () {
        if (closed) return yield* failure("ConnectionLost", "the client is closed")
        if (live === null || live.conn.failure !== null) live = yield* establish
        return yield* body(live.conn, live.dialect)
      }),
    )

  /** WAIT with a timeout that leaves the stream in step (see the module comment). */
  const waitOn = (c: Connection, dialect: Dialect, keys: ReadonlyArray<string>, timeout: Duration.Input | undefined) =>
    Effect.gen(function* () {
      const timeoutMs = timeout === undefined ? defaultTimeoutMs : toMillis(timeout)
      const wire = keys.map(wireKey)
      yield* send(c, dialect, { op: "wait", keys: wire })
      const r = yield* receive(c, u8, timeoutMs)
      if (r._tag === "Closed") return yield* failure("ConnectionLost", `WAIT: ${r.detail}`)
      if (r._tag === "Value") {
        if (r.value === STOP_WAITING) return
        c.close("bad WAIT reply")
        return yield* failure("Protocol", `WAIT answered ${r.value}`)
      }
      // The keys as the caller named them; the wire form adds the client's own "/" in front.
      const timedOut = new StoreTimeout({ keys: [...keys], timeoutMs })
      if (dialect === "1.13") {
        c.close("a timed-out WAIT poisons a 1.13 connection")
        return yield* timedOut
      }
      yield* send(c, dialect, { op: "cancelWait" })
      const first = yield* reply(c, "CANCEL_WAIT", u8)
      if (first === WAIT_CANCELED) return yield* timedOut
      // STOP_WAITING raced the cancel: the keys exist, so the wait succeeded after all.
      const second = yield* reply(c, "CANCEL_WAIT", u8)
      if (first === STOP_WAITING && second === WAIT_CANCELED) return
      c.close("bad CANCEL_WAIT reply")
      return yield* failure("Protocol", `CANCEL_WAIT answered ${first}, ${second}`)
    })

  const only2x = (op: string) => failure("Unsupported", `${op} needs a torch 2.x server; this one speaks 1.13`)

  live = yield* establish
  yield* Effect.addFinalizer(() =>
    Effect.sync(() => {
      closed = true
      live?.conn.close("client closed")
    }),
  )

  const client: TcpStoreClient = {
    dialect: live.dialect,
    set: (key, value) => run((c, d) => send(c, d, { op: "set", key: wireKey(key), value: toBytes(value) })),
    get: (key, timeout) =>
      run((c, d) =>
        Effect.gen(function* () {
          yield* waitOn(c, d, [key], timeout)
          yield* send(c, d, { op: "get", key: wireKey(key) })
          return yield* reply(c, "GET", blob)
        }),
      ),
    add: (key, delta) =>
      run((c, d) =>
        Effect.andThen(send(c, d, { op: "add", key: wireKey(key), delta: BigInt(delta) }), reply(c, "ADD", i64)),
      ).pipe(Effect.map(Number)),
    compareSet: (key, expected, desired) =>
      run((c, d) =>
        Effect.andThen(
          send(c, d, { op: "compareSet", key: wireKey(key), expected: toBytes(expected), desired: toBytes(desired) }),
          reply(c, "COMPARE_SET", blob),
        ),
      ),
    check: (keys) =>
      run((c, d) => Effect.andThen(send(c, d, { op: "check", keys: keys.map(wireKey) }), reply(c, "CHECK", u8))).pipe(
        Effect.map((r) => r === CHECK_READY),
      ),
    wait: (keys, timeout) => run((c, d) => waitOn(c, d, keys, timeout)),
    numKeys: run((c, d) => Effect.andThen(send(c, d, { op: "getNumKeys" }), reply(c, "GETNUMKEYS", i64))).pipe(
      Effect.map(Number),
    ),
    deleteKey: (key) =>
      run((c, d) => Effect.andThen(send(c, d, { op: "deleteKey", key: wireKey(key) }), reply(c, "DELETE_KEY", i64))).pipe(
        Effect.map((n) => n === 1n),
      ),
    append: (key, value) =>
      run((c, d) =>
        d === "2.x" ? send(c, d, { op: "append", key: wireKey(key), value: toBytes(value) }) : Effect.fail(only2x("APPEND")),
      ),
    multiGet: (keys, timeout) =>
      keys.length === 0
        ? Effect.succeed([])
        : run((c, d) =>
            Effect.gen(function* () {
              yield* waitOn(c, d, keys, timeout)
              if (d === "2.x") {
                yield* send(c, d, { op: "multiGet", keys: keys.map(wireKey) })
                return yield* reply(c, "MULTI_GET", blobs(keys.length))
              }
              // 1.13 has no MULTI_GET: the same WAIT, then one GET per key under the same lock.
              const values: Array<Uint8Array> = []
              for (const key of keys) {
                yield* send(c, d, { op: "get", key: wireKey(key) })
                values.push(yield* reply(c, "GET", blob))
              }
              return values
            }),
          ),
    multiSet: (entries) =>
      run((c, d) => {
        const pairs = entries.map(([k, v]) => [wireKey(k), toBytes(v)] as const)
        if (d === "2.x") return send(c, d, { op: "multiSet", entries: pairs })
        const w = new Writer()
        for (const [key, value] of pairs) writeRequest(w, d, { op: "set", key, value })
        return c.write(w.bytes()) ? Effect.void : Effect.fail(failure("ConnectionLost", "sending SETs"))
      }),
    ping: run((c, d) => {
      if (opcode(d, "ping") < 0) return Effect.fail(only2x("PING"))
      const nonce = (Math.random() * 2 ** 32) >>> 0
      return Effect.andThen(send(c, d, { op: "ping", nonce }), reply(c, "PING", u32)).pipe(
        Effect.flatMap((echo) =>
          echo === nonce ? Effect.void : Effect.fail(failure("Protocol", `PING echoed ${echo}, sent ${nonce}`)),
        ),
      )
    }),
  }
  return client
}) satisfies (options: ClientOptions) => Effect.Effect<TcpStoreClient, StoreError, Scope.Scope>
