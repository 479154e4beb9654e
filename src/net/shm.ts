/**
 * Shared-memory segments between the controller and a worker on the same host: a fetched tensor
 * is copied once, from the tensor's memory into a segment both processes keep mapped, and the
 * socket carries only the control messages (docs/protocol.md, section 5a).
 *
 * The controller makes each segment: a memfd (no name in /dev/shm, so no other process can open
 * it by name; it is freed once both ends have unmapped it), sized, mapped and faulted in once,
 * with 16 random bytes in its header. It names it to the worker over the authenticated link as
 * `/proc/<controller pid>/fd/<fd>` (SharedSegment); only a process allowed to read the
 * controller's memory (its user, or root) can open that path. The worker takes the name and size
 * as untrusted input: the path must have that form and lead to a memfd of this module's name, of
 * exactly the size given, holding the check bytes (which also proves both ends share the host);
 * else it answers SegmentMapped with the problem and the link goes on over the socket. The
 * controller closes its descriptor once answered, so the path opens nothing from then on.
 *
 * Segments are kept per link and reused: the page faults of fresh memory (on the dev VM a copy
 * into fresh memory ran at 0.05x of one into touched memory) are paid once per segment, not per
 * fetch. A fetch whose tensor does not fit goes by the socket and makes the controller offer a
 * larger segment for the next one. The worker writes into its current segment only when it is
 * free, announcing the tensor first and then its progress in the header, so the controller copies
 * each chunk out while the next is written, then frees it (SegmentFree).
 */
import type { Pointer } from "bun:ffi"
import { randomBytes } from "node:crypto"
import { closeSync, constants, fstatSync, ftruncateSync, openSync, readlinkSync } from "node:fs"
import { Data } from "effect"
import { ITEM_SIZE, HostTensor, type DType } from "../protocol/values.ts"

/** A segment message the receiver refused: the reason, for SegmentMapped or the fetch's failure. */
export class SegmentRefused extends Data.TaggedError("SegmentRefused")<{ readonly message: string }> {}

/** The memfd name every segment has; the worker refuses a descriptor that is not one. */
export const SEGMENT_NAME = "monarch-segment"
/** Bytes at a fresh segment's CHECK_AT that the worker must find there. */
export const CHECK_BYTES = 16
/**
 * A segment's header: at 0 an i32, the bytes of the tensor written so far in the fetch now in
 * it (-1: the worker failed to write it), which the controller copies out behind; the check
 * bytes at CHECK_AT; the tensor from HEADER_BYTES.
 */
export const HEADER_BYTES = 64
const CHECK_AT = 16
/** The worker writes a tensor in chunks of this, the controller copying each out as it lands. */
const CHUNK_BYTES = 4 << 20
/** A fetch whose writer has written no byte in this long (its process alive, but stuck) is refused. */
const STALL_MS = 10_000
/** The smallest segment offered: a smaller tensor still fits the first one made. */
export const MIN_SEGMENT_BYTES = 1 << 20
/** The largest segment a worker maps (the largest frame the link carries, DEFAULT_MAX_FRAME_BYTES). */
export const MAX_SEGMENT_BYTES = 1024 ** 3
/** Tensors smaller than this go by the socket unless the controller says otherwise (a frame costs less than the control messages). */
export const DEFAULT_SHARED_MIN_BYTES = 256 * 1024

const PROT_READ = 1, PROT_WRITE = 2, MAP_SHARED = 1, MAP_POPULATE = 0x8000, MFD_CLOEXEC = 1

/**
 * bun:ffi, loaded on the first segment rather than imported: the controller's modules import no
 * native code (a controller on a host without shared memory never loads it).
 */
let ffi: typeof import("bun:ffi") | undefined
const native = (): typeof import("bun:ffi") => (ffi ??= require("bun:ffi") as typeof import("bun:ffi"))

