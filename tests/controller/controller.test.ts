// The controller library against four real worker processes: meshes, calls, reduces,
// sends, borrows, fetches, batching, handle deletion, and how failures reach the program.
import { afterAll, beforeAll, describe, expect, spyOn, test } from "bun:test"
import { Effect, ManagedRuntime } from "effect"
import { readdirSync } from "node:fs"
import { Controller, ControllerError, HostTensor, ops, RemoteError, type ControllerApi } from "../../src/controller/index.ts"

const ROOT = new URL("../..", import.meta.url).pathname
const problems: string[] = []
let rt: ManagedRuntime.ManagedRuntime<Controller, unknown>
let ctl: ControllerApi

const run = <A, E>(e: Effect.Effect<A, E, Controller>) => rt.runPromise(e)
// Handles of commands that never reached the workers, kept for the whole file: deleting them
// would draw a ProtocolError (an unknown ref) into a later test's `problems`.
const unsentHandles: unknown[] = []
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

  test("a user function's result that shares memory (a view of its argument, the argument itself, one tensor returned twice) is its own contiguous copy: a write to it changes nothing else", async () => {
    const fixture = (name: string) => `tests/controller/fixtures:${name}`
    const got = await run(Effect.gen(function* () {
      const mesh = yield* ctl.mesh({ all: 4 })
      // x has memory of its own (a reshape's result would be a view, shared already).
      const x = yield* mesh.call("ops.mul", [yield* mesh.call("ops.reshape", [yield* mesh.call("ops.arange", [6], { dtype: "f32" }), [2, 3]]), 1])
      const t = yield* mesh.call(fixture("transposed"), [x], {}, { results: [{ dtype: "f32", shape: [3, 2] }] })
      const same = yield* mesh.call(fixture("itself"), [x], {}, { results: [{ dtype: "f32", shape: [2, 3] }] })
      const [a, b] = yield* mesh.callMany(fixture("twice"), [x], {}, { results: [{ dtype: "f32", shape: [2, 3] }, { dtype: "f32", shape: [2, 3] }] })
      const layout = yield* mesh.fetch(t, 0, { fn: fixture("layoutOf") })
      ops.add_(t, 100)
      ops.add_(same, 10)
      ops.add_(a!, 1000)
      return { layout, x: values(yield* mesh.fetch(x)), t: values(yield* mesh.fetch(t)), same: values(yield* mesh.fetch(same)), a: values(yield* mesh.fetch(a!)), b: values(yield* mesh.fetch(b!)) }
    }))
    expect(got).toEqual({
      layout: [[2, 1], 0, 1],
      x: [0, 1, 2, 3, 4, 5],
      t: [100, 103, 101, 104, 102, 105],
      same: [10, 11, 12, 13, 14, 15],
      a: [1000, 1002, 1004, 1006, 1008, 1010],
      b: [0, 2, 4, 6, 8, 10],
    })
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

  test("a value the wire cannot carry is refused at the call; one that slips past fails only its own command", async () => {
    const mesh = await run(ctl.mesh({ all: 4 }))
    for (const bad of [
      mesh.call("ops.full", [[2], undefined]),
      mesh.call("ops.neg", [() => 1]),
      mesh.call("tests/controller/fixtures:rankValue", [], {}, { results: [{ dtype: "f32", shape: [Number.NaN] }] }),
      mesh.call("ops.arange", [Number.POSITIVE_INFINITY]),
      mesh.call("ops.neg", [2n ** 70n]),
      mesh.call("ops.neg", [new HostTensor("f32", [2], new Uint8Array(4))]),
    ]) expect(await run(Effect.flip(bad))).toBeInstanceOf(ControllerError)
    // Nesting deeper than the codec takes gets past the Mesh's checks, in a batch with others.
    let deep: unknown = 1
    for (let i = 0; i < 40; i++) deep = [deep]
    const before = problems.length
    const [good, unsent] = await run(Effect.gen(function* () {
      const ok = yield* mesh.call("ops.ones", [[2]])
      const nested = yield* mesh.call("tests/controller/fixtures:rankValue", [deep], {}, { results: [{ dtype: "f32", shape: [2, 2] }] })
      unsentHandles.push(nested)
      const later = yield* mesh.call("ops.add", [ok, 1])
      return yield* Effect.all([mesh.fetch(later), Effect.flip(mesh.fetch(nested, 3))]).pipe(Effect.timeout("5 seconds"))
    }))
    expect(values(good)).toEqual([2, 2])
    expect(unsent).toBeInstanceOf(ControllerError)
    expect(unsent.message).toContain("could not be sent")
    expect(problems.slice(before).some((p) => p.includes("nesting deeper than"))).toBe(true)
    problems.length = before
  })

  test("an operand with one element takes the other's shape, even an empty one", async () => {
    const [shape, got] = await run(Effect.gen(function* () {
      const mesh = yield* ctl.mesh({ all: 4 })
      const empty = yield* mesh.call("ops.zeros", [[0]])
      const one = yield* mesh.call("ops.ones", [[1]])
      const sum = yield* mesh.call("ops.add", [one, empty])
      return [sum.shape, yield* mesh.fetch(sum, 1)] as const
    }))
    expect(shape).toEqual([0])
    expect((got as HostTensor).shape).toEqual([0])
  })

  test("a 0-dim tensor: reductions over its dim 0 or -1, and a transpose, run as their shape rules say", async () => {
    const got = await run(Effect.gen(function* () {
      const mesh = yield* ctl.mesh({ all: 4 })
      const s = yield* mesh.call("ops.full", [[], 3])
      const xs = [
        yield* mesh.call("ops.sum", [s], { dim: 0 }),
        yield* mesh.call("ops.amax", [s], { dim: -1, keepdim: true }),
        yield* mesh.call("ops.transpose", [s, 0, -1]),
      ]
      return yield* Effect.forEach(xs, (x) => Effect.map(mesh.fetch(x, 2), (v) => [x.shape, (v as HostTensor).shape, values(v)]))
    }))
    expect(got).toEqual([[[], [], [3]], [[], [], [3]], [[], [], [3]]])
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

  test("a mesh sends too (ctl.send is the same), and refuses a tensor that is not on its ranks", async () => {
    const [got, refused] = await run(Effect.gen(function* () {
      const mesh = yield* ctl.mesh({ dp: 2, tp: 2 })
      const top = yield* mesh.slice({ dp: 0 }), bottom = yield* mesh.slice({ dp: 1 })
      const v = yield* bottom.call("tests/controller/fixtures:rankValue", [], {}, { results: [{ dtype: "f32", shape: [2, 2] }] })
      const moved = yield* bottom.send(v, top)
      return [yield* top.fetchAll(moved), yield* Effect.flip(top.send(v, bottom))] as const
    }))
    expect(got.map((v) => values(v)[0])).toEqual([3, 4])
    expect(refused).toBeInstanceOf(ControllerError)
    expect(refused.message).toContain("is not on ranks [0,1]")
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

  test("a released tensor cannot be sent, nor a borrow's alias used once its scope closed", async () => {
    const mesh = await run(ctl.mesh({ dp: 2, tp: 2 }))
    const top = await run(mesh.slice({ dp: 0 })), bottom = await run(mesh.slice({ dp: 1 }))
    const t = await run(top.call("ops.ones", [[2]]))
    t.release()
    expect(await run(Effect.flip(ctl.send(t, bottom)))).toBeInstanceOf(ControllerError)
    const other = await run(ctl.stream())
    const u = await run(mesh.call("ops.ones", [[2]]))
    const alias = await run(Effect.scoped(mesh.borrow(u, other)))
    expect(await run(Effect.flip(mesh.call("ops.neg", [alias], {}, { stream: other })))).toBeInstanceOf(ControllerError)
    expect(problems).toEqual([])
  })
})

describe("batching and handles", () => {
  test("what is issued in one tick goes as one CommandGroup per worker", async () => {
    // Handles earlier tests dropped are deleted after GC, in frames of their own: collect and
    // let those DeleteRefs go out first, so the count below is only this tick's batch.
    Bun.gc(true)
    await Bun.sleep(50)
    const before = { ...ctl.core.sent }
    await run(Effect.gen(function* () {
      const mesh = yield* ctl.mesh({ all: 4 })
      let t = yield* mesh.call("ops.ones", [[2]])
      for (let i = 0; i < 9; i++) t = yield* mesh.call("ops.add", [t, 1])
      return yield* mesh.fetch(t)
    }))
    // One batch per worker: 10 calls, and on rank 0 the fetch and a RequestStatus (only the
    // rank the fetch waits on is asked; the mesh was made by an earlier test).
    expect(ctl.core.sent.frames - before.frames).toBe(4)
    expect(ctl.core.sent.commands - before.commands).toBeGreaterThanOrEqual(4 * 10 + 2)
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

  test("the same slice (or mesh) asked for again is the same mesh: a loop opens no communicator per iteration", async () => {
    const mesh = await run(ctl.mesh({ dp: 2, tp: 2 }))
    expect(await run(ctl.mesh({ dp: 2, tp: 2 }))).toBe(mesh)
    expect(await run(mesh.slice({ dp: 1 }))).toBe(await run(mesh.slice({ dp: 1 })))
    const workerPid = Number(await run(mesh.fetch(null, 0, { fn: "tests/controller/fixtures:pid" })))
    const openFiles = () => readdirSync(`/proc/${workerPid}/fd`).length
    const counts: number[] = []
    for (let i = 0; i < 10; i++) {
      const got = await run(Effect.gen(function* () {
        const row = yield* mesh.slice({ dp: 0 })
        return yield* row.fetch(yield* row.reduce(yield* row.call("ops.ones", [[2]]), "tp", "sum"))
      }))
      expect(values(got)).toEqual([2, 2])
      counts.push(openFiles())
    }
    expect(counts.at(-1)).toBe(counts[0])
  })
})

describe("failures", () => {
  test("a RemoteError names the root ident, rank, message, worker frames and the call site", async () => {
    const error = await run(Effect.flip(Effect.gen(function* () {
      const mesh = yield* ctl.mesh({ all: 4 })
      const t = yield* mesh.call("ops.ones", [[2]])
      const bad = yield* mesh.call("tests/controller/fixtures:failOnRank", [2, t], {}, { results: [{ dtype: "f32", shape: [2] }] })
      return yield* mesh.fetch(bad, 2)
    })))
    expect(error).toBeInstanceOf(RemoteError)
    const e = error as RemoteError
    expect(e.rank).toBe(2)
    expect(e.reason).toBe("deliberate failure on rank 2")
    expect(e.function).toBe("tests/controller/fixtures:failOnRank")
    expect(e.frames.some((f) => f.file.endsWith("tests/controller/fixtures.ts"))).toBe(true)
    expect(e.site).toContain("controller.test.ts")
  })

  test("a user function that returns other than it declared fails at its root naming both; dependents are poisoned; the mesh goes on", async () => {
    const [lie, dependent, honest] = await run(Effect.gen(function* () {
      const mesh = yield* ctl.mesh({ all: 4 })
      const t = yield* mesh.call("ops.ones", [[2]])
      const lied = yield* mesh.call("tests/controller/fixtures:asF64", [t], {}, { results: [{ dtype: "f32", shape: [2] }] })
      const later = lied.add(1)
      const fine = yield* mesh.call("tests/controller/fixtures:asF64", [t], {}, { results: [{ dtype: "f64", shape: [2] }] })
      return yield* Effect.all([Effect.flip(mesh.fetch(lied, 1)), Effect.flip(mesh.fetch(later, 1)), mesh.fetch(fine, 3)])
    }))
    for (const e of [lie, dependent]) {
      expect(e).toBeInstanceOf(RemoteError)
      expect((e as RemoteError).function).toBe("tests/controller/fixtures:asF64")
      expect((e as RemoteError).message).toContain("declared f32[2], returned f64[2]")
    }
    expect((dependent as RemoteError).ident).toBe((lie as RemoteError).ident)
    expect([(honest as HostTensor).dtype, values(honest)]).toEqual(["f64", [1, 1]])
  })

  test("a typed op that fails on the workers names its own call site, as a method and as a function", async () => {
    const [method, fn] = await run(Effect.gen(function* () {
      const mesh = yield* ctl.mesh({ all: 4 })
      // Its shape is unknown to the controller ([2, 2] on the workers), so the bad matmul is sent.
      const u = yield* mesh.call("tests/controller/fixtures:rankValue", [], {}, { results: 1 })
      const w = yield* mesh.call("ops.ones", [[3, 5]])
      const viaMethod = u.matmul(w)
      const viaFunction = ops.matmul(u, w)
      return yield* Effect.all([Effect.flip(mesh.fetch(viaMethod)), Effect.flip(mesh.fetch(viaFunction))])
    }))
    for (const e of [method, fn]) {
      expect(e).toBeInstanceOf(RemoteError)
      expect((e as RemoteError).function).toBe("ops.matmul")
      expect((e as RemoteError).site).toContain("controller.test.ts")
    }
  })

  test("a failure on one rank poisons its dependents there and, through a reduce, in its group; other ranks' results stay good", async () => {
    const [own, viaReduce, dependent, otherGroup, otherRank, independent] = await run(Effect.gen(function* () {
      const mesh = yield* ctl.mesh({ dp: 2, tp: 2 })
      const t = yield* mesh.call("ops.ones", [[2]])
      const bad = yield* mesh.call("tests/controller/fixtures:failOnRank", [3, t], {}, { results: [{ dtype: "f32", shape: [2] }] })
      const reduced = yield* mesh.reduce(bad, "tp", "sum")
      const later = yield* mesh.call("ops.add", [reduced, 1])
      const fine = yield* mesh.call("ops.add", [t, 1])
      return yield* Effect.all([
        Effect.flip(mesh.fetch(bad, 3)), Effect.flip(mesh.fetch(reduced, 2)), Effect.flip(mesh.fetch(later, { dp: 1, tp: 0 })),
        mesh.fetch(later, { dp: 0, tp: 1 }), mesh.fetch(bad, 2), mesh.fetch(fine, 3),
      ])
    }))
    for (const e of [own, viaReduce, dependent]) {
      expect(e).toBeInstanceOf(RemoteError)
      expect((e as RemoteError).rank).toBe(3)
    }
    expect((viaReduce as RemoteError).ident).toBe((dependent as RemoteError).ident)
    // The top row's tp group never held rank 3's input; rank 2's own call succeeded.
    expect(values(otherGroup)).toEqual([3, 3])
    expect(values(otherRank)).toEqual([1, 1])
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
