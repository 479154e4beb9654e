// A real worker bounds its recordings (MONARCH_MAX_RECORDINGS, MONARCH_MAX_RECORDED_COMMANDS):
// a DefineRecording past either bound is refused with a ProtocolError naming it, a redefinition
// counts only its difference, a DeleteRecording makes room, and the worker goes on. A flood of
// DefineRecordings of 1,000 commands each keeps its RSS near what the bound allows (10,000 of
// them took a worker to 4.3 GB before).
import { afterAll, beforeAll, describe, expect, test } from "bun:test"
import { encodeMessage } from "../../src/protocol/codec.ts"
import type { DefineRecording, WorkerMessage } from "../../src/protocol/messages.ts"
import { DEFAULT_RECORDING_LIMITS, readRecordingLimits } from "../../src/protocol/recordingLimits.ts"
import { rssKiB } from "../fuzz/proc.ts"
import { call, createStream, fetch, numbers, ref } from "./build.ts"
import { FIXTURES, startWorkers, type Harness } from "./harness.ts"

/** A recording of `n` commands, each a CallFunction making a 2-element tensor. */
const recording = (id: number, n: number): DefineRecording => ({
  _tag: "DefineRecording", recording: id, idents: n, formals: [], params: [], results: [100_000],
  commands: Array.from({ length: n }, (_, k) => call(k, [k === n - 1 ? 100_000 : 100_001 + k], "ops.zeros", [[2]])),
})

let ident = 0
const FUZZ_FIXTURES = new URL("../fuzz/fixtures", import.meta.url).pathname

/** What the worker holds, not garbage waiting to be collected: RSS after a full collection there. */
const heldKiB = async (h: Harness) => {
  const i = ident++
  h.send(0, fetch(i, null, "fuzzgc:collect"))
  await h.until(() => h.seen(0, "FetchResult").find((m) => m.ident === i), 20_000, "the worker collected its garbage")
  return rssKiB(h.job.pids[0]!)
}

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

describe("a flood", () => {
  const limit = 100_000, defines = 1000, each = 1000
  let h: Harness
  beforeAll(async () => {
    h = await startWorkers({ world: 1, env: { MONARCH_MAX_RECORDED_COMMANDS: String(limit), MONARCH_FUNCTION_PATH: `${FIXTURES}:${FUZZ_FIXTURES}` } })
    h.send(0, createStream)
  }, 40_000)
  afterAll(() => h?.close())

  test(`${defines} DefineRecordings of ${each} commands: ${limit / each} kept, the rest refused, RSS near the bound, the worker serves`, async () => {
    const before = await heldKiB(h)
    // One encoding, its recording id (the array's second element, 0 here) patched per copy.
    const r = encodeMessage(recording(0, each) as WorkerMessage)
    if (r._tag === "Failure") throw new Error(r.failure.message)
    const body = r.success
    if (body[2] !== 0) throw new Error("expected [15, 0, ...]")
    for (let id = 1; id <= defines; id++) {
      h.links[0]!.sendRawForTestsOnly(Buffer.concat([body.subarray(0, 2), new Uint8Array([0xcd, id >> 8, id & 0xff]), body.subarray(3)]))
      if (id % 100 === 0) await settle(h)
    }
    await settle(h)
    const after = await heldKiB(h)
    const kept = limit, held = (after - before) * 1024
    console.log(`worker RSS ${(before / 1024).toFixed(0)} -> ${(after / 1024).toFixed(0)} MiB for ${kept} recorded commands kept (${(held / kept).toFixed(0)} B each); ${defines * each} sent`)
    // Unbounded, the 1,000,000 commands sent would be kept: ten times as much.
    expect(after - before).toBeLessThan(192 * 1024)
    const refused = refusals(h)
    expect(refused.length).toBe(defines - limit / each)
    expect(refused.every((m) => m.includes(`past its most (MONARCH_MAX_RECORDED_COMMANDS=${limit})`))).toBe(true)
    const f = ident + 1
    h.send(0, call(ident, [9], "ops.full", [[2], 5]))
    h.send(0, fetch(f, ref(9)))
    ident += 2
    const got = await h.until(() => h.seen(0, "FetchResult").find((m) => m.ident === f), 20_000, "the worker serves after the flood")
    expect(numbers(got.value)).toEqual([5, 5])
  }, 240_000)
})

test("the limits' environment: defaults, positive integers only", () => {
  expect(readRecordingLimits({})).toEqual({ limits: DEFAULT_RECORDING_LIMITS })
  expect(readRecordingLimits({ MONARCH_MAX_RECORDINGS: "3", MONARCH_MAX_RECORDED_COMMANDS: "70" })).toEqual({ limits: { recordings: 3, commands: 70 } })
  expect(readRecordingLimits({ MONARCH_MAX_RECORDINGS: "0" })).toEqual({ problem: "MONARCH_MAX_RECORDINGS=0 is not a positive integer" })
  expect(readRecordingLimits({ MONARCH_MAX_RECORDED_COMMANDS: "1e3x" })).toEqual({ problem: "MONARCH_MAX_RECORDED_COMMANDS=1e3x is not a positive integer" })
})
