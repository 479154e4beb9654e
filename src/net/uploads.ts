/**
 * Uploads through shared memory: host tensors the controller sends to workers on its host move
 * through one upload segment that every such worker maps, so a tensor given to an op costs the
 * controller one copy (into the segment, whatever the number of ranks it goes to) and each
 * worker one copy (out of the segment, into the tensor it makes); the socket carries the
 * command, in which a SharedTensor stands for the HostTensor (docs/protocol.md, section 5a).
 *
 * The segment is a memfd made, sized and checked as a fetch's (src/net/shm.ts: its path, name,
 * size and check bytes are the worker's checks), offered with UploadSegment. Unlike a fetch's
 * segment, it is shared by the links of one listener: its descriptor stays open until every link
 * offered it has answered (so the path opens nothing after), and a worker that connects later (a
 * restart) gets a fresh segment, offered to every link, with the first upload for it. The controller places
 * each tensor in a free region of it; the region is held by the ranks its command went to until
 * each has said UploadTaken (the worker copied it, or the command failed before it could), or its
 * link closed. A tensor that finds no room goes by the socket; one larger than half the segment
 * makes a new segment, twice its size, for the next: the older is not placed in again and is
 * unmapped once its last region is let go (the worker unmaps its older one when the newer is
 * offered, since no command after the offer names it).
 */
import { closeSync } from "node:fs"
import type { UploadSegment, WorkerMessage } from "../protocol/messages.ts"
import { ITEM_SIZE, SharedTensor, type DType } from "../protocol/values.ts"
import { HEADER_BYTES, makeMemfd, Mapping, MAX_SEGMENT_BYTES, nextSegmentId, openOffer, segmentSizeFor, SegmentRefused, writeCheck } from "./shm.ts"

/** Regions start at multiples of this (a cache line), so copies into and out of them are aligned. */
const ALIGN = 64

/** The most upload segment memory a controller keeps mapped, across its current and retired segments. */
export const MAX_UPLOAD_BYTES = 2 * MAX_SEGMENT_BYTES

interface Region {
  readonly bytes: number
  readonly holders: Set<number>
}

/** One upload segment on the controller: its memory, who mapped it, its regions and free runs. */
class Segment {
  /** The descriptor, open until every link offered this segment has answered. */
  fd: number | undefined
  /** Ranks offered it that have not answered yet. */
  readonly asked = new Set<number>()
  readonly mapped = new Set<number>()
  readonly regions = new Map<number, Region>()
  /** Free runs [start, end) in offset order. */
  free: Array<[number, number]>

  constructor(readonly id: number, fd: number, readonly map: Mapping, readonly check: Uint8Array) {
    this.fd = fd
    this.free = [[HEADER_BYTES, map.bytes]]
  }

  get bytes(): number {
    return this.map.bytes
  }

  /** The first free run that takes `bytes` (aligned), taken; undefined when none does. */
  allocate(bytes: number): number | undefined {
    const need = Math.max(ALIGN, Math.ceil(bytes / ALIGN) * ALIGN)
    const i = this.free.findIndex(([s, e]) => e - s >= need)
    if (i < 0) return undefined
    const [start, end] = this.free[i]!
    if (end - start === need) this.free.splice(i, 1)
    else this.free[i] = [start + need, end]
    return start
  }

  /** Gives a region's run back, merged with its free neighbours. */
  release(offset: number, bytes: number): void {
    const need = Math.max(ALIGN, Math.ceil(bytes / ALIGN) * ALIGN)
    let run: [number, number] = [offset, offset + need]
    const at = this.free.findIndex(([s]) => s > offset)
    const i = at < 0 ? this.free.length : at
    this.free.splice(i, 0, run)
    const next = this.free[i + 1]
    if (next !== undefined && next[0] === run[1]) { run[1] = next[1]; this.free.splice(i + 1, 1) }
    const prev = this.free[i - 1]
    if (prev !== undefined && prev[1] === run[0]) { prev[1] = run[1]; this.free.splice(i, 1); run = prev }
  }

  offer(): UploadSegment {
    return { _tag: "UploadSegment", segment: this.id, path: `/proc/${process.pid}/fd/${this.fd}`, bytes: this.bytes, check: this.check }
  }

  /** An answer (or a link gone): once no offer waits, the descriptor is closed. */
  answered(rank: number): void {
    this.asked.delete(rank)
    if (this.asked.size === 0) this.closeFd()
  }

  closeFd(): void {
    if (this.fd !== undefined) closeSync(this.fd)
    this.fd = undefined
  }

  close(): void {
    this.closeFd()
    this.map.unmap()
  }
}

/**
 * The controller's upload segments, shared by the links of one listener to workers of this host:
 * the current segment (placed in), retired ones (kept until their regions are let go), and each
 * link's way to send it an offer.
 */
