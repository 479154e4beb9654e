/**
 * What a stranger can make the controller hold before it proves anything, as checks that return
 * what they saw (preAuth.test.ts asserts on it, reliability.ts turns it into rows): the
 * listener's first frame is capped at what a WorkerHello needs and only so many connections
 * wait for their hello; the store (which has no authentication at all, as torch's has none)
 * holds a bounded number of bytes, refusing more with a clear message.
 */
import type { Socket } from "bun"
import { Effect, Exit, Scope } from "effect"
import { listen, MAX_HELLO_BYTES, MAX_PENDING_CONNECTIONS } from "../../src/controller/listener.ts"
import { eventually } from "../fuzz/controllerRig.ts"
import { settledRss } from "./closedDoor.ts"
import { watchAllocations } from "../fuzz/frameLength.ts"
import { peakRssKiB, rssKiB } from "../fuzz/proc.ts"
import { lengthPrefix, RawPeer, workerHandshake } from "../fuzz/rawPeer.ts"
import { ENTRY_OVERHEAD_BYTES, MAX_BUFFERED_BYTES, MAX_STORED_BYTES, startServer, type ServerOptions } from "../../src/store/server.ts"
import { type Request, VALIDATION_MAGIC, Writer, writeRequest } from "../../src/store/wire.ts"

/** A listener in this process for the duration of `body`, with every problem it reports. */
const withListener = async <A>(options: { readonly maxPendingConnections?: number }, body: (address: string, problems: string[], admitted: () => number) => Promise<A>): Promise<A> => {
  const problems: string[] = []
  let admitted = 0
  const scope = Effect.runSync(Scope.make())
  try {
    const l = await Effect.runPromise(Scope.provide(scope)(listen({
      token: "pre-auth-token", ...options,
      onWorker: () => void admitted++, onMessage: () => {}, onDisconnect: () => {}, onProblem: (p) => void problems.push(p),
    })))
    return await body(l.address, problems, () => admitted)
  } finally {
    await Effect.runPromise(Scope.close(scope, Exit.void))
  }
}

export interface ClaimsResult {
  readonly connections: number
  /** Bytes each connection claimed in its first length prefix, and sent after it. */
  readonly claim: number
  readonly sent: number
  readonly closed: number
  /** Reports naming the hello's maximum. */
  readonly refused: number
  /** Allocations of 1 MiB or more while the claims and bytes arrived. */
  readonly largeAllocations: ReadonlyArray<number>
  readonly rssBeforeKiB: number
  readonly rssAfterKiB: number
}

/**
 * `connections` connections to a listener, each opening with a 512 MiB claim (within the 1 GiB
 * an admitted worker may send) followed by 16 MiB of bytes: before its hello, no connection may
 * make the controller allocate for that claim.
 */
export const checkPreAuthClaims = async (connections = 4): Promise<ClaimsResult> => {
  const claim = 512 * 1024 * 1024, bytes = new Uint8Array(16 * 1024 * 1024).fill(0x5a)
  return withListener({}, async (address, problems) => {
    const peers = await Promise.all(Array.from({ length: connections }, () => RawPeer.connect(address)))
    const rssBeforeKiB = await settledRss()
    const watch = watchAllocations()
    try {
      for (const peer of peers) {
        peer.write(lengthPrefix(claim))
        peer.write(bytes)
      }
      await Promise.all(peers.map((p) => p.until(() => p.closed, 5000)))
    } finally {
      watch.restore()
    }
    const rssAfterKiB = await settledRss()
    await eventually(() => problems.length >= connections, 1000)
    for (const p of peers) p.end()
    return {
      connections, claim, sent: bytes.length,
      closed: peers.filter((p) => p.closed).length,
      refused: problems.filter((p) => p.includes(`frame of ${claim} bytes is over the ${MAX_HELLO_BYTES}-byte maximum`)).length,
      largeAllocations: watch.sizes.filter((n) => n >= 1 << 20),
      rssBeforeKiB, rssAfterKiB,
    }
  })
}

export interface FloodResult {
  readonly opened: number
  readonly limit: number
  /** Connections still open once the flood settled, and whether they are the newest ones. */
  readonly open: number
  readonly newestKept: boolean
  /** Reports of an oldest connection closed to take a new one. */
  readonly evictions: number
  /** A worker saying hello during the flood was admitted. */
  readonly helloAdmitted: boolean
}

/**
 * `opened` silent connections to a listener that keeps `limit` unadmitted ones: only the newest
 * `limit` stay open, and a worker that says hello at once is still admitted.
 */
