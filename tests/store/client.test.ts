// The client's connection logic against stand-in servers: dialect probing, connect retries and
// timeouts, the CANCEL_WAIT race, and what a timed-out or interrupted request does to its
// connection. A relay in front of our server records what the client puts on the wire.
import { afterAll, beforeAll, expect, test } from "bun:test"
import type { Socket } from "bun"
import { Effect, Fiber, Option } from "effect"
import { makeClient } from "../../src/store/client.ts"
import { type RunningServer, startServer } from "../../src/store/server.ts"
import { ByteBuffer, CLIENT_LIMITS, INCOMPLETE, parseRequest, Writer } from "../../src/store/wire.ts"
import { bytes, run, str, text, u64 } from "./helpers.ts"

let server: RunningServer
beforeAll(() => {
  server = startServer()
})
afterAll(() => server.stop())

let serial = 0
const fresh = (name: string) => `${name}-${++serial}`

const PROBE_START = [0x00, 0xce, 0xf7, 0x85, 0x3c]
const isProbe = (chunk: Uint8Array) => PROBE_START.every((b, i) => chunk[i] === b)

/**
 * Forwards connections to our server and records, per connection, the first chunk and all
 * bytes the client sent. `dropProbes` makes it act like a 1.13 server: a connection whose first
 * bytes are the 2.x probe is reset.
 */
const relay = (dropProbes: boolean) => {
  const connections: Array<{ first: Uint8Array; sent: Array<number> }> = []
  type Link = { upstream: Promise<Socket<unknown>> | null; record: { first: Uint8Array; sent: Array<number> } | null }
  const listener = Bun.listen<Link>({
    hostname: "127.0.0.1",
    port: 0,
    socket: {
      binaryType: "uint8array",
      open(s) {
        s.data = { upstream: null, record: null }
      },
      data(s, chunk) {
        const link = s.data
        if (link.record === null) {
          link.record = { first: chunk.slice(), sent: [] }
          connections.push(link.record)
          if (dropProbes && isProbe(chunk)) return s.terminate()
          link.upstream = Bun.connect({
            hostname: "127.0.0.1",
            port: server.port,
            socket: {
              binaryType: "uint8array",
              data: (_u, reply) => void s.write(reply),
              close: () => void s.end(),
            },
          })
        }
        link.record.sent.push(...chunk)
        void link.upstream?.then((u) => u.write(chunk.slice()))
      },
      close(s) {
        void s.data.upstream?.then((u) => u.end())
      },
    },
  })
  return { port: listener.port, connections, stop: () => listener.stop(true) }
}

/** A 2.x server that echoes PINGs, answers GETNUMKEYS with 42, never answers a WAIT, and
 * answers CANCEL_WAIT with `onCancel`. */
const fakeServer = (onCancel: Array<number>) =>
  Bun.listen<ByteBuffer>({
    hostname: "127.0.0.1",
    port: 0,
    socket: {
      binaryType: "uint8array",
      open(s) {
        s.data = new ByteBuffer()
      },
      data(s, chunk) {
        s.data.append(chunk)
        for (;;) {
          const c = s.data.cursor(CLIENT_LIMITS)
          let req
          try {
            req = parseRequest(c, "2.x")
          } catch (e) {
            if (e === INCOMPLETE) return
            throw e
          }
          s.data.consumeTo(c.pos)
          if (req.op === "ping") s.write(new Writer().u32(req.nonce).bytes())
          if (req.op === "cancelWait") s.write(new Uint8Array(onCancel))
          if (req.op === "getNumKeys") s.write(new Writer().i64(42n).bytes())
        }
      },
    },
  })

test("auto falls back to 1.13 when the server drops the probe, which is sent in one write", () => {
  const r = relay(true)
  return run(
    Effect.gen(function* () {
      const c = yield* makeClient({ port: r.port, timeout: 5000 })
      expect(c.dialect).toBe("1.13")
      yield* c.set("k", "v")
      expect(text(yield* c.get("k"))).toBe("v")
      expect(r.connections.length).toBe(2)
      expect(r.connections[0]!.first.byteLength).toBe(10)
      expect([...r.connections[0]!.first.subarray(0, 6)]).toEqual([...PROBE_START, 0x0d])
      // 1.13 numbering from then on: SET=0 with the key "/k", then WAIT=5, GET=2
      const expected = bytes(0, str("/k"), str("v"), 5, u64(1), str("/k"), 2, str("/k"))
      expect(r.connections[1]!.sent).toEqual([...expected])
    }).pipe(Effect.ensuring(Effect.sync(r.stop))),
  )
})

