// Backward rules of issue 11.2's ops (tril, triu, split, chunk, scaled_dot_product_attention,
// rms_norm, nll_loss, mse_loss, dropout) through the controller's tape on a CPU worker: the
// gradient of sum(op(inputs) * w) (w random) against central finite differences in f64, for every
// element of every input. (Until tests/autograd/gradcheck.test.ts, which enumerates the registry, has their cases.)
import { afterAll, beforeAll, expect, test } from "bun:test"
import { Effect, ManagedRuntime } from "effect"
import { Controller, grad, noGrad, ops, opsOn, type ControllerApi, type Mesh, type RemoteTensor } from "../../src/controller/index.ts"
import { host } from "../worker/build.ts"
let rt: ManagedRuntime.ManagedRuntime<Controller, unknown>, ctl: ControllerApi, mesh: Mesh
beforeAll(async () => { rt = ManagedRuntime.make(Controller.local({ world: 1, onWorkerLine: () => {} })); ctl = await rt.runPromise(Effect.service(Controller)); mesh = await rt.runPromise(ctl.mesh({ dp: 1 })) }, 60000)
afterAll(() => rt?.dispose())
let seed = 7; const rnd = () => ((seed = (seed * 1103515245 + 12345) % 2 ** 31) / 2 ** 31)
const T = (shape: number[], data?: number[]) => opsOn(mesh).clone(host("f64", shape, data ?? Array.from({ length: shape.reduce((a, b) => a * b, 1) }, () => rnd() * 4 - 2)) as never) as RemoteTensor
const vals = async (t: RemoteTensor) => [...(await rt.runPromise(t.fetch())).toArray()].map(Number)
const check = async (name: string, shapes: number[][], f: (...xs: RemoteTensor[]) => RemoteTensor) => {
  const data = shapes.map((s) => Array.from({ length: s.reduce((a, b) => a * b, 1) }, () => rnd() * 4 - 2))
  const xs = data.map((d, i) => T(shapes[i]!, d).requiresGrad_())
  const out = f(...xs)
  const w = T(out.shape as number[])
  const loss = ops.mul(out, w).sum()
  const gs = grad(loss, xs)
  const lossAt = async (k: number, j: number, eps: number) => {
    const d2 = data.map((d) => [...d]); d2[k]![j]! += eps
    return noGrad(() => { const ys = d2.map((d, i) => T(shapes[i]!, d)); return ops.mul(f(...ys), w).sum() })
  }
  for (let k = 0; k < xs.length; k++) {
    const g = await vals(gs[k]!)
    for (let j = 0; j < data[k]!.length; j++) {
      const e = 1e-6, a = (await vals(await lossAt(k, j, e)))[0]!, b = (await vals(await lossAt(k, j, -e)))[0]!
      const fd = (a - b) / (2 * e)
      expect(`${name}: input ${k}[${j}] ${Math.abs(fd - g[j]!) <= 1e-5 * (1 + Math.abs(fd)) ? "agrees" : `tape ${g[j]}, finite difference ${fd}`}`).toBe(`${name}: input ${k}[${j}] agrees`)
    }
  }
}
test("every element's gradient matches its finite difference", async () => {
  await check("tril", [[3, 4]], (x) => ops.tril(x!, 1))
  await check("triu", [[2, 3, 3]], (x) => ops.triu(x!, -1))
  await check("split", [[5, 2]], (x) => { const [a, b, c] = x!.split(2) as RemoteTensor[]; return ops.add(ops.mul(a!, 2), ops.sum(ops.mul(b!, b!))).add(ops.sum(c!)) })
  await check("chunk", [[2, 5]], (x) => { const [a, , c] = x!.chunk(3, -1) as RemoteTensor[]; return ops.mul(a!, 3).sum().add(c!.sum().mul(c!.sum())) })
  await check("sdpa", [[2, 3, 4], [2, 5, 4], [2, 5, 2]], (q, k, v) => ops.scaled_dot_product_attention(q!, k!, v!))
  await check("sdpa causal scale", [[2, 4, 3], [2, 4, 3], [2, 4, 2]], (q, k, v) => ops.scaled_dot_product_attention(q!, k!, v!, { is_causal: true, scale: 0.7 }))
  const m = opsOn(mesh).clone(host("bool", [3, 4], [1, 0, 1, 1, 0, 1, 1, 1, 1, 1, 0, 1]) as never) as RemoteTensor
  await check("sdpa bool mask broadcast batch", [[2, 3, 2], [4, 2], [4, 3]], (q, k, v) => ops.scaled_dot_product_attention(q!, k!, v!, m))
  await check("sdpa float mask", [[3, 2], [3, 2], [3, 2], [3, 3]], (q, k, v, fm) => ops.scaled_dot_product_attention(q!, k!, v!, fm!))
  await check("rms_norm", [[3, 4], [4]], (x, w) => ops.rms_norm(x!, [4], w!))
  await check("rms_norm 2 dims no weight", [[2, 3, 2]], (x) => ops.rms_norm(x!, [3, 2], { eps: 1e-3 }))
  const t = opsOn(mesh).clone(host("i64", [4], [0, 2, -100, 1]) as never) as RemoteTensor
  const wt = T([3], [0.5, 2, 1.5])
  await check("nll mean weight ignore", [[4, 3]], (x) => ops.nll_loss(x!, t, wt))
  await check("nll none", [[4, 3]], (x) => ops.nll_loss(x!, t, { reduction: "none" }))
  const t3 = opsOn(mesh).clone(host("i64", [2, 2], [0, 2, 1, 1]) as never) as RemoteTensor
  await check("nll [N,C,d] sum", [[2, 3, 2]], (x) => ops.nll_loss(x!, t3, { reduction: "sum" }))
  await check("mse mean broadcast", [[2, 3], [3]], (a, b) => ops.mse_loss(a!, b!))
  await check("mse none", [[2, 3], [2, 3]], (a, b) => ops.mse_loss(a!, b!, "none"))
  await check("dropout", [[6, 5]], (x) => { opsOn(mesh).manual_seed(3); return x!.dropout(0.4) })
}, 120000)
