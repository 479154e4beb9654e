// Framing (src/protocol/framing.ts): frames survive any chunking, oversized prefixes are
// refused before allocation, the writer queues what the socket does not take, and a real
// socket carries encoded messages end to end.
import { afterAll, describe, expect, spyOn, test } from "bun:test"
import { Result } from "effect"
import { decodeControllerMessage, encodeMessageParts } from "../../src/protocol/codec.ts"
import { WireError } from "../../src/protocol/errors.ts"
import { FrameReader, FrameWriter, OWNED_FRAME_BYTES, type ByteSink, type FrameOwnership } from "../../src/protocol/framing.ts"
import type { ControllerMessage } from "../../src/protocol/messages.ts"
import { HostTensor } from "../../src/protocol/values.ts"

const rng = (seed: number) => () => {
  seed = (seed + 0x6d2b79f5) | 0
  let t = Math.imul(seed ^ (seed >>> 15), 1 | seed)
  t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t
  return ((t ^ (t >>> 14)) >>> 0) / 4294967296
}

const body = (n: number, seed: number) => Uint8Array.from({ length: n }, (_, i) => (i * 13 + seed) & 0xff)

/** The framing written out by hand: a u32 big-endian length, then the body. */
const framed = (bodies: Uint8Array[]): Uint8Array => {
  const out = new Uint8Array(bodies.reduce((n, b) => n + 4 + b.length, 0))
  let at = 0
  for (const b of bodies) {
    out.set([b.length >>> 24, (b.length >>> 16) & 0xff, (b.length >>> 8) & 0xff, b.length & 0xff], at)
    out.set(b, at + 4)
    at += 4 + b.length
  }
  return out
}

interface Received { readonly bytes: Uint8Array; readonly ownership: FrameOwnership; readonly fresh: boolean }

/** A reader that keeps a copy of each frame, and whether it was a fresh, exactly sized buffer. */
const collector = (maxFrameBytes?: number) => {
  const frames: Received[] = []
  const reader = new FrameReader((b, ownership) => {
    frames.push({ bytes: b.slice(), ownership, fresh: b.byteOffset === 0 && b.buffer.byteLength === b.length })
  }, maxFrameBytes === undefined ? {} : { maxFrameBytes })
  return { frames, reader }
}

const bodies = [body(0, 1), body(1, 2), body(300, 3), body(OWNED_FRAME_BYTES - 1, 4), body(OWNED_FRAME_BYTES, 5), body(0, 6), body(3 * OWNED_FRAME_BYTES + 17, 7), body(5, 8)]
const stream = framed(bodies)

const expectAll = (frames: Received[]) => {
  expect(frames.map((f) => f.bytes)).toEqual(bodies)
  frames.forEach((f, i) => {
    const big = bodies[i]!.length >= OWNED_FRAME_BYTES
    expect(f.ownership).toBe(big ? "owned" : "borrowed")
    if (big) expect(f.fresh).toBe(true)
  })
}

describe("FrameReader", () => {
  test("one chunk holding every frame", () => {
    const { frames, reader } = collector()
    expect(reader.push(stream)).toBeUndefined()
    expectAll(frames)
    expect(reader.pendingBytes).toBe(0)
  })

  test("split in two at every position of a small stream", () => {
    const small = [body(0, 1), body(3, 2), body(9, 3)]
    const bytes = framed(small)
    for (let cut = 0; cut <= bytes.length; cut++) {
      const got: Uint8Array[] = []
      const reader = new FrameReader((b) => got.push(b.slice()))
      reader.push(bytes.subarray(0, cut))
      reader.push(bytes.subarray(cut))
      expect(got).toEqual(small)
    }
  })

  test("one byte at a time", () => {
    const { frames, reader } = collector()
    for (let i = 0; i < stream.length; i++) expect(reader.push(stream.subarray(i, i + 1))).toBeUndefined()
    expectAll(frames)
  })

  test("random chunk sizes, torn and coalesced (seeded)", () => {
    const next = rng(7)
    for (let round = 0; round < 30; round++) {
      const { frames, reader } = collector()
      for (let at = 0; at < stream.length; ) {
        const n = Math.min(stream.length - at, 1 + Math.floor(next() ** 3 * 3 * OWNED_FRAME_BYTES))
        reader.push(stream.subarray(at, at + n))
        at += n
      }
      expectAll(frames)
    }
  })

  test("a small frame wholly inside a chunk is a view of that chunk, not a copy", () => {
    const views: Uint8Array[] = []
    const reader = new FrameReader((b) => views.push(b))
    const bytes = framed([body(10, 1)])
    reader.push(bytes)
    expect(views[0]!.buffer).toBe(bytes.buffer)
    expect(views[0]!.byteOffset).toBe(4)
  })

  test("an oversized length is refused from its 4 bytes alone, before any allocation", () => {
    const { frames, reader } = collector(1000)
    // Record the sizes of the buffers allocated meanwhile, both ways the reader could:
    // the Uint8Array constructor (looked up at run time) and Bun.allocUnsafe.
    const Original = globalThis.Uint8Array
    const sizes: number[] = []
    globalThis.Uint8Array = new Proxy(Original, {
      construct: (target, args, newTarget) => {
        if (typeof args[0] === "number") sizes.push(args[0])
        return Reflect.construct(target, args, newTarget)
      },
    })
    const allocUnsafe = spyOn(Bun, "allocUnsafe")
    let error: WireError | undefined
    try {
      error = reader.push(new Original([...framed([body(3, 1)]), 0x00, 0x00, 0x03, 0xe9]))
    } finally {
      globalThis.Uint8Array = Original
      sizes.push(...allocUnsafe.mock.calls.map(([n]) => n))
      allocUnsafe.mockRestore()
    }
    expect(error).toBeInstanceOf(WireError)
    expect(error!.fatal).toBe(true)
    expect(error!.message).toBe("frame of 1001 bytes is over the 1000-byte maximum; the stream cannot be resynchronised")
    expect(sizes.filter((n) => n > 100)).toEqual([])
    // The frame before it was delivered; nothing after it is.
    expect(frames.map((f) => f.bytes)).toEqual([body(3, 1)])
    expect(reader.push(framed([body(2, 2)]))).toBe(error!)
    expect(frames.length).toBe(1)
  })

  test("the maximum itself is allowed; the default is 1 GiB, refused past it", () => {
    const { frames, reader } = collector(10)
    expect(reader.push(framed([body(10, 1)]))).toBeUndefined()
    expect(frames.length).toBe(1)
    const fresh = new FrameReader(() => {})
    expect(fresh.maxFrameBytes).toBe(1024 ** 3)
    expect(fresh.push(new Uint8Array([0x40, 0x00, 0x00, 0x01]))?.fatal).toBe(true)
  })
})