test("forced 2.x against a server that drops the probe fails with Connect at the connect timeout", () => {
  const r = relay(true)
  return run(
    Effect.gen(function* () {
      const t0 = performance.now()
      const e = yield* Effect.flip(makeClient({ port: r.port, dialect: "2.x", timeout: 400 }))
      expect(performance.now() - t0).toBeGreaterThanOrEqual(390)
      expect(e).toMatchObject({ _tag: "StoreError", reason: "Connect" })
      expect(r.connections.length).toBeGreaterThan(1)
    }).pipe(Effect.ensuring(Effect.sync(r.stop))),
  )
})

test("connect retries until the server starts", async () => {
  const probe = Bun.listen({ hostname: "127.0.0.1", port: 0, socket: { data() {} } })
  const port = probe.port
  probe.stop(true)
  let late: RunningServer | undefined
  const timer = setTimeout(() => {
    late = startServer({ port })
  }, 300)
  try {
    const got = await run(
      Effect.gen(function* () {
        const c = yield* makeClient({ port, timeout: 5000 })
        yield* c.set("k", "up")
        return text(yield* c.get("k"))
      }),
    )
    expect(got).toBe("up")
    expect(late).toBeDefined()
  } finally {
    clearTimeout(timer)
    late?.stop()
  }
})

test("no server: StoreError Connect after the connect timeout", async () => {
  const probe = Bun.listen({ hostname: "127.0.0.1", port: 0, socket: { data() {} } })
  const port = probe.port
  probe.stop(true)
  const t0 = performance.now()
  const e = await run(Effect.flip(makeClient({ port, timeout: 60_000, connectTimeout: 300 })))
  expect(performance.now() - t0).toBeGreaterThanOrEqual(290)
  expect(e).toMatchObject({ _tag: "StoreError", reason: "Connect" })
  expect(e.message).toContain(`127.0.0.1:${port}`)
})

test("STOP_WAITING racing CANCEL_WAIT: both bytes are consumed and the wait succeeds", () => {
  const fake = fakeServer([0, 1])
  return run(
    Effect.gen(function* () {
      const c = yield* makeClient({ port: fake.port, dialect: "2.x", timeout: 5000 })
      yield* c.wait(["k"], 100)
      expect(yield* c.numKeys).toBe(42)
    }).pipe(Effect.ensuring(Effect.sync(() => fake.stop(true)))),
  )
})

test("WAIT_CANCELED alone: StoreTimeout, and the stream stays in step", () => {
  const fake = fakeServer([1])
  return run(
    Effect.gen(function* () {
      const c = yield* makeClient({ port: fake.port, dialect: "2.x", timeout: 5000 })
      expect(yield* Effect.flip(c.wait(["k"], 100))).toMatchObject({ _tag: "StoreTimeout", keys: ["k"] })
      expect(yield* c.numKeys).toBe(42)
      yield* c.ping
    }).pipe(Effect.ensuring(Effect.sync(() => fake.stop(true)))),
  )
})

test("a 1.13 wait timeout closes the connection and the next request uses a new one", () => {
  const r = relay(false)
  return run(
    Effect.gen(function* () {
      const c = yield* makeClient({ port: r.port, dialect: "1.13", timeout: 5000 })
      const other = yield* makeClient({ port: server.port, dialect: "1.13" })
      const k = fresh("late")
      yield* Effect.flip(c.wait([k], 100))
      yield* other.set(k, "x")
      expect(yield* c.add(fresh("n"), 3)).toBe(3)
      expect(r.connections.length).toBe(2)
    }).pipe(Effect.ensuring(Effect.sync(r.stop))),
  )
})

test("a request interrupted mid-flight closes its connection; the next one is in step", () =>
  run(
    Effect.gen(function* () {
      const c = yield* makeClient({ port: server.port, dialect: "2.x", timeout: 5000 })
      const other = yield* makeClient({ port: server.port })
      const k = fresh("int")
      expect(yield* Effect.timeoutOption(c.wait([k]), 50)).toEqual(Option.none())
      yield* other.set(k, "x")
      yield* Effect.sleep(30)
      expect(yield* c.add(fresh("n"), 5)).toBe(5)
      // and concurrent requests from several fibers are serialized on the one connection
      const fibers = yield* Effect.forEach([1, 2, 3, 4], (i) => Effect.forkChild(c.add(`par-${k}`, i)))
      const results = yield* Effect.forEach(fibers, Fiber.join)
      expect(results.toSorted((a, b) => a - b).at(-1)).toBe(10)
    }),
  ))
