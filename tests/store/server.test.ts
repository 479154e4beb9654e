// Our client against our server in each dialect, and the server's behaviour seen from raw
// sockets: exact replies, CANCEL_WAIT, half-sent and malformed requests, many clients at once,
// a reply refused before it is built when it would pass the connections' buffer bound.
import { afterAll, beforeAll, describe, expect, test } from "bun:test"
import { Effect, Fiber } from "effect"
import { makeClient } from "../../src/store/client.ts"
import { prefixStore } from "../../src/store/prefix.ts"
import { StoreError, StoreTimeout } from "../../src/store/errors.ts"
import { type RunningServer, startServer } from "../../src/store/server.ts"
import { type Dialect, VALIDATION_MAGIC, Writer, writeRequest } from "../../src/store/wire.ts"
import { bytes, RawPeer, run, str, text, u32, u64 } from "./helpers.ts"

let server: RunningServer
beforeAll(() => {
  server = startServer()
})
afterAll(() => server.stop())

/** Keys unique to one test, since all tests share the server. */
let serial = 0
const fresh = (name: string) => `${name}-${++serial}`

const client = (dialect: Dialect | "auto", timeout = 5000) => makeClient({ port: server.port, dialect, timeout })

const VALIDATE = bytes(0, 0xce, 0xf7, 0x85, 0x3c)

