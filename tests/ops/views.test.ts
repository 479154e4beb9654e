// Views without copies: narrow, select, slicing, split, chunk and contiguous give a
// view of their input (the same memory, from an offset into it) wherever their result is one
// contiguous block of it, and a copy elsewhere. Checked on real workers through the controller:
//   - against torch 1.13 (tests/ops/views_ref.py): ours is a view exactly where torch's view is
//     contiguous, so in-place writes through the view reach the base and writes to the base reach
//     the view, as in torch; where torch's is not, ours is a copy, with torch's values;
//   - lifetimes: the base's ref deleted while a view lives leaves the view's memory alive and
//     correct, counted once, and freed with the last of them (the worker's own counters);
//   - a write whose input shares only some of its memory is refused, as torch refuses it, and
//     scatter_ and index_add_ refuse even the written tensor itself as their source;
//   - leaf gradients made as views of one gradient (cat's backward) stay independent;
//   - matmul's and linear's backward read their transposes in place (_matmul_t): no ops.transpose.
import { afterAll, beforeAll, describe, expect, spyOn, test } from "bun:test"
import { Effect, ManagedRuntime } from "effect"
import { Controller, eager, ops, opsOn, type ControllerApi, type Mesh, type RemoteTensor } from "../../src/controller/index.ts"
import { clipGradNorm } from "../../src/optim/clip.ts"
import type { DType } from "../../src/protocol/values.ts"
import { describeUnless } from "../skip.ts"
import { torchMissing, TorchServer } from "../torch.ts"
import { host } from "../worker/build.ts"

const ROOT = new URL("../..", import.meta.url).pathname
let rt: ManagedRuntime.ManagedRuntime<Controller, unknown>
let ctl: ControllerApi
let mesh: Mesh
beforeAll(async () => {
  rt = ManagedRuntime.make(Controller.local({ world: 1, functionPath: [ROOT], gcRelease: false, onWorkerLine: () => {} }))
  ctl = await rt.runPromise(Effect.service(Controller))
  mesh = await rt.runPromise(ctl.mesh({ dp: 1 }))
}, 60_000)
afterAll(() => rt?.dispose())

const run = <A>(e: Effect.Effect<A, unknown>): Promise<A> => rt.runPromise(e)
const values = (t: RemoteTensor): Promise<number[]> => run(t.fetch()).then((h) => [...h.toArray()].map(Number))
const iota = (n: number) => Array.from({ length: n }, (_, i) => i)
const tensor = (t: DType, shape: number[], data = iota(shape.reduce((a, b) => a * b, 1))): RemoteTensor =>
  opsOn(mesh).clone(host(t, shape, data) as never) as RemoteTensor
/** This worker's live tensor handles and their bytes (tests/controller/fixtures.ts), after what was issued before has run. */
const workerMemory = async (t: RemoteTensor): Promise<{ tensors: number; bytes: number }> => {
  await run(t.fetch())
  const [tensors, bytes] = ((await run(mesh.fetchAll(t, { fn: "tests/controller/fixtures:workerMemory" }))) as number[][])[0]!
  return { tensors: tensors!, bytes: bytes! }
}

type Step = readonly [op: string, args: ReadonlyArray<unknown>]
interface Case { readonly name: string; readonly t: DType; readonly shape: number[]; readonly chain: ReadonlyArray<Step>; readonly piece?: number }
const v = (name: string, shape: number[], chain: ReadonlyArray<Step>, piece?: number, t: DType = "f32"): Case => ({ name, t, shape, chain, piece })
const CASES: Case[] = [
  v("narrow of the leading dim", [4, 3], [["narrow", [0, 1, 2]]]),
  v("narrow, negative start", [5, 2], [["narrow", [0, -3, 2]]], undefined, "f64"),
  v("narrow of an inner dim (a copy)", [4, 3], [["narrow", [1, 0, 2]]]),
  v("narrow of an inner dim under size-1 leading dims", [1, 1, 6], [["narrow", [2, 2, 3]]]),
  v("narrow of an inner dim, whole", [3, 4], [["narrow", [1, 0, 4]]]),
  v("narrow to nothing", [4, 3], [["narrow", [0, 2, 0]]]),
  v("select of the leading dim", [4, 3], [["select", [0, 2]]], undefined, "i64"),
  v("select, negative index", [4, 3], [["select", [0, -1]]]),
  v("select of an inner dim (a copy)", [4, 3], [["select", [1, 1]]]),
  v("select of an inner dim under a size-1 dim", [1, 4, 3], [["select", [1, 3]]]),
  v("slice of the leading dim", [5, 2], [["slice", [0, 1, 4]]]),
  v("slice with a step (a copy)", [6, 2], [["slice", [0, 0, null, 2]]]),
  v("slice with a step that keeps one entry", [6, 2], [["slice", [0, 4, 5, 3]]]),
  v("split of the leading dim, the second piece", [6, 2], [["split", [2, 0]]], 1),
  v("split of an inner dim (copies)", [3, 4], [["split", [2, 1]]], 1),
  v("chunk of the leading dim, the last piece", [5, 3], [["chunk", [2, 0]]], 1, "i32"),
  v("unbind of the leading dim", [3, 4], [["unbind", [0]]], 2),
  v("unbind of an inner dim (copies)", [3, 4], [["unbind", [1]]], 1, "f64"),
  v("a select of a narrow: offsets add up", [4, 3], [["narrow", [0, 1, 3]], ["select", [0, 1]]]),
  v("a narrow of a reshape", [2, 6], [["reshape", [[4, 3]]], ["narrow", [0, 2, 2]]]),
  v("contiguous is its input", [2, 3], [["contiguous", []]]),
]
const WRITES = [["view", "add_", 100], ["base", "mul_", -1], ["view", "fill_", 7]] as const

