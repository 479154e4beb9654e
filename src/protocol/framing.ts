/**
 * Framing: each message body travels as a u32 big-endian length, then the body. FrameReader
 * splits a byte stream (torn or coalesced socket chunks) back into bodies; FrameWriter
 * writes frames to a socket that may take fewer bytes than offered. What a body holds is
 * codec.ts's business.
 */
import { WireError } from "./errors.ts"
import { locateTensor, type Located } from "./locate.ts"

/** The largest body a FrameReader accepts unless told otherwise: 1 GiB. */
export const DEFAULT_MAX_FRAME_BYTES = 1024 ** 3
/** Bodies at least this long get a buffer of their own, handed over as "owned". */
export const OWNED_FRAME_BYTES = 64 * 1024

/**
 * "owned": the bytes are the receiver's to keep, so decoded tensors may be views into them.
 * "borrowed": valid only during the callback that got them; decoding copies what it keeps.
 */
export type FrameOwnership = "owned" | "borrowed"

export interface FrameReaderOptions {
  /** Longer bodies are refused, before any allocation (default DEFAULT_MAX_FRAME_BYTES). */
  readonly maxFrameBytes?: number
  /** The most memory recycle() keeps for reuse (default 256 MiB). */
  readonly maxSpareBytes?: number
  /**
   * Where the elements of an owned frame's first CallFunction host tensor go instead of the frame
   * (locate.ts): memory of `located.bytes` that the tensor will be made of, or undefined (they
   * go into the frame). The frame's bytes there are then left unwritten.
   */
  readonly direct?: (body: Uint8Array, located: Located) => Uint8Array | undefined
}

/**
 * How far into an owned frame its tensor is looked for, and where first: each look walks the
 * frame from its start, so the next is made once twice as much has come (a frame of many small
 * commands costs at most two walks of its first PROBE_LIMIT bytes).
 */
const PROBE_LIMIT = 64 * 1024, FIRST_PROBE = 4096

/**
 * Splits a stream of chunks into frame bodies. A body of OWNED_FRAME_BYTES or more is
 * copied once, from the chunks into memory of its own that starts at offset 0 of its
 * ArrayBuffer, and handed over as "owned". Smaller bodies are "borrowed" views (into the
 * chunk, or into the reader's buffer when torn), valid only during `onFrame`. `onFrame`
 * must not throw, nor push into the same reader.
 */
export class FrameReader {
  /**
   * Longer bodies are refused. May change between frames: both ends of a worker's link start it
   * at what the handshake needs and raise it once the handshake is over.
   */
  maxFrameBytes: number
  readonly maxSpareBytes: number
  /** The memory of owned frames handed over: only these may come back through recycle(). */
  private readonly handedOver = new WeakSet<ArrayBufferLike>()
  /** Recycled memory, whole ArrayBuffers, for the next large frames. */
  private readonly spare: Uint8Array[] = []
  private spareBytes = 0
  private readonly header = new Uint8Array(4)
  private headerFill = 0
  /** The body being filled, when its header has been read. */
  private body: Uint8Array | undefined
  private bodyLength = 0
  private bodyFill = 0
  /** Reused for torn small bodies. */
  private small = new Uint8Array(0)
  private failure: WireError | undefined
  private readonly direct: FrameReaderOptions["direct"]
  /** Whether the owned body being filled is still looked into for its tensor (direct reads), and at what fill next. */
  private probing = false
  private nextProbe = FIRST_PROBE
  /** Where its tensor's elements go instead of the body: body positions [start, end) into `into`. */
  private hole: { readonly start: number; readonly end: number; readonly into: Uint8Array } | undefined

  constructor(
    private readonly onFrame: (body: Uint8Array, ownership: FrameOwnership) => void,
    options: FrameReaderOptions = {},
  ) {
    this.maxFrameBytes = options.maxFrameBytes ?? DEFAULT_MAX_FRAME_BYTES
    this.maxSpareBytes = options.maxSpareBytes ?? 256 * 1024 * 1024
    this.direct = options.direct
  }

