// Global-norm clipping on a dp=2 x tp=2 mesh of four workers against torch 1.13's
// clip_grad_norm_ over the logical tensors: gradients sharded over tp (either dim), over dp,
// over both, and replicated, each replica counted once; every rank's block after clipping and
// the norm every rank returns, with the norm above and below max_norm, f32 and f64; and the
// refusals (a partial gradient, another mesh).
import { afterAll, beforeAll, expect, test } from "bun:test"
import { Effect, ManagedRuntime } from "effect"
import { Controller, ControllerError, HostTensor, partial, shard, type ControllerApi, type Mesh, type RemoteTensor } from "../../src/controller/index.ts"
import { AdamW, clipGradNorm } from "../../src/optim/index.ts"
import { describeUnless } from "../skip.ts"
import { fromJson, torchMissing, TorchServer } from "../torch.ts"
import { host } from "../worker/build.ts"

const ROOT = new URL("../..", import.meta.url).pathname
const SERVER = new URL("./torch_optim.py", import.meta.url).pathname
const missing = torchMissing()

type Float = "f32" | "f64"
/** torch takes each tensor's norm in its dtype, then the norm of the norms; we sum squares in double: an ulp or two. */
const TOLERANCE: Readonly<Record<Float, number>> = { f32: 2e-6, f64: 1e-13 }

let seed = 99
const rnd = () => ((seed = (seed * 1103515245 + 12345) % 2 ** 31) / 2 ** 31)
const values = (t: Float, n: number) => Array.from({ length: n }, () => (t === "f32" ? Math.fround : Number)(rnd() * 2 - 1))

/** A logical gradient and how it is laid out: tensor dim -> the mesh dim it is sharded over. */
interface Grad { readonly shape: number[]; readonly shards: Readonly<Record<number, "dp" | "tp">> }
const GRADS: Grad[] = [
  { shape: [4, 6], shards: { 1: "tp" } }, // column-parallel weight
  { shape: [6, 4], shards: { 0: "tp" } }, // row-parallel weight
  { shape: [5], shards: {} }, // replicated (a layer norm's weight)
  { shape: [8], shards: { 0: "dp" } }, // sharded over dp (ZeRO-style)
  { shape: [4, 4], shards: { 0: "dp", 1: "tp" } }, // over both
  { shape: [], shards: {} },
]

/** The block of `full` (row-major data of `shape`) at coordinates `at` under `shards`. */
const blockOf = (full: number[], shape: number[], shards: Grad["shards"], at: Readonly<Record<string, number>>, sizes: Readonly<Record<string, number>>): number[] => {
  const ranges = shape.map((n, d) => {
    const m = shards[d]
    return m === undefined ? [0, n] : [at[m]! * (n / sizes[m]!), (at[m]! + 1) * (n / sizes[m]!)]
  })
  const strides = shape.map((_, d) => shape.slice(d + 1).reduce((a, b) => a * b, 1))
  return full.filter((_, i) => shape.every((_, d) => {
    const c = Math.floor(i / strides[d]!) % shape[d]!
    return c >= ranges[d]![0]! && c < ranges[d]![1]!
  }))
}

