// autocast against torch 1.13's CPU autocast to bf16, through the controller: random shapes of
// the low list's ops (linear, matmul, mm, bmm, baddbmm, conv1d, conv2d), the f32 list's
// (cross_entropy, mse_loss, prod), ops that run in what they are given (softmax, sum,
// layer_norm), and chains (a linear into softmax, into cross_entropy, into an add with an f32
// tensor; conv2d into batch_norm with f32 statistics): each result's dtype is torch's, its values
// within a bf16 step of torch's, and the gradients of the f32 inputs within bf16's rounding of
// torch's. Then what torch's rules say beyond values: f64 is not cast, the "cuda" lists keep
// reductions and norms in f32, autocast(null) turns it off inside, backward rules run outside
// the scope, a parameter is cast once per scope, and bad arguments are refused.
import { afterAll, beforeAll, describe, expect, test } from "bun:test"
import { Effect } from "effect"
import { autocast, compile, ControllerError, grad, ops, opsOn, type RemoteTensor } from "../../src/controller/index.ts"
import type { HostTensor } from "../../src/protocol/values.ts"
import { describeUnless } from "../skip.ts"
import { lcg, numbers, numel, oneRankMesh } from "./oneRank.ts"
import { torchMissing, TorchServer } from "../torch.ts"
import { host } from "../worker/build.ts"

interface T { readonly t: "f32" | "f64" | "i64"; readonly shape: number[]; readonly data: number[] }
type Op = (...a: RemoteTensor[]) => RemoteTensor
interface Case { readonly name: string; readonly op: string; readonly args: T[]; readonly wrt: number[] }

const f32 = (rnd: () => number, shape: number[], scale = 1): T => ({ t: "f32", shape, data: Array.from({ length: numel(shape) }, () => Math.fround((rnd() * 2 - 1) * scale)) })
const classes = (rnd: () => number, n: number, c: number): T => ({ t: "i64", shape: [n], data: Array.from({ length: n }, () => Math.floor(rnd() * c)) })

/** Our side of each case: the op, or the chain, as the reference runs it. */
const OURS: Record<string, Op> = {
  linear: (x, w, b) => ops.linear(x!, w!, b), matmul: (a, b) => ops.matmul(a!, b!), mm: (a, b) => ops.mm(a!, b!), bmm: (a, b) => ops.bmm(a!, b!),
  baddbmm: (i, a, b) => ops.baddbmm(i!, a!, b!), conv1d: (x, w, b) => ops.conv1d(x!, w!, b), conv2d: (x, w, b) => ops.conv2d(x!, w!, b),
  cross_entropy: (x, y) => ops.cross_entropy(x!, y!), mse_loss: (a, b) => ops.mse_loss(a!, b!), prod: (x) => ops.prod(x!),
  softmax: (x) => ops.softmax(x!, -1), sum: (x) => ops.sum(x!), layer_norm: (x) => ops.layer_norm(x!, [x!.shape!.at(-1)!]),
  linear_softmax: (x, w, b) => ops.softmax(ops.linear(x!, w!, b), -1),
  linear_cross_entropy: (x, w, b, y) => ops.cross_entropy(ops.linear(x!, w!, b), y!),
  linear_add: (x, w, r) => ops.linear(x!, w!).add(r!),
  conv2d_batch_norm: (x, w, rm, rv, g, b) => ops.relu(ops.batch_norm(ops.conv2d(x!, w!, null, 1, 1), rm!, rv!, g, b, true)),
}

/** Torch's argument lists (softmax's dim, the reference's other arguments) are its own: these are the tensors. */
const randomCase = (seed: number): Case => {
  const rnd = lcg(seed), int = (lo: number, hi: number) => lo + Math.floor(rnd() * (hi - lo + 1))
  const names = Object.keys(OURS), op = names[seed % names.length]!
  const n = int(1, 5), k = int(2, 24), m = int(1, 7), b = int(1, 3)
  const all = (args: T[], wrt = args.flatMap((a, i) => (a.t === "f32" ? [i] : []))): Case => ({ name: `${op} seed ${seed}: ${args.map((a) => `${a.t}[${a.shape}]`).join(" ")}`, op, args, wrt })
  switch (op) {
    case "linear": case "linear_softmax": return all([f32(rnd, [b, n, k]), f32(rnd, [m, k]), f32(rnd, [m])])
    case "matmul": return all([f32(rnd, [b, n, k]), f32(rnd, [k, m])])
    case "mm": return all([f32(rnd, [n, k]), f32(rnd, [k, m])])
    case "bmm": return all([f32(rnd, [b, n, k]), f32(rnd, [b, k, m])])
    case "baddbmm": return all([f32(rnd, [b, n, m]), f32(rnd, [b, n, k]), f32(rnd, [b, k, m])])
    case "conv1d": return all([f32(rnd, [b, 2, int(3, 8)]), f32(rnd, [m, 2, 3]), f32(rnd, [m])])
    case "conv2d": return all([f32(rnd, [b, 2, int(3, 6), int(3, 6)]), f32(rnd, [m, 2, 3, 3]), f32(rnd, [m])])
    case "cross_entropy": return all([f32(rnd, [n, k], 4), classes(rnd, n, k)])
    case "mse_loss": return all([f32(rnd, [n, k]), f32(rnd, [n, k])])
    case "prod": return all([f32(rnd, [n, 3], 1.5)])
    case "softmax": case "sum": case "layer_norm": return all([f32(rnd, [n, k])])
    case "linear_cross_entropy": return all([f32(rnd, [n, k]), f32(rnd, [m + 1, k]), f32(rnd, [m + 1]), classes(rnd, n, m + 1)])
    case "linear_add": return all([f32(rnd, [n, k]), f32(rnd, [m, k]), f32(rnd, [n, m])])
    default: {
      const c = int(1, 3), ones = (s: number[]): T => ({ t: "f32", shape: s, data: Array(numel(s)).fill(1) })
      return all([f32(rnd, [int(2, 3), 2, 4, 4]), f32(rnd, [c, 2, 3, 3]), { t: "f32", shape: [c], data: Array(c).fill(0) }, ones([c]), f32(rnd, [c]), f32(rnd, [c])], [0, 1, 4, 5])
    }
  }
}

