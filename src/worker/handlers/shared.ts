/**
 * SharedSegment and SegmentFree: the shared-memory segments a fetch may answer through
 * (src/net/shm.ts); UploadSegment: the one uploads come through (src/net/uploads.ts). An offer
 * that does not check out is answered with why, and those bytes go on over the socket.
 */
import { Effect } from "effect"
import type { SharedSegment, SegmentFree, UploadSegment } from "../../protocol/messages.ts"
import { reject, type Session } from "../session.ts"

const why = (e: unknown): string => (e instanceof Error ? e.message : String(e))

/** Maps an offered segment with `attach` (undefined: this link takes no shared memory) and says whether it could. */
const answerOffer = (s: Session, segment: number, attach: (() => void) | undefined): void => {
  if (attach === undefined) return s.send({ _tag: "SegmentMapped", segment, problem: "this worker's link takes no shared memory" })
  try {
    attach()
    s.send({ _tag: "SegmentMapped", segment, problem: null })
  } catch (e) {
    s.send({ _tag: "SegmentMapped", segment, problem: why(e) })
  }
}

export const sharedSegment = (s: Session) => (m: SharedSegment) =>
  Effect.sync(() => answerOffer(s, m.segment, s.segments && (() => s.segments!.attach(m))))

export const segmentFree = (s: Session) => (m: SegmentFree) => Effect.sync(() => {
  try {
    if (s.segments === undefined) return reject(s, `SegmentFree for segment ${m.segment}: this worker's link takes no shared memory`)
    s.segments.free(m.segment)
  } catch (e) {
    reject(s, why(e))
  }
})

export const uploadSegment = (s: Session) => (m: UploadSegment) =>
  Effect.sync(() => answerOffer(s, m.segment, s.uploads && (() => s.uploads!.attach(m))))
