// conv1d, conv2d, batch_norm and group_norm against torch 1.13, through the controller (which
// issues their parts), in f64: random shapes with every option combined (stride, padding, also
// larger than the kernel, dilation, groups, bias, an unbatched input, a batch of 1; batch_norm in
// training and eval, with and without weight and bias, random momentum and eps), each compared by
// value, by the gradients of sum(out * w) with respect to every tensor, and for batch_norm by its
// running statistics after the call. Then their refusals, as ControllerErrors before sending.
import { afterAll, beforeAll, describe, expect, test } from "bun:test"
import { ControllerError, grad, ops, opsOn, type RemoteTensor } from "../../src/controller/index.ts"
import type { HostTensor } from "../../src/protocol/values.ts"
import { describeUnless } from "../skip.ts"
import { close, lcg, numbers, numel, oneRankMesh } from "./oneRank.ts"
import { fromJson, torchMissing, TorchServer } from "../torch.ts"
import { host } from "../worker/build.ts"

interface T { readonly t: "f64"; readonly shape: number[]; readonly data: number[] }
interface Case {
  readonly name: string
  readonly op: "conv1d" | "conv2d" | "batch_norm" | "group_norm"
  readonly args: unknown[]
  /** The paths of the tensors that get a gradient ([i]: argument i). */
  readonly wrt: number[]
  /** batch_norm: the running statistics, compared after the call. */
  readonly stats?: [T, T]
}

const tensorOf = (rnd: () => number, shape: number[], lo = -2, hi = 2): T => ({ t: "f64", shape, data: Array.from({ length: numel(shape) }, () => lo + rnd() * (hi - lo)) })

/**
 * A random convolution: 1 or 2 spatial dims, groups 1 to 3, kernel 1 to 3, stride 1 to 3,
 * padding 0 to 4 (past the kernel now and then), dilation 1 to 3, a bias or none, a batch of 1
 * to 3 or none; the input large enough for one output place.
 */
const convCase = (seed: number): Case => {
  const rnd = lcg(seed), int = (lo: number, hi: number) => lo + Math.floor(rnd() * (hi - lo + 1))
  const spatial = rnd() < 0.35 ? 1 : 2, groups = int(1, 3), cin = groups * int(1, 2), cout = groups * int(1, 2)
  const k = Array.from({ length: spatial }, () => int(1, 3)), s = k.map(() => int(1, 3)), p = k.map(() => (rnd() < 0.2 ? int(3, 4) : int(0, 2))), d = k.map(() => int(1, 3))
  const sizes = k.map((kk, i) => Math.max(1, d[i]! * (kk - 1) + 1 - 2 * p[i]!) + int(0, 4))
  const batch = rnd() < 0.2 ? [] : [rnd() < 0.3 ? 1 : int(2, 3)]
  const x = tensorOf(rnd, [...batch, cin, ...sizes]), w = tensorOf(rnd, [cout, cin / groups, ...k]), b = rnd() < 0.7 ? tensorOf(rnd, [cout]) : null
  // ints where all agree, else one per dim, as torch takes either
  const form = (xs: number[]) => (xs.every((v) => v === xs[0]) && rnd() < 0.5 ? xs[0]! : xs)
  const op = spatial === 1 ? "conv1d" : "conv2d"
  return {
    name: `${op} seed ${seed}: x [${x.shape}] w [${w.shape}] ${b ? "bias" : "no bias"} stride ${s} padding ${p} dilation ${d} groups ${groups}`,
    op, args: [x, w, b, form(s), form(p), form(d), groups], wrt: b ? [0, 1, 2] : [0, 1],
  }
}

/** A random batch_norm: [N, C, ...] of rank 2 to 4 (a batch of 1 with spatial dims now and then), training or eval, weight and bias or not. */
const batchNormCase = (seed: number): Case => {
  const rnd = lcg(seed), int = (lo: number, hi: number) => lo + Math.floor(rnd() * (hi - lo + 1))
  const rank = int(2, 4), c = int(1, 4), training = rnd() < 0.6
  const spatial = Array.from({ length: rank - 2 }, () => int(1, 3))
  const n = rnd() < 0.2 && numel(spatial) > 1 ? 1 : int(2, 4)
  const x = tensorOf(rnd, [n, c, ...spatial]), rm = tensorOf(rnd, [c], -1, 1), rv = tensorOf(rnd, [c], 0.5, 2)
  const affine = rnd() < 0.7, w = affine ? tensorOf(rnd, [c]) : null, b = affine && rnd() < 0.8 ? tensorOf(rnd, [c]) : null
  const momentum = Math.round(rnd() * 100) / 100, eps = [1e-5, 1e-3, 0.1][int(0, 2)]!
  return {
    name: `batch_norm seed ${seed}: [${x.shape}] ${training ? "training" : "eval"} weight ${w ? "yes" : "no"} bias ${b ? "yes" : "no"} momentum ${momentum} eps ${eps}`,
    op: "batch_norm", args: [x, rm, rv, w, b, training, momentum, eps], wrt: [0, ...(w ? [3] : []), ...(b ? [4] : [])], stats: [rm, rv],
  }
}

