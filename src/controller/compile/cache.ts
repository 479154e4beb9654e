/**
 * A compiled step's recordings, by signature: which one a call finds (the same signature, and
 * the same reads of its objects), why a call finds none (for the retrace message), and
 * forgetting one, in the cache and on the workers (past maxRecordings, to make room on the
 * workers, at dispose, or once the compiled step is collected).
 */
import type { Recording } from "./build.ts"
import { type ObjectRead, readAgain, readPath, valueText } from "./reader.ts"
import { type Flat, textOf } from "./signature.ts"

/** Forgets a recording on the workers that hold it: after its calls so far, which still run. */
export const deleteOnWorkers = (r: Recording<unknown>): void => {
  r.core.recordings.forget(r.id)
  if (r.ranks.length > 0) r.core.post(r.ranks, { _tag: "DeleteRecording", recording: r.id })
}

/** Forgets a recording in its step's cache and on the workers: past maxRecordings, or to make room on the workers (Core.recordings). */
export const drop = <R>(cache: Map<string, Array<Recording<R>>>, recording: Recording<R>): void => {
  for (const [k, rs] of cache) {
    if (!rs.includes(recording)) continue
    const rest = rs.filter((r) => r !== recording)
    if (rest.length > 0) cache.set(k, rest)
    else cache.delete(k)
  }
  deleteOnWorkers(recording)
}

/** `drop` for Core.recordings, made out here so that it holds the cache and not the compiled step (which may then be collected). */
export const evictor = <R>(cache: Map<string, Array<Recording<R>>>, recording: Recording<R>) => () => drop(cache, recording)

/** A compiled step collected without dispose(): its recordings (held here, not the step) are deleted then. */
export const collected = new FinalizationRegistry((cache: Map<string, Array<Recording<unknown>>>) => {
  for (const rs of cache.values()) rs.forEach(deleteOnWorkers)
})

/** The first of the recording's reads that reads otherwise in this call's objects. */
export const unlikeRead = (recording: Recording<unknown>, flat: Flat): ObjectRead | undefined =>
  recording.reads.find((r) => !Object.is(readAgain(flat.objects[r.object], r), r.value))

/** Why a call with `args` does not fit the recording made for `recorded` (flattened with their paths). */
export const mismatch = (recording: Recording<unknown>, recorded: Flat, flat: Flat): string => {
  if (flat.key !== recorded.key) {
    const was = recorded.leaves, now = flat.leaves
    const i = now.findIndex((l, j) => l.path !== was[j]?.path || l.key !== was[j]?.key)
    const at = i < 0 ? was.length : i
    const path = now[at]?.path ?? was[at]?.path ?? "the arguments"
    return `${path}: ${was[at]?.path === path ? textOf(was[at]!) : "nothing"}, now ${now[at]?.path === path ? textOf(now[at]!) : "nothing"}`
  }
  const r = unlikeRead(recording, flat)
  return r === undefined ? "the same signature, whose recording was deleted (maxRecordings)"
    : `${readPath(flat.objectPaths, r)}: ${valueText(r.value)}, now ${valueText(readAgain(flat.objects[r.object], r))} (read by the step)`
}
