// Inside a recording (real workers, world 4 as dp=2 x tp=2): reduces, sends, borrows and user
// functions replay as they run outside one; a failure poisons exactly the results that depend
// on it, reports the recorded command's own call site, and the mesh goes on.
import { afterAll, beforeAll, describe, expect, test } from "bun:test"
import { Effect, ManagedRuntime } from "effect"
import { compile, Controller, eager, opsOn, param, type ControllerApi, type Mesh, type RemoteTensor } from "../../src/controller/index.ts"

const ROOT = new URL("../..", import.meta.url).pathname
const FIXTURES = "tests/recordings/fixtures"
let rt: ManagedRuntime.ManagedRuntime<Controller, unknown>
let ctl: ControllerApi
let mesh: Mesh
const problems: string[] = []

beforeAll(async () => {
  rt = ManagedRuntime.make(Controller.local({ world: 4, functionPath: [ROOT], onProblem: (p) => problems.push(p), onWorkerLine: () => {} }))
  ctl = await rt.runPromise(Effect.service(Controller))
  mesh = await rt.runPromise(ctl.mesh({ dp: 2, tp: 2 }))
}, 60_000)
afterAll(() => rt?.dispose())

const run = <A, E>(e: Effect.Effect<A, E, Controller>) => rt.runPromise(e)
const all = (t: RemoteTensor) => run(Effect.map(mesh.fetchAll(t), (hs) => hs.map((h) => Array.from((h as { toArray(): Float32Array }).toArray()))))

