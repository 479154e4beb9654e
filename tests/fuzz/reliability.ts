/**
 * The fuzz area's rows for RELIABILITY.md (the reliability contract): the worker and the
 * controller's reader under mutated and random frames, and the length prefix fuzzed against
 * FrameReader and real workers. fuzz.test.ts runs the same checks at the same sizes and
 * asserts on their results. MONARCH_FUZZ_SEED replays another seed (default 1).
 */
import { EXIT_STATUS } from "../../src/worker/startup.ts"
import { fuzzControllerReader, type ControllerFuzzResult } from "./controllerFuzz.ts"
import { fuzzFrameLengths, oversizedToWorker, type LengthFuzzResult, type WorkerLengthResult } from "./frameLength.ts"
import { checkLookups, READS_PER_LOOKUP, type LookupCheck } from "../protocol/lookups.ts"
import { checkNotUtf8, type NotUtf8Check } from "../protocol/notUtf8.ts"
import { notUtf8ToWorker, type NotUtf8WorkerResult } from "./notUtf8Worker.ts"
import { rssChange } from "./proc.ts"
import { countOf, fuzzWorker, type WorkerFuzzResult } from "./workerFuzz.ts"
import type { Mode, ReliabilityRow } from "../reliability.ts"



/** How much each check does per mode. */
export const SIZES = {
  default: { workerFrames: 5_000, workerWarmup: 10_000, controllerFrames: 5_000, lengthClaims: 10_000, restarts: 3, lookupSlices: 300, notUtf8: 3_000, notUtf8Worker: 200 },
  long: { workerFrames: 100_000, workerWarmup: 50_000, controllerFrames: 100_000, lengthClaims: 200_000, restarts: 20, lookupSlices: 5_000, notUtf8: 100_000, notUtf8Worker: 5_000 },
} as const

export const fuzzSeed = (): number => Number(process.env.MONARCH_FUZZ_SEED ?? 1)

/** RSS after within 10% of before. */
export const RSS_TOLERANCE = 0.1

const tally = (counts: Readonly<Record<string, number>>) => Object.entries(counts).map(([k, n]) => `${k} ${n}`).join(", ") || "none"
const secs = (s: number) => `${s.toFixed(1)} s`

export const workerRows = (r: WorkerFuzzResult, seed: number): ReliabilityRow[] => {
  const valid = countOf(r.run.validSent)
  const survived = r.alive && r.exits === 0 && r.sentinelKept && r.commandAfter
  const within = r.rssAfterKiB <= r.rssBeforeKiB * (1 + RSS_TOLERANCE)
  return [
    {
      area: "fuzz",
      check: `worker: ${r.run.sent + countOf(r.run.heldBack)} mutated/random frames (${r.run.sent} sent)`,
      tries: r.run.sent,
      held: r.run.answered + (survived ? valid : 0),
      detail: `${r.run.invalid} invalid, ${r.run.answered} answered by a ProtocolError naming the problem; ${valid} valid sent (${r.run.remoteFailures} RemoteFunctionFailed, ${r.run.fetchResults} FetchResult, ${r.run.handlerRejects} refused by a handler); `
        + `${countOf(r.run.heldBack)} valid held back (${tally(r.run.heldBack)}); ${survived ? "alive, value kept, command after ran" : `alive ${r.alive}, value kept ${r.sentinelKept}, command after ${r.commandAfter}`}; seed ${seed}, ${secs(r.seconds)}`,
    },
    {
      area: "fuzz",
      check: `worker: RSS after ${r.run.sent} fuzz frames sent`,
      tries: 1,
      held: within ? 1 : 0,
      detail: `${rssChange(r.rssBeforeKiB, r.rssAfterKiB)} after a ${r.warmup.sent}-frame warm-up, each the least of 3 readings after a full GC`,
    },
  ]
}

export const controllerRows = (r: ControllerFuzzResult, seed: number): ReliabilityRow[] => {
  const valid = countOf(r.valid)
  const served = r.admitted && r.stayedOpen && r.keptValue && r.newCommand && r.rank0Alive
  return [
    {
      area: "fuzz",
      check: `controller reader: ${r.sent} mutated/random frames from a fake worker`,
      tries: r.sent,
      held: r.reported + (served ? valid : 0),
      detail: `${r.invalid} invalid, ${r.reported} reported (onProblem) with the codec's problem; ${valid} valid (${tally(r.valid)}) drew ${r.otherProblems} other problems; `
        + `${served ? "link kept, rank 0 kept its value and ran a new command" : `link kept ${r.stayedOpen}, value kept ${r.keptValue}, new command ${r.newCommand}`}; seed ${seed}, ${secs(r.seconds)}`,
    },
    {
      area: "fuzz",
      check: "controller reader: oversized length prefix from an admitted worker",
      tries: 1,
      held: r.oversizedClosed && r.oversizedProblem !== "" && r.servedAfterOversized ? 1 : 0,
      detail: r.oversizedClosed ? `link closed, "${r.oversizedProblem}"; rank 0 served after: ${r.servedAfterOversized}` : "the link stayed open",
    },
  ]
}

