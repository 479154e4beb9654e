// Every refusal carries a reason (errors.ts's RefusalReason): one refusal of each kind a
// program meets, told apart by its reason alone, never by matching its message.
import { afterAll, beforeAll, expect, test } from "bun:test"
import { Effect, ManagedRuntime, Result } from "effect"
import { compile, Controller, ControllerError, eager, exportFile, opsOn, ops, param, shard, type Mesh, type Ops, type RefusalReason, type RemoteTensor } from "../../src/controller/index.ts"
import { SGD } from "../../src/optim/index.ts"

let rt: ManagedRuntime.ManagedRuntime<Controller, unknown>
let mesh: Mesh
let on: Ops
beforeAll(async () => {
  rt = ManagedRuntime.make(Controller.local({ world: 2, onWorkerLine: () => {} }))
  const ctl = await rt.runPromise(Effect.service(Controller))
  mesh = await rt.runPromise(ctl.mesh({ dp: 2 }))
  on = opsOn(mesh)
}, 90_000)
afterAll(async () => {
  await rt?.dispose()
})

/** The reason of the ControllerError `e` fails with (thrown inside it included), or what else it did. */
const reasonOf = async (e: Effect.Effect<unknown, unknown, Controller>): Promise<string> => {
  const r = await rt.runPromise(Effect.result(e))
  if (Result.isSuccess(r)) return "succeeded"
  return r.failure instanceof ControllerError ? r.failure.reason : `failed with ${String(r.failure)}`
}
const sync = (f: () => unknown) => eager(f)

test("each kind of refusal says its reason", async () => {
  const x = on.ones([2]), released = on.ones([2])
  released.release()
  const unknownShape = await rt.runPromise(mesh.call("tests/controller/fixtures:rankValue", []))
  let calls = 0
  const disposed = compile((t: RemoteTensor) => t.add(1), { name: "disposed" })
  disposed.dispose()
  const cases: ReadonlyArray<readonly [string, RefusalReason, Effect.Effect<unknown, unknown, Controller>]> = [
    ["an index outside the mesh", "argument", mesh.fetch(x, 5)],
    ["param() of a non-number", "argument", sync(() => param("lr" as never))],
    ["shapes that do not broadcast", "op-rule", sync(() => ops.add(x, on.ones([3])))],
    ["a reduce of a tensor of unknown shape", "unknown-meta", mesh.reduce(unknownShape, "dp", "sum")],
    ["a released tensor used", "released", sync(() => ops.neg(released))],
    ["a mesh that does not cover the ranks", "mesh", Effect.flatMap(Effect.service(Controller), (ctl) => ctl.mesh({ dp: 3 }))],
    ["a shard of a dim the tensor lacks", "placement", sync(() => x.place({ dp: shard(3) }))],
    ["backward of what requires no grad", "autograd", sync(() => ops.sum(x).backward())],
    ["a fetch inside a compiled step", "not-recordable", compile((t: RemoteTensor) => t.fetch(), { name: "fetching" })(x)],
    ["a step whose commands change every trace", "not-replayable", compile((t: RemoteTensor) => t.add(calls++), { name: "counting" })(x)],
    ["a disposed compiled step called", "disposed", disposed(x)],
    ["an export to a relative path without a checkpoint root", "checkpoint", exportFile(mesh, { x }, "x.safetensors")],
    ["a parameter in two groups", "optimizer", sync(() => new SGD([{ params: [x] }, { params: [x] }], { lr: 0.1 }))],
  ]
  const got: Record<string, string> = {}, want: Record<string, string> = {}
  for (const [what, reason, e] of cases) {
    got[what] = await reasonOf(e)
    want[what] = reason
  }
  expect(got).toEqual(want)
})