/** A random group_norm: [N, C, ...] of rank 2 to 4, C a multiple of the groups, weight and bias or not. */
const groupNormCase = (seed: number): Case => {
  const rnd = lcg(seed), int = (lo: number, hi: number) => lo + Math.floor(rnd() * (hi - lo + 1))
  const groups = int(1, 3), c = groups * int(1, 3), rank = int(2, 4)
  const x = tensorOf(rnd, [int(1, 3), c, ...Array.from({ length: rank - 2 }, () => int(1, 3))])
  // a group of one value (C = G, no spatial dims) has variance 0: eps keeps it finite
  const affine = rnd() < 0.7, w = affine ? tensorOf(rnd, [c]) : null, b = affine ? tensorOf(rnd, [c]) : null, eps = [1e-5, 1e-2][int(0, 1)]!
  return { name: `group_norm seed ${seed}: [${x.shape}] groups ${groups} ${affine ? "affine" : "no affine"} eps ${eps}`, op: "group_norm", args: [x, groups, w, b, eps], wrt: [0, ...(affine ? [2, 3] : [])] }
}

const CASES: Case[] = [
  ...Array.from({ length: 60 }, (_, i) => convCase(3000 + i)),
  ...Array.from({ length: 30 }, (_, i) => batchNormCase(4000 + i)),
  ...Array.from({ length: 20 }, (_, i) => groupNormCase(6000 + i)),
]

const fixture = oneRankMesh()


describeUnless(torchMissing())("conv1d, conv2d, batch_norm and group_norm against torch 1.13: values, gradients, running statistics", () => {
  let torch: TorchServer
  beforeAll(() => void (torch = new TorchServer(new URL("./torch_ref.py", import.meta.url).pathname)))
  afterAll(() => torch?.close())

  for (const [id, cs] of CASES.entries()) {
    test(cs.name, async () => {
      const on = opsOn(fixture.mesh)
      const upload = (x: T) => on.clone(host(x.t, x.shape, x.data) as never)
      const sent = new Map(cs.args.flatMap((v, i) => (v !== null && typeof v === "object" && "t" in v ? [[v as T, cs.wrt.includes(i) ? upload(v as T).requiresGrad_() : upload(v as T)]] : [])))
      const out = (ops[cs.op] as (...a: unknown[]) => RemoteTensor)(...cs.args.map((v) => sent.get(v as T) ?? v))
      const weights = tensorOf(lcg(id + 1), [...out.shape!])
      const inputs = cs.wrt.map((i) => sent.get(cs.args[i] as T)!)
      const grads = grad(ops.sum(ops.mul(out, on.clone(host("f64", weights.shape, weights.data) as never))), inputs)
      const stats = cs.stats ? ops.cat(cs.stats.map((s) => sent.get(s)!), 0) : out
      const [value, gs, after] = await fixture.run(fixture.mesh.fetch([out, grads, stats])) as unknown as [HostTensor, HostTensor[], HostTensor]
      const want = await torch.ask(3 * id, { op: cs.op, args: cs.args, kwargs: {} })
      const wantGrads = await torch.ask(3 * id + 1, { op: cs.op, args: cs.args, kwargs: {}, wrt: cs.wrt.map((i) => [i]), weights })
      expect(want.error).toBeUndefined()
      expect(wantGrads.error).toBeUndefined()
      expect([...value.shape]).toEqual(want.shape)
      expect({ value: close(numbers(value), want.data.map(fromJson)) }).toEqual({ value: true })
      gs.forEach((g, j) => expect({ input: cs.wrt[j], close: close(numbers(g), wantGrads.grads[j].map(fromJson)) }).toEqual({ input: cs.wrt[j], close: true }))
      if (cs.stats) {
        const wantStats = await torch.ask(3 * id + 2, { op: "batch_norm_stats", args: cs.args, kwargs: {} })
        expect(wantStats.error).toBeUndefined()
        expect({ runningStats: close(numbers(after), wantStats.data.map(fromJson)) }).toEqual({ runningStats: true })
      }
    }, 30_000)
  }
})

