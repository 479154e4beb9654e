// One real controller (Controller.attach, its listener and the handshake with the job token)
// driving 64 simulated workers (bench/simWorkers.ts: one socket each, the real wire, no
// computing): they all attach, ops and fetches on the whole mesh and on a sub-mesh complete with
// every rank's answer, a rank whose socket closes is reported as WorkerLost naming it, a rank
// that stops answering is reported as hung once hangAfterMs has passed, and a world of 256
// connecting at once is admitted without a handshake cut off. And, on the core alone,
// the work per message and per command does not grow with the ranks where it need not.
import { expect, test } from "bun:test"
import { Effect } from "effect"
import { randomBytes } from "node:crypto"
import { Controller, type HangReport } from "../../src/controller/index.ts"
import { Core } from "../../src/controller/core.ts"
import type { WorkerLink } from "../../src/controller/listener.ts"
import { RemoteStream } from "../../src/controller/handles.ts"
import { createMesh } from "../../src/controller/mesh.ts"
import { opsOn } from "../../src/controller/ops.ts"
import { NDSlice } from "../../src/protocol/ndslice.ts"
import { Ref } from "../../src/protocol/values.ts"
import { startSimulatedWorkers } from "../../bench/simWorkers.ts"

const WORLD = 64
const HANG_AFTER_MS = 300

/** A port nothing listens on now (the controller binds it next). */
const freePort = (): number => {
  const l = Bun.listen({ hostname: "127.0.0.1", port: 0, socket: { data() {} } })
  const port = l.port
  l.stop(true)
  return port
}

test("64 simulated ranks attach to one controller; ops, fetches, a lost rank and a hung one are reported", async () => {
  const token = randomBytes(16).toString("hex")
  const address = `127.0.0.1:${freePort()}`
  const closed: number[] = []
  const sims = startSimulatedWorkers({ address, token, world: WORLD, ranks: Array.from({ length: WORLD }, (_, r) => r), onClosed: (r) => closed.push(r) })
  const hangs: HangReport[] = []
  const problems: string[] = []
  const got = await Effect.runPromise(Effect.gen(function* () {
    const ctl = yield* Controller
    const mesh = yield* ctl.mesh({ x: WORLD })
    const x = yield* mesh.call("ops.full", [[1], 0])
    for (let i = 0; i < 20; i++) yield* mesh.run("ops.add_", [x, 1], {}, { mutates: [x] })
    const all = yield* mesh.fetchAll(x)
    const one = yield* mesh.fetch(x, 7)
    const sub = yield* (yield* ctl.mesh({ dp: 8, tp: 8 })).slice({ dp: 2 })
    const y = yield* sub.call("ops.full", [[1], 0])
    yield* sub.run("ops.add_", [y, 1], {}, { mutates: [y] })
    const fromSub = yield* sub.fetchAll(y)
    // Rank 63 closes its socket on receipt; the fetch in the same batch waits on it.
    yield* mesh.run("sim:close", [WORLD - 1])
    const lost = yield* Effect.flip(mesh.fetchAll(x))
    // Rank 5 stops in this command: a fetch that does not need it still completes.
    yield* mesh.run("sim:stall", [5])
    const unaffected = yield* mesh.fetch(x, 0)
    const start = performance.now()
    while (!hangs.some((h) => h.label === "sim:stall") && performance.now() - start < 10_000) yield* Effect.sleep("50 millis")
    return { all, one, fromSub, lost, unaffected, connected: ctl.workers().length }
  }).pipe(Effect.provide(Controller.attach({ world: WORLD, listen: address, token, hangAfterMs: HANG_AFTER_MS, onHang: (r) => hangs.push(r), onProblem: (p) => problems.push(p), startTimeoutMs: 30_000 }))))
  expect(got.all, "every rank answered its fetch, in mesh order").toEqual(Array.from({ length: WORLD }, (_, r) => r))
  expect(got.one).toBe(7)
  expect(got.fromSub, "the sub-mesh dp=2 is ranks 16..23").toEqual([16, 17, 18, 19, 20, 21, 22, 23])
  expect(closed).toEqual([WORLD - 1])
  expect(got.lost._tag).toBe("WorkerLost")
  expect(got.lost._tag === "WorkerLost" && got.lost.rank, "the WorkerLost names the rank whose socket closed").toBe(WORLD - 1)
  expect(got.unaffected).toBe(0)
  // On a loaded host an ordinary command may be reported too; the stalled one is reported once.
  const stalled = hangs.filter((h) => h.label === "sim:stall")
  expect(stalled.length, `the stalled command's reports (${problems.join("; ")})`).toBe(1)
  expect(stalled[0]!.behind, "only the stalled rank is behind (the lost one is not waited for)").toEqual([5])
  expect(stalled[0]!.at).toEqual([{ rank: 5, ident: stalled[0]!.ident, label: "sim:stall" }])
  expect(stalled[0]!.waitingMs).toBeGreaterThanOrEqual(HANG_AFTER_MS)
  // The layer's end sent Exit to every rank still connected.
  await sims.done
}, 30_000)

