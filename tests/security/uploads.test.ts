// The upload segment between one process's two ends (controller and worker halves): an offer is
// checked as a fetch segment's is (a bad check byte is refused); a SharedTensor is untrusted input
// to the worker (a segment it has not mapped, or bytes outside the segment, are refused, naming
// them); an UploadTaken for a region the rank does not hold is refused; regions are reused once
// every rank let them go, and a segment too small for a tensor makes a larger one.
import { expect, test } from "bun:test"
import { HEADER_BYTES, segmentSizeFor, SegmentRefused } from "../../src/net/shm.ts"
import { ControllerUploads, WorkerUploads } from "../../src/net/uploads.ts"
import type { UploadSegment, WorkerMessage } from "../../src/protocol/messages.ts"
import { SharedTensor } from "../../src/protocol/values.ts"

/** A controller half with two ranks attached, their offers kept, and a worker half per rank. */
const pair = () => {
  const ctl = new ControllerUploads(16)
  const offers: UploadSegment[][] = [[], []]
  const taken: Array<{ segment: number; offsets: ReadonlyArray<number> }>[] = [[], []]
  const workers = [0, 1].map((r) => new WorkerUploads((m) => void taken[r]!.push(m)))
  for (const r of [0, 1]) ctl.attach(r, (m: WorkerMessage) => (m._tag === "UploadSegment" && offers[r]!.push(m), true))
  /** Each worker maps its newest offer and answers. */
  const answer = () => {
    for (const r of [0, 1]) {
      const o = offers[r]!.at(-1)!
      workers[r]!.attach(o)
      ctl.mapped(r, o.segment, null)
    }
  }
  return { ctl, offers, taken, workers, answer }
}
const fill = (bytes: Uint8Array) => (into: Uint8Array) => into.set(bytes)
const none = () => {}

test("a tensor placed for two ranks is copied once, read by both, and its region reused once both let it go", () => {
  const { ctl, offers, taken, workers, answer } = pair()
  const data = Uint8Array.from({ length: 1000 }, (_, i) => i & 0xff)
  // No segment yet: the first goes in the command and makes one that fits two.
  let sent = 0
  expect(ctl.place([0, 1], "u8", [1000], fill(data), () => sent++)).toBeUndefined()
  expect(sent).toBe(1)
  expect(offers.map((o) => o.length)).toEqual([1, 1])
  expect(offers[0]![0]!.bytes).toBe(segmentSizeFor(2000))
  // Offered but not answered: still in the command.
  expect(ctl.place([0, 1], "u8", [1000], fill(data), none)).toBeUndefined()
  answer()
  const t = ctl.place([0, 1], "u8", [1000], fill(data), none)!
  expect(t).toBeInstanceOf(SharedTensor)
  expect(t.offset).toBeGreaterThanOrEqual(HEADER_BYTES)
  expect(ctl.counts).toEqual({ uploads: 1, bytes: 1000, offers: 2 })
  for (const w of workers) expect(Buffer.compare(w.bytesOf(t), data)).toBe(0)
  // A second one while the first is held lands elsewhere.
  const u = ctl.place([1], "u8", [1000], fill(data), none)!
  expect(u.offset).not.toBe(t.offset)
  workers[0]!.done(t)
  workers[0]!.done(t) // told once
  expect(taken[0]).toEqual([{ _tag: "UploadTaken", segment: t.segment, offsets: [t.offset] }] as never)
  ctl.taken(0, t.segment, [t.offset])
  expect(ctl.heldBytes).toBe(2000)
  ctl.taken(1, t.segment, [t.offset])
  ctl.taken(1, u.segment, [u.offset])
  expect(ctl.heldBytes).toBe(0)
  // Freed runs merge back: the next one starts where the first did.
  expect(ctl.place([0], "u8", [1000], fill(data), none)!.offset).toBe(t.offset)
  for (const w of workers) w.close()
  ctl.close()
})

test("a SharedTensor naming a segment not mapped, or bytes outside it, is refused, naming them", () => {
  const { ctl, workers, answer } = pair()
  ctl.place([0, 1], "u8", [100], none, none)
  answer()
  const t = ctl.place([0, 1], "u8", [100], none, none)!
  const refused = (s: SharedTensor) => {
    try {
      workers[0]!.bytesOf(s)
    } catch (e) {
      expect(e).toBeInstanceOf(SegmentRefused)
      return (e as SegmentRefused).message
    }
    throw new Error("not refused")
  }
  expect(refused(new SharedTensor(t.segment + 100, t.offset, "u8", [100]))).toContain(`names upload segment ${t.segment + 100}, which this worker has not mapped`)
  expect(refused(new SharedTensor(t.segment, 0, "u8", [100]))).toContain("at offset 0 does not lie within upload segment")
  const size = segmentSizeFor(200)
  expect(refused(new SharedTensor(t.segment, size - 10, "u8", [100]))).toContain(`of 100 bytes at offset ${size - 10} does not lie within`)
  expect(refused(new SharedTensor(t.segment, HEADER_BYTES, "f64", [size]))).toContain("does not lie within")
  // A closed link maps nothing more.
  workers[1]!.close()
  expect(() => workers[1]!.bytesOf(t)).toThrow(SegmentRefused)
  ctl.close()
})

