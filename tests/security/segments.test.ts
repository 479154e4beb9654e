// A shared-memory segment offer is untrusted input to the worker, and a FetchShared to the
// controller: an offer whose path, size, kind of file or check bytes do not hold is refused
// with a SegmentRefused saying which, nothing is left mapped, and the link goes on;
// a FetchShared naming a segment the link has not mapped, or a tensor larger than it, is refused.
import { afterEach, expect, test } from "bun:test"
import { closeSync, openSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { ControllerSegments, HEADER_BYTES, MAX_SEGMENT_BYTES, segmentSizeFor, SegmentRefused, WorkerSegments, type SegmentOffer } from "../../src/net/shm.ts"

const opened: Array<ControllerSegments | WorkerSegments> = []
afterEach(() => {
  for (const s of opened.splice(0)) s.close()
})

/** A real offer from a controller's segments in this process (a worker of this process can open it). */
const offer = (bytes = 3 << 20): { readonly ctl: ControllerSegments; readonly o: SegmentOffer } => {
  const ctl = new ControllerSegments(0)
  opened.push(ctl)
  return { ctl, o: ctl.offerFor(bytes)! }
}

/** Attaches `o` to fresh worker segments. */
const attach = (o: SegmentOffer) => {
  const w = new WorkerSegments()
  opened.push(w)
  try {
    w.attach(o)
    return { w, error: undefined }
  } catch (e) {
    return { w, error: e }
  }
}

/** A memory guard's count: what take reserved and not yet released. */
const guard = () => {
  const held = { bytes: 0 }
  return { held, reserve: (bytes: number) => ((held.bytes += bytes), () => void (held.bytes -= bytes)) }
}

const refusal = (o: SegmentOffer): string => {
  const { w, error } = attach(o)
  expect(error).toBeInstanceOf(SegmentRefused)
  expect(w.mappedBytes).toBe(0)
  return (error as SegmentRefused).message
}

test("a genuine offer maps; a fetch's bytes in it are counted while it is busy; bytes go across", () => {
  const { ctl, o } = offer(3 << 20)
  expect(o.bytes).toBe(segmentSizeFor(3 << 20))
  expect(o.bytes).toBe(4 << 20) // the tensor and the header, rounded up to whole MiB
  const { w, error } = attach(o)
  expect(error).toBeUndefined()
  ctl.mapped(o.segment, null)
  const { held, reserve } = guard()
  const slot = w.take(5, reserve)!
  expect(held.bytes).toBe(5)
  WorkerSegments.write(slot, Uint8Array.from([1, 2, 3, 4, 5]))
  expect(w.take(5, reserve)).toBeUndefined() // busy until freed
  expect([...ctl.take(slot.segment, "u8", [5])!.data]).toEqual([1, 2, 3, 4, 5])
  w.free(slot.segment)
  expect(held.bytes).toBe(0)
  expect(w.take(o.bytes - HEADER_BYTES + 1, reserve)).toBeUndefined() // past the segment: the socket's
  const refusing = () => {
    throw new Error("over the limit")
  }
  expect(() => w.take(8, refusing)).toThrow("over the limit")
  expect(w.take(8, reserve)).toBeDefined() // a refused reservation took nothing
  w.close()
  expect(held.bytes).toBe(0)
})

test("offers whose path is not a memfd of the controller's are refused, saying why", () => {
  const { o } = offer()
  expect(refusal({ ...o, path: "/dev/shm/monarch-segment" })).toContain("is not /proc/<pid>/fd/<fd>")
  expect(refusal({ ...o, path: `/proc/${process.pid}/fd/../../self/mem` })).toContain("is not /proc/<pid>/fd/<fd>")
  expect(refusal({ ...o, path: `/proc/self/fd/0` })).toContain("is not /proc/<pid>/fd/<fd>")
  expect(refusal({ ...o, path: `/proc/${process.pid}/fd/987654` })).toContain("cannot be read")
  const file = join(tmpdir(), `segment-${process.pid}`)
  writeFileSync(file, new Uint8Array(o.bytes))
  const fd = openSync(file, "r+")
  try {
    expect(refusal({ ...o, path: `/proc/${process.pid}/fd/${fd}` })).toContain("not a monarch-segment memfd")
  } finally {
    closeSync(fd)
  }
})

test("offers whose size or check bytes do not hold are refused, saying why", () => {
  const { o } = offer()
  expect(refusal({ ...o, bytes: o.bytes + 4096 })).toContain(`not the ${o.bytes + 4096} offered`)
  expect(refusal({ ...o, bytes: o.bytes - 4096 })).toContain(`not the ${o.bytes - 4096} offered`)
  expect(refusal({ ...o, bytes: MAX_SEGMENT_BYTES + 1 })).toContain("is outside")
  expect(refusal({ ...o, bytes: 2 ** 60 })).toContain("is outside")
  expect(refusal({ ...o, check: o.check.map((b) => b ^ 1) })).toContain("does not hold the offer's check bytes")
  expect(refusal({ ...o, check: new Uint8Array(15) })).toContain("check of 15 bytes")
  // The genuine offer still maps after all that.
  expect(attach(o).error).toBeUndefined()
})

test("a FetchShared naming a segment not mapped, or a tensor past its segment, is refused", () => {
  const { ctl, o } = offer(1 << 20)
  // `gone`: were a refusal missed, the copy would wait for a writer; this one is gone at once.
  const gone = () => false
  expect(() => ctl.take(o.segment, "f32", [4], gone)).toThrow("which this link has not mapped") // offered, not yet answered
  ctl.mapped(o.segment, null)
  expect(() => ctl.take(o.segment + 1, "f32", [4], gone)).toThrow("which this link has not mapped")
  expect(() => ctl.take(o.segment, "f32", [o.bytes / 4], gone)).toThrow(`does not fit segment ${o.segment}`) // the header takes some
  expect(() => ctl.take(o.segment, "f64", [2 ** 40, 2 ** 20], gone)).toThrow("does not fit")
  expect(() => ctl.mapped(o.segment + 7, null)).toThrow("which was not offered")
  expect(ctl.take(o.segment, "u8", [0])!.data.byteLength).toBe(0)
})

test("the written-so-far counter is untrusted: past the tensor it is refused; a failed write or a gone writer gives nothing", () => {
  const { ctl, o } = offer(1 << 20)
  const { w } = attach(o)
  ctl.mapped(o.segment, null)
  const { reserve } = guard()
  let slot = w.take(8, reserve)!
  slot.written(9)
  expect(() => ctl.take(slot.segment, "u8", [8], () => false)).toThrow("says 9 bytes written of a 8-byte tensor")
  w.untake(slot.segment)
  slot = w.take(8, reserve)!
  slot.written(-1)
  expect(ctl.take(slot.segment, "u8", [8])).toBeUndefined()
  w.untake(slot.segment)
  slot = w.take(8, reserve)!
  slot.written(4) // then the writer's process is gone
  const start = performance.now()
  expect(ctl.take(slot.segment, "u8", [8], () => false)).toBeUndefined()
  expect(performance.now() - start).toBeLessThan(2000)
  expect(ctl.counts.fetches).toBe(0)
})

test("a refused offer makes no more offers on that link, and a closed one maps nothing", () => {
  const { ctl, o } = offer(1 << 20)
  ctl.mapped(o.segment, "not on this host")
  expect(ctl.mappedBytes).toBe(0)
  expect(ctl.offerFor(2 << 20)).toBeUndefined()
  const fresh = offer(1 << 20)
  const w = new WorkerSegments()
  w.close()
  expect(() => w.attach(fresh.o)).toThrow("the link is closed")
})