export const checkPendingFlood = async (opened = MAX_PENDING_CONNECTIONS + 36, limit?: number): Promise<FloodResult> =>
  withListener(limit === undefined ? {} : { maxPendingConnections: limit }, async (address, problems, admitted) => {
    const max = limit ?? MAX_PENDING_CONNECTIONS
    const peers: RawPeer[] = []
    for (let i = 0; i < opened; i++) peers.push(await RawPeer.connect(address))
    const expectedClosed = Math.max(0, opened - max)
    await eventually(() => peers.filter((p) => p.closed).length >= expectedClosed, 3000)
    await Bun.sleep(100)
    const open = peers.filter((p) => !p.closed).length
    const newestKept = peers.slice(opened - Math.min(opened, max)).every((p) => !p.closed)
    const worker = await RawPeer.connect(address)
    await workerHandshake(worker, { token: "pre-auth-token", rank: 0, world: 1 })
    const helloAdmitted = await eventually(() => admitted() === 1, 2000) && !worker.closed
    for (const p of [...peers, worker]) p.end()
    return { opened, limit: max, open, newestKept, evictions: problems.filter((p) => p.startsWith("closed the oldest of")).length, helloAdmitted }
  })

// ---- the store ----------------------------------------------------------------------------------

const STORE_CHILD = new URL("./store_child.ts", import.meta.url).pathname

/** A store server in a child process (store_child.ts), with what it says on stderr. */
interface StoreChild {
  readonly port: number
  readonly pid: number
  readonly log: () => string
  readonly stop: () => Promise<void>
}

const startStoreChild = async (options: ServerOptions = {}): Promise<StoreChild> => {
  const proc = Bun.spawn([process.execPath, STORE_CHILD, JSON.stringify(options)], { stdout: "pipe", stderr: "pipe", stdin: "ignore" })
  let err = ""
  void (async () => {
    for await (const chunk of proc.stderr) err += new TextDecoder().decode(chunk)
  })()
  const reader = proc.stdout.getReader()
  let out = ""
  while (!/listening (\d+)/.test(out)) {
    const { value, done } = await reader.read()
    if (done) throw new Error(`store child exited: ${err}`)
    out += new TextDecoder().decode(value)
  }
  return {
    port: Number(/listening (\d+)/.exec(out)![1]), pid: proc.pid, log: () => err,
    stop: async () => {
      proc.kill("SIGKILL")
      await proc.exited
    },
  }
}

/**
 * A raw store client: writes the bytes it is given (queued under backpressure), keeps what comes
 * back, and notices a close. `read: false` never reads (the socket is paused), so the server's
 * replies pile up on its side.
 */
class StorePeer {
  closed = false
  private readonly chunks: Uint8Array[] = []
  received = 0
  private socket: Socket<undefined> | undefined
  private readonly queue: Uint8Array[] = []

  static async connect(port: number, o: { readonly read?: boolean } = {}): Promise<StorePeer> {
    const peer = new StorePeer()
    peer.socket = await Bun.connect<undefined>({
      hostname: "127.0.0.1", port,
      socket: {
        binaryType: "uint8array",
        data: (_s, chunk) => { peer.chunks.push(chunk.slice()); peer.received += chunk.length },
        drain: () => peer.flush(),
        close: () => void (peer.closed = true),
        error: () => void (peer.closed = true),
      },
    })
    if (o.read === false) peer.socket.pause()
    return peer
  }

  write(bytes: Uint8Array): void {
    this.queue.push(bytes)
    this.flush()
  }

  /** Bytes written but not yet taken by the socket. */
  get pending(): number {
    return this.queue.reduce((n, b) => n + b.length, 0)
  }

  /** Everything received, end to end. */
  raw(): Uint8Array {
    return Buffer.concat(this.chunks)
  }

  private flush(): void {
    const s = this.socket
    while (s !== undefined && !this.closed && this.queue.length > 0) {
      const next = this.queue[0]!
      const n = Math.max(s.write(next), 0)
      if (n < next.length) return void (this.queue[0] = next.subarray(n))
      this.queue.shift()
    }
  }

  /** Resolves true once `cond` holds (polled every 5 ms), false after `ms`. */
  until(cond: () => boolean, ms: number): Promise<boolean> {
    return eventually(cond, ms)
  }

  /** Reads again after `read: false`. */
  resume(): void {
    this.socket?.resume()
  }

  end(): void {
    this.socket?.end()
  }
}

/** Requests in the 2.x dialect, VALIDATE first, as bytes. */
const requests = (...reqs: ReadonlyArray<Request>): Uint8Array => {
  const w = new Writer(1024)
  for (const r of [{ op: "validate", magic: VALIDATION_MAGIC } as const, ...reqs]) writeRequest(w, "2.x", r)
  return w.bytes()
}

