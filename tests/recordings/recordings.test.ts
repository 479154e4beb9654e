// compile(step) with real workers (world 2): a replay gives what the step computes unrecorded,
// sends one message per worker, takes the numbers named with param() as parameters (refusing one
// that cannot be), keys every other number, says why it traces again, refuses fetches inside,
// and frees its temporaries on every call.
import { afterAll, beforeAll, describe, expect, test } from "bun:test"
import { Effect, ManagedRuntime } from "effect"
import { compile, Controller, opsOn, param, type ControllerApi, type Mesh, type RemoteTensor } from "../../src/controller/index.ts"

const ROOT = new URL("../..", import.meta.url).pathname
let rt: ManagedRuntime.ManagedRuntime<Controller, unknown>
let ctl: ControllerApi
let mesh: Mesh
const problems: string[] = []

beforeAll(async () => {
  rt = ManagedRuntime.make(Controller.local({ world: 2, functionPath: [ROOT], onProblem: (p) => problems.push(p), onWorkerLine: () => {} }))
  ctl = await rt.runPromise(Effect.service(Controller))
  mesh = await rt.runPromise(ctl.mesh({ dp: 2 }))
}, 60_000)
afterAll(() => rt?.dispose())

const run = <A, E>(e: Effect.Effect<A, E, Controller>) => rt.runPromise(e)
const values = (t: RemoteTensor) => run(Effect.map(t.fetch(), (h) => Array.from(h.toArray() as Float32Array)))

/** The model code both ways: recorded (compile) and issued op by op. */
const model = (x: RemoteTensor, w: RemoteTensor, lr: number) => {
  const h = x.matmul(w).relu().add(1)
  const loss = h.mul(h).mean()
  w.sub_(x.t().matmul(h).mul(lr))
  return { loss, h }
}

