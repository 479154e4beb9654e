// The mesh's backward rules (src/controller/meshgrad.ts) against torch 1.13's autograd: each
// collective and send runs on a real 2x2 mesh with rank-dependent inputs x (squared before the
// collective, so the gradient depends on the values) and rank-dependent weights c of a loss
// sum(y * c) per rank; every rank's x.grad must equal what torch computes for the same group.
import { afterAll, beforeAll, expect, spyOn, test } from "bun:test"
import { Effect, ManagedRuntime } from "effect"
import { allGather, allReduce, allToAll, Controller, type ControllerApi, copyTo, HostTensor, Mesh, reduceScatter, type RemoteTensor, sendTo } from "../../src/controller/index.ts"
import { TORCH_PYTHON, torchMissing } from "../../examples/gpt/twin.ts"
import { describeUnless } from "../skip.ts"

const ROOT = new URL("../..", import.meta.url).pathname
const WORLD = 4
let rt: ManagedRuntime.ManagedRuntime<Controller, unknown>
let ctl: ControllerApi
let mesh: Mesh
const run = <A, E>(e: Effect.Effect<A, E, Controller>) => rt.runPromise(e)

let seed = 7
const rnd = () => ((seed = (seed * 1103515245 + 12345) % 2 ** 31) / 2 ** 31) * 2 - 1
const values = (n: number) => Array.from({ length: n }, rnd)
const numel = (s: ReadonlyArray<number>) => s.reduce((a, b) => a * b, 1)

/** A tensor whose value on rank r is rows[r] (f64, `shape`), on `on`. */
const perRank = (on: Mesh, rows: ReadonlyMap<number, number[]>, shape: number[]): Promise<RemoteTensor> => {
  const whole = new Float64Array(WORLD * numel(shape))
  for (const [r, v] of rows) whole.set(v, r * numel(shape))
  return run(on.call("tests/gpt/fixtures:rankRow", [new HostTensor("f64", [WORLD, ...shape], new Uint8Array(whole.buffer))], {}, { results: [{ dtype: "f64", shape }] }))
}

interface Case {
  readonly name: string
  /** The ref script's kind. */
  readonly kind: string
  readonly shape: number[]
  readonly outShape: number[]
  /** The groups, each its ranks in group order. */
  readonly groups: number[][]
  /** x is the same on every member of a group (copyTo's input is replicated). */
  readonly sameX?: boolean
  /** c is the same on every member (the output is used the same way). */
  readonly sameC?: boolean
  readonly apply: (x: RemoteTensor) => RemoteTensor
}

const TP_GROUPS = [[0, 1], [2, 3]], ALL = [[0, 1, 2, 3]]
const CASES: Case[] = [
  { name: "all_reduce sum over tp: identity", kind: "all_reduce_sum", shape: [2, 3], outShape: [2, 3], groups: TP_GROUPS, sameC: true, apply: (x) => allReduce(x, "tp") },
  { name: "all_reduce avg over tp: 1/n", kind: "all_reduce_avg", shape: [2, 3], outShape: [2, 3], groups: TP_GROUPS, sameC: true, apply: (x) => allReduce(x, "tp", "avg") },
  { name: "all_reduce sum over dp and tp", kind: "all_reduce_sum", shape: [3], outShape: [3], groups: ALL, sameC: true, apply: (x) => allReduce(x, ["dp", "tp"]) },
  { name: "copyTo tp (Megatron's f): all_reduce of the parts", kind: "copy_to", shape: [2, 3], outShape: [2, 3], groups: TP_GROUPS, sameX: true, apply: (x) => copyTo(x, "tp") },
  { name: "all_gather over tp: reduce_scatter", kind: "all_gather", shape: [2, 3], outShape: [2, 2, 3], groups: TP_GROUPS, apply: (x) => allGather(x, "tp") },
  { name: "all_gather over dp and tp: reduce_scatter", kind: "all_gather", shape: [3], outShape: [4, 3], groups: ALL, apply: (x) => allGather(x, ["dp", "tp"]) },
  { name: "reduce_scatter over tp: all_gather", kind: "reduce_scatter", shape: [2, 3], outShape: [3], groups: TP_GROUPS, apply: (x) => reduceScatter(x, "tp") },
  { name: "reduce_scatter avg over tp: all_gather, 1/n", kind: "reduce_scatter_avg", shape: [2, 3], outShape: [3], groups: TP_GROUPS, apply: (x) => reduceScatter(x, "tp", "avg") },
  { name: "reduce_scatter avg over dp and tp: all_gather, 1/n", kind: "reduce_scatter_avg", shape: [4, 3], outShape: [3], groups: ALL, apply: (x) => reduceScatter(x, ["dp", "tp"], "avg") },
  { name: "all_to_all over tp: all_to_all", kind: "all_to_all", shape: [4, 3], outShape: [4, 3], groups: TP_GROUPS, apply: (x) => allToAll(x, "tp") },
]

const torchGrads = async (cases: ReadonlyArray<object>): Promise<number[][][]> => {
  const child = Bun.spawn([TORCH_PYTHON, new URL("meshgrad_ref.py", import.meta.url).pathname], { stdin: new Blob([JSON.stringify({ cases })]), stdout: "pipe", stderr: "pipe" })
  const [out, err, code] = await Promise.all([new Response(child.stdout).text(), new Response(child.stderr).text(), child.exited])
  if (code !== 0) throw new Error(`meshgrad_ref.py exited ${code}: ${err}`)
  return JSON.parse(out)
}