const key = (k: string) => new TextEncoder().encode(k)

export interface StoreFillResult {
  /** What the stranger sent, and the server's bound. */
  readonly sentBytes: number
  readonly maxStoredBytes: number
  /** Connections the server closed, and the reason it gave. */
  readonly closed: number
  readonly said: string
  readonly rssBeforeKiB: number
  readonly rssAfterKiB: number
  /** A later client can still read a key stored before the store filled. */
  readonly servesAfter: boolean
}

/**
 * A stranger with no credentials (the store has none to ask for) SETs 4 MiB values under fresh
 * keys until it has sent `totalMiB`, reconnecting whenever it is closed, into a store in a
 * process of its own: the store must refuse past MAX_STORED_BYTES and its RSS stay near it.
 */
export const checkStoreFill = async (totalMiB = 256): Promise<StoreFillResult> => {
  const child = await startStoreChild()
  try {
    const first = await StorePeer.connect(child.port)
    first.write(requests({ op: "set", key: key("/job/kept"), value: key("yes") }))
    await Bun.sleep(100)
    first.end()
    const rssBeforeKiB = rssKiB(child.pid)
    const value = new Uint8Array(4 * 1024 * 1024).fill(7)
    let sent = 0, closed = 0, i = 0
    while (sent < totalMiB * 1024 * 1024) {
      const peer = await StorePeer.connect(child.port)
      // Sixteen SETs per connection, then a GET of the first so the reply shows they were read.
      for (let n = 0; n < 16; n++, i++) {
        peer.write(requests({ op: "set", key: key(`/stranger/${i}`), value }))
        sent += value.length
      }
      peer.write(requests({ op: "get", key: key(`/stranger/${i - 16}`) }))
      await peer.until(() => peer.closed || peer.received > 0, 10_000)
      if (peer.closed) closed++
      peer.end()
    }
    await Bun.sleep(200)
    const rssAfterKiB = rssKiB(child.pid)
    const reader = await StorePeer.connect(child.port)
    reader.write(requests({ op: "get", key: key("/job/kept") }))
    const servesAfter = await reader.until(() => reader.received >= 8 + 3, 5000)
    reader.end()
    return { sentBytes: sent, maxStoredBytes: MAX_STORED_BYTES, closed, said: child.log(), rssBeforeKiB, rssAfterKiB, servesAfter }
  } finally {
    await child.stop()
  }
}

export interface StoreBufferResult {
  readonly closed: boolean
  readonly said: string
  readonly rssBeforeKiB: number
  readonly rssAfterKiB: number
}

/**
 * Strangers that make the store hold bytes without storing them: `partial`, connections that
 * 8 connections that each send all but the last byte of a 32 MiB MULTI_SET (within maxRequestBytes); `unread`, one
 * client that asks for a 4 MiB value 64 times and never reads a reply. Either way the
 * connections together may hold MAX_BUFFERED_BYTES; past that, the one that grows is closed.
 */
export const checkStoreBuffers = async (kind: "partial" | "unread"): Promise<StoreBufferResult> => {
  const child = await startStoreChild()
  try {
    const value = new Uint8Array(4 * 1024 * 1024).fill(3)
    const rssBeforeKiB = rssKiB(child.pid)
    const peers: StorePeer[] = []
    if (kind === "partial") {
      const whole = requests({ op: "multiSet", entries: Array.from({ length: 8 }, (_, n) => [key(`/big/${n}`), value] as const) })
      for (let n = 0; n < 8; n++) {
        const peer = await StorePeer.connect(child.port)
        peer.write(whole.subarray(0, whole.length - 1))
        peers.push(peer)
        await peer.until(() => peer.pending === 0 || peer.closed, 5000)
      }
    } else {
      const setter = await StorePeer.connect(child.port)
      setter.write(requests({ op: "set", key: key("/big"), value }))
      await setter.until(() => setter.pending === 0, 5000)
      peers.push(setter)
      const reader = await StorePeer.connect(child.port, { read: false })
      // In one write, so that the server reads all 64 in one chunk.
      reader.write(requests(...Array.from({ length: 64 }, () => ({ op: "get", key: key("/big") }) as const)))
      peers.push(reader)
    }
    await eventually(() => peers.some((p) => p.closed) || child.log().includes("closing a connection"), 5000)
    // A paused socket hears of the close only once it reads again.
    for (const p of peers) p.resume()
    const closed = await eventually(() => peers.some((p) => p.closed), 5000)
    await Bun.sleep(200)
    const rssAfterKiB = rssKiB(child.pid)
    for (const p of peers) p.end()
    return { closed, said: child.log(), rssBeforeKiB, rssAfterKiB }
  } finally {
    await child.stop()
  }
}

