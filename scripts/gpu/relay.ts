/**
 * A capturing TCP relay for TCPStore traffic: it sits on a free port in front of a server (torch's
 * or ours), forwards bytes both ways untouched, and decodes every client request as it arrives,
 * in the dialect the connection opens with. Requests are parsed by
 * src/store/wire.ts; the 2.x opcodes past its table (14-18) are decoded here,
 * and the first opcode neither knows ends decoding of that connection (the bytes still flow).
 * scripts/gpu/store_probe.ts uses it to see what torch sends; tests/store/relay.test.ts checks it.
 */
import type { Socket } from "bun"
import {
  ByteBuffer,
  CLIENT_LIMITS,
  type Cursor,
  type Dialect,
  INCOMPLETE,
  type Op,
  parseRequest,
  type Request,
  VALIDATION_MAGIC,
  WireViolation,
} from "../../src/store/wire.ts"
import { SocketWriter } from "../../src/net/socketWriter.ts"

/** One decoded client request, numbered across every relay in arrival order. */
export interface Captured {
  readonly seq: number
  readonly conn: number
  readonly op: string
  readonly key?: string
  /** The value's length, for SET / APPEND / COMPARE_SET (desired). */
  readonly valueBytes?: number
  readonly text: string
}

let seq = 0

/** A key or value as text: printable ASCII kept, the rest escaped. */
const show = (b: Uint8Array, max = 160) => {
  let s = ""
  for (const x of b.subarray(0, max)) s += x >= 0x20 && x < 0x7f ? String.fromCharCode(x) : `\\x${x.toString(16).padStart(2, "0")}`
  return b.byteLength > max ? `${s}...` : s
}

/** Torch's own names for the operations. */
const NAMES: Record<Op, string> = {
  validate: "VALIDATE",
  set: "SET",
  compareSet: "COMPARE_SET",
  get: "GET",
  add: "ADD",
  check: "CHECK",
  wait: "WAIT",
  getNumKeys: "GETNUMKEYS",
  watchKey: "WATCH_KEY",
  deleteKey: "DELETE_KEY",
  append: "APPEND",
  multiGet: "MULTI_GET",
  multiSet: "MULTI_SET",
  cancelWait: "CANCEL_WAIT",
  ping: "PING",
}

const describe = (r: Request): Omit<Captured, "seq" | "conn"> => {
  const name = NAMES[r.op]
  switch (r.op) {
    case "validate":
      return { op: r.op, text: `${name} 0x${r.magic.toString(16)}` }
    case "ping":
      return { op: r.op, text: `${name} ${r.nonce}` }
    case "set":
    case "append":
      return { op: r.op, key: show(r.key), valueBytes: r.value.byteLength, text: `${name} ${show(r.key)} = ${show(r.value, 24)} (${r.value.byteLength} B)` }
    case "compareSet":
      return { op: r.op, key: show(r.key), valueBytes: r.desired.byteLength, text: `${name} ${show(r.key)}` }
    case "add":
      return { op: r.op, key: show(r.key), text: `${name} ${show(r.key)} ${r.delta}` }
    case "get":
    case "deleteKey":
    case "watchKey":
      return { op: r.op, key: show(r.key), text: `${name} ${show(r.key)}` }
    case "check":
    case "wait":
    case "multiGet":
      return { op: r.op, key: r.keys.map((k) => show(k)).join(","), text: `${name} [${r.keys.map((k) => show(k)).join(", ")}]` }
    case "multiSet":
      return { op: r.op, key: r.entries.map(([k]) => show(k)).join(","), text: `${name} ${r.entries.length} keys` }
    case "getNumKeys":
    case "cancelWait":
      return { op: r.op, text: name }
  }
}

/** The 2.x opcodes past wire.ts's table, laid out as torch 2.x's TCPStore sends them. */
const parseTail = (c: Cursor, code: number): Omit<Captured, "seq" | "conn"> | null => {
  switch (code) {
    case 14: {
      const key = show(c.key())
      return { op: "queuePush", key, valueBytes: c.value().byteLength, text: `QUEUE_PUSH(14) ${key}` }
    }
    case 15:
    case 16: {
      const key = show(c.key())
      return { op: code === 15 ? "queuePop" : "queueLen", key, text: `${code === 15 ? "QUEUE_POP" : "QUEUE_LEN"}(${code}) ${key}` }
    }
    case 17:
      return { op: "listKeys", text: "LIST_KEYS(17)" }
    case 18: {
      const key = show(c.key())
      return { op: "barrier", key, text: `BARRIER(18) ${key} world ${c.i64()}` }
    }
  }
  return null
}