let libc: ReturnType<typeof openLibc> | undefined
const openLibc = () => { const { dlopen, FFIType } = native(); return dlopen("libc.so.6", {
  memfd_create: { args: [FFIType.cstring, FFIType.u32], returns: FFIType.i32 },
  mmap: { args: [FFIType.ptr, FFIType.u64, FFIType.i32, FFIType.i32, FFIType.i32, FFIType.i64], returns: FFIType.ptr },
  munmap: { args: [FFIType.ptr, FFIType.u64], returns: FFIType.i32 },
}).symbols }
const c = () => (libc ??= openLibc())

/** A mapping of `bytes` bytes of a segment, read and written through `view` until unmapped. */
export class Mapping {
  private at: Pointer | null
  readonly view: Uint8Array<ArrayBuffer>

  private constructor(at: Pointer, readonly bytes: number) {
    this.at = at
    this.view = new Uint8Array(native().toArrayBuffer(at, 0, bytes))
  }

  /** Maps `fd` shared, its pages faulted in now (MAP_POPULATE) so later copies pay none. */
  static of(fd: number, bytes: number): Mapping {
    const at = c().mmap(null, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0) as Pointer | null
    // MAP_FAILED is (void*)-1: bun:ffi reads it as 2^64 - 1, well past any user address.
    if (at === null || (at as number) >= 2 ** 63) throw new SegmentRefused({ message: `mmap of ${bytes} bytes failed` })
    return new Mapping(at, bytes)
  }

  get mapped(): boolean {
    return this.at !== null
  }

  /** Unmaps it; `view` must not be touched after (nothing outside this module holds it). */
  unmap(): void {
    if (this.at === null) return
    c().munmap(this.at, this.bytes)
    this.at = null
  }
}

/** What the controller sends to offer a segment (the fields of SharedSegment). */
export interface SegmentOffer {
  readonly segment: number
  readonly path: string
  readonly bytes: number
  readonly check: Uint8Array
  readonly minBytes: number
}

let lastSegmentId = 0
/** A fresh segment id: unique in this process, so one answer (SegmentMapped) names one segment of any kind. */
export const nextSegmentId = (): number => ++lastSegmentId

/** A fresh memfd of `bytes`, sized and mapped (faulted in); throws SegmentRefused when this host cannot (the descriptor closed). */
export const makeMemfd = (bytes: number): { readonly fd: number; readonly map: Mapping } => {
  const fd = c().memfd_create(Buffer.from(`${SEGMENT_NAME}\0`), MFD_CLOEXEC)
  if (fd < 0) throw new SegmentRefused({ message: "memfd_create failed" })
  try {
    ftruncateSync(fd, bytes)
    return { fd, map: Mapping.of(fd, bytes) }
  } catch (e) {
    closeSync(fd)
    throw e
  }
}

/** Fresh random check bytes, written where the worker looks for them; returned for the offer. */
export const writeCheck = (map: Mapping): Uint8Array => {
  const check = new Uint8Array(randomBytes(CHECK_BYTES))
  map.view.set(check, CHECK_AT)
  return check
}

/** The segment for a tensor of `bytes`: it and the header rounded up to whole MiB, so a segment is at most one copy of the tensor and a MiB. */
export const segmentSizeFor = (bytes: number): number => Math.max(MIN_SEGMENT_BYTES, Math.ceil((bytes + HEADER_BYTES) / MIN_SEGMENT_BYTES) * MIN_SEGMENT_BYTES)

/** A segment's written-so-far counter (the header's first i32). */
const progressOf = (map: Mapping): Int32Array => new Int32Array(map.view.buffer, 0, 1)

/** For waits of a fraction of a millisecond while the writer is ahead of nothing. */
const nap = new Int32Array(new SharedArrayBuffer(4))

/**
 * The controller's segments for one link: offers (a memfd made and mapped, its descriptor open
 * until the worker answers), the current segment, and the copy out of a FetchShared.
 */