describe("commands inside a recording", () => {
  test("a user function, a reduce over dp, a send to a sub-mesh and a borrow on another stream replay as they run unrecorded", async () => {
    const stream = await run(ctl.stream())
    const dp0 = await run(mesh.slice({ dp: 0 })), dp1 = await run(mesh.slice({ dp: 1 }))
    const body = (x: RemoteTensor) => Effect.gen(function* () {
      const mine = yield* mesh.call(`${FIXTURES}:byRank`, [x], {}, { results: [x.meta!] })
      const summed = yield* mesh.reduce(mine, "dp", "sum")
      const sent = yield* dp0.send(summed, dp1)
      const doubled = yield* Effect.scoped(Effect.gen(function* () {
        const b = yield* mesh.borrow(summed, stream)
        return yield* mesh.call("ops.mul", [b, 2], {}, { stream })
      }))
      return { summed, sent, doubled }
    })
    const step = compile(body)
    const x = opsOn(mesh).ones([2])
    for (let i = 0; i < 3; i++) {
      const r = await run(step(x))
      const e = await run(body(x))
      expect(await all(r.summed)).toEqual(await all(e.summed))
      expect(await run(Effect.map(dp1.fetchAll(r.sent), (hs) => hs.map((h) => Array.from((h as { toArray(): Float32Array }).toArray())))))
        .toEqual(await run(Effect.map(dp1.fetchAll(e.sent), (hs) => hs.map((h) => Array.from((h as { toArray(): Float32Array }).toArray())))))
      expect(await all(r.doubled)).toEqual(await all(e.doubled))
    }
    // ranks 0 and 2 (tp=0) hold 1 + 3, ranks 1 and 3 hold 2 + 4.
    expect(await all((await run(step(x))).summed)).toEqual([[4, 4], [6, 6], [4, 4], [6, 6]])
    expect(step.traces).toBe(1)
    expect(problems).toEqual([])
  }, 60_000)

  test("a failure poisons exactly what depends on it and reports the recorded command's call site", async () => {
    const step = compile((x: RemoteTensor, fail: number) => Effect.gen(function* () {
      const bad = yield* mesh.call(`${FIXTURES}:failIf`, [1, fail, x], {}, { results: [x.meta!] })
      const local = bad.add(1)
      const reduced = yield* mesh.reduce(x.mul(3), "tp", "sum")
      const mixed = yield* mesh.reduce(bad, "dp", "sum")
      return { local, reduced, mixed, fine: x.add(5) }
    }), { name: "failing" })
    const x = opsOn(mesh).ones([2])
    const good = await run(step(x, param(0)))
    expect(await all(good.local)).toEqual([[2, 2], [2, 2], [2, 2], [2, 2]])
    const r = await run(step(x, param(1)))
    // Rank 1 failed: its own results, and rank 3's, which reduce with it over dp.
    const local = await run(Effect.flip(mesh.fetch(r.local, 1)))
    expect(local._tag).toBe("RemoteError")
    expect(local.message).toMatch(/rank 1: command \d+ \(tests\/recordings\/fixtures:failIf\) failed with Error: deliberate failure on rank 1/)
    expect(local.message).toMatch(/issued at .*commands\.test\.ts:57/)
    expect((await run(Effect.flip(mesh.fetch(r.mixed, 3))))._tag).toBe("RemoteError")
    expect(await run(Effect.map(mesh.fetch(r.local, 0), (h) => Array.from((h as { toArray(): Float32Array }).toArray())))).toEqual([2, 2])
    expect(await run(Effect.map(mesh.fetch(r.mixed, 2), (h) => Array.from((h as { toArray(): Float32Array }).toArray())))).toEqual([2, 2])
    // What does not depend on the failed command is good on every rank, rank 1 included.
    expect(await all(r.reduced)).toEqual([[6, 6], [6, 6], [6, 6], [6, 6]])
    expect(await all(r.fine)).toEqual([[6, 6], [6, 6], [6, 6], [6, 6]])
    // The mesh goes on, and the next replay is good again.
    expect(await all((await run(step(x, param(0)))).mixed)).toEqual([[2, 2], [2, 2], [2, 2], [2, 2]])
    expect(step.traces).toBe(1)
  }, 60_000)

  test("a poisoned input poisons the results that read it, and only those", async () => {
    const step = compile((a: RemoteTensor, b: RemoteTensor) => ({ fromA: a.add(1), fromB: b.add(1) }))
    const x = opsOn(mesh).ones([2])
    const poisoned = await run(mesh.call(`${FIXTURES}:failIf`, [0, 1, x], {}, { results: [x.meta!] }))
    const r = await run(step(poisoned, x))
    const f = await run(Effect.flip(mesh.fetch(r.fromA, 0)))
    expect(f.message).toMatch(/deliberate failure on rank 0/)
    expect(await all(r.fromB)).toEqual([[2, 2], [2, 2], [2, 2], [2, 2]])
    expect(await run(Effect.map(mesh.fetch(r.fromA, 1), (h) => Array.from((h as { toArray(): Float32Array }).toArray())))).toEqual([2, 2])
  }, 30_000)

  test("a refused op inside the step fails the call with its ControllerError, sending nothing", async () => {
    const step = compile((x: RemoteTensor) => eager(() => x.matmul(x.reshape([1, 2]))))
    const e = await run(Effect.flip(Effect.flatten(Effect.sync(() => step(opsOn(mesh).ones([3]))))))
    expect(e._tag).toBe("ControllerError")
    expect(ctl.core.sink).toBe(ctl.core)
  }, 30_000)

  test("a borrow made outside the step, or a compiled step called inside another's trace, is refused with a clear error", async () => {
    const stream = await run(ctl.stream())
    const x = opsOn(mesh).ones([2])
    const outside = await run(Effect.flip(Effect.scoped(Effect.gen(function* () {
      const b = yield* mesh.borrow(x, stream)
      return yield* compile((t: RemoteTensor) => mesh.call("ops.mul", [t, 2], {}, { stream }), { name: "borrowing" })(b)
    }))))
    expect(outside.message).toContain("compile(borrowing): a borrow made outside the step cannot be used inside it")
    const inner = compile((t: RemoteTensor) => t.add(1), { name: "inner" })
    const nested = await run(Effect.flip(compile((t: RemoteTensor) => inner(t), { name: "outer" })(x)))
    expect(nested.message).toContain("compile(inner) was called while compile(outer) records its step")
    expect(ctl.core.sink).toBe(ctl.core)
    // The mesh goes on.
    expect(await all(x.add(1))).toEqual([[2, 2], [2, 2], [2, 2], [2, 2]])
  }, 30_000)
})