describe.each(["1.13", "2.x"] as const)("our client forced to %s", (dialect) => {
  test("set, get, add, check, numKeys, deleteKey", () =>
    run(
      Effect.gen(function* () {
        const c = yield* client(dialect)
        expect(c.dialect).toBe(dialect)
        const k = fresh("k")
        const before = yield* c.numKeys
        expect(yield* c.check([k])).toBe(false)
        yield* c.set(k, "v1")
        expect(text(yield* c.get(k))).toBe("v1")
        yield* c.set(k, new Uint8Array([0, 255, 7]))
        expect([...(yield* c.get(k))]).toEqual([0, 255, 7])
        expect(yield* c.check([k])).toBe(true)
        const ctr = fresh("ctr")
        expect(yield* c.add(ctr, 5)).toBe(5)
        expect(yield* c.add(ctr, -7)).toBe(-2)
        expect(text(yield* c.get(ctr))).toBe("-2")
        expect(yield* c.numKeys).toBe(before + 2)
        expect(yield* c.deleteKey(k)).toBe(true)
        expect(yield* c.deleteKey(k)).toBe(false)
        expect(yield* c.numKeys).toBe(before + 1)
      }),
    ))

  test("compareSet: missing+empty stores, missing+non-empty answers expected, match swaps, mismatch keeps", () =>
    run(
      Effect.gen(function* () {
        const c = yield* client(dialect)
        const k = fresh("cas")
        expect(text(yield* c.compareSet(k, "x", "y"))).toBe("x")
        expect(yield* c.check([k])).toBe(false)
        expect(text(yield* c.compareSet(k, "", "first"))).toBe("first")
        expect(text(yield* c.compareSet(k, "wrong", "second"))).toBe("first")
        expect(text(yield* c.compareSet(k, "first", "second"))).toBe("second")
        expect(text(yield* c.get(k))).toBe("second")
      }),
    ))

  test("ADD reads decimal text the way stoll does", () =>
    run(
      Effect.gen(function* () {
        const c = yield* client(dialect)
        const k = fresh("num")
        yield* c.set(k, " \t+41xyz")
        expect(yield* c.add(k, 1)).toBe(42)
        expect(text(yield* c.get(k))).toBe("42")
      }),
    ))

  test("ADD on a non-numeric value closes only that connection; the client reconnects", () =>
    run(
      Effect.gen(function* () {
        const c = yield* client(dialect)
        const other = yield* client(dialect)
        const k = fresh("nan")
        yield* c.set(k, "abc")
        const e = yield* Effect.flip(c.add(k, 1))
        expect(e).toBeInstanceOf(StoreError)
        expect((e as StoreError).reason).toBe("ConnectionLost")
        expect(text(yield* other.get(k))).toBe("abc")
        expect(yield* c.add(fresh("after"), 3)).toBe(3)
      }),
    ))

  test("multiGet and multiSet", () =>
    run(
      Effect.gen(function* () {
        const c = yield* client(dialect)
        const [a, b] = [fresh("ma"), fresh("mb")]
        yield* c.multiSet([
          [a, "1"],
          [b, "2"],
        ])
        expect((yield* c.multiGet([a, b])).map(text)).toEqual(["1", "2"])
        expect(yield* c.multiGet([])).toEqual([])
      }),
    ))

  test("a wait that times out names its keys and the milliseconds", () =>
    run(
      Effect.gen(function* () {
        const c = yield* client(dialect)
        const [a, b] = [fresh("ta"), fresh("tb")]
        yield* c.set(a, "present")
        const t0 = performance.now()
        const e = yield* Effect.flip(c.wait([a, b], 150))
        expect(performance.now() - t0).toBeGreaterThanOrEqual(140)
        expect(e).toBeInstanceOf(StoreTimeout)
        expect(e).toMatchObject({ _tag: "StoreTimeout", keys: [a, b], timeoutMs: 150 })
        expect(e.message).toContain(b)
        expect(e.message).toContain("150 ms")
        const g = yield* Effect.flip(c.get(fresh("tg"), "120 millis"))
        expect(g).toMatchObject({ _tag: "StoreTimeout", timeoutMs: 120 })
        // Under torchrun's agent prefix the keys read as the worker names them: the client's own
        // leading "/" on the wire is not part of them (no "//worker/...").
        const agent = prefixStore("/worker/attempt_0/monarch", c)
        const h = yield* Effect.flip(agent.get("controller", "100 millis"))
        expect(h).toMatchObject({ _tag: "StoreTimeout", keys: ["/worker/attempt_0/monarch/controller"] })
        expect(h.message).not.toContain("//")
      }),
    ))

  test("a late wake-up after a timeout does not corrupt the next reply", () =>
    run(
      Effect.gen(function* () {
        const c = yield* client(dialect)
        const other = yield* client(dialect)
        const late = fresh("late")
        yield* Effect.flip(c.wait([late], 100))
        yield* other.set(late, "x")
        yield* Effect.sleep(50) // a server that kept the WAIT would send its STOP_WAITING now
        const expected = yield* other.numKeys
        expect(yield* c.numKeys).toBe(expected)
        const k = fresh("after")
        expect(yield* c.add(k, 7)).toBe(7)
        expect(text(yield* c.get(late))).toBe("x")
        expect(yield* c.add(k, 1)).toBe(8)
      }),
    ))

  test("waiters wake on SET, ADD, MULTI_SET and a storing COMPARE_SET", () =>
    run(
      Effect.gen(function* () {
        const writer = yield* client(dialect)
        const wakers: Array<[string, (k: string) => Effect.Effect<unknown, StoreError>]> = [
          ["set", (k) => writer.set(k, "v")],
          ["add", (k) => writer.add(k, 1)],
          ["multiSet", (k) => writer.multiSet([[k, "v"]])],
          ["compareSet", (k) => writer.compareSet(k, "", "v")],
        ]
        if (dialect === "2.x") wakers.push(["append", (k) => writer.append(k, "v")])
        for (const [name, wake] of wakers) {
          const waiter = yield* client(dialect)
          const k = fresh(name)
          const fiber = yield* Effect.forkChild(waiter.wait([k]))
          yield* Effect.sleep(30)
          expect(fiber.pollUnsafe()).toBeUndefined()
          yield* wake(k)
          yield* Fiber.join(fiber)
        }
      }),
    ))
})

test("auto detects 2.x against our server; APPEND and PING work there", () =>
  run(
    Effect.gen(function* () {
      const c = yield* client("auto")
      expect(c.dialect).toBe("2.x")
      const k = fresh("app")
      yield* c.append(k, "ab")
      yield* c.append(k, "cd")
      expect(text(yield* c.get(k))).toBe("abcd")
      yield* c.ping
    }),
  ))