const CASES = Array.from({ length: 64 }, (_, i) => randomCase(100 + i))

const fixture = oneRankMesh()

/** Within `steps` bf16 steps (2^-8 relative) of the largest magnitude of b: one rounding, or a few summed. */
const within = (a: number[], b: number[], steps: number) => {
  const scale = Math.max(1e-3, ...b.map(Math.abs))
  return a.length === b.length && a.every((x, i) => Math.abs(x - b[i]!) <= steps * 2 ** -8 * scale)
}

describeUnless(torchMissing())("autocast to bf16 against torch 1.13's CPU autocast: dtypes, values, gradients", () => {
  let torch: TorchServer
  beforeAll(() => void (torch = new TorchServer(new URL("./autocast_ref.py", import.meta.url).pathname)))
  afterAll(() => torch?.close())

  for (const [id, cs] of CASES.entries()) {
    test(cs.name, async () => {
      const on = opsOn(fixture.mesh)
      const sent = cs.args.map((a, i) => {
        const t = on.clone(host(a.t, a.shape, a.data) as never)
        return cs.wrt.includes(i) ? t.requiresGrad_() : t
      })
      const out = autocast("bf16", () => OURS[cs.op]!(...sent))
      const weights = Array.from({ length: numel(out.shape!) }, (_, i) => Math.fround(Math.sin(i + id)))
      const grads = grad(ops.sum(ops.mul(out.to("f32"), on.clone(host("f32", [...out.shape!], weights) as never))), cs.wrt.map((i) => sent[i]!))
      const [value, gs] = await fixture.run(fixture.mesh.fetch([out, grads])) as unknown as [HostTensor, HostTensor[]]
      const want = await torch.ask(id, { op: cs.op, args: cs.args, wrt: cs.wrt, weights })
      expect(want.error).toBeUndefined()
      expect({ dtype: out.dtype, shape: [...value.shape] }).toEqual({ dtype: want.dtype, shape: want.shape })
      expect({ value: within(numbers(value), want.data, 2) }).toEqual({ value: true })
      gs.forEach((g, j) => {
        expect(g.dtype).toBe("f32")
        expect({ input: cs.wrt[j], grad: within(numbers(g), want.grads[j], 4) }).toEqual({ input: cs.wrt[j], grad: true })
      })
    }, 30_000)
  }
})