describe("compile(step)", () => {
  test("replays give what the step computes unrecorded, with the learning rate as a parameter: one trace", async () => {
    const retraces: string[] = []
    const step = compile(model, { onRetrace: (w) => void retraces.push(w) })
    const on = opsOn(mesh)
    const w1 = on.full([3, 2], 0.1), w2 = on.full([3, 2], 0.1)
    for (let i = 0; i < 5; i++) {
      const x = on.arange(12).reshape([4, 3]).div(10 + i)
      const lr = 0.01 * (i + 1)
      const recorded = await run(step(x, w1, param(lr)))
      const eager = model(x, w2, lr)
      expect(await values(recorded.loss)).toEqual(await values(eager.loss))
      expect(await values(recorded.h)).toEqual(await values(eager.h))
      expect(await values(w1)).toEqual(await values(w2))
    }
    expect(step.traces).toBe(1)
    expect(retraces).toEqual([])
    expect(problems).toEqual([])
  }, 60_000)

  test("a replay sends one message per worker", async () => {
    const step = compile((x: RemoteTensor) => x.add(1).mul(2).sub(3).relu().sum())
    const x = opsOn(mesh).ones([8])
    await run(Effect.flatMap(step(x), (y) => y.fetch()))
    await Effect.runPromise(Effect.sleep("20 millis"))
    const before = { ...ctl.core.sent }
    const y = await run(step(x))
    ctl.core.flush()
    expect({ frames: ctl.core.sent.frames - before.frames, commands: ctl.core.sent.commands - before.commands }).toEqual({ frames: 2, commands: 2 })
    expect(await values(y)).toEqual([8])
  }, 30_000)

  test("a fetch inside the step is refused, and nothing of the trace is sent", async () => {
    const step = compile((x: RemoteTensor) => Effect.gen(function* () {
      const y = x.add(1)
      yield* y.fetch()
      return y
    }), { name: "fetching" })
    const before = ctl.core.sent.commands
    const failure = await run(Effect.flip(step(opsOn(mesh).ones([2]))))
    expect(failure.message).toContain("compile(fetching): a fetch inside a recorded step is refused")
    expect(ctl.core.sink).toBe(ctl.core)
    // The ones() above went out; nothing else did.
    ctl.core.flush()
    expect(ctl.core.sent.commands - before).toBeLessThanOrEqual(2)
  }, 30_000)

  test("a retrace says which part of the signature changed: a number is part of it, a replay parameter's value is not", async () => {
    const retraces: string[] = []
    const on = opsOn(mesh)
    const step = compile((x: RemoteTensor, n: number, scale: number) => x.sum().add(on.ones([n]).mul(scale)), { name: "shaped", onRetrace: (w) => void retraces.push(w) })
    expect(await values(await run(step(on.ones([4]), 2, param(0.5))))).toEqual([4.5, 4.5])
    expect(await values(await run(step(on.ones([4]), 2, param(2.5))))).toEqual([6.5, 6.5])
    expect(step.traces).toBe(1)
    expect(await values(await run(step(on.ones([4]), 3, param(2.5))))).toEqual([6.5, 6.5, 6.5])
    expect(retraces[0]).toBe("compile(shaped): tracing again: argument 1: 2, now 3")
    expect(await values(await run(step(on.ones([5]), 3, param(2.5))))).toEqual([7.5, 7.5, 7.5])
    expect(retraces[1]).toBe("compile(shaped): tracing again: argument 0: f32[4] on Mesh(dp=2), stream 1, now f32[5] on Mesh(dp=2), stream 1")
    // An integer value is another kind: an integer tensor's op promotes with a fraction only.
    expect(await values(await run(step(on.ones([5]), 3, param(2))))).toEqual([7, 7, 7])
    expect(retraces[2]).toBe("compile(shaped): tracing again: argument 2: a replay parameter (a fraction), now a replay parameter (an integer)")
    expect(step.traces).toBe(4)
  }, 30_000)

  test("a step that changes its argument in place and returns it gives that argument back, changed, every call", async () => {
    const step = compile((x: RemoteTensor) => {
      for (let i = 0; i < 3; i++) x.add_(1)
      return { x, twice: x.mul(2) }
    })
    const x = opsOn(mesh).ones([2])
    for (let i = 1; i <= 3; i++) {
      const r = await run(step(x))
      expect(r.x).toBe(x)
      expect(await values(x)).toEqual([1 + 3 * i, 1 + 3 * i])
      expect(await values(r.twice)).toEqual([2 + 6 * i, 2 + 6 * i])
    }
    expect(problems).toEqual([])
  }, 30_000)

  test("a step called with one tensor in two places, then with two tensors, does not replay the first call's aliasing", async () => {
    const body = (a: RemoteTensor, b: RemoteTensor) => {
      a.add_(1)
      return b.mul(2)
    }
    const step = compile(body, { onRetrace: () => {} })
    const on = opsOn(mesh)
    const [x1, y1, x2, y2] = [on.ones([2]), on.full([2], 10), on.ones([2]), on.full([2], 10)]
    for (const [recorded, eager] of [[[x1, x1], [x2, x2]], [[x1, y1], [x2, y2]], [[y1, y1], [y2, y2]], [[y1, x1], [y2, x2]]] as const) {
      expect(await values(await run(step(...recorded)))).toEqual(await values(body(...eager)))
      expect([await values(x1), await values(y1)]).toEqual([await values(x2), await values(y2)])
    }
    expect(step.traces).toBe(2)
  }, 30_000)

  test("a tensor made inside the step and not returned cannot be used after the call", async () => {
    let kept: RemoteTensor | undefined
    const step = compile((x: RemoteTensor) => {
      kept = x.add(1)
      return kept.mul(2)
    })
    await run(step(opsOn(mesh).ones([2])))
    expect(() => kept!.add(1)).toThrow(/was made inside compile\(step\)'s step and not returned from it/)
  }, 30_000)

  test("temporaries are freed on every call: 1,000 replays leave the workers' memory as it was", async () => {
    const on = opsOn(mesh)
    const w = on.ones([64, 64])
    const step = compile((x: RemoteTensor) => {
      let h = x
      for (let i = 0; i < 10; i++) h = h.matmul(w).tanh()
      return h.sum()
    })
    const x = on.ones([64, 64])
    const inUse = () => run(mesh.fetchAll(x, { fn: "tests/recordings/fixtures:memoryInUse" })) as Promise<ReadonlyArray<number>>
    const first = await run(step(x))
    await values(first)
    first.release()
    const before = await inUse()
    let last: RemoteTensor | undefined
    for (let i = 0; i < 1000; i++) {
      last?.release()
      last = await run(step(x))
    }
    await values(last!)
    last!.release()
    // Each call made 21 tensors of up to 16 KiB; none of them is left (a few bytes of earlier tests may have gone since).
    const after = await inUse()
    after.forEach((bytes, r) => expect(bytes).toBeLessThanOrEqual(before[r]!))
  }, 120_000)

  test("a number that reaches an op through arithmetic is keyed like any other; as a replay parameter it is refused, naming it", async () => {
    const retraces: string[] = []
    const scheduled = (x: RemoteTensor, t: number) => x.mul(Math.cos(t))
    const step = compile(scheduled, { name: "scheduled", onRetrace: (w) => void retraces.push(w) })
    const x = opsOn(mesh).ones([1])
    expect(await values(await run(step(x, 0)))).toEqual([1])
    expect(await values(await run(step(x, 0)))).toEqual([1])
    expect(step.traces).toBe(1)
    const [v] = await values(await run(step(x, Math.PI)))
    expect(v).toBeCloseTo(-1, 6)
    expect(retraces).toEqual(["compile(scheduled): tracing again: argument 1: 0, now 3.141592653589793"])
    const failure = await run(Effect.flip(compile(scheduled, { name: "scheduled" })(x, param(0))))
    expect(failure._tag).toBe("ControllerError")
    expect(failure.message).toMatch(/^compile\(scheduled\): argument 1 is a replay parameter \(param\(0\)\), but with another value \(1\) it reaches ops\.mul issued at .*recordings\.test\.ts:\d+:\d+\) through arithmetic \(1 there, then 0\.54\d*\), which a replay cannot redo: compute that number outside the step and pass it; pass it as a plain number instead/)
  }, 30_000)

  test("a replay parameter whose other value makes the step fail, or changes its commands, is refused, naming it", async () => {
    const x = opsOn(mesh).ones([1])
    const bounded = compile((x: RemoteTensor, k: number) => {
      if (k > 2) throw new RangeError(`k = ${k} is too large`)
      return x.mul(k)
    }, { name: "bounded" })
    expect((await run(Effect.flip(bounded(x, param(2))))).message).toBe("compile(bounded): argument 1 is a replay parameter (param(2)), but with another value (3) the step fails (k = 3 is too large); pass it as a plain number instead (part of the signature: each new value traces again)")
    // Plain, each value its own trace.
    expect(await values(await run(bounded(x, 2)))).toEqual([2])
    const branching = compile((x: RemoteTensor, o: { lr: number; t: number }) => (o.t > 10 ? x.mul(o.lr) : x.add(o.lr)), { name: "branching" })
    expect((await run(Effect.flip(branching(x, { lr: param(0.5), t: param(10) })))).message).toMatch(/^compile\(branching\): argument 1\.t is a replay parameter \(param\(10\)\), but with another value \(12\) it changes the commands or the tensors \(command 0: ops\.add issued at .*, then ops\.mul issued at .*\)/)
  }, 30_000)

  test("verify: true traces the second call too and fails it, naming both call sites, when it issued other commands", async () => {
    // State the signature does not see, changed by the program between calls.
    let mode = "add"
    const step = compile((x: RemoteTensor) => (mode === "add" ? x.add(1) : x.sub(1)), { verify: true, name: "drifting" })
    const x = opsOn(mesh).ones([2])
    expect(await values(await run(step(x)))).toEqual([2, 2])
    mode = "sub"
    const failure = await run(Effect.flip(step(x)))
    expect(failure.message).toMatch(/^compile\(drifting, \{ verify: true \}\): the step's second call issued other commands than its first: command 0: ops\.add issued at .*recordings\.test\.ts:\d+:\d+\), then ops\.sub issued at .*recordings\.test\.ts:\d+:\d+\)/)
    // A step that issues the same commands passes verification, with new parameter values too.
    const steady = compile((x: RemoteTensor, k: number) => x.mul(k), { verify: true })
    expect(await values(await run(steady(x, param(2))))).toEqual([2, 2])
    expect(await values(await run(steady(x, param(3))))).toEqual([3, 3])
    expect(await values(await run(steady(x, param(4))))).toEqual([4, 4])
    expect(steady.traces).toBe(2)
  }, 30_000)

  test("a step whose commands change from one trace to the next (a count it keeps) is refused at its first call, saying what changed", async () => {
    let calls = 0
    const step = compile((x: RemoteTensor) => x.mul(++calls), { name: "counting" })
    const failure = await run(Effect.flip(step(opsOn(mesh).ones([2]))))
    expect(failure._tag).toBe("ControllerError")
    expect(failure.message).toMatch(/^compile\(counting\): traced twice with the same arguments, its step issued other commands \(command 0: ops\.mul issued at .*recordings\.test\.ts:\d+:\d+\): args\.1: 1, then 2\): they depend on something its arguments do not hold \(a count it keeps, say\); pass that as an argument$/)
  }, 30_000)
})