describeUnless(torchMissing())("views against torch 1.13: a view where torch's is contiguous, writes seen both ways", () => {
  let torch: TorchServer
  beforeAll(() => void (torch = new TorchServer(new URL("./views_ref.py", import.meta.url).pathname)))
  afterAll(() => torch?.close())
  CASES.forEach((c, id) => test(c.name, async () => {
    const data = iota(c.shape.reduce((a, b) => a * b, 1))
    const want = torch.ask<{ contiguous: boolean; steps: Array<{ base: number[]; view: number[] }>; error?: string }>(id, { t: c.t, shape: c.shape, data, chain: c.chain, piece: c.piece ?? 0, writes: WRITES })
    const base = tensor(c.t, c.shape, data)
    let view: RemoteTensor = base
    for (const [op, args] of c.chain) {
      const r = (ops as unknown as Record<string, (...a: unknown[]) => RemoteTensor | RemoteTensor[]>)[op]!(view, ...args)
      view = Array.isArray(r) ? r[c.piece ?? 0]! : r
    }
    const steps: Array<{ base: number[]; view: number[] }> = []
    for (const [who, op, arg] of WRITES) {
      ;(ops as unknown as Record<string, (t: RemoteTensor, x: number) => void>)[op]!(who === "view" ? view : base, arg)
      steps.push({ base: await values(base), view: await values(view) })
    }
    const theirs = await want
    expect(theirs.error).toBeUndefined()
    expect(steps).toEqual(theirs.steps)
  }, 30_000)) // the first case waits for torch to import (seconds on a loaded machine)
})

describe("view lifetimes on a worker", () => {
  test("a view outlives its base's ref: its memory stays alive and counted once, and goes with the view", async () => {
    const probe = tensor("f32", [1])
    const before = await workerMemory(probe)
    const x = tensor("f32", [256, 64])
    const afterBase = await workerMemory(probe)
    expect(afterBase.bytes - before.bytes).toBe(256 * 64 * 4)
    const row = ops.select(x, 0, 200), rows = ops.narrow(x, 0, 10, 20)
    // Views: no bytes more.
    expect((await workerMemory(probe)).bytes).toBe(afterBase.bytes)
    x.release()
    const held = await workerMemory(probe)
    expect(held.bytes).toBe(afterBase.bytes)
    expect(await values(row)).toEqual(iota(64).map((i) => 200 * 64 + i))
    ops.add_(rows, 1) // a write through a view whose base's ref is gone
    expect((await values(rows)).slice(0, 3)).toEqual([641, 642, 643])
    row.release()
    expect((await workerMemory(probe)).bytes).toBe(afterBase.bytes)
    rows.release()
    const after = await workerMemory(probe)
    expect(after).toEqual(before)
  })

  test("a view of a view keeps its values when the intermediate view and then the base are freed (the memory's owner is counted, not the intermediate)", async () => {
    const probe = tensor("f32", [1])
    const before = await workerMemory(probe)
    const x = tensor("f32", [6, 2])
    const middle = ops.narrow(x, 0, 1, 4), inner = ops.narrow(middle, 0, 1, 2)
    middle.release()
    x.release()
    // Fresh tensors of the base's dtype and shape: none may be given the memory inner still views.
    const fresh = [0, 1, 2].map(() => opsOn(mesh).full([6, 2], -1, { dtype: "f32" }))
    expect(await values(inner)).toEqual([4, 5, 6, 7])
    for (const f of fresh) f.release()
    inner.release()
    expect(await workerMemory(probe)).toEqual(before)
  })

  test("a copy (an inner dim's narrow) takes its own bytes and is independent of the base", async () => {
    const probe = tensor("f32", [1])
    const x = tensor("f32", [64, 64])
    const before = await workerMemory(probe)
    const cols = ops.narrow(x, 1, 0, 16)
    expect((await workerMemory(probe)).bytes - before.bytes).toBe(64 * 16 * 4)
    ops.fill_(x, 0)
    expect((await values(cols)).slice(0, 3)).toEqual([0, 1, 2])
    cols.release()
    x.release()
  })
})