describe("FrameReader.recycle", () => {
  const big = (n: number, seed: number) => framed([body(n, seed)])

  test("a recycled frame's memory carries a later frame of the same size, or down to half of it", () => {
    const T = OWNED_FRAME_BYTES
    const frames: Uint8Array[] = []
    const reader = new FrameReader((frame) => frames.push(frame))
    reader.push(big(4 * T, 1))
    const memory = frames[0]!.buffer
    expect(reader.recycle(frames[0]!)).toBe(true)
    reader.push(big(4 * T, 2))
    expect(frames[1]!.buffer).toBe(memory)
    expect(frames[1]!).toEqual(body(4 * T, 2))
    expect(reader.recycle(frames[1]!)).toBe(true)
    // Less than half the spare's size: new memory, the spare stays.
    reader.push(big(T, 3))
    expect(frames[2]!.buffer).not.toBe(memory)
    expect(frames[2]!).toEqual(body(T, 3))
    // Exactly half: the spare, as a view from offset 0.
    reader.push(big(2 * T, 4))
    expect(frames[3]!.buffer).toBe(memory)
    expect(frames[3]!.byteOffset).toBe(0)
    expect(frames[3]!).toEqual(body(2 * T, 4))
  })

  test("only owned frames of this reader come back, once", () => {
    const frames: Array<[Uint8Array, FrameOwnership]> = []
    const reader = new FrameReader((f, o) => frames.push([f, o]))
    const other = new FrameReader(() => {})
    reader.push(framed([body(10, 1), body(OWNED_FRAME_BYTES, 2)]))
    const [[small, smallOwnership], [owned]] = frames as [[Uint8Array, FrameOwnership], [Uint8Array, FrameOwnership]]
    expect(smallOwnership).toBe("borrowed")
    expect(reader.recycle(small)).toBe(false)
    expect(reader.recycle(new Uint8Array(OWNED_FRAME_BYTES))).toBe(false)
    expect(other.recycle(owned)).toBe(false)
    expect(reader.recycle(owned)).toBe(true)
    expect(reader.recycle(owned)).toBe(false)
  })

  test("spare memory is capped", () => {
    const frames: Uint8Array[] = []
    const reader = new FrameReader((f) => frames.push(f), { maxSpareBytes: OWNED_FRAME_BYTES * 3 })
    reader.push(framed([body(OWNED_FRAME_BYTES * 2, 1), body(OWNED_FRAME_BYTES * 2, 2)]))
    expect(reader.recycle(frames[0]!)).toBe(true)
    expect(reader.recycle(frames[1]!)).toBe(false)
  })
})

/** A sink that takes at most what its schedule allows per call, recording what it got. */
class ThrottledSink implements ByteSink {
  readonly received: Uint8Array[] = []
  constructor(private readonly allow: () => number) {}
  write(data: Uint8Array): number {
    const n = Math.min(data.length, this.allow())
    if (n > 0) this.received.push(data.subarray(0, n))
    return n
  }
  bytes(): Uint8Array {
    const out = new Uint8Array(this.received.reduce((n, r) => n + r.length, 0))
    this.received.reduce((at, r) => (out.set(r, at), at + r.length), 0)
    return out
  }
}

