// The composite ops of model code against torch 1.13, through the controller (which issues their
// parts): einsum (matmul, permute, reshape, expand, sum, mul) over the equations transformer
// code uses, then random equations over 1 to 4 operands (repeated labels, labels of size 1 that
// broadcast, an ellipsis, implicit outputs, labels summed out); pad over random modes, ranks and
// sizes (negative ones crop); max_pool2d and avg_pool2d over random kernels, strides, paddings,
// dilations, ceil_mode, count_include_pad and divisor_override. Each is compared by value and by
// the gradients of sum(out * w) with respect to every tensor. Then their refusals, as
// ControllerErrors before sending.
import { afterAll, beforeAll, describe, expect, test } from "bun:test"
import { ControllerError, grad, ops, opsOn, type RemoteTensor } from "../../src/controller/index.ts"
import type { HostTensor } from "../../src/protocol/values.ts"
import { describeUnless } from "../skip.ts"
import { close, lcg, numbers, numel, oneRankMesh } from "./oneRank.ts"
import { fromJson, torchMissing, TorchServer } from "../torch.ts"
import { host } from "../worker/build.ts"

interface T { readonly t: "f64"; readonly shape: number[]; readonly data: number[] }
/** An op's call: einsum(equation, operands), or pad(input, pad, mode, value). */
interface Case { readonly name: string; readonly op: "einsum" | "pad" | "max_pool2d" | "avg_pool2d"; readonly args: unknown[]; readonly kwargs?: Record<string, unknown>; readonly tensors: T[] }

const tensorOf = (rnd: () => number, shape: number[]): T => ({ t: "f64", shape, data: Array.from({ length: numel(shape) }, () => rnd() * 4 - 2) })

const LISTED: Array<[string, number[][]]> = [
  ["bij,bjk->bik", [[2, 3, 4], [2, 4, 5]]],
  ["bhqd,bhkd->bhqk", [[2, 2, 3, 4], [2, 2, 5, 4]]],
  ["bhqk,bhkd->bhqd", [[2, 2, 3, 5], [2, 2, 5, 4]]],
  ["ij,j->i", [[3, 4], [4]]],
  ["ii->i", [[4, 4]]],
  ["ij->ji", [[3, 4]]],
  ["i,j->ij", [[3], [4]]],
  ["...ij,...jk->...ik", [[2, 3, 3, 4], [3, 4, 2]]],
  ["ij->", [[3, 4]]],
  ["ij,jk", [[3, 4], [4, 2]]],
  ["ii", [[3, 3]]],
  ["ij->ij", [[2, 3]]],
]

const LETTERS = [..."abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"]

/** A random valid equation and its operands: 1 to 4 operands over up to 6 labels of sizes 1 to 3. */
const randomCase = (seed: number): Case => {
  const rnd = lcg(seed), pick = <X>(xs: ReadonlyArray<X>): X => xs[Math.floor(rnd() * xs.length)]!
  const count = 1 + Math.floor(rnd() * 4), labels = Array.from({ length: 2 + Math.floor(rnd() * 5) }, () => pick(LETTERS))
  const pool = [...new Set(labels)], size = new Map(pool.map((l) => [l, 1 + Math.floor(rnd() * 3)]))
  const ellipsis = rnd() < 0.3 ? Array.from({ length: Math.floor(rnd() * 3) }, () => 1 + Math.floor(rnd() * 3)) : undefined
  const terms: string[] = [], operands: T[] = []
  for (let k = 0; k < count; k++) {
    const own = Array.from({ length: Math.floor(rnd() * 4) }, () => pick(pool))
    // a label of size 1 here that is larger elsewhere broadcasts (not within one operand: there sizes must agree)
    const one = new Set(own.filter((l) => own.indexOf(l) === own.lastIndexOf(l) && rnd() < 0.15))
    const lead = ellipsis?.slice(Math.floor(rnd() * (ellipsis.length + 1))).map((d) => (rnd() < 0.2 ? 1 : d))
    terms.push((lead ? "..." : "") + own.join(""))
    operands.push(tensorOf(rnd, [...(lead ?? []), ...own.map((l) => (one.has(l) ? 1 : size.get(l)!))]))
  }
  let equation = terms.join(",")
  if (rnd() < 0.7) {
    const used = [...new Set(terms.join("").replace(/\./g, ""))]
    const out = used.filter(() => rnd() < 0.5).sort(() => rnd() - 0.5)
    equation += "->" + (ellipsis && rnd() < 0.8 ? "..." : "") + out.join("")
  }
  return { name: `einsum seed ${seed}: ${equation} over ${operands.map((o) => `[${o.shape}]`).join(" ")}`, op: "einsum", args: [equation, operands], tensors: operands }
}

const einsumCase = (name: string, equation: string, operands: T[]): Case => ({ name: `einsum ${name}`, op: "einsum", args: [equation, operands], tensors: operands })

