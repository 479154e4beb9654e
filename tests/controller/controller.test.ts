// The controller library against four real worker processes: meshes, calls, reduces,
// sends, borrows, fetches, batching, handle deletion, and how failures reach the program.
import { afterAll, beforeAll, describe, expect, spyOn, test } from "bun:test"
import { Effect, ManagedRuntime } from "effect"
import { Controller, ControllerError, HostTensor, RemoteError, type ControllerApi } from "../../src/controller/index.ts"

const ROOT = new URL("../..", import.meta.url).pathname
const problems: string[] = []
let rt: ManagedRuntime.ManagedRuntime<Controller, unknown>
let ctl: ControllerApi

const run = <A, E>(e: Effect.Effect<A, E, Controller>) => rt.runPromise(e)
const values = (v: unknown) => [...(v as HostTensor).toArray()].map(Number)

beforeAll(async () => {
  rt = ManagedRuntime.make(Controller.local({ world: 4, functionPath: [ROOT], onProblem: (p) => problems.push(p), onWorkerLine: () => {} }))
  ctl = await rt.runPromise(Effect.service(Controller))
}, 60_000)
afterAll(() => rt?.dispose())

describe("meshes and calls", () => {
  test("a 2x2 mesh: calls with handles, numbers and kwargs; built-in results know their shape", async () => {
    const [x, y, s] = await run(Effect.gen(function* () {
      const mesh = yield* ctl.mesh({ dp: 2, tp: 2 })
      const x = yield* mesh.call("ops.arange", [6], { dtype: "f32" })
      const m = yield* mesh.call("ops.reshape", [x, [2, 3]])
      const y = yield* mesh.call("ops.mul", [m, 3])
      const s = yield* mesh.call("ops.sum", [y], { dim: 1 })
      expect([m.shape, y.shape, s.shape]).toEqual([[2, 3], [2, 3], [2]])
      return yield* Effect.all([mesh.fetch(x), mesh.fetch(y, { dp: 1, tp: 1 }), mesh.fetch(s, 2)])
    }))
    expect(values(x)).toEqual([0, 1, 2, 3, 4, 5])
    expect(values(y)).toEqual([0, 3, 6, 9, 12, 15])
    expect(values(s)).toEqual([9, 36])
  })

  test("a bad call is refused before it reaches a worker", async () => {
    const error = await run(Effect.flip(Effect.gen(function* () {
      const mesh = yield* ctl.mesh({ all: 4 })
      const a = yield* mesh.call("ops.ones", [[2, 3]])
      return yield* mesh.call("ops.matmul", [a, a])
    })))
    expect(error).toBeInstanceOf(ControllerError)
    expect(error.message).toContain("inner dims differ")
  })

  test("fetchAll gives each rank's value, and a function applied on the worker", async () => {
    const all = await run(Effect.gen(function* () {
      const mesh = yield* ctl.mesh({ all: 4 })
      const v = yield* mesh.call("tests/controller/fixtures:rankValue", [], {}, { results: [{ dtype: "f32", shape: [2, 2] }] })
      return yield* mesh.fetchAll(v, { fn: "ops.sum" })
    }))
    expect(all.map((v) => values(v)[0])).toEqual([4, 8, 12, 16])
  })

  test("sub-meshes: slicing a dim away, and flattening", async () => {
    const [row, flat] = await run(Effect.gen(function* () {
      const mesh = yield* ctl.mesh({ dp: 2, tp: 2 })
      const row = yield* mesh.slice({ dp: 1 })
      const v = yield* row.call("tests/controller/fixtures:rankValue", [], {}, { results: [{ dtype: "f32", shape: [2, 2] }] })
      const summed = yield* row.reduce(v, "tp", "sum")
      const flat = yield* mesh.flatten("all")
      const w = yield* flat.call("tests/controller/fixtures:rankValue", [], {}, { results: [{ dtype: "f32", shape: [2, 2] }] })
      return yield* Effect.all([row.fetchAll(summed), flat.fetch(yield* flat.reduce(w, "all", "max"), 0)])
    }))
    expect(row.map((v) => values(v)[0])).toEqual([7, 7])
    expect(values(flat)).toEqual([4, 4, 4, 4])
  })
})

