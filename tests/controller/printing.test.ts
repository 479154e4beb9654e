// console.log of a tensor handle prints one line of what torch shows of a DTensor without its
// values (which are on the workers): logical size, dtype, mesh, placement, the local size
// when sharded, requires_grad, its ref; a released handle says so. Not the handle's internals.
import { afterAll, beforeAll, expect, test } from "bun:test"
import { Effect, ManagedRuntime } from "effect"
import { Controller, opsOn, partial, shard, type Mesh } from "../../src/controller/index.ts"

let rt: ManagedRuntime.ManagedRuntime<Controller, unknown>
let mesh: Mesh
beforeAll(async () => {
  rt = ManagedRuntime.make(Controller.local({ world: 4, onWorkerLine: () => {} }))
  const ctl = await rt.runPromise(Effect.service(Controller))
  mesh = await rt.runPromise(ctl.mesh({ dp: 2, tp: 2 }))
}, 90_000)
afterAll(async () => {
  await rt?.dispose()
})

test("a RemoteTensor prints its logical size, dtype, mesh and placement on one line", () => {
  const on = opsOn(mesh)
  const w = on.randn([4, 8], { seed: 0 }).place({ tp: shard(0) })
  expect(Bun.inspect(w)).toBe(`RemoteTensor(size=[8, 8], dtype=f32, mesh=Mesh(dp=2, tp=2), placement={dp: replicate, tp: shard(0)}, local_size=[4, 8], ref=${w.ref.id})`)
  const both = on.zeros([3, 2], { dtype: "f64" }).place({ dp: shard(1), tp: shard(1) })
  expect(Bun.inspect(both)).toContain("size=[3, 8], dtype=f64")
  const b = on.ones([5]).requiresGrad_()
  expect(Bun.inspect(b)).toBe(`RemoteTensor(size=[5], dtype=f32, mesh=Mesh(dp=2, tp=2), placement={dp: replicate, tp: replicate}, requires_grad=true, ref=${b.ref.id})`)
  const sum = on.ones([2]).place({ tp: partial })
  expect(Bun.inspect(sum)).toBe(`RemoteTensor(size=[2], dtype=f32, mesh=Mesh(dp=2, tp=2), placement={dp: replicate, tp: partial}, ref=${sum.ref.id})`)
  const s = on.ones([])
  expect(Bun.inspect(s)).toContain("RemoteTensor(size=[], dtype=f32")
  // In an object, as console.log shows a structure holding handles.
  expect(Bun.inspect({ w })).toBe(`{\n  w: ${Bun.inspect(w)},\n}`)
  w.release()
  expect(Bun.inspect(w)).toBe(`RemoteTensor(released, ref=${w.ref.id})`)
})