export class ControllerSegments {
  private offered: { readonly id: number; readonly fd: number; readonly map: Mapping } | undefined
  private readonly maps = new Map<number, Mapping>()
  private current: number | undefined
  /** Set once the worker refused an offer (another host, say): no more offers on this link. */
  private refused = false
  /** Tensors and bytes that came through segments (tests and the bench read them). */
  readonly counts = { fetches: 0, bytes: 0, offers: 0 }

  /** `minBytes`: the smallest tensor worth a segment; undefined: this link gets no offers (another host's, or shared memory is off). */
  constructor(readonly minBytes: number | undefined) {}

  /** A fresh offer big enough for `bytes`, or undefined when none is due (off, one is out, the current fits, or the worker refused). */
  offerFor(bytes: number): SegmentOffer | undefined {
    const minBytes = this.minBytes
    if (minBytes === undefined || this.refused || this.offered !== undefined || bytes < minBytes || bytes > MAX_SEGMENT_BYTES) return undefined
    if (this.current !== undefined && this.maps.get(this.current)!.bytes >= bytes) return undefined
    const size = segmentSizeFor(bytes)
    let made: { readonly fd: number; readonly map: Mapping }
    try {
      made = makeMemfd(size)
    } catch {
      return void (this.refused = true)
    }
    const { fd, map } = made
    const check = writeCheck(map)
    const id = nextSegmentId()
    this.offered = { id, fd, map }
    this.counts.offers++
    return { segment: id, path: `/proc/${process.pid}/fd/${fd}`, bytes: size, check, minBytes }
  }

  /** The worker's answer to an offer: mapped (it becomes the current segment) or refused with why. */
  mapped(id: number, problem: string | null): void {
    const o = this.offered
    if (o === undefined || o.id !== id) throw new SegmentRefused({ message: `SegmentMapped for segment ${id}, which was not offered` })
    this.offered = undefined
    closeSync(o.fd)
    if (problem !== null) {
      o.map.unmap()
      this.refused = true
      return
    }
    // The worker writes only into its newest segment, and any FetchShared of an older one came
    // before this answer on the same socket: the older is done with.
    if (this.current !== undefined) {
      this.maps.get(this.current)!.unmap()
      this.maps.delete(this.current)
    }
    this.current = id
    this.maps.set(id, o.map)
  }

  /**
   * The tensor a FetchShared describes, copied out of its segment into memory of its own (so the
   * segment can be freed at once) as the worker writes it, chunk by chunk behind its counter;
   * undefined when the worker failed to write it (it reports that itself) or its process is gone
   * (`alive` says; the link's close reports that). Refused when the segment is unknown, the
   * tensor does not fit, the counter passes the tensor, or nothing moves for STALL_MS.
   */
  take(segment: number, dtype: DType, shape: ReadonlyArray<number>, alive: () => boolean = () => true): HostTensor | undefined {
    const map = this.maps.get(segment)
    if (map === undefined || !map.mapped) throw new SegmentRefused({ message: `FetchShared names segment ${segment}, which this link has not mapped` })
    const bytes = shape.reduce((a, b) => a * b, 1) * ITEM_SIZE[dtype]
    if (!Number.isSafeInteger(bytes) || bytes > map.bytes - HEADER_BYTES)
      throw new SegmentRefused({ message: `FetchShared of a ${dtype} tensor [${shape}] (${bytes} bytes) does not fit segment ${segment} (${map.bytes} bytes)` })
    // Into memory of the process's allocator: fresh pages cost faults here (on the dev VM a copy
    // into them ran at 0.05x-0.4x of one into touched memory), paid by this copy alone.
    const data = Bun.allocUnsafe(bytes), progress = progressOf(map)
    let done = 0, moved = performance.now(), checked = moved
    while (done < bytes) {
      const written = Atomics.load(progress, 0)
      if (written < 0) return undefined
      if (written > bytes) throw new SegmentRefused({ message: `segment ${segment} says ${written} bytes written of a ${bytes}-byte tensor` })
      if (written > done) {
        data.set(map.view.subarray(HEADER_BYTES + done, HEADER_BYTES + written), done)
        done = written
        moved = performance.now()
        continue
      }
      const now = performance.now()
      if (now - checked > 100) {
        if (!alive()) return undefined
        checked = now
      }
      if (now - moved > STALL_MS) throw new SegmentRefused({ message: `segment ${segment}: the worker wrote nothing of its ${bytes}-byte tensor for ${STALL_MS} ms (${done} bytes in)` })
      Atomics.wait(nap, 0, 0, 0.05)
    }
    this.counts.fetches++
    this.counts.bytes += bytes
    return new HostTensor(dtype, shape, data)
  }