describe("writes through views", () => {
  test("a write whose input shares only some of its memory is refused at the call, naming both, and nothing is sent", async () => {
    const x = tensor("f32", [6, 2])
    const a = ops.narrow(x, 0, 0, 4), b = ops.narrow(x, 0, 2, 4)
    const refused = await run(Effect.flip(eager(() => ops.add_(a, b))))
    expect(refused.reason).toBe("overlap")
    expect(refused.message).toMatch(/^ops\.add_: unsupported operation: some elements of the input tensor and the written-to tensor refer to a single memory location \(RemoteTensor\(\d+ f32\[4,2\].*the written RemoteTensor/)
    // The same call as a function with mutates (the path a checkpoint's restore takes) is refused the same way.
    const viaRun = await run(Effect.flip(mesh.run("ops.copy_", [a, b], {}, { mutates: [a] })))
    expect(viaRun.reason).toBe("overlap")
    // Nothing was sent: the view is not poisoned and x was not written; disjoint blocks of one memory are fine operands.
    expect(await values(a)).toEqual(iota(8))
    expect(await values(x)).toEqual(iota(12))
    const c = ops.narrow(x, 0, 4, 2)
    ops.add_(ops.narrow(x, 0, 0, 2), c)
    expect((await values(x)).slice(0, 4)).toEqual([8, 10, 12, 14])
  })

  test("scatter_ and index_add_ refuse the written tensor itself as their source (torch's assert_no_overlap); add_ takes it", async () => {
    const x = tensor("f32", [4]), index = tensor("i64", [4])
    const scatter = await run(Effect.flip(eager(() => ops.scatter_(x, 0, index, x))))
    const indexAdd = await run(Effect.flip(eager(() => ops.index_add_(x, 0, index, x))))
    expect([scatter.reason, indexAdd.reason]).toEqual(["overlap", "overlap"])
    expect(await values(x)).toEqual(iota(4))
    ops.add_(x, x)
    expect(await values(x)).toEqual([0, 2, 4, 6])
  })

  test("leaf gradients that are views of one gradient (cat's backward) stay independent under in-place updates", async () => {
    const a = (tensor("f64", [3]) as RemoteTensor<"f64">).requiresGrad_(), b = (tensor("f64", [3]) as RemoteTensor<"f64">).requiresGrad_()
    const c = (tensor("f64", [6]) as RemoteTensor<"f64">).requiresGrad_()
    ops.add(ops.cat([a, b]), c).sum().backward()
    ops.add(ops.cat([a, b]), c).sum().backward() // accumulates in place: add_ into each .grad
    expect([await values(a.grad!), await values(b.grad!), await values(c.grad!)]).toEqual([[2, 2, 2], [2, 2, 2], [2, 2, 2, 2, 2, 2]])
    await run(clipGradNorm([a.grad!, b.grad!, c.grad!], Math.sqrt(12))) // scales each in place by about 1/2
    const rounded = async (t: RemoteTensor) => (await values(t)).map((x) => Number(x.toFixed(4)))
    expect([await rounded(a.grad!), await rounded(b.grad!), await rounded(c.grad!)]).toEqual([[1, 1, 1], [1, 1, 1], [1, 1, 1, 1, 1, 1]])
  })
})

describe("transposed operands read in place", () => {
  test("the backward of linear and of matmul (batched input, 2-D weight) issues no transpose, and gives torch's gradients", async () => {
    const x = (tensor("f64", [2, 3, 4]) as RemoteTensor<"f64">).requiresGrad_(), w = (tensor("f64", [5, 4]) as RemoteTensor<"f64">).requiresGrad_()
    const v = (tensor("f64", [4, 5]) as RemoteTensor<"f64">).requiresGrad_()
    const issued: string[] = []
    const issue = mesh.issue.bind(mesh)
    const spy = spyOn(mesh, "issue").mockImplementation((fn, ...rest) => (issued.push(fn), issue(fn, ...rest)))
    try {
      ops.add(ops.linear(x, w).sum(), ops.matmul(x, v).sum()).backward()
    } finally {
      spy.mockRestore()
    }
    expect(issued.filter((f) => f === "ops.transpose" || f === "ops.t" || f === "ops.permute")).toEqual([])
    expect(issued).toContain("ops._matmul_t")
    // d/dx = ones @ w + ones @ v^T; d/dw = ones^T x (summed rows); d/dv = x^T ones.
    const xs = iota(24), colSum = [0, 1, 2, 3].map((j) => xs.filter((_, i) => i % 4 === j).reduce((a, b) => a + b, 0))
    const wRowSum = [0, 1, 2, 3].map((j) => iota(5).reduce((a, r) => a + r * 4 + j, 0)), vRowSum = [0, 1, 2, 3].map((r) => iota(5).reduce((a, j) => a + r * 5 + j, 0))
    expect(await values(x.grad!)).toEqual(xs.map((i) => wRowSum[i % 4]! + vRowSum[i % 4]!))
    expect(await values(w.grad!)).toEqual(iota(20).map((i) => colSum[i % 4]!))
    expect(await values(v.grad!)).toEqual(iota(20).map((i) => colSum[Math.floor(i / 5)]!))
  })
})