describe("collectives and sends", () => {
  test("every reduction over one dim, and over both", async () => {
    const got = await run(Effect.gen(function* () {
      const mesh = yield* ctl.mesh({ dp: 2, tp: 2 })
      const v = yield* mesh.call("tests/controller/fixtures:rankValue", [], {}, { results: [{ dtype: "f32", shape: [2, 2] }] })
      const out: Record<string, unknown> = {}
      for (const r of ["sum", "prod", "min", "max", "avg"] as const) out[r] = yield* mesh.fetch(yield* mesh.reduce(v, "dp", r), 0)
      const both = yield* mesh.reduce(v, ["dp", "tp"], "sum")
      const stacked = yield* mesh.reduce(v, "tp", "stack")
      expect(stacked.shape).toEqual([2, 2, 2])
      out.both = yield* mesh.fetch(both, 3)
      out.stack = yield* mesh.fetch(stacked, 2)
      return out
    }))
    // rank = 2 dp + tp holds rank + 1; rank 0's dp group is ranks {0, 2}: values 1 and 3.
    expect(values(got.sum)[0]).toBe(4)
    expect(values(got.prod)[0]).toBe(3)
    expect(values(got.min)[0]).toBe(1)
    expect(values(got.max)[0]).toBe(3)
    expect(values(got.avg)[0]).toBe(2)
    expect(values(got.both)[0]).toBe(10)
    expect(values(got.stack)).toEqual([3, 3, 3, 3, 4, 4, 4, 4])
  })

  test("send from one row of the mesh to the other", async () => {
    const got = await run(Effect.gen(function* () {
      const mesh = yield* ctl.mesh({ dp: 2, tp: 2 })
      const top = yield* mesh.slice({ dp: 0 }), bottom = yield* mesh.slice({ dp: 1 })
      const v = yield* top.call("tests/controller/fixtures:rankValue", [], {}, { results: [{ dtype: "f32", shape: [2, 2] }] })
      const moved = yield* ctl.send(v, bottom)
      return yield* bottom.fetchAll(moved)
    }))
    expect(got.map((v) => values(v)[0])).toEqual([1, 2])
  })

  test("a borrow issues Create, FirstUse, LastUse and Drop, and the alias works on its stream", async () => {
    const got = await run(Effect.scoped(Effect.gen(function* () {
      const mesh = yield* ctl.mesh({ all: 4 })
      const other = yield* ctl.stream()
      const t = yield* mesh.call("ops.full", [[3], 5])
      const borrowed = yield* mesh.borrow(t, other)
      const doubled = yield* mesh.call("ops.mul", [borrowed, 2], {}, { stream: other })
      return yield* mesh.fetch(doubled, 1, { stream: other })
    })))
    expect(values(got)).toEqual([10, 10, 10])
    expect(problems).toEqual([])
  })
})

describe("batching and handles", () => {
  test("what is issued in one tick goes as one CommandGroup per worker", async () => {
    const before = { ...ctl.core.sent }
    await run(Effect.gen(function* () {
      const mesh = yield* ctl.mesh({ all: 4 })
      let t = yield* mesh.call("ops.ones", [[2]])
      for (let i = 0; i < 9; i++) t = yield* mesh.call("ops.add", [t, 1])
      return yield* mesh.fetch(t)
    }))
    // One batch for CreateDeviceMesh + 10 calls + the fetch (+ RequestStatus) per worker.
    expect(ctl.core.sent.frames - before.frames).toBe(4)
    expect(ctl.core.sent.commands - before.commands).toBeGreaterThanOrEqual(4 * 12)
  })

  test("a released handle is deleted on the workers; a dropped one is deleted after GC", async () => {
    const mesh = await run(ctl.mesh({ all: 4 }))
    const t = await run(mesh.call("ops.ones", [[2]]))
    t.release()
    expect(await run(Effect.flip(mesh.fetch(t)))).toBeInstanceOf(ControllerError)
    // Past the handle, straight to the workers: the ref is gone there.
    const raw = await run(Effect.flip(ctl.core.fetch([0], [], "raw fetch", undefined, (ident) => ({
      _tag: "FetchValue", ident, mutates: [], function: null, object: t.ref, stream: mesh.defaultStream.ref,
    }))))
    expect(raw).toBeInstanceOf(RemoteError)
    expect(raw.message).toContain(`unknown ref ${t.ref.id}`)

    const release = spyOn(ctl.core, "release")
    let id = -1
    await (async () => {
      const u = await run(mesh.call("ops.ones", [[2]]))
      id = u.ref.id
    })()
    for (let i = 0; i < 20 && !release.mock.calls.some(([, refs]) => refs.includes(id)); i++) {
      Bun.gc(true)
      await Bun.sleep(50)
    }
    expect(release.mock.calls.some(([, refs]) => refs.includes(id))).toBe(true)
    release.mockRestore()
  })
})

