// Releases go to the workers in command order (Core.release; their place in the frame is in
// lifetime.test.ts), so with a real worker a released tensor's memory is free for the next
// command of the same batch; releases made while compile records a step stay after the call's
// CallRecording, which still reads them.
import { afterAll, beforeAll, expect, test } from "bun:test"
import { Effect, ManagedRuntime } from "effect"
import { compile, Controller, opsOn, type ControllerApi, type Mesh } from "../../src/controller/index.ts"

const ROOT = new URL("../..", import.meta.url).pathname
let rt: ManagedRuntime.ManagedRuntime<Controller, unknown>
let ctl: ControllerApi
let mesh: Mesh

beforeAll(async () => {
  rt = ManagedRuntime.make(Controller.local({ world: 1, functionPath: [ROOT], onWorkerLine: () => {} }))
  ctl = await rt.runPromise(Effect.service(Controller))
  mesh = await rt.runPromise(ctl.mesh({ all: 1 }))
}, 60_000)
afterAll(() => rt?.dispose())

/** Per rank: live tensor handles, their bytes (tests/controller/fixtures.ts). */
const workerMemory = (of: Parameters<Mesh["fetchAll"]>[0]) =>
  Effect.map(mesh.fetchAll(of, { fn: "tests/controller/fixtures:workerMemory" }), (vs) => (vs[0] as ReadonlyArray<number>).slice(0, 2))

test("a tensor released is freed before the next command of the same batch: the workers' counters show one at a time", async () => {
  const on = opsOn(mesh)
  const keep = on.ones([1])
  const BIG = 1 << 16 // 256 KiB of f32: past the small-tensor pool, freed to the shim
  const [base, during, frames] = await rt.runPromise(Effect.gen(function* () {
    const base = yield* workerMemory(keep)
    const sent = ctl.core.sent.frames
    // One batch: make a big tensor, release it, make another, count, release that.
    const a = on.ones([BIG])
    a.release()
    const b = on.ones([BIG])
    const during = yield* workerMemory(keep)
    b.release()
    return [base, during, ctl.core.sent.frames - sent]
  }))
  expect(frames).toBe(1)
  // Only b is live when the count runs: a was freed before b was made.
  expect({ tensors: during[0]! - base[0]!, bytes: during[1]! - base[1]! }).toEqual({ tensors: 1, bytes: BIG * 4 })
  keep.release()
}, 30_000)

test("a release made while compile records a step goes after the call that reads it", async () => {
  const on = opsOn(mesh)
  const step = compile((x: ReturnType<typeof on.ones>, old: ReturnType<typeof on.ones>) => {
    const y = x.add(old)
    old.release()
    return y
  })
  const x = on.full([3], 2)
  const before = await rt.runPromise(workerMemory(x))
  const old = on.full([3], 5)
  const y = await rt.runPromise(step(x, old))
  expect(old.released).toBe(true)
  expect(Array.from((await rt.runPromise(y.fetch())).toArray() as Float32Array)).toEqual([7, 7, 7])
  // And old is gone on the worker: y is the only tensor more than before.
  const after = await rt.runPromise(workerMemory(x))
  expect(after[0]! - before[0]!).toBe(1)
  y.release()
}, 30_000)
