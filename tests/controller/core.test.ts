// The controller's core, message by message (no processes): what a fetch puts in the batch it
// goes out with, and when a long burst goes out. The commands' own messages do not matter here:
// DeleteRefs stands in for them.
import { expect, test } from "bun:test"
import { Effect, Result } from "effect"
import { Core, FLUSH_EVERY } from "../../src/controller/core.ts"
import type { WorkerLink } from "../../src/controller/listener.ts"
import { decodeWorkerMessage } from "../../src/protocol/codec.ts"
import type { WorkerMessage } from "../../src/protocol/messages.ts"

/** A link that decodes every frame the core writes to it. */
const recordingLink = (rank: number, world: number, got: WorkerMessage[]): WorkerLink => ({
  hello: { _tag: "WorkerHello", rank, world, pid: 1000 + rank, proof: new Uint8Array(32), device: "cpu" },
  host: "127.0.0.1",
  send: (m) => (got.push(m), true),
  sendEncoded: (parts) => {
    const decoded = decodeWorkerMessage(Buffer.concat(parts.map((p) => Buffer.from(p))))
    if (Result.isFailure(decoded)) throw new Error(decoded.failure.message)
    got.push(decoded.success)
    return true
  },
  sendRawForTestsOnly: () => {},
  close: () => {},
})

test("a fetch goes out with a RequestStatus for the last ident, so it settles without the once-a-second Status", async () => {
  const core = new Core({ world: 1, captureSites: false })
  const got: WorkerMessage[] = []
  core.admit(recordingLink(0, 1, got))
  const call = core.command([0], "a call", [], [5], undefined, (ident) => ({ _tag: "DeleteRefs", refs: [ident] }))
  const fetched = Effect.runPromise(core.fetch([0], [5], "fetch", undefined, (ident) => ({ _tag: "DeleteRefs", refs: [ident] })))
  await Bun.sleep(0)
  expect(got.length, "one batch for the one worker").toBe(1)
  const batch = got[0]!
  const commands = batch._tag === "CommandGroup" ? batch.commands : [batch]
  expect(commands.at(-1), "a fetch's batch did not ask for Status (the fetch would wait for the once-a-second one)").toEqual({ _tag: "RequestStatus", ident: call.ident + 1 })
  core.onMessage(0, { _tag: "FetchResult", ident: call.ident + 1, value: 3 })
  core.onMessage(0, { _tag: "Status", firstUncompletedIdent: call.ident + 2 })
  expect(await fetched).toEqual([3])
})

test("a batch without a fetch asks for no Status", async () => {
  const core = new Core({ world: 1, captureSites: false })
  const got: WorkerMessage[] = []
  core.admit(recordingLink(0, 1, got))
  core.command([0], "a call", [], [5], undefined, (ident) => ({ _tag: "DeleteRefs", refs: [ident] }))
  await Bun.sleep(0)
  expect(got).toEqual([{ _tag: "DeleteRefs", refs: [0] }])
})

test(`a long synchronous burst goes out every FLUSH_EVERY (${FLUSH_EVERY}) messages while it is issued, the rest at the next tick, in order`, async () => {
  const core = new Core({ world: 2, captureSites: false })
  const got: WorkerMessage[][] = [[], []]
  core.admit(recordingLink(0, 2, got[0]!))
  core.admit(recordingLink(1, 2, got[1]!))
  const total = 2 * FLUSH_EVERY + 10
  const framesWhileIssuing: number[] = []
  for (let i = 0; i < total; i++) {
    core.command([0, 1], "a call", [], [i + 1], undefined, (ident) => ({ _tag: "DeleteRefs", refs: [ident] }))
    if ((i + 1) % FLUSH_EVERY === 0) framesWhileIssuing.push(got[0]!.length)
  }
  expect(framesWhileIssuing, "frames sent by the end of each FLUSH_EVERY commands of the burst").toEqual([1, 2])
  await Bun.sleep(0)
  for (const frames of got) {
    expect(frames.map((f) => (f._tag === "CommandGroup" ? f.commands.length : 1))).toEqual([FLUSH_EVERY, FLUSH_EVERY, 10])
    const idents = frames.flatMap((f) => (f._tag === "CommandGroup" ? [...f.commands] : [f])).map((m) => (m._tag === "DeleteRefs" ? m.refs[0] : -1))
    expect(idents).toEqual(Array.from({ length: total }, (_, i) => i))
  }
})
