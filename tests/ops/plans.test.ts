// An op's dtype/shape rule runs once where it is used: once on the controller, to give a call's
// result its metadata before sending, and once on the worker, to allocate the command's results;
// the kernel then reads the plan the rule returned (the compute dtype and broadcast result, the
// reduced dims, a sort's line) rather than working it out a third time. Counted by spying on
// each rule and on the planning functions it calls, which a kernel planning again would call too.
import { afterAll, beforeAll, describe, expect, spyOn, test } from "bun:test"
import { Effect, ManagedRuntime } from "effect"
import { loadNative } from "../../ffi/native.ts"
import { Stream } from "../../ffi/stream.ts"
import { Tensor } from "../../ffi/tensor.ts"
import { Controller, opsOn } from "../../src/controller/index.ts"
import { Generator } from "../../src/ops/generator.ts"
import { OPS } from "../../src/ops/registry.ts"
import * as rules from "../../src/ops/rules.ts"
import * as elementwise from "../../src/ops/specs/elementwise.ts"
import { HostTensor } from "../../src/protocol/values.ts"
import { builtinFunction } from "../../src/worker/kernels/dispatch.ts"
import { prepareBuiltin } from "../../src/worker/kernels/prepare.ts"

// Installed before any op is first dispatched in this process: the dispatch adapter keeps the
// rule it found then.
const rule = {
  add: spyOn(OPS.add, "outputs"), mul: spyOn(OPS.mul, "outputs"), sum: spyOn(OPS.sum, "outputs"),
  sort: spyOn(OPS.sort, "outputs"), div_: spyOn(OPS.div_, "outputs"),
  logsumexp: spyOn(OPS.logsumexp, "outputs"), amax: spyOn(OPS.amax, "outputs"),
}
const planBinary = spyOn(elementwise, "planBinary"), normDim = spyOn(rules, "normDim")

const reset = () => {
  for (const s of [...Object.values(rule), planBinary, normDim]) s.mockClear()
}

const native = loadNative("cpu")
const stream = Stream.default(native)
const ctx = { native, rank: 0, world: 1, device: "cpu" as const, stream, coords: {}, generator: new Generator(0), kwargs: {}, group: () => { throw new Error("no group") } }
const f32 = (shape: number[], values: number[]) => Tensor.fromHost(native, new HostTensor("f32", shape, new Uint8Array(Float32Array.from(values).buffer)), stream)
const valuesOf = (t: unknown) => [...(t as Tensor).toHost(stream).toArray() as Float32Array]

describe("on the worker, the rule runs once per command and the kernel reads its plan", () => {
  test("add with broadcasting: one rule, one planBinary (the kernel casts and broadcasts by the plan)", () => {
    const x = f32([2, 3], [1, 2, 3, 4, 5, 6]), y = f32([3], [10, 20, 30])
    reset()
    const out = builtinFunction("add")!({ ...ctx, kwargs: { alpha: 2 } }, x, y)
    expect({ rule: rule.add.mock.calls.length, planBinary: planBinary.mock.calls.length }).toEqual({ rule: 1, planBinary: 1 })
    expect(valuesOf(out)).toEqual([21, 42, 63, 24, 45, 66])
    for (const t of [x, y, out as Tensor]) t.free()
  })

  test("div_ in place: one rule, one planBinary", () => {
    const x = f32([2], [3, 8])
    reset()
    builtinFunction("div_")!({ ...ctx, kwargs: {} }, x, 2)
    expect({ rule: rule.div_.mock.calls.length, planBinary: planBinary.mock.calls.length }).toEqual({ rule: 1, planBinary: 1 })
    expect(valuesOf(x)).toEqual([1.5, 4])
    x.free()
  })

  test("sum over a dim: one rule, one normDim (the kernel reduces the plan's dims)", () => {
    const x = f32([2, 3], [1, 2, 3, 4, 5, 6])
    reset()
    const out = builtinFunction("sum")!({ ...ctx, kwargs: {} }, x, -1)
    expect({ rule: rule.sum.mock.calls.length, normDim: normDim.mock.calls.length }).toEqual({ rule: 1, normDim: 1 })
    expect(valuesOf(out)).toEqual([6, 15])
    for (const t of [x, out as Tensor]) t.free()
  })

  test("sort along a dim: one rule, one normDim (the kernel sorts along the plan's line)", () => {
    const x = f32([2, 2], [2, 1, 3, 4])
    reset()
    const [values, indices] = builtinFunction("sort")!({ ...ctx, kwargs: { descending: true } }, x, 0) as Tensor[]
    expect({ rule: rule.sort.mock.calls.length, normDim: normDim.mock.calls.length }).toEqual({ rule: 1, normDim: 1 })
    expect(valuesOf(values)).toEqual([3, 4, 2, 1])
    for (const t of [x, values!, indices!]) t.free()
  })

  test("a prepared call (a recording's replays): the rule and its plan once at preparation, none per replay", () => {
    const x = f32([4], [1, 2, 3, 4]), y = f32([4], [2, 2, 2, 2])
    reset()
    const call = prepareBuiltin("mul", [x, y], {}, [x, y])!
    const outs = [0, 1, 2].flatMap(() => call.run(ctx, [x, y]))
    expect({ rule: rule.mul.mock.calls.length, planBinary: planBinary.mock.calls.length }).toEqual({ rule: 1, planBinary: 1 })
    expect(valuesOf(outs[2])).toEqual([2, 4, 6, 8])
    for (const t of [x, y, ...outs]) t.free()
  })
})

