// Calls the registry refuses: on the controller as a ControllerError before anything is sent
// (catchable by tag), and on a worker, for a client that talks to it directly, as an
// OpArgumentError that fails only that command.
import { afterAll, beforeAll, describe, expect, spyOn, test } from "bun:test"
import { Effect, ManagedRuntime } from "effect"
import { Controller, type ControllerApi, type ControllerError } from "../../src/controller/index.ts"
import { call, createStream, fetch, host, numbers, ref } from "../worker/build.ts"
import { startWorkers, type Harness } from "../worker/harness.ts"

describe("the controller refuses before sending", () => {
  let rt: ManagedRuntime.ManagedRuntime<Controller, unknown>
  let ctl: ControllerApi
  beforeAll(async () => {
    rt = ManagedRuntime.make(Controller.local({ world: 1, onWorkerLine: () => {} }))
    ctl = await rt.runPromise(Effect.service(Controller))
  }, 60_000)
  afterAll(() => rt?.dispose())

  test("an unknown keyword, a wrong type and a bad shape, each caught by its tag", async () => {
    const issued = spyOn(ctl.core, "command")
    const reasons = await rt.runPromise(Effect.gen(function* () {
      const mesh = yield* ctl.mesh({ x: 1 })
      const x = yield* mesh.call("ops.ones", [[2, 3]])
      issued.mockClear()
      const refused = (e: Effect.Effect<unknown, ControllerError>): Effect.Effect<string> =>
        e.pipe(Effect.as("sent"), Effect.catchTag("ControllerError", (err) => Effect.succeed(err.message)))
      return [
        yield* refused(mesh.call("ops.sum", [x], { axis: 0 })),
        yield* refused(mesh.call("ops.sum", [x], { keepdim: "yes" })),
        yield* refused(mesh.call("ops.to", [x], { dtype: "float32" })),
        yield* refused(mesh.call("ops.matmul", [x, x])),
        yield* refused(mesh.call("ops.neg", [x, x])),
      ]
    }))
    expect(reasons[0]).toMatch(/ops\.sum: unexpected keyword argument 'axis'/)
    expect(reasons[1]).toMatch(/keepdim must be a boolean, got string/)
    expect(reasons[2]).toMatch(/dtype must be a dtype/)
    expect(reasons[3]).toMatch(/inner dims differ: f32\[2, 3\] @ f32\[2, 3\]/)
    expect(reasons[4]).toMatch(/takes 1 positional argument/)
    expect(issued).not.toHaveBeenCalled()
    issued.mockRestore()
  })

  test("a keyword the op declares is honoured: to(dtype=...) and sum(dim=...)", async () => {
    const [cast, summed] = await rt.runPromise(Effect.gen(function* () {
      const mesh = yield* ctl.mesh({ x: 1 })
      const x = yield* mesh.call("ops.arange", [6])
      const y = yield* mesh.call("ops.reshape", [x, [2, 3]])
      const c = yield* mesh.call("ops.to", [y], { dtype: "i32" })
      const s = yield* mesh.call("ops.sum", [y], { dim: 0 })
      expect([c.dtype, s.shape]).toEqual(["i32", [3]])
      return yield* Effect.all([mesh.fetch(c), mesh.fetch(s)])
    }))
    expect(numbers(cast)).toEqual([0, 1, 2, 3, 4, 5])
    expect(numbers(summed)).toEqual([3, 5, 7])
  })
})

describe("a worker refuses a direct client's bad call", () => {
  let h: Harness
  beforeAll(async () => {
    h = await startWorkers({ world: 1 })
    h.send(0, createStream)
  }, 40_000)
  afterAll(() => h?.close())

  test("as OpArgumentError, failing only that command", async () => {
    const cases: Array<[string, unknown[], Record<string, unknown>, RegExp]> = [
      ["ops.sum", [host("f32", [3], [1, 2, 3])], { axis: 0 }, /ops\.sum: unexpected keyword argument 'axis'/],
      ["ops.zeros", [[2]], { dtype: "float32" }, /dtype must be a dtype/],
      ["ops.transpose", [host("f32", [3], [1, 2, 3]), 0], {}, /missing argument 'dim1'/],
      ["ops.add", [host("f32", [2, 3], [1, 2, 3, 4, 5, 6]), host("f32", [2], [1, 2])], {}, /shapes do not broadcast: \[2, 3\] and \[2\]/],
    ]
    let ident = 0
    for (const [fn, args, kwargs, message] of cases) {
      h.send(0, call(ident, [100 + ident], fn, args as never, { kwargs: kwargs as never }))
      const failed = await h.next(0, "RemoteFunctionFailed")
      expect([failed.ident, failed.error.type]).toEqual([ident, "OpArgumentError"])
      expect(failed.error.message).toMatch(message)
      ident++
    }
    // What only the kernel can see (an index's values) fails in the shim, as that command's failure.
    h.send(0, call(ident, [150], "ops.gather", [host("f32", [3], [1, 2, 3]), 0, host("i64", [2], [0, 3])]))
    const failed = await h.next(0, "RemoteFunctionFailed")
    expect([failed.ident, failed.error.type]).toEqual([ident, "ShimError"])
    expect(failed.error.message).toMatch(/index 3 is out of range for dim 0 of size 3/)
    ident++
    h.send(0, call(ident, [200], "ops.sum", [host("f32", [3], [1, 2, 3])], { kwargs: { dim: 0 } }))
    h.send(0, fetch(ident + 1, ref(200)))
    expect(numbers((await h.next(0, "FetchResult")).value)).toEqual([6])
  })
})