/** A random pad: constant over up to every dim, or another mode over the last 1 to 3 dims of an input with one or two more. */
const padCase = (seed: number): Case => {
  const rnd = lcg(seed), mode = (["constant", "reflect", "replicate", "circular"] as const)[Math.floor(rnd() * 4)]!
  const k = 1 + Math.floor(rnd() * 3), rank = mode === "constant" ? k + Math.floor(rnd() * 2) : mode === "circular" ? k + 2 : k + 1 + Math.floor(rnd() * 2)
  const shape = Array.from({ length: rank }, (_, d) => (d < rank - k ? 1 + Math.floor(rnd() * 2) : 2 + Math.floor(rnd() * 3)))
  const pad = Array.from({ length: 2 * k }, (_, j) => {
    const n = shape[rank - 1 - (j >> 1)]!, max = mode === "reflect" ? n - 1 : mode === "circular" ? n : 3
    // a crop now and then, never past what the dim holds (nor, for circular, its whole size on both sides)
    return rnd() < 0.2 ? -Math.floor(rnd() * Math.min(n - 1, 2)) : Math.floor(rnd() * (max + 1))
  })
  const value = mode === "constant" ? Math.round(rnd() * 40 - 20) / 8 : 0, x = tensorOf(rnd, shape)
  return { name: `pad seed ${seed}: ${mode} [${pad}] of [${shape}], value ${value}`, op: "pad", args: [x, pad, mode, value], tensors: [x] }
}

/**
 * A random 2-D pooling: kernel, stride, padding (at most half the kernel), dilation (max) and
 * ceil_mode, count_include_pad and now and then divisor_override (avg), over [N, C, H, W] or [C, H, W].
 */
const poolCase = (seed: number): Case => {
  const rnd = lcg(seed), max = rnd() < 0.5, int = (lo: number, hi: number) => lo + Math.floor(rnd() * (hi - lo + 1))
  const k = [int(1, 3), int(1, 3)], stride = rnd() < 0.3 ? null : [int(1, 3), int(1, 3)], padding = k.map((x) => int(0, Math.floor(x / 2)))
  const dilation = max ? [int(1, 2), int(1, 2)] : [1, 1], ceil = rnd() < 0.5
  const span = k.map((x, i) => dilation[i]! * (x - 1) + 1)
  const shape = [...(rnd() < 0.5 ? [int(1, 2)] : []), int(1, 2), int(span[0]!, span[0]! + 4), int(span[1]!, span[1]! + 4)]
  const x = tensorOf(rnd, shape)
  const kwargs: Record<string, unknown> = max ? { dilation, ceil_mode: ceil } : { ceil_mode: ceil, count_include_pad: rnd() < 0.5, ...(rnd() < 0.2 ? { divisor_override: int(1, 5) } : {}) }
  const op = max ? "max_pool2d" : "avg_pool2d"
  return { name: `${op} seed ${seed}: [${shape}] kernel ${k} stride ${stride ?? "= kernel"} padding ${padding} ${JSON.stringify(kwargs)}`, op, args: [x, k, stride ?? k, padding], kwargs, tensors: [x] }
}

const CASES: Case[] = [
  ...LISTED.map(([equation, shapes], i) => einsumCase(equation, equation, shapes.map((s) => tensorOf(lcg(100 + i), s)))),
  ...Array.from({ length: 100 }, (_, i) => randomCase(9000 + i)),
  ...Array.from({ length: 40 }, (_, i) => padCase(7000 + i)),
  ...Array.from({ length: 40 }, (_, i) => poolCase(5000 + i)),
]

const fixture = oneRankMesh()


describeUnless(torchMissing())("einsum, pad and the pools against torch 1.13, values and gradients", () => {
  let torch: TorchServer
  beforeAll(() => void (torch = new TorchServer(new URL("./torch_ref.py", import.meta.url).pathname)))
  afterAll(() => torch?.close())

  for (const [id, cs] of CASES.entries()) {
    test(cs.name, async () => {
      const on = opsOn(fixture.mesh)
      const sent = new Map(cs.tensors.map((x) => [x, on.clone(host(x.t, x.shape, x.data) as never).requiresGrad_()]))
      const remote = (v: unknown): unknown => (Array.isArray(v) ? v.map(remote) : sent.get(v as T) ?? v)
      const out = (ops[cs.op] as (...a: unknown[]) => RemoteTensor)(...(remote(cs.args) as unknown[]), cs.kwargs ?? {})
      const weights = tensorOf(lcg(id + 1), [...out.shape!])
      const inputs = [...sent.values()]
      const grads = grad(ops.sum(ops.mul(out, on.clone(host("f64", weights.shape, weights.data) as never))), inputs)
      const [value, gs] = await fixture.run(fixture.mesh.fetch([out, grads])) as unknown as [HostTensor, HostTensor[]]
      // the tensors' paths in the arguments: einsum's in its list, pad's input first
      const wrt = cs.op === "einsum" ? cs.tensors.map((_, j) => [1, j]) : [[0]]
      const kwargs = cs.kwargs ?? {}
      const want = await torch.ask(2 * id, { op: cs.op, args: cs.args, kwargs })
      const wantGrads = await torch.ask(2 * id + 1, { op: cs.op, args: cs.args, kwargs, wrt, weights })
      expect(want.error).toBeUndefined()
      expect(wantGrads.error).toBeUndefined()
      expect([...value.shape]).toEqual(want.shape)
      expect(close(numbers(value), want.data.map(fromJson))).toBe(true)
      gs.forEach((g, j) => expect({ input: j, close: close(numbers(g), wantGrads.grads[j].map(fromJson)) }).toEqual({ input: j, close: true }))
    }, 30_000)
  }
})