describe("autocast's rules beyond torch's values", () => {
  const on = () => opsOn(fixture.mesh)
  // the typed surface's dtypes are the rules' without autocast: these read the one each result has
  const dt = (t: RemoteTensor): string | undefined => t.dtype
  test("f64 is not cast; f16 is cast to bf16; ops off the lists keep their dtypes; outside the scope nothing is cast", () => {
    const a = on().zeros([2, 3], { dtype: "f64" }), b = on().zeros([3, 2], { dtype: "f64" }), h = on().zeros([2, 3], { dtype: "f16" }), w = on().zeros([4, 3], { dtype: "f32" })
    autocast("bf16", () => {
      expect(dt(a.matmul(b))).toBe("f64")
      expect(dt(ops.linear(h, w))).toBe("bf16")
      expect(dt(ops.relu(w))).toBe("f32")
    })
    expect(dt(ops.linear(w, w))).toBe("f32")
    expect(dt(autocast("f16", () => ops.linear(w, w)))).toBe("f16")
  })
  test("the cpu lists leave reductions, norms and softmax in the low type; the cuda lists run them in f32", () => {
    const x = on().zeros([2, 8], { dtype: "f32" }), w = on().zeros([8, 8], { dtype: "f32" })
    const run = (lists: "cpu" | "cuda") => autocast("bf16", () => {
      const y = ops.linear(x, w)
      return [ops.sum(y), ops.softmax(y, -1), ops.layer_norm(y, [8]), ops.exp(y), ops.cross_entropy(y, on().zeros([2], { dtype: "i64" }))].map(dt)
    }, { lists })
    expect(run("cpu")).toEqual(["bf16", "bf16", "bf16", "bf16", "f32"])
    expect(run("cuda")).toEqual(["f32", "f32", "f32", "f32", "f32"])
    // torch's CPU list has reflection_pad and replication_pad, not the constant pad
    const low = on().zeros([1, 2, 4], { dtype: "bf16" })
    expect(autocast("bf16", () => [ops.pad(low, [1, 1], "reflect"), ops.pad(low, [1, 1], { mode: "replicate" }), ops.pad(low, [1, 1])].map(dt))).toEqual(["f32", "f32", "bf16"])
  })
  test("autocast(null) turns it off inside; the scope ends when f returns or throws", () => {
    const w = on().zeros([4, 4], { dtype: "f32" })
    autocast("bf16", () => expect(dt(autocast(null, () => ops.linear(w, w)))).toBe("f32"))
    expect(() => autocast("bf16", () => { throw new Error("inside") })).toThrow("inside")
    expect(dt(ops.linear(w, w))).toBe("f32")
  })
  test("a parameter is cast once per scope: its two uses read one low copy; a tensor that is not a leaf is cast at each use", () => {
    const w = on().randn([4, 4]).requiresGrad_(), x = on().randn([2, 4])
    // the low copy of the [4, 4] operand a linear's node reads
    const lowOf = (t: RemoteTensor) => t.autograd!.node!.inputs.find((i) => i.dtype === "bf16" && i.shape!.join() === "4,4")
    autocast("bf16", () => {
      const [a, b] = [ops.linear(x, w), ops.linear(x, w)]
      expect(lowOf(a)).toBeDefined()
      expect(lowOf(a)).toBe(lowOf(b))
      const v = w.mul(1), [c, d] = [ops.linear(x, v), ops.linear(x, v)]
      expect(lowOf(c)).not.toBe(lowOf(d))
    })
    // a new scope, a new copy (the parameter may have changed between steps)
    const first = autocast("bf16", () => lowOf(ops.linear(x, w))), second = autocast("bf16", () => lowOf(ops.linear(x, w)))
    expect(first).not.toBe(second)
  })
  test("backward runs outside the scope: an f32 forward's gradients are the same when grad is called inside one", async () => {
    const w = on().randn([3, 5]).requiresGrad_(), x = on().randn([4, 5])
    const outside = grad(ops.linear(x, w).exp().sum(), [w])
    // inside, the rules' matmuls would run in bf16 and exp's f32 list would not matter: the values would move
    const inside = autocast("bf16", () => grad(autocast(null, () => ops.linear(x, w).exp().sum()), [w]))
    const [a, b] = await fixture.run(fixture.mesh.fetch([outside, inside])) as unknown as [HostTensor[], HostTensor[]]
    expect(b[0]!.dtype).toBe("f32")
    expect(numbers(b[0]!)).toEqual(numbers(a[0]!))
  })
  test("compile: autocast inside the step is traced and replayed; a compiled call inside a scope (which ends before the step runs) is refused", async () => {
    const w = on().randn([4, 4]).requiresGrad_(), x = on().randn([2, 4])
    const step = compile((a: RemoteTensor) => autocast("bf16", () => ops.linear(a, w)), { name: "lowLinear", onRetrace: () => {} })
    const [first, second, third] = [await fixture.run(step(x)), await fixture.run(step(x)), await fixture.run(step(x))]
    expect([first, second, third].map(dt)).toEqual(["bf16", "bf16", "bf16"])
    const [a, c] = await fixture.run(fixture.mesh.fetch([first, third])) as unknown as [HostTensor, HostTensor]
    expect(c.dtype).toBe("bf16")
    expect(numbers(c)).toEqual(numbers(a))
    const plain = compile((a: RemoteTensor) => ops.linear(a, w), { name: "plainLinear" })
    const refused = await fixture.run(Effect.flip(autocast("bf16", () => plain(x))))
    expect(refused).toBeInstanceOf(ControllerError)
    expect((refused as Error).message).toMatch(/compile\(plainLinear\) was called inside autocast\("bf16"\), which ends before the step runs; call autocast inside the step/)
    step.dispose()
    plain.dispose()
  })
  test("a dtype that is not a low type, or lists that do not exist, are refused", () => {
    expect(() => autocast("f32" as never, () => 0)).toThrow(ControllerError)
    expect(() => autocast("bf16", () => 0, { lists: "tpu" as never })).toThrow(/autocast's lists are "cpu" or "cuda", got "tpu"/)
  })
})

