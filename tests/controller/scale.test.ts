// One real controller (Controller.attach, its listener and the handshake with the job token)
// driving 64 simulated workers (bench/simWorkers.ts: one socket each, the real wire, no
// computing): they all attach, ops and fetches on the whole mesh and on a sub-mesh complete with
// every rank's answer, a rank whose socket closes is reported as WorkerLost naming it, and a rank
// that stops answering is reported as hung once hangAfterMs has passed.
import { expect, test } from "bun:test"
import { Effect } from "effect"
import { randomBytes } from "node:crypto"
import { Controller, type HangReport } from "../../src/controller/index.ts"
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
    while (hangs.length === 0 && performance.now() - start < 10_000) yield* Effect.sleep("50 millis")
    return { all, one, fromSub, lost, unaffected, connected: ctl.workers().length }
  }).pipe(Effect.provide(Controller.attach({ world: WORLD, listen: address, token, hangAfterMs: HANG_AFTER_MS, onHang: (r) => hangs.push(r), onProblem: (p) => problems.push(p), startTimeoutMs: 30_000 }))))
  expect(got.all, "every rank answered its fetch, in mesh order").toEqual(Array.from({ length: WORLD }, (_, r) => r))
  expect(got.one).toBe(7)
  expect(got.fromSub, "the sub-mesh dp=2 is ranks 16..23").toEqual([16, 17, 18, 19, 20, 21, 22, 23])
  expect(closed).toEqual([WORLD - 1])
  expect(got.lost._tag).toBe("WorkerLost")
  expect(got.lost._tag === "WorkerLost" && got.lost.rank, "the WorkerLost names the rank whose socket closed").toBe(WORLD - 1)
  expect(got.unaffected).toBe(0)
  expect(hangs.length, `no hang reported: ${problems.join("; ")}`).toBe(1)
  expect(hangs[0]!.label).toBe("sim:stall")
  expect(hangs[0]!.behind, "only the stalled rank is behind (the lost one is not waited for)").toEqual([5])
  expect(hangs[0]!.waitingMs).toBeGreaterThanOrEqual(HANG_AFTER_MS)
  // The layer's end sent Exit to every rank still connected.
  await sims.done
}, 30_000)
