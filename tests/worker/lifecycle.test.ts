// A worker's life: Status every second once it advanced (and only then), bad frames refused without losing
// anything, Exit (and in restartable mode a fresh state and Restarted).
import { afterAll, beforeAll, describe, expect, test } from "bun:test"
import { encode } from "@msgpack/msgpack"
import { MESSAGE_CODES } from "../../src/protocol/messages.ts"
import { call, createStream, fetch, numbers, ref } from "./build.ts"
import { startWorkers, type Harness } from "./harness.ts"

describe("a worker's life", () => {
  let h: Harness
  beforeAll(async () => {
    h = await startWorkers({ world: 1, env: { MONARCH_RESTARTABLE: "1" } })
    h.send(0, createStream)
  }, 40_000)
  afterAll(() => h?.close())

  test("Status comes by itself, about a second after progress", async () => {
    const before = h.seen(0, "Status").length
    const t0 = performance.now()
    h.send(0, call(0, [10], "ops.ones", [[2]]))
    await h.passed(0, 0, 3000)
    const took = performance.now() - t0
    expect(h.seen(0, "Status").length).toBe(before + 1)
    expect(took).toBeLessThan(2500)
    // At least one more tick of the once-a-second Status passes here with nothing advanced.
    await Bun.sleep(1500)
    expect(h.seen(0, "Status").length, "Status was sent again though nothing advanced").toBe(before + 1)
  })

  test("a command that fails synchronously is passed by the periodic Status, with no RequestStatus", async () => {
    // An unknown ref in the arguments fails in the handler body itself; nothing after it runs.
    h.send(0, call(3, [11], "ops.add", [ref(99_999), 1]))
    expect((await h.next(0, "RemoteFunctionFailed")).ident).toBe(3)
    await h.passed(0, 3, 3000, "a command that failed synchronously did not advance firstUncompletedIdent (a false hang on the controller)")
    expect(h.seen(0, "Status").at(-1)!.firstUncompletedIdent).toBe(4)
  })

  test("1,000 malformed frames are each answered, and defined values survive them", async () => {
    const before = h.seen(0, "ProtocolError").length
    let seed = 7
    const random = () => (seed = (seed * 1103515245 + 12345) % 2 ** 31) / 2 ** 31
    const bodies: Uint8Array[] = []
    for (let i = 0; i < 1000; i++) {
      const kind = i % 4
      if (kind === 0) bodies.push(Uint8Array.from({ length: 1 + Math.floor(random() * 40) }, () => Math.floor(random() * 256)))
      else if (kind === 1) bodies.push(encode([99 + (i % 50), i]))
      else if (kind === 2) bodies.push(encode([MESSAGE_CODES.CallFunction, "not an ident", [], [], "ops.ones", [], {}, 1]))
      else bodies.push(encode([MESSAGE_CODES.DeleteRefs, ["x"]]))
    }
    for (const b of bodies) h.links[0]!.sendRawForTestsOnly(b)
    const f = 5
    h.send(0, fetch(f, ref(10)))
    expect(numbers((await h.next(0, "FetchResult", 20_000)).value)).toEqual([1, 1])
    const refused = h.seen(0, "ProtocolError").slice(before)
    expect(refused.length).toBe(1000)
    expect(refused.some((p) => p.message.includes("CallFunction.ident"))).toBe(true)
    expect(h.exits).toEqual([])
  })

  test("restartable: Exit starts a fresh state and says Restarted", async () => {
    h.send(0, { _tag: "Exit" })
    expect((await h.next(0, "Restarted", 5000, "a restartable Exit sent no Restarted")).restarts).toBe(1)
    const mark = h.received[0]!.length
    h.send(0, createStream)
    h.send(0, fetch(0, ref(10)))
    const answer = await h.until(() => h.received[0]!.slice(mark).find((m) => (m._tag === "FetchResult" || m._tag === "RemoteFunctionFailed") && m.ident === 0), 5000, "the fetch after the restart got no answer")
    expect(answer._tag, "a restartable Exit kept the old state: ref 10 from before the restart was still defined").toBe("RemoteFunctionFailed")
    expect(answer._tag === "RemoteFunctionFailed" && answer.error.message).toContain("unknown ref 10")
    h.send(0, call(1, [10], "ops.full", [[1], 9]))
    h.send(0, fetch(2, ref(10)))
    expect(numbers((await h.next(0, "FetchResult")).value)).toEqual([9])
    expect(h.exits).toEqual([])
  })
})

describe("a worker that is not restartable", () => {
  test("Exit ends the process with status 0", async () => {
    const h = await startWorkers({ world: 1 })
    try {
      h.send(0, { _tag: "Exit" })
      const end = await Promise.race([
        new Promise((resolve) => h.job.onExit(resolve)),
        Bun.sleep(10_000).then(() => "still running"),
      ])
      expect(end).toMatchObject({ rank: 0, status: 0 })
    } finally {
      await h.close()
    }
  }, 40_000)
})