describeUnless(missing)("clip_grad_norm_ across dp and tp shards against torch 1.13", () => {
  let rt: ManagedRuntime.ManagedRuntime<Controller, unknown>
  let ctl: ControllerApi
  let mesh: Mesh
  let torch: TorchServer
  const run = <A, E>(e: Effect.Effect<A, E, Controller>) => rt.runPromise(e)

  beforeAll(async () => {
    rt = ManagedRuntime.make(Controller.local({ world: 4, functionPath: [ROOT], onWorkerLine: () => {} }))
    ctl = await rt.runPromise(Effect.service(Controller))
    mesh = await run(ctl.mesh({ dp: 2, tp: 2 }))
    torch = new TorchServer(SERVER)
  }, 90_000)
  afterAll(async () => {
    torch?.close()
    await rt?.dispose()
  })

  /** Each rank's block of the logical gradient, with its placement stated. */
  const upload = async (t: Float, g: Grad, full: number[]): Promise<RemoteTensor> => {
    const local = g.shape.map((n, d) => (g.shards[d] === undefined ? n : n / mesh.dims[g.shards[d]!]!))
    const x = await run(mesh.call("tests/optim/fixtures:block", [host(t, g.shape, full), g.shards, mesh.dims], {}, { results: [{ dtype: t, shape: local }] }))
    return x.place(Object.fromEntries(Object.entries(g.shards).map(([d, m]) => [m, shard(Number(d))])))
  }

  let id = 0
  for (const t of ["f32", "f64"] as const)
    for (const maxNorm of [0.5, 100]) {
      test(`${t}, max_norm ${maxNorm} (${maxNorm < 1 ? "clipped" : "left as it is"})`, async () => {
        const fulls = GRADS.map((g) => values(t, g.shape.reduce((a, b) => a * b, 1)))
        const want = torch.ask(id++, { kind: "clip", max_norm: maxNorm, grads: GRADS.map((g, i) => ({ t, shape: g.shape, data: fulls[i] })) })
        const grads = await Promise.all(GRADS.map((g, i) => upload(t, g, fulls[i]!)))
        const norm = await run(clipGradNorm(grads, maxNorm))
        const theirs = await want
        expect(theirs.error).toBeUndefined()
        expect(norm.dtype).toBe(t)
        const norms = (await run(mesh.fetchAll(norm))).map((v) => Number((v as HostTensor).toArray()[0]))
        expect(norms.filter((n) => !(Math.abs(n - theirs.total) <= TOLERANCE[t] * theirs.total)).map((n) => `total norm ${n}, torch ${theirs.total}`)).toEqual([])
        const bad: string[] = []
        for (const [i, g] of GRADS.entries()) {
          const blocks = await run(mesh.fetchAll(grads[i]))
          mesh.ranks.forEach((rank, r) => {
            const at = { dp: Math.floor(r / 2), tp: r % 2 }
            const expected = blockOf((theirs.grads[i] as Array<number | string>).map(fromJson), g.shape, g.shards, at, mesh.dims)
            const ours = [...(blocks[r] as HostTensor).toArray()].map(Number)
            ours.forEach((v, j) => {
              if (!(Math.abs(v - expected[j]!) <= TOLERANCE[t] * (Math.abs(expected[j]!) + 1e-6))) bad.push(`grad ${i} rank ${rank} [${j}]: ours ${v}, torch ${expected[j]}`)
            })
          })
        }
        expect(bad.slice(0, 8)).toEqual([])
      }, 60_000)
    }

  test("an optimizer's state takes its parameter's placement (checkpoints read it)", async () => {
    const w = await upload("f32", GRADS[0]!, values("f32", 24)), g = await upload("f32", GRADS[0]!, values("f32", 24))
    const opt = new AdamW([w], { amsgrad: true })
    opt.step([[w, g]])
    const st = opt.state.get(w)!
    for (const t of [st.expAvg, st.expAvgSq, st.maxExpAvgSq!]) expect(t.placement).toEqual(w.placement)
    expect(w.placement.tp).toEqual(shard(1))
  })

  test("a partial gradient, gradients on two meshes, no gradients and a bad max_norm are refused", async () => {
    const g = await upload("f32", GRADS[2]!, values("f32", 5))
    const p = (await upload("f32", GRADS[2]!, values("f32", 5))).place({ tp: partial })
    const other = await run(mesh.slice({ dp: 0 }))
    const elsewhere = await run(other.call("ops.ones", [[3]]))
    const refusals = await Promise.all([clipGradNorm([g, p], 1), clipGradNorm([g, elsewhere], 1), clipGradNorm([], 1), clipGradNorm([g], -1)].map((e) => run(Effect.flip(e))))
    for (const r of refusals) expect(r).toBeInstanceOf(ControllerError)
    expect(refusals.map((r) => r.message.replace(/RemoteTensor\(.*?\)\)/g, "T"))).toEqual([
      "clipGradNorm: T is partial (dp: replicate, tp: partial): reduce it before taking its norm",
      `clipGradNorm: T is on ${other}, not ${mesh} like the first gradient`,
      "clipGradNorm: no gradients",
      "clipGradNorm: max_norm must be a non-negative number, got -1",
    ])
  })
})