const expectClose = (label: string, ours: ArrayLike<number>, theirs: ReadonlyArray<number>) => {
  const worst = theirs.reduce((w, t, i) => Math.max(w, Math.abs(ours[i]! - t) / (1e-12 + Math.abs(t))), 0)
  if (!(worst <= 1e-10) || ours.length !== theirs.length) throw new Error(`${label}: gradient differs from torch's (worst relative error ${worst}); ours [${Array.from(ours).map((v) => v.toFixed(6))}], torch [${theirs.map((v) => v.toFixed(6))}]`)
}

const missing = torchMissing()

describeUnless(missing)("each mesh rule against torch autograd", () => {
  beforeAll(async () => {
    rt = ManagedRuntime.make(Controller.local({ world: WORLD, functionPath: [ROOT], onWorkerLine: () => {} }))
    ctl = await rt.runPromise(Effect.service(Controller))
    mesh = await run(ctl.mesh({ dp: 2, tp: 2 }))
  }, 60_000)
  afterAll(() => rt?.dispose())

  test("every collective's gradient on every rank", async () => {
    const inputs = CASES.map((c) => {
      const xs = new Map<number, number[]>(), cs = new Map<number, number[]>()
      for (const g of c.groups) {
        const sharedX = values(numel(c.shape)), sharedC = values(numel(c.outShape))
        for (const r of g) {
          xs.set(r, c.sameX ? sharedX : values(numel(c.shape)))
          cs.set(r, c.sameC ? sharedC : values(numel(c.outShape)))
        }
      }
      return { xs, cs }
    })
    const reference = await torchGrads(CASES.flatMap((c, i) => c.groups.map((g) => ({ kind: c.kind, shape: c.shape, xs: g.map((r) => inputs[i]!.xs.get(r)), cs: g.map((r) => inputs[i]!.cs.get(r)) }))))
    let at = 0
    for (const [i, c] of CASES.entries()) {
      const x = (await perRank(mesh, inputs[i]!.xs, c.shape)).requiresGrad_()
      const weight = await perRank(mesh, inputs[i]!.cs, c.outShape)
      c.apply(x.mul(x)).mul(weight).sum().backward()
      const got = await run(mesh.fetchAll(x.grad!))
      for (const g of c.groups) {
        const want = reference[at++]!
        g.forEach((r, m) => expectClose(`${c.name}, rank ${r}`, (got[r] as HostTensor).toArray() as Float64Array, want[m]!))
      }
    }
  }, 60_000)

  test("send: the gradient is sent back to the sender", async () => {
    const [top, bottom] = await run(Effect.all([mesh.slice({ dp: 0 }), mesh.slice({ dp: 1 })]))
    const xs = new Map([[0, values(6)], [1, values(6)]]), cs = new Map([[2, values(6)], [3, values(6)]])
    const [want] = await torchGrads([{ kind: "send", shape: [2, 3], xs: [xs.get(0), xs.get(1)], cs: [cs.get(2), cs.get(3)] }])
    const x = (await perRank(top!, xs, [2, 3])).requiresGrad_()
    const weight = await perRank(bottom!, cs, [2, 3])
    sendTo(x.mul(x), bottom!).mul(weight).sum().backward()
    const got = await run(top!.fetchAll(x.grad!))
    got.forEach((g, m) => expectClose(`send, rank ${m}`, (g as HostTensor).toArray() as Float64Array, want![m]!))
  }, 60_000)

  test("what the rules issue in backward is released once used: only the leaves' gradients stay", async () => {
    const x = (await perRank(mesh, new Map([0, 1, 2, 3].map((r) => [r, values(12)])), [4, 3])).requiresGrad_()
    const issued: RemoteTensor[] = []
    const original = Mesh.prototype.issueReduce
    const spy = spyOn(Mesh.prototype, "issueReduce").mockImplementation(function (this: Mesh, ...args) {
      const out = original.apply(this, args)
      issued.push(out)
      return out
    })
    try {
      const y = reduceScatter(allToAll(allReduce(allGather(x.mul(x), "tp"), "dp", "avg"), "tp"), "tp", "avg")
      const before = issued.length
      y.sum().backward()
      const inBackward = issued.slice(before)
      expect(inBackward.length).toBe(3) // reduce_scatter, all_to_all, all_gather (an avg all_reduce divides: no collective)
      expect(inBackward.filter((t) => !t.released).map(String)).toEqual([])
      expect(x.grad!.released).toBe(false)
    } finally {
      spy.mockRestore()
    }
  }, 60_000)

  test("a failure in forward poisons exactly the gradients that depend on it through the collectives", async () => {
    // Rank 3's weights fail; all_gather's backward (a reduce_scatter over tp) joins ranks 2 and 3 only.
    const x = (await perRank(mesh, new Map([0, 1, 2, 3].map((r) => [r, values(6)])), [2, 3])).requiresGrad_()
    const c = await perRank(mesh, new Map([0, 1, 2, 3].map((r) => [r, values(12)])), [2, 2, 3])
    const weight = await run(mesh.call("tests/gpt/fixtures:failOnRank", [c, 3], {}, { results: [{ dtype: "f64", shape: [2, 2, 3] }] }))
    allGather(x.mul(x), "tp").mul(weight).sum().backward()
    const outcomes = await Promise.all([0, 1, 2, 3].map((r) => run(Effect.exit(mesh.fetch(x.grad!, r)))))
    expect(outcomes.map((o) => o._tag)).toEqual(["Success", "Success", "Failure", "Failure"])
    for (const o of outcomes.slice(2)) expect(String(o)).toContain("deliberate failure on rank 3")
  }, 60_000)
})