test("256 simulated ranks connecting at once all pass the handshake: the listener cuts none of them off", async () => {
  const world = 256
  const token = randomBytes(16).toString("hex")
  const address = `127.0.0.1:${freePort()}`
  const problems: string[] = []
  const layer = Controller.attach({ world, listen: address, token, onProblem: (p) => problems.push(p), startTimeoutMs: 30_000 })
  // The listener is up before any rank connects, so every connection is one the controller took.
  const fetched = Effect.runPromise(Effect.gen(function* () {
    const mesh = yield* (yield* Controller).mesh({ x: world })
    return yield* mesh.fetchAll(yield* mesh.call("ops.full", [[1], 0]))
  }).pipe(Effect.provide(layer)))
  await Bun.sleep(200)
  const workers = startSimulatedWorkers({ address, token, world, ranks: Array.from({ length: world }, (_, r) => r) })
  expect(await fetched).toEqual(Array.from({ length: world }, (_, r) => r))
  await workers.done
  expect(workers.cutOff(), `handshakes cut off: ${problems.slice(0, 3).join("; ")}`).toBe(0)
}, 30_000)

/** A core of `world` ranks whose links drop what they are sent, counting the graph's per-rank look-ups. */
const countingCore = (world: number) => {
  const core = new Core({ world, captureSites: false })
  for (let rank = 0; rank < world; rank++)
    core.admit({ hello: { _tag: "WorkerHello", rank, world, pid: 0, proof: new Uint8Array(32), device: "cpu" }, host: "local", send: () => true, sendEncoded: () => true, sendRawForTestsOnly: () => {}, close: () => {} } satisfies WorkerLink)
  const passed = core.graph.passed.bind(core.graph)
  const counted = { lookups: 0 }
  core.graph.passed = (rank) => (counted.lookups++, passed(rank))
  return { core, counted, all: Array.from({ length: world }, (_, r) => r) }
}

test("a fetch from every one of 1,024 ranks settles with work linear in the ranks, not quadratic", async () => {
  const world = 1024
  const { core, counted, all } = countingCore(world)
  const fetched = Effect.runPromise(core.fetch(all, [], "fetch", undefined, (ident) => ({ _tag: "RequestStatus", ident })))
  await Bun.sleep(0)
  const ident = core.graph.live.keys().next().value!
  counted.lookups = 0
  for (let rank = 0; rank < world; rank++) {
    core.onMessage(rank, { _tag: "FetchResult", ident, value: rank })
    core.onMessage(rank, { _tag: "Status", firstUncompletedIdent: ident + 1 })
  }
  expect(await fetched).toEqual(all)
  // Each message looks its rank up a few times; a scan of every rank per message is ~2 * world^2.
  expect(counted.lookups, "per-rank look-ups while 1,024 ranks answered one fetch").toBeLessThan(16 * world)
})

test("issuing a command on every rank costs the graph no look-up per rank", () => {
  const world = 1024, commands = 100
  const { core, counted, all } = countingCore(world)
  for (let i = 0; i < commands; i++) core.command(all, "op", [], [], undefined, (ident) => ({ _tag: "RequestStatus", ident }))
  expect(counted.lookups, `per-rank look-ups for ${commands} commands on ${world} ranks`).toBeLessThan(commands)
  // A rank that reported passing idents not issued yet has passed a command issued with one.
  core.onMessage(0, { _tag: "Status", firstUncompletedIdent: 10_000 })
  expect(core.command(all, "op", [], [], undefined, (ident) => ({ _tag: "RequestStatus", ident })).waiting, "rank 0 had already passed it").toBe(world - 1)
  // Once a rank is lost, a command looks at each rank (it fails at once on the lost one).
  core.onDisconnect(3)
  const node = core.command(all, "op", [], [], undefined, (ident) => ({ _tag: "RequestStatus", ident }))
  expect(node.waiting, "the lost rank (and rank 0, passed) are not waited for").toBe(world - 2)
})

