/**
 * What a real worker accepts it can also answer, and what it keeps is bounded, as checks that
 * return what they saw (tests/worker/idents.test.ts and recordingLimits.test.ts assert on it,
 * reliability.ts turns it into rows): idents past MAX_IDENT are refused so every Status stays
 * sendable; a flood of DefineRecordings is refused past the worker's bound, its RSS near it.
 */
import { encodeMessage } from "../../src/protocol/codec.ts"
import { MAX_IDENT } from "../../src/protocol/fields.ts"
import type { DefineRecording, WorkerMessage } from "../../src/protocol/messages.ts"
import { HostTensor } from "../../src/protocol/values.ts"
import { rssKiB } from "../fuzz/proc.ts"
import { call, createStream, fetch, numbers, ref } from "../worker/build.ts"
import { FIXTURES, startWorkers, type Harness } from "../worker/harness.ts"

const FUZZ_FIXTURES = new URL("../fuzz/fixtures", import.meta.url).pathname

/** `msg` as a frame body whose first field (the array's second element, 0 when encoded) is `value`. */
const withFirstField = (msg: WorkerMessage, value: number): Uint8Array => {
  const r = encodeMessage(msg)
  if (r._tag === "Failure") throw new Error(r.failure.message)
  const body = r.success
  if (body[2] !== 0) throw new Error("expected [code, 0, ...] with a fixarray and a positive fixint code")
  const wide = new Uint8Array(9)
  wide[0] = 0xcf
  new DataView(wide.buffer).setBigUint64(1, BigInt(value))
  return Buffer.concat([body.subarray(0, 2), wide, body.subarray(3)])
}

/** What `find` finds once it finds it (checked on every message), or undefined after `ms`. */
const awaitMessage = <T>(h: Harness, find: () => T | undefined, ms: number): Promise<T | undefined> =>
  h.until(find, ms, "").catch(() => undefined)

export interface IdentsResult {
  /** Each command sent with an ident past MAX_IDENT, and the ProtocolError it got (undefined: none). */
  readonly refused: ReadonlyArray<{ readonly name: string; readonly reply: string | undefined }>
  /** After them, a fetch of a poisoned value was answered by Status. */
  readonly poisonedFetchAnswered: boolean
  /** The largest idents answered: a fetch at MAX_IDENT - 20, a recording ending at 2^53 - 1, a fetch at MAX_IDENT. */
  readonly largestAnswered: ReadonlyArray<{ readonly name: string; readonly answered: boolean }>
  readonly lastStatus: number | undefined
}

/** One real worker: the boundary idents, refused and answered. */
export const checkIdents = async (): Promise<IdentsResult> => {
  const h = await startWorkers({ world: 1 })
  try {
    h.send(0, createStream)
    const raw = (body: Uint8Array) => h.links[0]!.sendRawForTestsOnly(body)
    const nextRefusal = async () => {
      const from = h.seen(0, "ProtocolError").length
      return (await awaitMessage(h, () => h.seen(0, "ProtocolError")[from], 5000))?.message
    }
    const refused: Array<{ name: string; reply: string | undefined }> = []
    const past = 2 ** 53 - 1
    for (const [name, msg] of [
      ["RequestStatus(2^53 - 1)", { _tag: "RequestStatus", ident: 0 }],
      ["CallFunction(2^53 - 1)", call(0, [10], "ops.zeros", [[2]])],
      ["FetchValue(2^53 - 1)", fetch(0, 1)],
    ] as Array<[string, WorkerMessage]>) {
      raw(withFirstField(msg, past))
      refused.push({ name, reply: await nextRefusal() })
    }
    // A poisoned value's fetch is answered by Status alone: it needs Status to be sendable.
    h.send(0, call(1, [11], "ops.no_such_op"))
    h.send(0, fetch(2, ref(11)))
    const poisonedFetchAnswered = (await awaitMessage(h, () => h.seen(0, "Status").find((m) => m.firstUncompletedIdent > 2), 5000)) !== undefined
    h.send(0, { _tag: "DefineRecording", recording: 1, idents: 10, formals: [], params: [], results: [20], commands: [call(0, [20], "ops.zeros", [[2]])] })
    h.send(0, { _tag: "CallRecording", ident: 2 ** 53 - 10, recording: 1, results: [ref(21)], actuals: [], params: [] })
    refused.push({ name: "CallRecording(2^53 - 10) of 10 idents", reply: await nextRefusal() })

    const fetched = (ident: number, want: string) =>
      awaitMessage(h, () => h.seen(0, "FetchResult").find((m) => m.ident === ident), 5000).then((m) => m?.value instanceof HostTensor && numbers(m.value).join() === want)
    h.send(0, call(3, [12], "ops.full", [[2], 3]))
    h.send(0, fetch(MAX_IDENT - 20, ref(12)))
    const first = await fetched(MAX_IDENT - 20, "3,3")
    h.send(0, { _tag: "CallRecording", ident: 2 ** 53 - 11, recording: 1, results: [ref(22)], actuals: [], params: [] })
    const recorded = (await awaitMessage(h, () => h.seen(0, "Status").find((m) => m.firstUncompletedIdent === 2 ** 53 - 1), 5000)) !== undefined
    h.send(0, fetch(MAX_IDENT, ref(22)))
    const last = await fetched(MAX_IDENT, "0,0")
    return {
      refused, poisonedFetchAnswered,
      largestAnswered: [{ name: "FetchValue(MAX_IDENT - 20)", answered: first }, { name: "CallRecording ending at 2^53 - 1", answered: recorded }, { name: "FetchValue(MAX_IDENT)", answered: last }],
      lastStatus: h.seen(0, "Status").at(-1)?.firstUncompletedIdent,
    }
  } finally {
    await h.close()
  }
}

