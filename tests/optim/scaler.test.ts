// GradScaler (src/optim/scaler.ts), torch.cuda.amp.GradScaler's rules (torch 1.13 has no CPU
// kernels for them, so the expected figures are worked by hand from _amp_update_scale_):
// scale multiplies the loss; unscale_ divides the gradients, so a scaled backward gives the
// unscaled one's gradients; a step whose gradients hold an inf or a NaN is skipped (parameters
// and optimizer state untouched) and the scale backs off, growing again after growthInterval good
// steps; an inf in one dp rank's shard skips every rank's step (the check is all-reduced); under
// f16 autocast a small loss's gradients underflow to zero without the scaler and come back with
// it; disabled it is the identity; its state round-trips; bad calls are refused.
import { afterAll, beforeAll, describe, expect, test } from "bun:test"
import { Effect, ManagedRuntime } from "effect"
import { autocast, Controller, ControllerError, grad, HostTensor, ops, opsOn, shard, type ControllerApi, type Mesh, type RemoteTensor } from "../../src/controller/index.ts"
import { AdamW, GradScaler, SGD } from "../../src/optim/index.ts"
import { distribute } from "../../examples/gpt/model.ts"
import { host } from "../worker/build.ts"

const ROOT = new URL("../..", import.meta.url).pathname
let rt: ManagedRuntime.ManagedRuntime<Controller, unknown>
let mesh: Mesh
let dp: Mesh
beforeAll(async () => {
  rt = ManagedRuntime.make(Controller.local({ world: 2, functionPath: [ROOT], onWorkerLine: () => {} }))
  const ctl: ControllerApi = await rt.runPromise(Effect.service(Controller))
  dp = await rt.runPromise(ctl.mesh({ dp: 2 }))
  mesh = await rt.runPromise(dp.slice({ dp: 0 }))
}, 60_000)
afterAll(() => rt?.dispose())

const values = async (t: RemoteTensor) => [...((await rt.runPromise(t.mesh.fetch(t))) as HostTensor).toArray()].map(Number)
const f32 = (data: number[]) => opsOn(mesh).clone(host("f32", [data.length], data) as never)

