// 1,000 training steps (forward, backward, an SGD update) on two real workers with GC-driven
// release off: each step runs in a step scope (inStep), which alone releases what the step made,
// so the workers' tensor count and memory stay flat, the mesh's counters too, and no handle leaks.
import { afterAll, beforeAll, expect, test } from "bun:test"
import { Effect, ManagedRuntime } from "effect"
import { Controller, inStep, noGrad, opsOn, scoped, zeroGrad, type ControllerApi, type RemoteTensor } from "../../src/controller/index.ts"

const ROOT = new URL("../..", import.meta.url).pathname
const STEPS = 1000
const leaks: string[] = []
let rt: ManagedRuntime.ManagedRuntime<Controller, unknown>
let ctl: ControllerApi

beforeAll(async () => {
  rt = ManagedRuntime.make(Controller.local({ world: 2, functionPath: [ROOT], gcRelease: false, maxInFlight: 2000, onLeak: (h) => void leaks.push(h), onWorkerLine: () => {} }))
  ctl = await rt.runPromise(Effect.service(Controller))
}, 60_000)
afterAll(() => rt?.dispose())

test(`${STEPS} training steps in step scopes leave the workers' tensor count and RSS flat, with GC-driven release off`, async () => {
  const result = await rt.runPromise(Effect.gen(function* () {
    const mesh = yield* ctl.mesh({ dp: 2 })
    const on = opsOn(mesh)
    // Set-up in a scope too: arange's and reshape's results go, x stays.
    const [x, target, w] = scoped(mesh, () => [on.arange(0, 64).reshape([16, 4]).div(64), on.ones([16, 2]), on.zeros([4, 2]).requiresGrad_()] as const)
    const step = () => inStep(mesh, Effect.sync(() => {
      const loss = x.matmul(w).sub(target).pow(2).mean()
      loss.backward()
      noGrad(() => w.sub_(w.grad!.mul(0.5)))
      zeroGrad([w])
      return loss
    }))
    /** Per rank: live tensor handles, their bytes, RSS (tests/controller/fixtures.ts). */
    const workers = () => mesh.fetchAll(w, { fn: "tests/controller/fixtures:workerMemory" }) as Effect.Effect<ReadonlyArray<ReadonlyArray<number>>, unknown>
    // A fetch first: the sample is of the workers once they have run every step.
    const sample = () => Effect.gen(function* () {
      yield* mesh.fetch(w)
      return { workers: yield* workers(), live: { ...mesh.live } }
    })
    const losses: number[] = []
    let at200: Effect.Success<ReturnType<typeof sample>> | undefined
    let maxInFlight = 0
    for (let i = 1; i <= STEPS; i++) {
      const loss: RemoteTensor = yield* step()
      maxInFlight = Math.max(maxInFlight, mesh.inFlight)
      if (i === 1 || i === STEPS) losses.push(Number((yield* loss.fetch()).toArray()[0]))
      loss.release()
      if (i === 200) at200 = yield* sample()
    }
    return { losses, at200: at200!, atEnd: yield* sample(), maxInFlight }
  }))
  // It trained: the loss fell.
  expect(result.losses[1]!).toBeLessThan(result.losses[0]! / 2)
  // The controller holds the same handles after 1,000 steps as after 200 (x, target, w).
  expect(result.atEnd.live).toEqual(result.at200.live)
  expect(result.atEnd.live.refs).toBe(3)
  for (let r = 0; r < 2; r++) {
    const [tensors200, bytes200, rss200] = result.at200.workers[r]!
    const [tensorsEnd, bytesEnd, rssEnd] = result.atEnd.workers[r]!
    expect({ rank: r, tensors: tensorsEnd, bytes: bytesEnd }).toEqual({ rank: r, tensors: tensors200!, bytes: bytes200! })
    // 800 more steps of about 30 commands each: RSS within 32 MiB (the JS heap's own swings), not growing with them.
    expect(rssEnd! - rss200!).toBeLessThan(32 * 2 ** 20)
  }
  expect(leaks).toEqual([])
  // Steps waited for the workers: never more than the bound and one step's commands in flight.
  expect(result.maxInFlight).toBeLessThanOrEqual(2000 + 100)
}, 180_000)