describe("the refusals of einsum, pad and the pools, before sending", () => {
  const refusal = (f: () => unknown): string => {
    try {
      f()
    } catch (e) {
      expect(e).toBeInstanceOf(ControllerError)
      return (e as Error).message
    }
    throw new Error("expected a ControllerError")
  }
  test("a bad equation, a count or size that does not fit, a bad output", () => {
    const on = opsOn(fixture.mesh), a = on.zeros([2, 3], { dtype: "f64" }), b = on.zeros([4, 5], { dtype: "f64" })
    expect(refusal(() => ops.einsum("ij,j1->i", [a, b]))).toMatch(/has '1': subscripts are letters/)
    expect(refusal(() => ops.einsum("ij,jk->ik", [a]))).toMatch(/has 2 operands, got 1 tensor/)
    expect(refusal(() => ops.einsum("ij,jk->ik", [a, b]))).toMatch(/subscript 'j' has size 3 in one operand and 4 in operand 1/)
    expect(refusal(() => ops.einsum("ii->i", [a]))).toMatch(/'i' is repeated in operand 0 with sizes 2 and 3/)
    expect(refusal(() => ops.einsum("ijk->i", [a]))).toMatch(/operand 0 has 2 dims but its subscript names 3/)
    expect(refusal(() => ops.einsum("ij->jj", [a]))).toMatch(/output subscript 'j' appears more than once/)
    expect(refusal(() => ops.einsum("ij->k", [a]))).toMatch(/output subscript 'k' is in no operand/)
    expect(refusal(() => ops.einsum("i...j...->i", [a]))).toMatch(/more than one ellipsis/)
    expect(refusal(() => ops.einsum("ij,jk", [a, on.zeros([3, 2], { dtype: "f32" })]))).toMatch(/operands need one dtype/)
  })
  test("a bad pad: its mode, a mode for the input's rank, an odd list, a crop past the size", () => {
    const on = opsOn(fixture.mesh), x = on.zeros([2, 3], { dtype: "f32" })
    expect(refusal(() => ops.pad(x, [1, 1], "mirror"))).toMatch(/mode must be one of constant, reflect, replicate, circular, got 'mirror'/)
    expect(refusal(() => ops.pad(on.zeros([3], { dtype: "f32" }), [1, 1], "reflect"))).toMatch(/reflect pads the last 1, 2 or 3 dims of a 2-D to 5-D input/)
    expect(refusal(() => ops.pad(x, [1, 1, 1, 1], "replicate"))).toMatch(/replicate pads the last 1, 2 or 3 dims/)
    expect(refusal(() => ops.pad(x, [1, 1, 1]))).toMatch(/two sizes per padded dim, got 3/)
    expect(refusal(() => ops.pad(x, [-2, -2]))).toMatch(/leaves dim 1 of f32\[2, 3\] with -1 elements/)
    expect(refusal(() => ops.pad(x, [3, 0], "reflect"))).toMatch(/reflect pads dim 1 of size 3 by less than its size/)
    expect(refusal(() => ops.pad(x, [1, 1], "replicate", 2))).toMatch(/replicate takes no value \(as torch's\), got 2/)
    expect(refusal(() => ops.pad(on.zeros([2, 3, 4], { dtype: "f32" }), [1, 1, 1, 1], "circular"))).toMatch(/circular pads the last 1, 2 or 3 dims of a 3-D to 5-D input/)
  })
  test("a bad pooling: padding past half the kernel, the input's rank, an empty output, return_indices", () => {
    const on = opsOn(fixture.mesh), x = on.zeros([1, 2, 4, 4], { dtype: "f32" })
    expect(refusal(() => ops.max_pool2d(x, 2, 2, 2))).toMatch(/padding must be from 0 to half the kernel size, got padding 2 and kernel_size 2/)
    expect(refusal(() => ops.avg_pool2d(on.zeros([4, 4], { dtype: "f32" }), 2))).toMatch(/input must be \[N, C, H, W\] or \[C, H, W\], got f32\[4, 4\]/)
    expect(refusal(() => ops.max_pool2d(x, 5))).toMatch(/the output would be empty/)
    expect(refusal(() => ops.max_pool2d(x, [2, 2, 2]))).toMatch(/kernel_size must be an int or a pair, got \[2,2,2\]/)
    expect(refusal(() => ops.max_pool2d(x, 2, { return_indices: true }))).toMatch(/return_indices is not supported/)
    expect(refusal(() => ops.avg_pool2d(on.zeros([1, 2, 4, 4], { dtype: "i64" }), 2))).toMatch(/needs a floating input, got i64/)
  })
})