describe("the refusals of the convolutions and norms, before sending", () => {
  const refusal = (f: () => unknown): string => {
    try {
      f()
    } catch (e) {
      expect(e).toBeInstanceOf(ControllerError)
      return (e as Error).message
    }
    throw new Error("expected a ControllerError")
  }
  test("a convolution's shapes, groups, options and dtypes", () => {
    const on = opsOn(fixture.mesh), z = (shape: number[], dtype: "f32" | "f64" | "i64" = "f32") => on.zeros(shape, { dtype })
    expect(refusal(() => ops.conv2d(z([1, 4, 5, 5]), z([6, 3, 3, 3])))).toMatch(/weight f32\[6, 3, 3, 3\] with groups 1 takes 3 input channels, got f32\[1, 4, 5, 5\]/)
    expect(refusal(() => ops.conv2d(z([1, 4, 5, 5]), z([3, 2, 3, 3]), null, 1, 0, 1, 2))).toMatch(/out_channels 3 must be divisible by groups 2/)
    expect(refusal(() => ops.conv2d(z([1, 4, 5, 5]), z([4, 4, 3, 3]), z([3])))).toMatch(/bias f32\[3\] must be \[4\]/)
    expect(refusal(() => ops.conv2d(z([4, 5]), z([4, 4, 3, 3])))).toMatch(/input must be \[N, C, H, W\] or \[C, H, W\], got f32\[4, 5\]/)
    expect(refusal(() => ops.conv1d(z([1, 4, 5]), z([4, 4, 3, 3])))).toMatch(/weight must be \[out_channels, in_channels \/ groups, kW\]/)
    expect(refusal(() => ops.conv2d(z([1, 4, 2, 2]), z([4, 4, 3, 3]), null, 1, 0, 1))).toMatch(/the output would be empty/)
    expect(refusal(() => ops.conv2d(z([1, 4, 5, 5]), z([4, 4, 3, 3]), null, 0))).toMatch(/stride and dilation must be positive/)
    expect(refusal(() => ops.conv2d(z([1, 4, 5, 5]), z([4, 4, 3, 3]), null, 1, -1))).toMatch(/padding must not be negative/)
    expect(refusal(() => ops.conv2d(z([1, 4, 5, 5]), z([4, 4, 3, 3]), null, [1, 1, 1]))).toMatch(/stride must be an int or a pair, got \[1,1,1\]/)
    expect(refusal(() => ops.conv2d(z([1, 4, 5, 5]), z([4, 4, 3, 3], "f64")))).toMatch(/dtypes differ: f32\[1, 4, 5, 5\], f64\[4, 4, 3, 3\]/)
    expect(refusal(() => ops.conv2d(z([1, 4, 5, 5], "i64"), z([4, 4, 3, 3], "i64")))).toMatch(/needs a floating input, got i64/)
  })
  test("batch_norm's and group_norm's shapes and a training batch of one value per channel", () => {
    const on = opsOn(fixture.mesh), z = (shape: number[]) => on.zeros(shape, { dtype: "f32" })
    expect(refusal(() => ops.batch_norm(z([2, 3, 4]), z([4]), z([3])))).toMatch(/running_mean f32\[4\] must be \[3\] \(one per channel\)/)
    expect(refusal(() => ops.batch_norm(z([2, 3]), z([3]), z([3]), z([2])))).toMatch(/weight f32\[2\] must be \[3\]/)
    expect(refusal(() => ops.batch_norm(z([1, 3]), z([3]), z([3]), null, null, true))).toMatch(/expected more than 1 value per channel when training, got input f32\[1, 3\]/)
    expect(refusal(() => ops.batch_norm(z([3]), z([3]), z([3])))).toMatch(/input must be \[N, C, \.\.\.\], got f32\[3\]/)
    expect(refusal(() => ops.group_norm(z([2, 6, 4]), 4))).toMatch(/num_groups must divide the 6 channels of f32\[2, 6, 4\], got 4/)
    expect(refusal(() => ops.group_norm(z([2, 6, 4]), 3, z([3])))).toMatch(/weight f32\[3\] must be \[6\]/)
  })
})
