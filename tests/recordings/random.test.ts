// Random ops in a recording draw from each worker's generator (src/ops/generator.ts): a replay
// of a dropout-using step draws fresh numbers, the same ones the step's ops draw unrecorded from
// the same seed, without retracing.
import { afterAll, beforeAll, expect, test } from "bun:test"
import { Effect, ManagedRuntime } from "effect"
import { compile, Controller, opsOn, param, type Mesh, type RemoteTensor } from "../../src/controller/index.ts"

let rt: ManagedRuntime.ManagedRuntime<Controller, unknown>
let mesh: Mesh
beforeAll(async () => {
  rt = ManagedRuntime.make(Controller.local({ world: 2, onWorkerLine: () => {} }))
  const ctl = await rt.runPromise(Effect.service(Controller))
  mesh = await rt.runPromise(ctl.mesh({ dp: 2 }))
}, 60_000)
afterAll(() => rt?.dispose())

const run = <A, E>(e: Effect.Effect<A, E, Controller>) => rt.runPromise(e)
const all = (t: RemoteTensor) => run(Effect.map(mesh.fetchAll(t), (hs) => hs.map((h) => Array.from((h as { toArray(): Float32Array }).toArray()))))

test("a dropout-using step replays without retracing, drawing fresh numbers each call as its ops unrecorded do", async () => {
  const x = opsOn(mesh).ones([256])
  const step = compile((x: RemoteTensor, p: number) => x.dropout(p).mul(2))
  await run(mesh.run("ops.manual_seed", [7]))
  const recorded = [await all(await run(step(x, param(0.5)))), await all(await run(step(x, param(0.5)))), await all(await run(step(x, param(0.25))))]
  await run(mesh.run("ops.manual_seed", [7]))
  const plain = [await all(x.dropout(0.5).mul(2)), await all(x.dropout(0.5).mul(2)), await all(x.dropout(0.25).mul(2))]
  expect(recorded).toEqual(plain)
  expect(recorded[0]).not.toEqual(recorded[1])
  expect(recorded[0]![0]).not.toEqual(recorded[0]![1])
  expect(step.traces).toBe(1)
}, 60_000)