  /**
   * Gives an owned frame back once nothing uses it or any view of it (its tensors copied
   * elsewhere, say): a later frame reuses the memory. Worth it for large frames: fresh
   * memory costs page faults, and on the dev VM filling fresh memory ran at ~1.2 GB/s
   * against ~8 GB/s for reused memory. Returns false (and keeps nothing) for a frame this
   * reader did not hand over, one already given back, or when the spare memory is full.
   */
  recycle(frame: Uint8Array): boolean {
    const memory = frame.buffer
    if (!this.handedOver.has(memory)) return false
    this.handedOver.delete(memory)
    if (this.spareBytes + memory.byteLength > this.maxSpareBytes) return false
    this.spare.push(new Uint8Array(memory))
    this.spareBytes += memory.byteLength
    return true
  }

  /** Memory for an owned frame: the smallest spare that fits without wasting half, else new. */
  private ownedBody(length: number): Uint8Array {
    let best = -1
    for (let i = 0; i < this.spare.length; i++) {
      const size = this.spare[i]!.byteLength
      if (size >= length && size <= 2 * length && (best < 0 || size < this.spare[best]!.byteLength)) best = i
    }
    if (best >= 0) {
      const [memory] = this.spare.splice(best, 1)
      this.spareBytes -= memory!.byteLength
      return memory!.subarray(0, length)
    }
    // NOTE: uninitialised memory, safe because the frame is handed over only once every
    // byte has been written; skipping the zeroing raised 64 MiB frames from ~5.7 to ~8.4 GB/s.
    return Bun.allocUnsafe(length)
  }

  /**
   * Feeds one chunk; calls `onFrame` for every body it completes. Returns a fatal
   * WireError when a length prefix exceeds the maximum: the stream cannot be split any
   * further, so close the connection. From then on every push returns that error.
   */
  push(chunk: Uint8Array): WireError | undefined {
    if (this.failure !== undefined) return this.failure
    let at = 0
    while (at < chunk.length) {
      if (this.body === undefined) {
        let length: number
        if (this.headerFill === 0 && chunk.length - at >= 4) {
          length = ((chunk[at]! << 24) >>> 0) + (chunk[at + 1]! << 16) + (chunk[at + 2]! << 8) + chunk[at + 3]!
          at += 4
        } else {
          const n = Math.min(4 - this.headerFill, chunk.length - at)
          this.header.set(chunk.subarray(at, at + n), this.headerFill)
          this.headerFill += n
          at += n
          if (this.headerFill < 4) return undefined
          this.headerFill = 0
          length = new DataView(this.header.buffer).getUint32(0)
        }
        if (length > this.maxFrameBytes) {
          this.failure = new WireError({ message: `frame of ${length} bytes is over the ${this.maxFrameBytes}-byte maximum; the stream cannot be resynchronised`, fatal: true })
          return this.failure
        }
        if (length < OWNED_FRAME_BYTES && chunk.length - at >= length) {
          // The whole small body is in this chunk: hand over a view, no copy.
          this.onFrame(chunk.subarray(at, at + length), "borrowed")
          at += length
          continue
        }
        if (length >= OWNED_FRAME_BYTES) {
          this.body = this.ownedBody(length)
          this.probing = this.direct !== undefined
          this.nextProbe = FIRST_PROBE
          this.hole = undefined
        } else {
          if (this.small.length < length) this.small = new Uint8Array(OWNED_FRAME_BYTES)
          this.body = this.small
        }
        this.bodyLength = length
        this.bodyFill = 0
      }
      // While its tensor is looked for, a little at a time: what lands in the body before the
      // tensor is found is copied again into the tensor's memory.
      const n = Math.min(this.bodyLength - this.bodyFill, chunk.length - at, this.probing ? this.nextProbe - this.bodyFill : Infinity)
      if (this.hole === undefined) this.body.set(chunk.subarray(at, at + n), this.bodyFill)
      else this.fill(chunk.subarray(at, at + n))
      this.bodyFill += n
      at += n
      if (this.probing && (this.bodyFill === this.nextProbe || this.bodyFill === this.bodyLength)) this.probe()
      if (this.bodyFill === this.bodyLength) {
        const body = this.body
        this.body = undefined
        this.hole = undefined
        this.probing = false
        if (body === this.small) this.onFrame(body.subarray(0, this.bodyLength), "borrowed")
        else {
          this.handedOver.add(body.buffer)
          this.onFrame(body, "owned")
        }
      }
    }
    return undefined
  }