export class ControllerUploads {
  private current: Segment | undefined
  private readonly retired = new Set<Segment>()
  private readonly links = new Map<number, (msg: WorkerMessage) => boolean>()
  /** Ranks whose worker refused an offer: none of their uploads go by a segment until they reconnect. */
  private readonly refused = new Set<number>()
  private failed = false
  /** Tensors and bytes placed in segments, and offers made (tests and the bench read them). */
  readonly counts = { uploads: 0, bytes: 0, offers: 0 }

  /** `minBytes`: the smallest tensor worth a segment (smaller ones go inline, in the command's frame). */
  constructor(readonly minBytes: number) {}

  /** A link to a worker of this host: it is offered the current segment, if there is one. */
  attach(rank: number, send: (msg: WorkerMessage) => boolean): void {
    this.links.set(rank, send)
    this.refused.delete(rank)
    const c = this.current
    if (c !== undefined && c.fd !== undefined && send(c.offer())) {
      c.asked.add(rank)
      this.counts.offers++
    }
  }

  /** A link closed: its holds on every region are let go. */
  detach(rank: number): void {
    this.links.delete(rank)
    this.refused.delete(rank)
    for (const s of this.segments()) {
      s.mapped.delete(rank)
      if (s.asked.has(rank)) s.answered(rank)
      for (const [offset, r] of s.regions) if (r.holders.delete(rank) && r.holders.size === 0) this.letGo(s, offset)
    }
  }

  /** A worker's SegmentMapped: false when `segment` is not an upload segment (a fetch's answer, then). */
  mapped(rank: number, segment: number, problem: string | null): boolean {
    const s = this.segments().find((x) => x.id === segment)
    if (s === undefined) return false
    s.answered(rank)
    if (problem !== null) this.refused.add(rank)
    else if (s === this.current) s.mapped.add(rank)
    return true
  }

  /**
   * Places a tensor of `dtype` and `shape` for `ranks`, written by `fill` into its region: the
   * SharedTensor that stands for it, held by each of `ranks`; undefined when it goes inline (too
   * small, a rank without the current segment mapped, no room now). One larger than half the
   * current segment (or with none yet) first calls `before` (the caller sends what it queued, so
   * no command names a segment after the offer that retires it) and offers a segment that fits
   * two such.
   */
  place(ranks: ReadonlyArray<number>, dtype: DType, shape: ReadonlyArray<number>, fill: (into: Uint8Array) => void, before: () => void): SharedTensor | undefined {
    const bytes = shape.reduce((a, b) => a * b, ITEM_SIZE[dtype])
    if (this.failed || bytes < this.minBytes || bytes === 0 || bytes > MAX_SEGMENT_BYTES - HEADER_BYTES || ranks.length === 0) return undefined
    if (!ranks.every((r) => this.links.has(r) && !this.refused.has(r))) return undefined
    const c = this.current
    // None yet, too small, or a rank connected since it was offered (its descriptor is closed): a new one.
    if (c === undefined || 2 * bytes > c.bytes - HEADER_BYTES || (c.fd === undefined && ranks.some((r) => !c.mapped.has(r)))) {
      before()
      this.grow(Math.max(bytes, c === undefined ? 0 : Math.floor((c.bytes - HEADER_BYTES) / 2)))
      return undefined
    }
    if (!ranks.every((r) => c.mapped.has(r))) return undefined
    const offset = c.allocate(bytes)
    if (offset === undefined) return undefined
    fill(c.map.view.subarray(offset, offset + bytes))
    c.regions.set(offset, { bytes, holders: new Set(ranks) })
    this.counts.uploads++
    this.counts.bytes += bytes
    return new SharedTensor(c.id, offset, dtype, shape)
  }

  /** A worker's UploadTaken: its holds on those regions let go. Throws SegmentRefused for a region it does not hold. */
  taken(rank: number, segment: number, offsets: ReadonlyArray<number>): void {
    const s = this.segments().find((x) => x.id === segment)
    for (const offset of offsets) {
      const r = s?.regions.get(offset)
      if (s === undefined || r === undefined || !r.holders.delete(rank)) throw new SegmentRefused({ message: `UploadTaken for offset ${offset} of upload segment ${segment}, which rank ${rank} does not hold` })
      if (r.holders.size === 0) this.letGo(s, offset)
    }
  }

  /** Bytes of regions held by some worker now. */
  get heldBytes(): number {
    let n = 0
    for (const s of this.segments()) for (const r of s.regions.values()) n += r.bytes
    return n
  }

  /** Bytes of upload segment memory mapped now. */
  get mappedBytes(): number {
    return this.segments().reduce((n, s) => n + s.bytes, 0)
  }