describe("GradScaler", () => {
  test("scale multiplies the loss; unscale_ makes a scaled backward's gradients the unscaled ones'", async () => {
    const on = opsOn(mesh), x = on.randn([6, 3]), w = on.randn([3, 2]).requiresGrad_()
    const scaler = new GradScaler({ initScale: 1024 })
    const loss = x.matmul(w).pow(2).mean()
    const [plain] = grad(loss, [w])
    const scaled = scaler.scale(x.matmul(w).pow(2).mean())
    expect((await values(scaled))[0]).toBeCloseTo((await values(loss))[0]! * 1024, 2)
    scaled.backward()
    const opt = new SGD([w], { lr: 0.1 })
    scaler.unscale_(opt)
    // a power of two scales exactly
    expect(await values(w.grad!)).toEqual(await values(plain!))
  })

  test("an inf or NaN gradient skips the step (parameters and state untouched), the scale backs off, then grows after growthInterval good steps", async () => {
    const p = f32([1, 2, 3]).requiresGrad_()
    const opt = new AdamW([p], { lr: 0.1 })
    const scaler = new GradScaler({ initScale: 8, growthInterval: 2 })
    const stepWith = async (g: number[]) => {
      p.grad = f32(g.map((v) => v * scaler.getScale()))
      const stepped = await rt.runPromise(scaler.step(opt))
      scaler.update()
      return { stepped, scale: scaler.getScale() }
    }
    const before = await values(p)
    expect(await stepWith([Infinity, 0, 0])).toEqual({ stepped: false, scale: 4 })
    expect(await values(p)).toEqual(before)
    expect(opt.state.size).toBe(0)
    expect(await stepWith([0, NaN, 0])).toEqual({ stepped: false, scale: 2 })
    expect(await stepWith([0.5, 0.5, 0.5])).toEqual({ stepped: true, scale: 2 })
    expect(await values(p)).not.toEqual(before)
    expect(opt.state.get(p)!.step).toBe(1)
    // the second good step in a row doubles it, and the count starts again
    expect(await stepWith([0.5, 0.5, 0.5])).toEqual({ stepped: true, scale: 4 })
    expect(await stepWith([0.5, 0.5, 0.5])).toEqual({ stepped: true, scale: 4 })
    expect(await stepWith([-Infinity, 0, 0])).toEqual({ stepped: false, scale: 2 })
    expect(await stepWith([0.5, 0.5, 0.5])).toEqual({ stepped: true, scale: 2 })
    expect(await stepWith([0.5, 0.5, 0.5])).toEqual({ stepped: true, scale: 4 })
    expect(scaler.stateDict()).toEqual({ scale: 4, growth_factor: 2, backoff_factor: 0.5, growth_interval: 2, _growth_tracker: 0 })
  })

  test("an inf in one dp rank's gradient skips the step on every rank", async () => {
    const p = (await rt.runPromise(distribute(dp, new HostTensor("f32", [2], new Uint8Array(new Float32Array([1, 1]).buffer)), { dp: shard(0) }))).requiresGrad_()
    const opt = new SGD([p], { lr: 0.5 })
    const scaler = new GradScaler({ initScale: 1 })
    // rank 0's shard is finite, rank 1's is not
    p.grad = await rt.runPromise(distribute(dp, new HostTensor("f32", [2], new Uint8Array(new Float32Array([1, Infinity]).buffer)), { dp: shard(0) }))
    expect(await rt.runPromise(scaler.step(opt))).toBe(false)
    expect(await values(p)).toEqual([1])
  })

  test("under f16 autocast a small loss's gradients underflow to zero; scaled, they come back within f16's rounding", async () => {
    const on = opsOn(mesh), x = on.randn([8, 16]), w = on.randn([16, 4]).requiresGrad_()
    const tiny = () => autocast("f16", () => ops.linear(x, w.t())).to("f32").mean().mul(1e-7)
    const [exact] = grad(noCast(() => x.matmul(w).mean().mul(1e-7)), [w])
    const [underflowed] = grad(tiny(), [w])
    expect((await values(underflowed!)).every((v) => v === 0)).toBe(true)
    const scaler = new GradScaler()
    scaler.scale(tiny()).backward()
    scaler.unscale_(new SGD([w], { lr: 0.1 }))
    const want = await values(exact!), got = await values(w.grad!)
    const scale = Math.max(...want.map(Math.abs))
    expect(got.every((v, i) => Math.abs(v - want[i]!) <= 2 ** -9 * scale)).toBe(true)
  })

  test("disabled: scale is the loss itself, step steps, update does nothing", async () => {
    const p = f32([1]).requiresGrad_(), opt = new SGD([p], { lr: 1 }), scaler = new GradScaler({ enabled: false })
    const loss = p.mul(3).sum()
    expect(scaler.scale(loss)).toBe(loss)
    p.grad = f32([Infinity])
    expect(await rt.runPromise(scaler.step(opt))).toBe(true)
    scaler.update()
    expect(scaler.getScale()).toBe(1)
  })

  test("its state round-trips; bad options and calls out of order are refused", () => {
    const a = new GradScaler({ initScale: 32, growthInterval: 7 }), b = new GradScaler()
    b.loadStateDict(a.stateDict())
    expect(b.stateDict()).toEqual(a.stateDict())
    expect(() => new GradScaler({ initScale: 0 })).toThrow(/initScale must be a positive finite number, got 0/)
    expect(() => new GradScaler({ backoffFactor: 1 })).toThrow(/backoffFactor must be between 0 and 1/)
    expect(() => new GradScaler({ growthInterval: 1.5 })).toThrow(/growthInterval must be a positive integer/)
    expect(() => b.update()).toThrow(/no step\(\) was taken since the last update/)
    expect(() => b.loadStateDict({ ...a.stateDict(), scale: -1 })).toThrow(ControllerError)
    const p = f32([1]).requiresGrad_(), opt = new SGD([p], { lr: 1 })
    expect(() => b.unscale_(opt)).toThrow(/no parameter of the optimizer has a gradient/)
    p.grad = f32([1])
    b.unscale_(opt)
    expect(() => b.unscale_(opt)).toThrow(/already called on this optimizer since the last update/)
  })
})

/** f runs with autocast off (the f32 reference). */
const noCast = <A>(f: () => A): A => autocast(null, f)