test("APPEND on 1.13 fails as Unsupported", () =>
  run(
    Effect.gen(function* () {
      const c = yield* client("1.13")
      expect(yield* Effect.flip(c.append(fresh("a"), "x"))).toMatchObject({ _tag: "StoreError", reason: "Unsupported" })
    }),
  ))

test("many concurrent clients", () =>
  run(
    Effect.gen(function* () {
      const ctr = fresh("ctr")
      const go = fresh("go")
      const clients = yield* Effect.forEach(Array.from({ length: 40 }, (_, i) => i), (i) =>
        client(i % 2 === 0 ? "1.13" : "2.x"),
      )
      const workers = yield* Effect.forkChild(
        Effect.forEach(
          clients,
          (c) =>
            Effect.gen(function* () {
              for (let j = 0; j < 25; j++) yield* c.add(ctr, 1)
              yield* c.wait([go])
              return text(yield* c.get(go))
            }),
          { concurrency: "unbounded" },
        ),
      )
      const setter = yield* client("2.x")
      while ((yield* setter.add(ctr, 0)) < 1000) yield* Effect.sleep(5)
      yield* setter.set(go, "now")
      expect(yield* Fiber.join(workers)).toEqual(Array(40).fill("now"))
      expect(yield* setter.add(ctr, 0)).toBe(1000)
    }),
  ))