describe("FrameWriter", () => {
  test("a sink that takes everything: prefix and small parts go in one write", () => {
    const sink = new ThrottledSink(() => Infinity)
    const writer = new FrameWriter(sink)
    expect(writer.write([body(3, 1), body(4, 2)])).toBe(true)
    expect(sink.received.length).toBe(1)
    expect(sink.bytes()).toEqual(framed([new Uint8Array([...body(3, 1), ...body(4, 2)])]))
  })

  test("large parts are written as they are, not copied", () => {
    const sink = new ThrottledSink(() => Infinity)
    const big = body(OWNED_FRAME_BYTES * 2, 3)
    new FrameWriter(sink).write([body(5, 1), big, body(6, 2)])
    expect(sink.received.some((r) => r.buffer === big.buffer)).toBe(true)
    expect(sink.bytes()).toEqual(framed([new Uint8Array([...body(5, 1), ...big, ...body(6, 2)])]))
  })

  test("partial writes queue the rest in order until drained (seeded schedule, zero-byte writes too)", () => {
    const next = rng(3)
    const frames = [[body(10, 1)], [body(0, 2)], [body(100, 3), body(OWNED_FRAME_BYTES + 5, 4), body(7, 5)], [body(OWNED_FRAME_BYTES * 3, 6)], [body(1, 7)]]
    const sink = new ThrottledSink(() => Math.floor(next() * 4) === 0 ? 0 : Math.floor(next() * 20000))
    const writer = new FrameWriter(sink)
    let expectedPending = 0
    for (const parts of frames) {
      const before = writer.pendingBytes, sent = sink.bytes().length
      const done = writer.write(parts)
      expectedPending = before + 4 + parts.reduce((n, p) => n + p.length, 0) - (sink.bytes().length - sent)
      expect(writer.pendingBytes).toBe(expectedPending)
      expect(done).toBe(expectedPending === 0)
    }
    let drains = 0
    while (!writer.drain()) drains++
    expect(drains).toBeGreaterThan(0)
    expect(writer.pendingBytes).toBe(0)
    expect(sink.bytes()).toEqual(framed(frames.map((parts) => new Uint8Array(parts.flatMap((p) => [...p])))))
  })

  test("a body of 2^32 bytes or more is refused", () => {
    const writer = new FrameWriter(new ThrottledSink(() => Infinity))
    const fake = { byteLength: 2 ** 32, length: 2 ** 32 } as Uint8Array
    expect(() => writer.write([fake])).toThrow(RangeError)
  })
})

describe("over a real socket", () => {
  const servers: Array<{ stop(force?: boolean): void }> = []
  afterAll(() => servers.forEach((s) => s.stop(true)))

  test("messages with a 16 MiB tensor and 2000 small ones arrive whole, the tensor as a view of its frame", async () => {
    const tensor = new HostTensor("f32", [4 * 1024 * 1024], body(16 * 1024 * 1024, 9))
    const messages: ControllerMessage[] = [
      { _tag: "FetchResult", ident: 0, value: { t: tensor, note: "big" } },
      ...Array.from({ length: 2000 }, (_, i): ControllerMessage => ({ _tag: "Status", firstUncompletedIdent: i })),
      { _tag: "FetchResult", ident: 1, value: tensor },
    ]
    const received: ControllerMessage[] = []
    const views: boolean[] = []
    const done = Promise.withResolvers<void>()
    const server = Bun.listen<{ reader: FrameReader }>({
      hostname: "127.0.0.1",
      port: 0,
      socket: {
        binaryType: "uint8array",
        open(s) {
          s.data = {
            reader: new FrameReader((frame, ownership) => {
              const m = Result.getOrThrow(decodeControllerMessage(frame, ownership))
              if (m._tag === "FetchResult") views.push(ownership === "owned" && (m.value instanceof HostTensor ? m.value : (m.value as { t: HostTensor }).t).data.buffer === frame.buffer)
              received.push(m)
              if (received.length === messages.length) done.resolve()
            }),
          }
        },
        data(s, chunk) {
          const error = s.data.reader.push(chunk)
          if (error) done.reject(error)
        },
      },
    })
    servers.push(server)
    let writer: FrameWriter | undefined
    const client = await Bun.connect({
      hostname: "127.0.0.1",
      port: server.port,
      socket: { binaryType: "uint8array", data() {}, drain() { writer?.drain() } },
    })
    writer = new FrameWriter(client)
    for (const m of messages) writer.write(Result.getOrThrow(encodeMessageParts(m)))
    await done.promise
    client.end()
    expect(received.length).toBe(messages.length)
    expect(received).toStrictEqual(messages)
    expect(views).toEqual([true, true])
  }, 20_000)
})