describe("a fused op: its forward written once, in its spec", () => {
  test("the worker runs logsumexp as its composition over the kernels (amax among them), its own rule once", () => {
    const x = f32([2, 2], [0, Math.log(3), -Infinity, -Infinity])
    reset()
    const out = builtinFunction("logsumexp")!({ ...ctx, kwargs: {} }, x, 1)
    expect({ rule: rule.logsumexp.mock.calls.length, amax: rule.amax.mock.calls.length }).toEqual({ rule: 1, amax: 1 })
    // log(1 + 3); a row of -inf is -inf (its max taken as 0, so -inf - -inf makes no NaN).
    expect(valuesOf(out).map((v) => Math.round(v * 1e6) / 1e6)).toEqual([Math.round(Math.log(4) * 1e6) / 1e6, -Infinity])
    for (const t of [x, out as Tensor]) t.free()
  })
})

describe("on the controller, the rule runs once per call", () => {
  let rt: ManagedRuntime.ManagedRuntime<Controller, unknown>
  beforeAll(() => {
    rt = ManagedRuntime.make(Controller.local({ world: 1, onWorkerLine: () => {} }))
  })
  afterAll(() => rt.dispose())

  test("x.add(y) and its sum: each rule once here (the worker's count is its own process's)", async () => {
    const got = await rt.runPromise(Effect.gen(function* () {
      const mesh = yield* (yield* Controller).mesh({ dp: 1 })
      const on = opsOn(mesh), x = on.ones([2, 3]), y = on.arange(3)
      reset()
      const s = x.add(y).sum(-1)
      const counts = { add: rule.add.mock.calls.length, sum: rule.sum.mock.calls.length, planBinary: planBinary.mock.calls.length }
      return { counts, values: [...(yield* s.fetch()).toArray()] }
    }))
    expect(got).toEqual({ counts: { add: 1, sum: 1, planBinary: 1 }, values: [6, 6] })
  })

  test("a fused op (logsumexp) is one command: its rule runs here, its parts' (amax) only on the worker", async () => {
    const got = await rt.runPromise(Effect.gen(function* () {
      const mesh = yield* (yield* Controller).mesh({ dp: 1 })
      const x = opsOn(mesh).zeros([2, 4])
      reset()
      const l = x.logsumexp(1)
      const counts = { logsumexp: rule.logsumexp.mock.calls.length, amax: rule.amax.mock.calls.length }
      return { counts, values: [...(yield* l.fetch()).toArray()].map((v) => Math.round(Number(v) * 1e6) / 1e6) }
    }))
    expect(got).toEqual({ counts: { logsumexp: 1, amax: 0 }, values: [Math.round(Math.log(4) * 1e6) / 1e6, Math.round(Math.log(4) * 1e6) / 1e6] })
  })
})
