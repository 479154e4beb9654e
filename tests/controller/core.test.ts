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

/** A core of two ranks whose problems are kept, with both links admitted. */
const twoRanks = () => {
  const problems: string[] = []
  const core = new Core({ world: 2, captureSites: false, onProblem: (p) => void problems.push(p) })
  for (const r of [0, 1]) core.admit(recordingLink(r, 2, []))
  return { core, problems }
}
const deleteRefs = (ident: number): WorkerMessage => ({ _tag: "DeleteRefs", refs: [ident] })

test("a lost rank's FetchResult that comes after its exit settled the fetch is dropped quietly (its exit raced its socket)", async () => {
  const { core, problems } = twoRanks()
  const fetched = Effect.runPromise(Effect.flip(core.fetch([0, 1], [], "fetch", undefined, deleteRefs)))
  const ident = core.graph.live.keys().next().value!
  core.onExit({ rank: 0, status: 137, signal: "SIGKILL" })
  expect(await fetched).toMatchObject({ _tag: "WorkerLost", rank: 0 })
  core.onMessage(1, { _tag: "FetchResult", ident, value: 1 })
  core.onMessage(1, { _tag: "Status", firstUncompletedIdent: ident + 1 })
  // Rank 0's last bytes, sent before it was killed, read after its exit was seen.
  core.onMessage(0, { _tag: "FetchResult", ident, value: 0 })
  expect(problems).toEqual([])
  // A live rank's answer to an ident nothing waits for is still a problem worth saying.
  core.onMessage(1, { _tag: "FetchResult", ident, value: 1 })
  expect(problems).toEqual([`rank 1 sent a FetchResult for unknown ident ${ident}`])
})

test("a late fetch (a checkpoint's files) failed by a lost rank still takes a survivor's later result quietly", async () => {
  const { core, problems } = twoRanks()
  const fetched = Effect.runPromise(Effect.flip(core.fetch([0, 1], [], "save", undefined, deleteRefs, undefined, true)))
  const ident = core.graph.live.keys().next().value!
  for (const r of [0, 1]) core.onMessage(r, { _tag: "Status", firstUncompletedIdent: ident + 1 })
  core.onExit({ rank: 1, status: 137, signal: "SIGKILL" })
  expect(await fetched).toMatchObject({ _tag: "WorkerLost", rank: 1 })
  // Rank 0's file is durable now.
  core.onMessage(0, { _tag: "FetchResult", ident, value: { file: "rank-0.safetensors" } })
  expect(problems).toEqual([])
})

test("ranks given other commands in one tick each get their own batch, not the first rank's encoding", async () => {
  const core = new Core({ world: 2, captureSites: false })
  const got: WorkerMessage[][] = [[], []]
  for (const r of [0, 1]) core.admit(recordingLink(r, 2, got[r]!))
  core.command([0], "rank 0's call", [], [7], undefined, () => ({ _tag: "DeleteRefs", refs: [70] }))
  core.command([1], "rank 1's call", [], [8], undefined, () => ({ _tag: "DeleteRefs", refs: [80] }))
  await Bun.sleep(0)
  expect(got, "each rank's batch holds its own command").toEqual([[{ _tag: "DeleteRefs", refs: [70] }], [{ _tag: "DeleteRefs", refs: [80] }]])
})

test("a FetchResult for an unknown ident from a link admitted after its rank was lost is a problem", () => {
  const { core, problems } = twoRanks()
  core.onExit({ rank: 1, status: 137, signal: "SIGKILL" })
  expect(core.admit(recordingLink(1, 2, [])), "the lost rank's slot is free again").toBe(true)
  core.onMessage(1, { _tag: "FetchResult", ident: 987_654, value: 0 })
  expect(problems).toEqual(["rank 1 sent a FetchResult for unknown ident 987654"])
})