describe("raw sockets", () => {
  test("1.13 bytes: SET, then WAIT + GET as captured from torch", async () => {
    const p = await RawPeer.connect(server.port)
    const k = `/${fresh("raw")}`
    p.send(bytes(0, str(k), str("v1")))
    p.send(bytes(5, u64(1), str(k)))
    expect(await p.read(1)).toEqual([0])
    p.send(bytes(2, str(k)))
    expect(await p.read(10)).toEqual([...u64(2), 0x76, 0x31])
    p.end()
  })

  test("2.x: the probe is answered with the nonce", async () => {
    const p = await RawPeer.connect(server.port)
    p.send(bytes(VALIDATE, 0x0d, u32(0xdeadbeef)))
    expect(await p.read(4)).toEqual(u32(0xdeadbeef))
    p.end()
  })

  test("CANCEL_WAIT answers WAIT_CANCELED, after STOP_WAITING when the key came first", async () => {
    const p = await RawPeer.connect(server.port)
    const setter = await RawPeer.connect(server.port)
    setter.send(VALIDATE)
    p.send(VALIDATE)
    const [k1, k2] = [`/${fresh("cw")}`, `/${fresh("cw")}`]
    // cancelled before the key exists: only WAIT_CANCELED, and no stray byte when it appears later
    p.send(bytes(6, u64(1), str(k1)))
    p.send(bytes(12))
    expect(await p.read(1)).toEqual([1])
    setter.send(bytes(1, str(k1), str("x"), 13, u32(1)))
    expect(await setter.read(4)).toEqual(u32(1)) // the SET has been handled
    p.send(bytes(13, u32(5)))
    expect(await p.read(4)).toEqual(u32(5))
    // the key appears before the cancel: STOP_WAITING then WAIT_CANCELED
    p.send(bytes(6, u64(1), str(k2)))
    setter.send(bytes(1, str(k2), str("y")))
    expect(await p.read(1)).toEqual([0])
    p.send(bytes(12))
    expect(await p.read(1)).toEqual([1])
    p.send(bytes(13, u32(6)))
    expect(await p.read(4)).toEqual(u32(6))
    p.end()
    setter.end()
  })

  test("a reply that would take the connections past maxBufferedBytes with what they already hold is refused before it is built", async () => {
    const said: string[] = []
    const warn = console.warn
    console.warn = (...args: unknown[]) => void said.push(args.join(" "))
    const small = startServer({ maxBufferedBytes: 64 * 1024 })
    try {
      const k = fresh("room")
      await run(Effect.flatMap(makeClient({ port: small.port, dialect: "2.x", timeout: 5000 }), (c) => c.set(k, new Uint8Array(40_000).fill(7))))
      // Two GETs in one batch: the first reply (40,008 bytes) is held unsent when the second is asked.
      const w = new Writer(256)
      for (const r of [{ op: "validate", magic: VALIDATION_MAGIC }, { op: "get", key: new TextEncoder().encode(`/${k}`) }, { op: "get", key: new TextEncoder().encode(`/${k}`) }] as const) writeRequest(w, "2.x", r)
      const p = await RawPeer.connect(small.port)
      p.send(w.bytes())
      expect(await p.closedWithin(5000)).toBe(true)
      expect(p.pending()).toEqual([])
      expect(said.join("; ")).toMatch(/a reply of 40008 bytes would take the connections past the 65536 bytes they may hold together/)
      p.end()
    } finally {
      console.warn = warn
      small.stop()
    }
  })

  test("a half-sent request stalls nobody else, and completes when the rest arrives", () =>
    run(
      Effect.gen(function* () {
        const p = yield* Effect.promise(() => RawPeer.connect(server.port))
        const k = fresh("half")
        const whole = bytes(1, str(`/${k}`), str("finally"))
        p.send(bytes(VALIDATE, [...whole.subarray(0, 4)]))
        const c = yield* client("2.x")
        const t0 = performance.now()
        for (let i = 0; i < 200; i++) yield* c.add(fresh("busy"), 1)
        expect(performance.now() - t0).toBeLessThan(2000)
        expect(yield* c.check([k])).toBe(false)
        p.send(whole.subarray(4))
        expect(text(yield* c.get(k, 2000))).toBe("finally")
        p.end()
      }),
    ))

  test("an idle connection (the 1.13 callback socket) is accepted and left alone", async () => {
    const idle = await RawPeer.connect(server.port)
    await run(Effect.flatMap(client("1.13"), (c) => c.add(fresh("i"), 1)))
    expect(await idle.closedWithin(200)).toBe(false)
    idle.end()
  })

  const refused: Array<[string, Uint8Array]> = [
    ["1.13 key length 2^40", bytes(0, u64(2 ** 40))],
    ["2.x value length over 8 MiB", bytes(VALIDATE, 1, str("/k"), u64(8 * 1024 * 1024 + 1))],
    ["2.x key count over 128 Ki", bytes(VALIDATE, 6, u64(128 * 1024 + 1))],
    ["2.x unknown opcode", bytes(VALIDATE, 0x63)],
    ["2.x VALIDATE with a wrong magic", bytes(VALIDATE, 0, u32(1))],
    ["1.13 WATCH_KEY (not implemented)", bytes(7, str("/w"))],
    ["1.13 GET of a missing key", bytes(2, str("/surely-missing"))],
  ]
  test.each(refused)("%s closes only that client", async (_name, request) => {
    const bad = await RawPeer.connect(server.port)
    const k = fresh("survivor")
    await run(Effect.flatMap(client("2.x"), (c) => c.set(k, "kept")))
    bad.send(request)
    expect(await bad.closedWithin(1000)).toBe(true)
    expect(await run(Effect.flatMap(client("2.x"), (c) => c.get(k)).pipe(Effect.map(text)))).toBe("kept")
  })

  test("a large declared length within limits waits for its bytes instead of closing", async () => {
    const p = await RawPeer.connect(server.port)
    p.send(bytes(VALIDATE, 1, str("/big"), u64(1 << 20), [1, 2, 3]))
    expect(await p.closedWithin(200)).toBe(false)
    p.end()
  })

  test("a closed connection's wait is dropped; the others on that key still wake", async () => {
    const [gone, stays] = [await RawPeer.connect(server.port), await RawPeer.connect(server.port)]
    const k = `/${fresh("drop")}`
    for (const p of [gone, stays]) p.send(bytes(VALIDATE, 6, u64(1), str(k)))
    await Bun.sleep(30)
    gone.end()
    await Bun.sleep(30)
    const setter = await RawPeer.connect(server.port)
    setter.send(bytes(VALIDATE, 1, str(k), str("v"), 13, u32(9)))
    expect(await setter.read(4)).toEqual(u32(9))
    expect(await stays.read(1)).toEqual([0])
    stays.end()
    setter.end()
  })
})