  /** The size of the segment the worker writes into now (0: none yet). */
  get currentBytes(): number {
    return this.current === undefined ? 0 : this.maps.get(this.current)!.bytes
  }

  /** Bytes of segment memory mapped now (an offer's included). */
  get mappedBytes(): number {
    let n = this.offered?.map.bytes ?? 0
    for (const m of this.maps.values()) n += m.bytes
    return n
  }

  /** Unmaps everything (the link closed). */
  close(): void {
    if (this.offered !== undefined) {
      closeSync(this.offered.fd)
      this.offered.map.unmap()
      this.offered = undefined
    }
    for (const m of this.maps.values()) m.unmap()
    this.maps.clear()
    this.current = undefined
    this.refused = true
  }
}

/** The memfd's link text as /proc shows it: `/memfd:<name> (deleted)`. */
const MEMFD_LINK = `/memfd:${SEGMENT_NAME} (deleted)`
const PATH = /^\/proc\/([1-9][0-9]{0,9})\/fd\/([0-9]{1,9})$/

/**
 * Opens and maps an offered segment after checking everything the offer claims; throws
 * SegmentRefused saying what did not hold.
 */
export const openOffer = (o: SegmentOffer): Mapping => {
  if (!PATH.test(o.path)) throw new SegmentRefused({ message: `segment path ${JSON.stringify(o.path.slice(0, 80))} is not /proc/<pid>/fd/<fd>` })
  if (!Number.isSafeInteger(o.bytes) || o.bytes < HEADER_BYTES || o.bytes > MAX_SEGMENT_BYTES)
    throw new SegmentRefused({ message: `segment size ${o.bytes} is outside ${HEADER_BYTES}..${MAX_SEGMENT_BYTES} bytes` })
  if (o.check.byteLength !== CHECK_BYTES) throw new SegmentRefused({ message: `segment check of ${o.check.byteLength} bytes, expected ${CHECK_BYTES}` })
  let link: string
  try {
    link = readlinkSync(o.path)
  } catch (e) {
    throw new SegmentRefused({ message: `segment ${o.path} cannot be read (${(e as NodeJS.ErrnoException).code ?? (e as Error).message}): not on this host, or not this user's` })
  }
  if (link !== MEMFD_LINK) throw new SegmentRefused({ message: `segment ${o.path} is ${JSON.stringify(link.slice(0, 80))}, not a ${SEGMENT_NAME} memfd` })
  let fd: number
  try {
    fd = openSync(o.path, constants.O_RDWR)
  } catch (e) {
    throw new SegmentRefused({ message: `segment ${o.path} cannot be opened (${(e as NodeJS.ErrnoException).code ?? (e as Error).message})` })
  }
  try {
    const st = fstatSync(fd)
    if (!st.isFile() || st.size !== o.bytes) throw new SegmentRefused({ message: `segment ${o.path} holds ${st.size} bytes, not the ${o.bytes} offered` })
    const map = Mapping.of(fd, o.bytes)
    if (!map.view.subarray(CHECK_AT, CHECK_AT + CHECK_BYTES).every((b, i) => b === o.check[i])) {
      map.unmap()
      throw new SegmentRefused({ message: `segment ${o.path} does not hold the offer's check bytes: another process's descriptor` })
    }
    return map
  } finally {
    closeSync(fd)
  }
}