export const lengthRows = (claims: LengthFuzzResult, once: WorkerLengthResult, restarts: WorkerLengthResult): ReliabilityRow[] => [
  {
    area: "fuzz",
    check: `frame length: ${claims.tries} random claims into FrameReader`,
    tries: claims.tries,
    held: claims.held,
    detail: `${claims.over} over the maximum (1 MiB or 1 GiB) refused before any allocation (largest allocation for one: ${claims.allocatedForOver} B); ${claims.within} within it delivered intact${claims.failures.length > 0 ? `; failed: ${claims.failures.join("; ")}` : ""}`,
  },
  {
    area: "fuzz",
    check: "frame length: oversized claim + 64 MiB to a non-restartable worker",
    tries: 1,
    held: once.refused === 1 && once.exit?.status === EXIT_STATUS.linkLost ? 1 : 0,
    detail: `ProtocolError "${once.problem}", link closed; exit ${once.exit === undefined ? "none" : `status ${once.exit.status}`}`,
  },
  {
    area: "fuzz",
    check: `frame length: ${restarts.tries} oversized claims + 64 MiB each to a restartable worker`,
    tries: restarts.tries,
    held: restarts.rssAfterKiB !== undefined && restarts.rssAfterKiB <= restarts.rssBeforeKiB * (1 + RSS_TOLERANCE) ? Math.min(restarts.refused, restarts.servedAgain) : 0,
    detail: `${restarts.refused} refused with a ProtocolError and a closed link, ${restarts.servedAgain} reconnected and served; ${restarts.rssAfterKiB === undefined ? "" : rssChange(restarts.rssBeforeKiB, restarts.rssAfterKiB)}`,
  },
]

export const lookupRows = (r: LookupCheck, seed: number): ReliabilityRow[] => [
  {
    area: "fuzz",
    check: `NDSlice lookups: ${r.slices} random slices of 1-8 dims and 8 dims of stride 2 (sizes 16), every rank against brute force`,
    tries: r.lookups,
    held: r.held,
    detail: `at most ${r.maxReads} reads of sizes and strides for one lookup (allowed ${READS_PER_LOOKUP}; the backtracking search took millions)${r.failures.length > 0 ? `; failed: ${r.failures.join("; ")}` : ""}; seed ${seed}`,
  },
]

export const notUtf8Rows = (codec: NotUtf8Check, worker: NotUtf8WorkerResult, seed: number): ReliabilityRow[] => [
  {
    area: "fuzz",
    check: `str not UTF-8: ${codec.tries} messages with a bad str in a random field, through the codec`,
    tries: codec.tries,
    held: codec.held,
    detail: `each refused naming the field, and the same frame with valid text decoded intact${codec.failures.length > 0 ? `; failed: ${codec.failures.join("; ")}` : ""}; seed ${seed}`,
  },
  {
    area: "fuzz",
    check: `str not UTF-8: ${worker.frames} such frames to a live worker`,
    tries: worker.frames,
    held: worker.served ? worker.answered : 0,
    detail: `${worker.answered} answered by a ProtocolError naming the field; ${worker.served ? "value kept, fetch served after" : "the worker did not serve after"}${worker.failures.length > 0 ? `; failed: ${worker.failures.join("; ")}` : ""}`,
  },
]

/** A row for a check that threw instead of returning. */
const failedRow = (check: string, tries: number, e: unknown): ReliabilityRow => ({
  area: "fuzz", check, tries, held: 0, detail: `failed: ${(e instanceof Error ? e.message : String(e)).split("\n")[0]}`,
})

const attempt = async (check: string, tries: number, body: () => Promise<ReliabilityRow[]>): Promise<ReliabilityRow[]> => {
  try {
    return await body()
  } catch (e) {
    return [failedRow(check, tries, e)]
  }
}

export const run = async (mode: Mode): Promise<ReliabilityRow[]> => {
  const size = SIZES[mode], seed = fuzzSeed()
  return [
    ...(await attempt(`worker: ${size.workerFrames} mutated/random frames`, size.workerFrames, async () =>
      workerRows(await fuzzWorker({ frames: size.workerFrames, warmup: size.workerWarmup, seed }), seed))),
    ...(await attempt(`controller reader: ${size.controllerFrames} mutated/random frames from a fake worker`, size.controllerFrames, async () =>
      controllerRows(await fuzzControllerReader({ frames: size.controllerFrames, seed }), seed))),
    ...(await attempt("frame length", size.lengthClaims, async () =>
      lengthRows(
        fuzzFrameLengths(size.lengthClaims, seed),
        await oversizedToWorker({ restartable: false, tries: 1, seed }),
        await oversizedToWorker({ restartable: true, tries: size.restarts, seed }),
      ))),
    ...(await attempt("NDSlice lookups", size.lookupSlices, async () => lookupRows(checkLookups({ slices: size.lookupSlices, seed }), seed))),
    ...(await attempt("str not UTF-8", size.notUtf8, async () =>
      notUtf8Rows(checkNotUtf8({ tries: size.notUtf8, seed }), await notUtf8ToWorker({ frames: size.notUtf8Worker, seed }), seed))),
  ]
}