test("a fetch from one rank of 1,024 asks only the rank it waits on for a Status", async () => {
  const world = 1024
  const core = new Core({ world, captureSites: false })
  const framesTo = new Array<number>(world).fill(0)
  for (let rank = 0; rank < world; rank++)
    core.admit({ hello: { _tag: "WorkerHello", rank, world, pid: 0, proof: new Uint8Array(32), device: "cpu" }, host: "local", send: () => true, sendEncoded: () => (framesTo[rank]!++, true), sendRawForTestsOnly: () => {}, close: () => {} })
  const fetched = Effect.runPromise(core.fetch([700], [], "fetch", undefined, (ident) => ({ _tag: "FetchValue", ident, mutates: [], function: null, object: null, stream: new Ref(1) })))
  await Bun.sleep(0)
  expect(framesTo.flatMap((n, rank) => (n > 0 ? [rank] : [])), "ranks sent a frame for a fetch from rank 700 alone").toEqual([700])
  core.onMessage(700, { _tag: "FetchResult", ident: 0, value: 7 })
  core.onMessage(700, { _tag: "Status", firstUncompletedIdent: 1 })
  expect(await fetched).toEqual([7])
})

test("many commands hung behind many ranks are reported with one walk of the live commands, each rank where it is", () => {
  const world = 64, commands = 200
  const core = new Core({ world, captureSites: false, hangAfterMs: 1 })
  for (let rank = 0; rank < world; rank++)
    core.admit({ hello: { _tag: "WorkerHello", rank, world, pid: 0, proof: new Uint8Array(32), device: "cpu" }, host: "local", send: () => true, sendEncoded: () => true, sendRawForTestsOnly: () => {}, close: () => {} })
  const all = Array.from({ length: world }, (_, r) => r)
  for (let i = 0; i < commands; i++) core.command(all, `op ${i}`, [], [], undefined, (ident) => ({ _tag: "RequestStatus", ident }))
  // Every rank but the last passed the first 150; the last passed none: all 200 stay live.
  for (let rank = 0; rank < world - 1; rank++) core.onMessage(rank, { _tag: "Status", firstUncompletedIdent: 150 })
  const waitsOn = core.graph.waitsOn.bind(core.graph)
  let lookups = 0
  core.graph.waitsOn = (node, rank) => (lookups++, waitsOn(node, rank))
  const reports = core.checkHangs(performance.now() + 1000)
  expect(reports.length).toBe(commands)
  expect(reports[0]!.behind).toEqual([world - 1])
  const late = reports[160]!
  expect(late.behind).toEqual(all)
  expect(late.at.find((a) => a.rank === 0)).toEqual({ rank: 0, ident: 150, label: "op 150" })
  expect(late.at.find((a) => a.rank === world - 1)).toEqual({ rank: world - 1, ident: 0, label: "op 0" })
  // Who is behind each command: commands x ranks look-ups. Where each rank is, once for all the
  // reports: about 150 x 63 more; once per report and rank it was about 50 x 63 x 150.
  expect(lookups, "look-ups to report 200 hung commands on 64 ranks").toBeLessThan(commands * world + 4 * 150 * world)
})

test("a fetch of a collective's result over 1,024 ranks walks the group once, not once per member", async () => {
  const world = 1024
  const { core, all } = countingCore(world)
  const mesh = createMesh(core, ["x"], NDSlice.contiguous([world]), new RemoteStream(core, core.newRef()))
  const x = opsOn(mesh).ones([1])
  const reduced = mesh.issueReduce(x, "x", "sum", {}, undefined)
  const reduce = [...core.graph.live.values()].at(-1)!
  expect(reduce.exchange!.peers(0), "the members of one group share its list").toBe(reduce.exchange!.peers(world - 1))
  expect([...reduce.exchange!.peers(5)]).toEqual(all)
  // The walk behind a fetch: count the steps through the group's list.
  const group = reduce.exchange!.peers(0) as number[]
  const items = group[Symbol.iterator].bind(group)
  let steps = 0
  Object.defineProperty(group, Symbol.iterator, { value: function* () { for (const r of items()) (steps++, yield r) } })
  const fetch = core.graph.add(1_000_000, [0], [reduced.ref.id], [], "fetch")
  const needs = core.graph.needs(fetch, [0])
  expect([...needs.keys()].sort((a, b) => a - b), "rank 0's result of the reduce waits on every rank").toEqual(all)
  expect(steps, "steps through the group's list").toBeLessThanOrEqual(world)
})