/** A recording of `n` commands, each a CallFunction making a 2-element tensor. */
export const recordingOf = (id: number, n: number): DefineRecording => ({
  _tag: "DefineRecording", recording: id, idents: n, formals: [], params: [], results: [100_000],
  commands: Array.from({ length: n }, (_, k) => call(k, [k === n - 1 ? 100_000 : 100_001 + k], "ops.zeros", [[2]])),
})

export interface FloodResult {
  readonly defines: number
  readonly each: number
  readonly limit: number
  /** The ProtocolErrors the definitions got. */
  readonly refused: ReadonlyArray<string>
  /** The worker's RSS after a full collection there, before and after the flood. */
  readonly rssBeforeKiB: number
  readonly rssAfterKiB: number
  /** A call and a fetch still work after it. */
  readonly servesAfter: boolean
}

/**
 * `defines` DefineRecordings of `each` commands to one real worker that keeps `limit` recorded
 * commands (MONARCH_MAX_RECORDED_COMMANDS): sent as one encoding with its number patched.
 */
export const checkRecordingFlood = async (defines = 1000, each = 1000, limit = 100_000): Promise<FloodResult> => {
  const h = await startWorkers({ world: 1, env: { MONARCH_MAX_RECORDED_COMMANDS: String(limit), MONARCH_FUNCTION_PATH: `${FIXTURES}:${FUZZ_FIXTURES}` } })
  try {
    h.send(0, createStream)
    let ident = 0
    const settle = async () => {
      const i = ident++
      h.send(0, { _tag: "RequestStatus", ident: i })
      await h.passed(0, i, 60_000)
    }
    /** What the worker holds, not garbage waiting to be collected: RSS after a full collection there. */
    const heldKiB = async () => {
      const i = ident++
      h.send(0, fetch(i, null, "fuzzgc:collect"))
      await h.until(() => h.seen(0, "FetchResult").find((m) => m.ident === i), 20_000, "the worker collected its garbage")
      return rssKiB(h.job.pids[0]!)
    }
    await settle()
    const rssBeforeKiB = await heldKiB()
    // One encoding; each copy's recording number (a uint64 at bytes 3..10) set apart.
    const template = withFirstField(recordingOf(0, each), 0)
    for (let id = 1; id <= defines; id++) {
      const body = new Uint8Array(template)
      new DataView(body.buffer).setBigUint64(3, BigInt(id))
      h.links[0]!.sendRawForTestsOnly(body)
      if (id % 100 === 0) await settle()
    }
    await settle()
    const rssAfterKiB = await heldKiB()
    const f = ident + 1
    h.send(0, call(ident, [9], "ops.full", [[2], 5]))
    h.send(0, fetch(f, ref(9)))
    ident += 2
    const got = await awaitMessage(h, () => h.seen(0, "FetchResult").find((m) => m.ident === f), 20_000)
    return {
      defines, each, limit, refused: h.seen(0, "ProtocolError").map((m) => m.message), rssBeforeKiB, rssAfterKiB,
      servesAfter: got?.value instanceof HostTensor && numbers(got.value).join() === "5,5",
    }
  } finally {
    await h.close()
  }
}