/** Decodes one connection's client-to-server bytes as they arrive. */
class Decoder {
  private readonly input = new ByteBuffer()
  private dialect: Dialect | null = null
  private stopped = false

  constructor(
    private readonly conn: number,
    private readonly sink: (c: Captured) => void,
  ) {}

  push(chunk: Uint8Array) {
    if (this.stopped) return
    this.input.append(chunk)
    if (this.dialect === null && !this.sniff()) return
    for (;;) {
      let c = this.input.cursor(CLIENT_LIMITS)
      if (c.pos === c.end) return
      let decoded: Omit<Captured, "seq" | "conn"> | null
      try {
        decoded = describe(parseRequest(c, this.dialect!))
      } catch (e) {
        if (e === INCOMPLETE) return
        if (!(e instanceof WireViolation)) throw e
        c = this.input.cursor(CLIENT_LIMITS)
        try {
          decoded = this.dialect === "2.x" ? parseTail(c, c.u8()) : null
        } catch (e2) {
          if (e2 === INCOMPLETE) return
          decoded = null
        }
        if (decoded === null) {
          this.stopped = true
          const rest = [...this.input.buf.subarray(this.input.start, Math.min(this.input.end, this.input.start + 32))]
          decoded = { op: "undecodable", text: `UNDECODABLE opcode ${rest[0]}: ${rest.map((x) => x.toString(16).padStart(2, "0")).join(" ")}` }
        }
      }
      this.input.consumeTo(c.pos)
      this.sink({ seq: seq++, conn: this.conn, ...decoded })
      if (this.stopped) return
    }
  }

  /** A 2.x client opens with VALIDATE (00 CE F7 85 3C); anything else speaks 1.13. */
  private sniff(): boolean {
    const { buf, start, end } = this.input
    if (end - start >= 1 && buf[start] !== 0) this.dialect = "1.13"
    else if (end - start >= 5) this.dialect = new DataView(buf.buffer, start + 1, 4).getUint32(0, true) === VALIDATION_MAGIC ? "2.x" : "1.13"
    return this.dialect !== null
  }
}

export interface Relay {
  readonly port: number
  /** Every client request seen so far, in arrival order. */
  readonly requests: Captured[]
  readonly stop: () => void
}

/** One relayed connection: the client's socket, and the backend's once it has connected. */
interface Tap {
  readonly decoder: Decoder
  readonly down: SocketWriter
  up: SocketWriter | null
  /** What the client sent before the backend connection was up. */
  early: Uint8Array[]
  backend: Socket<undefined> | null
  closed: boolean
}

/** A TCP relay on a free port in front of `backendPort`, decoding what clients send. */
export const startRelay = (backendPort: number): Relay => {
  const requests: Captured[] = []
  let conns = 0
  const listener = Bun.listen<Tap>({
    hostname: "127.0.0.1",
    port: 0,
    socket: {
      binaryType: "uint8array",
      open(client) {
        const tap: Tap = {
          decoder: new Decoder(conns++, (c) => requests.push(c)),
          down: new SocketWriter(client),
          up: null,
          early: [],
          backend: null,
          closed: false,
        }
        client.data = tap
        Bun.connect({
          hostname: "127.0.0.1",
          port: backendPort,
          socket: {
            binaryType: "uint8array",
            open(s) {
              if (tap.closed) return void s.end() // the client left before the backend answered
              tap.backend = s
              tap.up = new SocketWriter(s)
              for (const chunk of tap.early) tap.up.write(chunk)
              tap.early = []
            },
            data(_s, chunk) {
              tap.down.write(chunk)
            },
            drain() {
              tap.up?.drain()
            },
            close() {
              client.end()
            },
          },
        }).catch(() => client.end())
      },
      data(client, chunk) {
        const tap = client.data
        tap.decoder.push(chunk)
        if (tap.up === null) tap.early.push(chunk.slice())
        else tap.up.write(chunk)
      },
      drain(client) {
        client.data.down.drain()
      },
      close(client) {
        client.data.closed = true
        client.data.backend?.end()
      },
    },
  })
  return { port: listener.port, requests, stop: () => listener.stop(true) }
}