  /** Looks for the owned body's tensor in what has come of it; once found, where its elements go. */
  private probe(): void {
    const body = this.body!, found = locateTensor(body.subarray(0, this.bodyFill))
    if (found === "more" && this.bodyFill < PROBE_LIMIT && this.bodyFill < this.bodyLength) return void (this.nextProbe *= 2)
    this.probing = false
    if (found === "more" || found === "none" || found.at + found.bytes > this.bodyLength) return
    const into = this.direct!(body, found)
    if (into === undefined || into.byteLength !== found.bytes) return
    const end = found.at + found.bytes
    if (this.bodyFill > found.at) into.set(body.subarray(found.at, Math.min(this.bodyFill, end)))
    this.hole = { start: found.at, end, into }
  }

  /** Writes `bytes`, the body's from bodyFill on, around the hole: its part in the hole into the tensor's memory. */
  private fill(bytes: Uint8Array): void {
    const h = this.hole!, body = this.body!, from = this.bodyFill, to = from + bytes.byteLength
    if (to <= h.start || from >= h.end) return void body.set(bytes, from)
    const a = Math.max(from, h.start), z = Math.min(to, h.end)
    if (a > from) body.set(bytes.subarray(0, a - from), from)
    h.into.set(bytes.subarray(a - from, z - from), a - h.start)
    if (z < to) body.set(bytes.subarray(z - from), z)
  }

  /** Bytes of an unfinished frame held now (0 between frames). */
  get pendingBytes(): number {
    return this.body === undefined ? this.headerFill : 4 + this.bodyFill
  }
}

/** Where frames go: Bun's Socket fits (write returns how many bytes it took). */
export interface ByteSink {
  write(data: Uint8Array): number
}

/** Parts shorter than this are copied together with their neighbours into one write. */
const COALESCE_BYTES = 64 * 1024

/**
 * Writes frames to a sink that may accept fewer bytes than offered: the rest is queued and
 * written by `drain()`, which the socket's drain handler must call. Small parts (and the
 * length prefix) are copied into one buffer per run; large parts are written as they are,
 * so they must stay unchanged until written (`pendingBytes === 0`).
 */
export class FrameWriter {
  private queue: Uint8Array[] = []
  private queueHead = 0
  private queued = 0

  constructor(private readonly sink: ByteSink) {}

  /**
   * Writes one frame whose body is `parts` back to back (one part or several, e.g. from
   * encodeMessageParts). Returns true when all of it went to the sink now, false when some
   * is queued. Throws RangeError for a body of 2^32 bytes or more (the prefix is a u32).
   */
  write(parts: Uint8Array | ReadonlyArray<Uint8Array>): boolean {
    const list: ReadonlyArray<Uint8Array> = parts instanceof Uint8Array ? [parts] : parts
    let length = 0
    for (const p of list) length += p.byteLength
    if (length > 0xffff_ffff) throw new RangeError(`frame body of ${length} bytes does not fit a u32 length prefix`)
    let run: Uint8Array[] = [], runBytes = 4
    const flushRun = (prefix: boolean) => {
      const out = new Uint8Array(runBytes)
      let at = 0
      if (prefix) { new DataView(out.buffer).setUint32(0, length); at = 4 }
      for (const p of run) { out.set(p, at); at += p.byteLength }
      this.send(out)
      run = []
      runBytes = 0
    }
    let prefixPending = true
    for (const p of list) {
      if (p.byteLength >= COALESCE_BYTES) {
        if (prefixPending || run.length > 0) flushRun(prefixPending)
        prefixPending = false
        this.send(p)
      } else {
        run.push(p)
        runBytes += p.byteLength
      }
    }
    if (prefixPending || run.length > 0) flushRun(prefixPending)
    return this.queued === 0
  }

  /** Writes what is queued, as far as the sink takes it; true when nothing is left. */
  drain(): boolean {
    while (this.queueHead < this.queue.length) {
      const next = this.queue[this.queueHead]!
      const n = Math.max(this.sink.write(next), 0)
      this.queued -= n
      if (n < next.byteLength) {
        this.queue[this.queueHead] = next.subarray(n)
        return false
      }
      this.queueHead++
    }
    this.queue = []
    this.queueHead = 0
    return true
  }

  /** Bytes accepted by write() but not yet by the sink. */
  get pendingBytes(): number {
    return this.queued
  }

  private send(bytes: Uint8Array): void {
    if (bytes.byteLength === 0) return
    if (this.queued === 0) {
      const n = Math.max(this.sink.write(bytes), 0)
      if (n === bytes.byteLength) return
      bytes = bytes.subarray(n)
    }
    this.queue.push(bytes)
    this.queued += bytes.byteLength
  }
}