/**
 * The worker's segments from its controller: the newest one, written into for one fetch at a
 * time (busy until SegmentFree), and older ones kept only until freed. A fetch's bytes in a
 * segment count against the memory limit while it is busy, as a host copy in flight does; an
 * idle segment does not (one per link, at most the largest tensor fetched and a MiB).
 */
export class WorkerSegments {
  private readonly maps = new Map<number, { readonly map: Mapping; busy: (() => void) | undefined }>()
  private current: number | undefined
  private minBytes = Infinity
  private closed = false

  /** Maps an offer (it becomes the current segment); throws SegmentRefused with why not. */
  attach(o: SegmentOffer): void {
    if (this.closed) throw new SegmentRefused({ message: "the link is closed" })
    if (this.maps.has(o.segment)) throw new SegmentRefused({ message: `segment ${o.segment} is already mapped` })
    const map = openOffer(o)
    const old = this.current
    this.maps.set(o.segment, { map, busy: undefined })
    this.current = o.segment
    this.minBytes = o.minBytes
    if (old !== undefined && this.maps.get(old)!.busy === undefined) this.drop(old)
  }

  /**
   * The current segment's memory for a tensor of `bytes`, now busy, with `reserve(bytes)` (which
   * throws past the memory limit, taking nothing) held until freed, and `written(n)` to tell the
   * controller, as it copies out behind, that the first n bytes are there (-1: the write failed);
   * undefined when it is busy, too small, or the tensor too small to be worth it.
   */
  take(bytes: number, reserve: (bytes: number) => () => void): { readonly segment: number; readonly view: Uint8Array<ArrayBuffer>; readonly written: (n: number) => void } | undefined {
    const s = this.current === undefined ? undefined : this.maps.get(this.current)
    if (s === undefined || s.busy !== undefined || bytes < this.minBytes || bytes > s.map.bytes - HEADER_BYTES) return undefined
    s.busy = reserve(bytes)
    const progress = progressOf(s.map)
    Atomics.store(progress, 0, 0)
    return { segment: this.current!, view: s.map.view.subarray(HEADER_BYTES, HEADER_BYTES + bytes), written: (n) => void Atomics.store(progress, 0, n) }
  }

  /** Copies `from` into a taken segment's `view` chunk by chunk, each announced as it lands. */
  static write(slot: { readonly view: Uint8Array; readonly written: (n: number) => void }, from: Uint8Array): void {
    for (let at = 0; at < from.byteLength; ) {
      const end = Math.min(at + CHUNK_BYTES, from.byteLength)
      slot.view.set(from.subarray(at, end), at)
      slot.written((at = end))
    }
  }

  /** Gives a segment back after the controller copied it out: reused if current, else unmapped. */
  free(segment: number): void {
    const s = this.maps.get(segment)
    if (s === undefined || s.busy === undefined) throw new SegmentRefused({ message: `SegmentFree for segment ${segment}, which is not in use` })
    this.untake(segment)
    if (segment !== this.current) this.drop(segment)
  }

  /** Puts a taken segment back (freed, or the copy into it failed), its bytes no longer counted. */
  untake(segment: number): void {
    const s = this.maps.get(segment)
    s?.busy?.()
    if (s !== undefined) s.busy = undefined
  }

  /** Bytes of segment memory mapped now. */
  get mappedBytes(): number {
    let n = 0
    for (const s of this.maps.values()) n += s.map.bytes
    return n
  }

  private drop(segment: number): void {
    this.untake(segment)
    this.maps.get(segment)!.map.unmap()
    this.maps.delete(segment)
  }

  close(): void {
    this.closed = true
    for (const id of [...this.maps.keys()]) this.drop(id)
    this.current = undefined
  }
}
