// A real worker bounds its recordings (MONARCH_MAX_RECORDINGS, MONARCH_MAX_RECORDED_COMMANDS):
// a DefineRecording past either bound is refused with a ProtocolError naming it, a redefinition
// counts only its difference, a DeleteRecording makes room, and the worker goes on. A flood of
// DefineRecordings of 1,000 commands each keeps its RSS near what the bound allows (10,000 of
// them took a worker to 4.3 GB before). (The flood's check: tests/security/bounds.ts.)
import { afterAll, beforeAll, describe, expect, test } from "bun:test"
import { DEFAULT_RECORDING_LIMITS, readRecordingLimits } from "../../src/protocol/recordingLimits.ts"
import { checkRecordingFlood, recordingOf as recording } from "../security/bounds.ts"
import { createStream, fetch, numbers, ref } from "./build.ts"
import { startWorkers, type Harness } from "./harness.ts"

let ident = 0
/** Everything sent before is done (or refused) once this passes. */
const settle = async (h: Harness) => {
  const i = ident++
  h.send(0, { _tag: "RequestStatus", ident: i })
  await h.passed(0, i, 60_000)
}
const refusals = (h: Harness) => h.seen(0, "ProtocolError").map((m) => m.message)

describe("the bounds, one by one", () => {
  let h: Harness
  beforeAll(async () => {
    h = await startWorkers({ world: 1, env: { MONARCH_MAX_RECORDINGS: "4", MONARCH_MAX_RECORDED_COMMANDS: "1000" } })
    h.send(0, createStream)
  }, 40_000)
  afterAll(() => h?.close())

  test("past 4 recordings or 1000 commands a DefineRecording is refused naming the bound; a redefinition and a delete count", async () => {
    for (const id of [1, 2, 3, 4]) h.send(0, recording(id, 100))
    await settle(h)
    expect(refusals(h)).toEqual([])
    h.send(0, recording(5, 1))
    await settle(h)
    expect(refusals(h)).toEqual(["DefineRecording 5: this worker holds 4 recordings, its most (MONARCH_MAX_RECORDINGS=4); delete one first"])
    // Replacing recording 1 keeps the count; 200 + 3 x 100 commands.
    h.send(0, recording(1, 200))
    h.send(0, { _tag: "DeleteRecording", recording: 2 })
    // 200 + 100 + 100 held: 601 more pass 1000, 600 reach it.
    h.send(0, recording(6, 601))
    h.send(0, recording(6, 600))
    await settle(h)
    expect(refusals(h).slice(1)).toEqual(["DefineRecording 6: its 601 commands would take this worker's recordings to 1001 commands, past its most (MONARCH_MAX_RECORDED_COMMANDS=1000); delete some first"])
    // Recording 6 holds 600 commands and runs; the worker goes on.
    const base = (ident += 700) - 700
    h.send(0, { _tag: "CallRecording", ident: base, recording: 6, results: [ref(7)], actuals: [], params: [] })
    h.send(0, fetch(base + 600, ref(7)))
    expect(numbers((await h.next(0, "FetchResult", 20_000)).value)).toEqual([0, 0])
  }, 60_000)
})

test("1000 DefineRecordings of 1000 commands: 100 kept, the rest refused, RSS near the bound, the worker serves", async () => {
  const r = await checkRecordingFlood(1000, 1000, 100_000)
  const grewKiB = r.rssAfterKiB - r.rssBeforeKiB
  console.log(`worker RSS ${(r.rssBeforeKiB / 1024).toFixed(0)} -> ${(r.rssAfterKiB / 1024).toFixed(0)} MiB for ${r.limit} recorded commands kept (${((grewKiB * 1024) / r.limit).toFixed(0)} B each); ${r.defines * r.each} sent`)
  // Unbounded, the 1,000,000 commands sent would be kept: ten times as much.
  expect(grewKiB).toBeLessThan(192 * 1024)
  expect(r.refused.length).toBe(r.defines - r.limit / r.each)
  expect(r.refused.every((m) => m.includes(`past its most (MONARCH_MAX_RECORDED_COMMANDS=${r.limit})`))).toBe(true)
  expect(r.servesAfter).toBe(true)
}, 240_000)

test("the limits' environment: defaults, positive integers only", () => {
  expect(readRecordingLimits({})).toEqual({ limits: DEFAULT_RECORDING_LIMITS })
  expect(readRecordingLimits({ MONARCH_MAX_RECORDINGS: "3", MONARCH_MAX_RECORDED_COMMANDS: "70" })).toEqual({ limits: { recordings: 3, commands: 70 } })
  expect(readRecordingLimits({ MONARCH_MAX_RECORDINGS: "0" })).toEqual({ problem: "MONARCH_MAX_RECORDINGS=0 is not a positive integer" })
  expect(readRecordingLimits({ MONARCH_MAX_RECORDED_COMMANDS: "1e3x" })).toEqual({ problem: "MONARCH_MAX_RECORDED_COMMANDS=1e3x is not a positive integer" })
})