  /** The current segment's id (undefined before the first): what new SharedTensors name. */
  get currentSegment(): number | undefined {
    return this.current?.id
  }

  /** Unmaps everything (the listener closed). */
  close(): void {
    for (const s of this.segments()) s.close()
    this.current = undefined
    this.retired.clear()
    this.failed = true
  }

  private segments(): Segment[] {
    return this.current === undefined ? [...this.retired] : [this.current, ...this.retired]
  }

  /** A new current segment for two tensors of `bytes` (at most the largest segment), offered to every link; the older retired. */
  private grow(bytes: number): void {
    const size = Math.min(segmentSizeFor(2 * bytes), MAX_SEGMENT_BYTES)
    const held = this.retired.size === 0 ? 0 : [...this.retired].reduce((n, s) => n + s.bytes, 0)
    if (held + size + (this.current?.bytes ?? 0) > MAX_UPLOAD_BYTES) return
    let made: { fd: number; map: Mapping } | undefined
    try {
      made = makeMemfd(size)
    } catch {
      made = undefined
    }
    // No shared memory here (no memfd, no mmap): every upload goes by the socket.
    if (made === undefined) return void (this.failed = true)
    const check = writeCheck(made.map)
    const old = this.current
    if (old !== undefined) {
      old.closeFd()
      if (old.regions.size === 0) old.close()
      else this.retired.add(old)
    }
    const s = new Segment(nextSegmentId(), made.fd, made.map, check)
    this.current = s
    for (const [rank, send] of this.links) if (!this.refused.has(rank) && send(s.offer())) {
      s.asked.add(rank)
      this.counts.offers++
    }
    if (s.asked.size === 0) s.closeFd()
  }

  /** A region no rank holds any more: its run is free again; a retired segment with none left is unmapped. */
  private letGo(s: Segment, offset: number): void {
    const r = s.regions.get(offset)!
    s.regions.delete(offset)
    if (s !== this.current && s.regions.size === 0) {
      s.close()
      this.retired.delete(s)
      return
    }
    s.release(offset, r.bytes)
  }
}

/**
 * A worker's view of its controller's upload segment: the newest one mapped, read by the
 * SharedTensors of commands, each told back once (UploadTaken) when copied out or let go.
 */
export class WorkerUploads {
  private readonly maps = new Map<number, Mapping>()
  private readonly told = new WeakSet<SharedTensor>()
  private closed = false

  constructor(private readonly send: (msg: { readonly _tag: "UploadTaken"; readonly segment: number; readonly offsets: ReadonlyArray<number> }) => void) {}

  /** Maps an offer, unmapping any older one first (no later command names it); throws SegmentRefused with why not. */
  attach(o: Omit<UploadSegment, "_tag">): void {
    for (const m of this.maps.values()) m.unmap()
    this.maps.clear()
    if (this.closed) throw new SegmentRefused({ message: "the link is closed" })
    this.maps.set(o.segment, openOffer({ ...o, minBytes: 0 }))
  }

  /** `t`'s bytes in its segment, a view valid until told; throws SegmentRefused when it is not mapped or `t` does not lie within it. */
  bytesOf(t: SharedTensor): Uint8Array {
    const map = this.maps.get(t.segment)
    const bytes = t.shape.reduce((a, b) => a * b, ITEM_SIZE[t.dtype])
    if (map === undefined || !map.mapped) throw new SegmentRefused({ message: `a SharedTensor names upload segment ${t.segment}, which this worker has not mapped` })
    if (t.offset < HEADER_BYTES || !Number.isSafeInteger(bytes) || t.offset + bytes > map.bytes)
      throw new SegmentRefused({ message: `a SharedTensor of ${bytes} bytes at offset ${t.offset} does not lie within upload segment ${t.segment} (${map.bytes} bytes, tensors from ${HEADER_BYTES})` })
    return map.view.subarray(t.offset, t.offset + bytes)
  }

  /** Tells the controller that `t`'s region is no longer needed here (once per SharedTensor). */
  done(t: SharedTensor): void {
    if (this.told.has(t)) return
    this.told.add(t)
    this.send({ _tag: "UploadTaken", segment: t.segment, offsets: [t.offset] })
  }

  /** Every SharedTensor in an argument tree not yet told, told: a command that stopped before copying them. */
  letGo(tree: unknown): void {
    if (tree instanceof SharedTensor) return this.done(tree)
    if (Array.isArray(tree)) for (const v of tree) this.letGo(v)
    else if (tree !== null && typeof tree === "object" && Object.getPrototypeOf(tree) === Object.prototype)
      for (const key in tree) this.letGo((tree as Record<string, unknown>)[key])
  }

  close(): void {
    this.closed = true
    for (const m of this.maps.values()) m.unmap()
    this.maps.clear()
  }
}