test("an upload offer whose check bytes do not hold is refused, and that rank's uploads go in their commands", () => {
  const { ctl, offers, workers } = pair()
  ctl.place([0, 1], "u8", [100], none, none)
  const o = offers[0]![0]!
  expect(() => workers[0]!.attach({ ...o, check: o.check.map((b) => b ^ 1) })).toThrow("does not hold the offer's check bytes")
  ctl.mapped(0, o.segment, "does not hold the offer's check bytes")
  workers[1]!.attach(offers[1]![0]!)
  ctl.mapped(1, o.segment, null)
  expect(ctl.place([0, 1], "u8", [100], none, none)).toBeUndefined()
  expect(ctl.place([1], "u8", [100], none, none)).toBeInstanceOf(SharedTensor)
  ctl.close()
})

test("an UploadTaken for a region the rank does not hold is refused; a closed link's holds are let go", () => {
  const { ctl, answer } = pair()
  ctl.place([0, 1], "u8", [100], none, none)
  answer()
  const t = ctl.place([0], "u8", [100], none, none)!
  expect(() => ctl.taken(1, t.segment, [t.offset])).toThrow(`UploadTaken for offset ${t.offset} of upload segment ${t.segment}, which rank 1 does not hold`)
  expect(() => ctl.taken(0, t.segment, [t.offset + 64])).toThrow(SegmentRefused)
  expect(ctl.heldBytes).toBe(100)
  ctl.detach(0)
  expect(ctl.heldBytes).toBe(0)
  ctl.close()
})

test("a tensor past half the segment makes a larger one; the older is unmapped once its last region is let go", () => {
  const { ctl, answer } = pair()
  ctl.place([0, 1], "u8", [100], none, none)
  answer()
  const small = ctl.place([0, 1], "u8", [100], none, none)!
  const first = ctl.mappedBytes
  expect(ctl.place([0, 1], "u8", [3 << 20], none, none)).toBeUndefined() // goes in its command, grows
  answer()
  expect(ctl.mappedBytes).toBe(first + segmentSizeFor(6 << 20)) // the older held by `small`
  const big = ctl.place([0, 1], "u8", [3 << 20], none, none)!
  expect(big.segment).not.toBe(small.segment)
  ctl.taken(0, small.segment, [small.offset])
  ctl.taken(1, small.segment, [small.offset])
  expect(ctl.mappedBytes).toBe(segmentSizeFor(6 << 20))
  ctl.close()
  expect(ctl.mappedBytes).toBe(0)
})

test("the descriptor is closed once every offered link answered; a worker that connects later gets a fresh segment with its first upload", () => {
  const { ctl, offers, workers, answer } = pair()
  ctl.place([0, 1], "u8", [100], none, none)
  answer()
  // Both answered: the path opens nothing any more.
  const late = new WorkerUploads(() => {})
  expect(() => late.attach(offers[0]![0]!)).toThrow("cannot be read")
  const first = ctl.place([0, 1], "u8", [100], none, none)!
  // Rank 2 connects: no offer now (the descriptor is closed); its first upload goes in its command and offers a new segment to all.
  const third: UploadSegment[] = []
  ctl.attach(2, (m: WorkerMessage) => (m._tag === "UploadSegment" && third.push(m), true))
  expect(third).toEqual([])
  let sent = 0
  expect(ctl.place([0, 2], "u8", [100], none, () => sent++)).toBeUndefined()
  expect({ sent, offers: [...offers.map((o) => o.length), third.length] }).toEqual({ sent: 1, offers: [2, 2, 1] })
  // While that offer waits for answers, no other one is made.
  expect(ctl.place([1, 2], "u8", [100], none, () => sent++)).toBeUndefined()
  expect({ sent, offers: [...offers.map((o) => o.length), third.length] }).toEqual({ sent: 1, offers: [2, 2, 1] })
  late.attach(third[0]!)
  ctl.mapped(2, third[0]!.segment, null)
  answer()
  const next = ctl.place([0, 1, 2], "u8", [100], none, none)!
  expect(next.segment).toBe(third[0]!.segment)
  expect(next.segment).not.toBe(first.segment)
  for (const w of [...workers, late]) w.close()
  ctl.close()
})
