// The capturing relay of scripts/gpu/relay.ts (what scripts/gpu/store_probe.ts sees torch send),
// in front of our own server: traffic passes through unchanged, every request of both dialects
// is decoded in order, requests split into single bytes still decode, the 2.x tail opcodes are
// named, and an unknown opcode stops decoding without stopping the bytes.
import { afterAll, beforeAll, describe, expect, test } from "bun:test"
import { Effect } from "effect"
import { startRelay } from "../../scripts/gpu/relay.ts"
import { makeClient } from "../../src/store/client.ts"
import { type RunningServer, startServer } from "../../src/store/server.ts"
import { VALIDATION_MAGIC } from "../../src/store/wire.ts"
import { bytes, RawPeer, run, str, text, u32, u64 } from "./helpers.ts"

describe("capturing relay in front of our server", () => {
  let server: RunningServer
  beforeAll(() => {
    server = startServer()
  })
  afterAll(() => server.stop())

  test("2.x: the handshake and each request decoded in order; replies pass through", async () => {
    const relay = startRelay(server.port)
    try {
      await run(
        Effect.gen(function* () {
          const c = yield* makeClient({ port: relay.port, dialect: "2.x", timeout: 2000 })
          yield* c.set("a", "xyz")
          expect(yield* c.add("n", 5)).toBe(5)
          expect(text(yield* c.get("a"))).toBe("xyz")
          yield* c.ping
        }),
      )
      const ops = relay.requests.map((r) => r.op)
      expect(ops).toEqual(["validate", "ping", "set", "add", "wait", "get", "ping"])
      expect(relay.requests[0]!.text).toBe(`VALIDATE 0x${VALIDATION_MAGIC.toString(16)}`)
      expect(relay.requests[2]).toMatchObject({ key: "/a", valueBytes: 3 })
      expect(relay.requests[3]!.text).toBe("ADD /n 5")
      expect(relay.requests.map((r) => r.seq)).toEqual([...relay.requests.map((r) => r.seq)].sort((a, b) => a - b))
    } finally {
      relay.stop()
    }
  }, 10_000)

  test("1.13: no VALIDATE, the 1.13 numbering", async () => {
    const relay = startRelay(server.port)
    try {
      await run(
        Effect.gen(function* () {
          const c = yield* makeClient({ port: relay.port, dialect: "1.13", timeout: 2000 })
          yield* c.set("k", "v")
          expect(yield* c.deleteKey("k")).toBe(true)
          expect(yield* c.numKeys).toBeGreaterThanOrEqual(0)
        }),
      )
      expect(relay.requests.map((r) => r.text)).toEqual(["SET /k = v (1 B)", "DELETE_KEY /k", "GETNUMKEYS"])
    } finally {
      relay.stop()
    }
  }, 10_000)

  test("a request sent one byte at a time decodes once it is whole", async () => {
    const relay = startRelay(server.port)
    try {
      const peer = await RawPeer.connect(relay.port)
      const request = bytes(0, u32(VALIDATION_MAGIC), 13, u32(77), 4, str("/split"), u64(3))
      for (const b of request) {
        peer.send(bytes(b))
        await Bun.sleep(1)
      }
      expect(await peer.read(4)).toEqual(u32(77))
      expect(await peer.read(8)).toEqual(u64(3))
      expect(relay.requests.map((r) => r.text)).toEqual(["VALIDATE 0x3c85f7ce", "PING 77", "ADD /split 3"])
      peer.end()
    } finally {
      relay.stop()
    }
  }, 10_000)

  test("the 2.x tail opcodes are named; an unknown one ends decoding, not the connection's bytes", async () => {
    const relay = startRelay(server.port)
    try {
      const tail = await RawPeer.connect(relay.port)
      tail.send(bytes(0, u32(VALIDATION_MAGIC), 17, 18, str("/b"), u64(2)))
      // our server does not know 17: it closes, and the relay passes the close on
      expect(await tail.closedWithin(2000)).toBe(true)
      const unknown = await RawPeer.connect(relay.port)
      unknown.send(bytes(0, u32(VALIDATION_MAGIC), 19, 13, u32(5)))
      expect(await unknown.closedWithin(2000)).toBe(true)
      const texts = relay.requests.map((r) => r.text)
      expect(texts).toEqual(["VALIDATE 0x3c85f7ce", "LIST_KEYS(17)", "BARRIER(18) /b world 2", "VALIDATE 0x3c85f7ce", "UNDECODABLE opcode 19: 13 0d 05 00 00 00"])
    } finally {
      relay.stop()
    }
  }, 10_000)
})