describe("failures", () => {
  test("a RemoteError names the root ident, rank, message, worker frames and the call site", async () => {
    const error = await run(Effect.flip(Effect.gen(function* () {
      const mesh = yield* ctl.mesh({ all: 4 })
      const t = yield* mesh.call("ops.ones", [[2]])
      const bad = yield* mesh.call("tests/controller/fixtures:failOnRank", [2, t], {}, { results: [{ dtype: "f32", shape: [2] }] })
      return yield* mesh.fetch(bad, 0)
    })))
    expect(error).toBeInstanceOf(RemoteError)
    const e = error as RemoteError
    expect(e.rank).toBe(2)
    expect(e.reason).toBe("deliberate failure on rank 2")
    expect(e.function).toBe("tests/controller/fixtures:failOnRank")
    expect(e.frames.some((f) => f.file.endsWith("tests/controller/fixtures.ts"))).toBe(true)
    expect(e.site).toContain("controller.test.ts")
  })

  test("a failure on one rank poisons dependents on every rank, through a reduce too", async () => {
    const [viaReduce, dependent, independent] = await run(Effect.gen(function* () {
      const mesh = yield* ctl.mesh({ dp: 2, tp: 2 })
      const t = yield* mesh.call("ops.ones", [[2]])
      const bad = yield* mesh.call("tests/controller/fixtures:failOnRank", [3, t], {}, { results: [{ dtype: "f32", shape: [2] }] })
      const reduced = yield* mesh.reduce(bad, "tp", "sum")
      const later = yield* mesh.call("ops.add", [reduced, 1])
      const fine = yield* mesh.call("ops.add", [t, 1])
      return yield* Effect.all([Effect.flip(mesh.fetch(reduced, 0)), Effect.flip(mesh.fetch(later, { dp: 0, tp: 1 })), mesh.fetch(fine, 3)])
    }))
    for (const e of [viaReduce, dependent]) {
      expect(e).toBeInstanceOf(RemoteError)
      expect((e as RemoteError).rank).toBe(3)
    }
    expect((viaReduce as RemoteError).ident).toBe((dependent as RemoteError).ident)
    expect(values(independent)).toEqual([2, 2])
  })

  test("a command outstanding too long is reported with the ranks that have not passed it", async () => {
    const mesh = await run(ctl.mesh({ all: 4 }))
    const t = await run(mesh.call("ops.ones", [[2]]))
    const slow = await run(mesh.call("tests/controller/fixtures:slowOnRank", [1, 3000, t], {}, { results: [{ dtype: "f32", shape: [2] }] }))
    // Past the once-a-second Status of the ranks that finished, so only rank 1 is behind.
    await Bun.sleep(1500)
    const reports = ctl.core.checkHangs(performance.now() + 30_000)
    const mine = reports.find((r) => r.label === "tests/controller/fixtures:slowOnRank")
    expect(mine?.behind).toEqual([1])
    expect(mine?.site).toContain("controller.test.ts")
    expect(values(await run(mesh.fetch(slow, 1)))).toEqual([1, 1])
  })
})
