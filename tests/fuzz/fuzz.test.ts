// Fuzzing the wire: mutated and random frames into a live worker and into the controller's
// reader, and fuzzed length prefixes. Sizes per mode come from reliability.ts (5,000 frames
// by default; MONARCH_LONG=1 for 100,000); MONARCH_FUZZ_SEED replays another seed.
import { describe, expect, test } from "bun:test"
import { fuzzControllerReader } from "./controllerFuzz.ts"
import { fuzzFrameLengths, oversizedToWorker } from "./frameLength.ts"
import { checkLookups } from "../protocol/lookups.ts"
import { checkNotUtf8 } from "../protocol/notUtf8.ts"
import { notUtf8ToWorker } from "./notUtf8Worker.ts"
import { modeFromEnv } from "../reliability.ts"
import { RSS_TOLERANCE, SIZES, fuzzSeed } from "./reliability.ts"
import { countOf, fuzzWorker } from "./workerFuzz.ts"
import { EXIT_STATUS } from "../../src/worker/startup.ts"

const mode = modeFromEnv()
const size = SIZES[mode]
const seed = fuzzSeed()
const long = mode === "long"

describe(`the wire under fuzz (${mode} mode, seed ${seed})`, () => {
  test(`a live worker: ${size.workerFrames} frames, each bad one answered; alive, value kept, RSS within 10%`, async () => {
    const r = await fuzzWorker({ frames: size.workerFrames, warmup: size.workerWarmup, seed })
    // Every frame is either invalid (answered) or valid (sent or held back, see holdBack).
    expect(r.run.invalid + countOf(r.run.validSent) + countOf(r.run.heldBack)).toBe(size.workerFrames)
    expect(r.run.invalid).toBeGreaterThan(size.workerFrames * 0.8)
    expect(r.run.unanswered).toEqual([])
    expect(r.run.answered).toBe(r.run.invalid)
    // Mutations do produce valid commands, of several kinds, and the worker acts on them.
    expect(Object.keys(r.run.validSent).length).toBeGreaterThanOrEqual(5)
    expect(r.run.remoteFailures + r.run.fetchResults).toBeGreaterThan(0)
    expect({ alive: r.alive, exits: r.exits, sentinelKept: r.sentinelKept, commandAfter: r.commandAfter }).toEqual({ alive: true, exits: 0, sentinelKept: true, commandAfter: true })
    expect(r.rssAfterKiB).toBeLessThanOrEqual(r.rssBeforeKiB * (1 + RSS_TOLERANCE))
  }, long ? 900_000 : 120_000)

  test(`the controller's reader: ${size.controllerFrames} frames from a fake worker, each bad one reported; real workers keep serving`, async () => {
    const r = await fuzzControllerReader({ frames: size.controllerFrames, seed })
    expect(r.admitted).toBe(true)
    expect(r.invalid + countOf(r.valid)).toBe(size.controllerFrames)
    expect(r.unreported).toEqual([])
    expect(r.reported).toBe(r.invalid)
    // Valid reports about commands the controller never issued are problems too, one each.
    expect(r.otherProblems).toBe((r.valid.FetchResult ?? 0) + (r.valid.RemoteFunctionFailed ?? 0) + (r.valid.ProtocolError ?? 0))
    expect({ stayedOpen: r.stayedOpen, keptValue: r.keptValue, newCommand: r.newCommand }).toEqual({ stayedOpen: true, keptValue: true, newCommand: true })
    expect(r.oversizedClosed).toBe(true)
    expect(r.oversizedProblem).toContain("rank 1 sent an invalid frame: frame of 4294967295 bytes is over the")
    expect(r.servedAfterOversized).toBe(true)
    expect(r.rank0Alive).toBe(true)
  }, long ? 600_000 : 60_000)
})

describe("the length prefix under fuzz", () => {
  test(`${size.lengthClaims} random claims: over the maximum refused before any allocation, within it delivered intact`, () => {
    const r = fuzzFrameLengths(size.lengthClaims, seed)
    expect(r.failures).toEqual([])
    expect(r.held).toBe(r.tries)
    expect(r.over).toBeGreaterThan(r.tries * 0.4)
    expect(r.within).toBeGreaterThan(r.tries * 0.4)
    expect(r.allocatedForOver).toBe(0)
  }, long ? 300_000 : 30_000)

  test("an oversized claim to a non-restartable worker: ProtocolError, link closed, exit with the link-lost status", async () => {
    const r = await oversizedToWorker({ restartable: false, tries: 1, seed })
    expect(r.refused).toBe(1)
    expect(r.problem).toMatch(/^frame of \d+ bytes is over the 1073741824-byte maximum/)
    expect(r.exit).toMatchObject({ rank: 0, status: EXIT_STATUS.linkLost })
  }, 60_000)

  test(`${size.restarts} oversized claims to a restartable worker: each refused, it reconnects and serves, RSS within 10%`, async () => {
    const r = await oversizedToWorker({ restartable: true, tries: size.restarts, seed })
    expect(r.refused).toBe(size.restarts)
    expect(r.servedAgain).toBe(size.restarts)
    expect(r.exit).toBeUndefined()
    expect(r.rssAfterKiB!).toBeLessThanOrEqual(r.rssBeforeKiB * (1 + RSS_TOLERANCE))
  }, long ? 300_000 : 60_000)
})

describe("NDSlice lookups", () => {
  test(`${size.lookupSlices} random slices and 8 dims of stride 2: every rank found as brute force finds it, within the read budget`, () => {
    const r = checkLookups({ slices: size.lookupSlices, seed })
    expect(r.failures).toEqual([])
    expect(r.held).toBe(r.lookups)
    expect(r.lookups).toBeGreaterThan(size.lookupSlices * 10)
  }, long ? 300_000 : 30_000)
})

describe("strs that are not UTF-8", () => {
  test(`${size.notUtf8} messages with a bad str in a random field: each refused naming the field; valid text in its place decodes intact`, () => {
    const r = checkNotUtf8({ tries: size.notUtf8, seed })
    expect(r.failures).toEqual([])
    expect(r.held).toBe(r.tries)
  }, long ? 300_000 : 30_000)

  test(`${size.notUtf8Worker} such frames to a live worker: each answered by a ProtocolError naming the field; the worker goes on`, async () => {
    const r = await notUtf8ToWorker({ frames: size.notUtf8Worker, seed })
    expect(r.failures).toEqual([])
    expect(r.answered).toBe(r.frames)
    expect(r.served).toBe(true)
  }, long ? 600_000 : 60_000)
})
