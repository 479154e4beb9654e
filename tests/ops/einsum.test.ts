// einsum against torch 1.13's, through the controller (which issues its parts: matmul, permute,
// reshape, expand, sum, mul): the equations transformer code uses, then random equations over
// 1 to 4 operands (repeated labels, labels of size 1 that broadcast, an ellipsis, implicit
// outputs, labels summed out), each compared by value and by the gradients of sum(out * w) with
// respect to every operand. Then its refusals, and pad's, as ControllerErrors before sending.
import { afterAll, beforeAll, describe, expect, test } from "bun:test"
import { Effect, ManagedRuntime } from "effect"
import { Controller, ControllerError, grad, ops, opsOn, type ControllerApi, type Mesh, type RemoteTensor } from "../../src/controller/index.ts"
import type { HostTensor } from "../../src/protocol/values.ts"
import { describeUnless } from "../skip.ts"
import { fromJson, torchMissing, TorchServer } from "../torch.ts"
import { host } from "../worker/build.ts"

interface T { readonly t: "f64"; readonly shape: number[]; readonly data: number[] }
interface Case { readonly name: string; readonly equation: string; readonly operands: T[] }

const numel = (s: ReadonlyArray<number>) => s.reduce((a, b) => a * b, 1)
const lcg = (seed: number) => () => ((seed = (seed * 1103515245 + 12345) % 2 ** 31) / 2 ** 31)
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
  return { name: `seed ${seed}: ${equation} over ${operands.map((o) => `[${o.shape}]`).join(" ")}`, equation, operands }
}

const CASES: Case[] = [
  ...LISTED.map(([equation, shapes], i) => ({ name: equation, equation, operands: shapes.map((s) => tensorOf(lcg(100 + i), s)) })),
  ...Array.from({ length: 100 }, (_, i) => randomCase(9000 + i)),
]

let rt: ManagedRuntime.ManagedRuntime<Controller, unknown>
let mesh: Mesh
beforeAll(async () => {
  rt = ManagedRuntime.make(Controller.local({ world: 1, onWorkerLine: () => {} }))
  const ctl: ControllerApi = await rt.runPromise(Effect.service(Controller))
  mesh = await rt.runPromise(ctl.mesh({ g: 1 }))
}, 60_000)
afterAll(() => rt?.dispose())

const numbers = (h: HostTensor) => [...h.toArray()].map(Number)
const close = (a: number[], b: number[]) => a.length === b.length && a.every((x, i) => Math.abs(x - b[i]!) <= 1e-9 * (1 + Math.abs(b[i]!)))

describeUnless(torchMissing())("einsum against torch 1.13, values and gradients", () => {
  let torch: TorchServer
  beforeAll(() => void (torch = new TorchServer(new URL("./torch_ref.py", import.meta.url).pathname)))
  afterAll(() => torch?.close())

  for (const [id, cs] of CASES.entries()) {
    test(cs.name, async () => {
      const on = opsOn(mesh)
      const inputs = cs.operands.map((o) => on.clone(host(o.t, o.shape, o.data) as never).requiresGrad_())
      const out = ops.einsum(cs.equation, inputs)
      const weights = tensorOf(lcg(id + 1), [...out.shape!])
      const grads = grad(ops.sum(ops.mul(out, on.clone(host("f64", weights.shape, weights.data) as never))), inputs)
      const [value, gs] = await rt.runPromise(mesh.fetch([out, grads])) as unknown as [HostTensor, HostTensor[]]
      const args = [cs.equation, cs.operands]
      const want = await torch.ask(2 * id, { op: "einsum", args, kwargs: {} })
      const wantGrads = await torch.ask(2 * id + 1, { op: "einsum", args, kwargs: {}, wrt: cs.operands.map((_, j) => [1, j]), weights })
      expect(want.error).toBeUndefined()
      expect(wantGrads.error).toBeUndefined()
      expect([...value.shape]).toEqual(want.shape)
      expect(close(numbers(value), want.data.map(fromJson))).toBe(true)
      gs.forEach((g, j) => expect({ operand: j, close: close(numbers(g), wantGrads.grads[j].map(fromJson)) }).toEqual({ operand: j, close: true }))
    }, 30_000)
  }
})

describe("einsum's and pad's refusals, before sending", () => {
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
    const on = opsOn(mesh), a = on.zeros([2, 3], { dtype: "f64" }), b = on.zeros([4, 5], { dtype: "f64" })
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
    const on = opsOn(mesh), x = on.zeros([2, 3], { dtype: "f32" })
    expect(refusal(() => ops.pad(x, [1, 1], "mirror"))).toMatch(/mode must be one of constant, reflect, replicate, circular, got 'mirror'/)
    expect(refusal(() => ops.pad(on.zeros([3], { dtype: "f32" }), [1, 1], "reflect"))).toMatch(/reflect pads the last 1, 2 or 3 dims of a 2-D to 5-D input/)
    expect(refusal(() => ops.pad(x, [1, 1, 1, 1], "replicate"))).toMatch(/replicate pads the last 1, 2 or 3 dims/)
    expect(refusal(() => ops.pad(x, [1, 1, 1]))).toMatch(/two sizes per padded dim, got 3/)
    expect(refusal(() => ops.pad(x, [-2, -2]))).toMatch(/leaves dim 1 of f32\[2, 3\] with -1 elements/)
    expect(refusal(() => ops.pad(x, [3, 0], "reflect"))).toMatch(/reflect pads dim 1 of size 3 by less than its size/)
  })
})