export interface AmplificationResult {
  /** The request's size, and the reply it asked for. */
  readonly requestBytes: number
  readonly replyBytes: number
  readonly closed: boolean
  readonly said: string
  /** The store process's peak RSS (VmHWM) before the request and after it was refused. */
  readonly peakBeforeKiB: number
  readonly peakAfterKiB: number
  /** A later client still reads the value whole. */
  readonly servesAfter: boolean
}

/**
 * A stranger stores one 8 MiB value (the most a value may be) and sends one MULTI_GET naming it
 * `times` times: a request of a few hundred bytes asking for `times` x 8 MiB. The store must
 * refuse it before building the reply, so its peak RSS stays within MAX_BUFFERED_BYTES of where
 * it was (the reply used to be built whole first: 558 MiB for 64 names).
 */
export const checkStoreAmplification = async (times = 64): Promise<AmplificationResult> => {
  const child = await startStoreChild()
  try {
    const value = new Uint8Array(8 * 1024 * 1024).fill(9)
    const setter = await StorePeer.connect(child.port)
    setter.write(requests({ op: "set", key: key("/big"), value }, { op: "check", keys: [key("/big")] }))
    await setter.until(() => setter.received >= 1, 10_000)
    setter.end()
    await Bun.sleep(200)
    const peakBeforeKiB = peakRssKiB(child.pid)
    const request = requests({ op: "multiGet", keys: Array.from({ length: times }, () => key("/big")) })
    const asker = await StorePeer.connect(child.port)
    asker.write(request)
    const closed = await asker.until(() => asker.closed, 10_000)
    await Bun.sleep(200)
    const peakAfterKiB = peakRssKiB(child.pid)
    asker.end()
    const reader = await StorePeer.connect(child.port)
    reader.write(requests({ op: "get", key: key("/big") }))
    const servesAfter = await reader.until(() => reader.received >= 8 + value.length, 10_000)
    reader.end()
    return { requestBytes: request.length, replyBytes: times * (value.length + 8), closed, said: child.log(), peakBeforeKiB, peakAfterKiB, servesAfter }
  } finally {
    await child.stop()
  }
}

/** Values and connections past the bounds, in this process with small limits. */
export const checkStoreLimits = async (): Promise<{
  /** APPENDs that grow one value past maxValueBytes: the connection is closed, the value kept. */
  readonly appendClosed: boolean
  readonly appendSaid: string
  /** Empty values under fresh keys until the store is full: how many were stored. */
  readonly emptyStored: number
  readonly emptyBound: number
  /** Connections opened past maxConnections, and how many the server closed at once. */
  readonly extraConnections: number
  readonly extraClosed: number
}> => {
  const said: string[] = []
  const warn = console.warn
  console.warn = (...args: unknown[]) => void said.push(args.join(" "))
  const server = startServer({ limits: { maxValueBytes: 1024 }, maxStoredBytes: 64 * 1024, maxConnections: 8 })
  try {
    const appender = await StorePeer.connect(server.port)
    const half = new Uint8Array(600)
    appender.write(requests({ op: "append", key: key("/a"), value: half }, { op: "append", key: key("/a"), value: half }))
    const appendClosed = await appender.until(() => appender.closed, 2000)
    const appendSaid = said.join("; ")

    const filler = await StorePeer.connect(server.port)
    const keys = Array.from({ length: 2000 }, (_, n) => `/e/${String(n).padStart(6, "0")}`)
    filler.write(requests(...keys.map((k) => ({ op: "set", key: key(k), value: new Uint8Array(0) }) as const), { op: "getNumKeys" }))
    await filler.until(() => filler.closed || filler.received >= 8, 5000)
    const counter = await StorePeer.connect(server.port)
    counter.write(requests({ op: "getNumKeys" }))
    await counter.until(() => counter.received >= 8, 2000)
    const emptyStored = Number(new DataView(counter.raw().buffer).getBigInt64(0, true))
    const emptyBound = Math.floor((64 * 1024) / (keys[0]!.length + ENTRY_OVERHEAD_BYTES))

    for (const p of [appender, filler, counter]) p.end()
    await Bun.sleep(100)
    const extra = await Promise.all(Array.from({ length: 12 }, () => StorePeer.connect(server.port)))
    await eventually(() => extra.filter((p) => p.closed).length >= 4, 2000)
    await Bun.sleep(100)
    const extraClosed = extra.filter((p) => p.closed).length
    for (const p of extra) p.end()
    return { appendClosed, appendSaid, emptyStored, emptyBound, extraConnections: 12 - 8, extraClosed }
  } finally {
    console.warn = warn
    server.stop()
  }
}
