// Strided views, as torch's. Checked on real workers through the controller:
//   - against torch 1.13 (tests/ops/views_ref.py), every view op, and random chains of them with
//     random in-place writes: the same values, shapes, strides, storage offsets and is_contiguous
//     (the controller's, from the rules, and the worker's shim's), writes through a view reaching
//     the base and writes to the base reaching the view, torch's refusals (a view across strides,
//     as_strided past its storage, a write to an expanded tensor) with torch's messages;
//   - lifetimes: the base's ref deleted while a view lives leaves the view's memory alive and
//     correct, counted once, and freed with the last of them (the worker's own counters);
//   - a write whose input shares only some of its memory is refused, as torch refuses it, and
//     scatter_ and index_add_ refuse even the written tensor itself as their source;
//   - leaf gradients made as views of one gradient (cat's backward), or expanded (sum's), stay
//     independent and writable under in-place updates;
//   - the backward rules of transpose, permute, expand, reshape and matmul issue no copy.
import { afterAll, beforeAll, describe, expect, spyOn, test } from "bun:test"
import { Effect, ManagedRuntime } from "effect"
import { compile, Controller, eager, ops, opsOn, type ControllerApi, type Mesh, type RemoteTensor } from "../../src/controller/index.ts"
import { clipGradNorm } from "../../src/optim/clip.ts"
import type { DType } from "../../src/protocol/values.ts"
import { describeUnless } from "../skip.ts"
import { torchMissing, TorchServer } from "../torch.ts"
import { host } from "../worker/build.ts"
import { infer, t } from "./infer.ts"

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

type Step = { readonly op: string; readonly args: ReadonlyArray<unknown>; readonly piece?: number } | { readonly write: number; readonly op: string; readonly arg: number }
interface Program { readonly name: string; readonly t: DType; readonly shape: number[]; readonly steps: ReadonlyArray<Step> }
type Recorded = { shape: number[]; stride: number[]; offset: number; contiguous: boolean; base: number[]; view: number[] } | { error: string }

const v = (op: string, ...args: unknown[]): Step => ({ op, args })
const piece = (op: string, at: number, ...args: unknown[]): Step => ({ op, args, piece: at })
const BOTH_WAYS: Step[] = [{ write: -1, op: "add_", arg: 100 }, { write: 0, op: "mul_", arg: -1 }, { write: -1, op: "fill_", arg: 7 }]
/** A case: the chain, then a write through the view, one to the base, and a fill through the view. */
const c = (name: string, shape: number[], chain: Step[], t: DType = "f32"): Program => ({ name, t, shape, steps: [...chain, ...BOTH_WAYS] })
const CASES: Program[] = [
  c("view", [2, 6], [v("view", [3, 4])]),
  c("view with -1 of a transposed tensor's split dims", [4, 6], [v("transpose", 0, 1), v("view", [2, 3, -1])]),
  c("view across strides is refused (torch's message)", [2, 3], [v("t"), v("view", [6])]),
  c("reshape of a contiguous tensor (a view)", [2, 6], [v("reshape", [4, 3])], "i64"),
  c("reshape that must copy (a transpose flattened)", [2, 3], [v("t"), v("reshape", [-1])]),
  c("reshape of a stepped slice that keeps its steps", [4, 6], [v("slice", 1, 0, null, 2), v("reshape", [2, 2, 3])]),
  c("reshape of an empty tensor", [0, 3], [v("t"), v("reshape", [3, 0])]),
  c("transpose", [2, 3, 4], [v("transpose", 0, 2)]),
  c("transpose with negative dims", [3, 4], [v("transpose", -1, -2)], "f64"),
  c("permute", [2, 3, 4], [v("permute", [2, 0, 1])]),
  c("t of a matrix", [3, 5], [v("t")], "i32"),
  c("t of a vector is itself", [4], [v("t")]),
  c("expand a size-1 dim (stride 0): writes through it refused", [3, 1], [v("expand", [3, 4])]),
  c("expand with new leading dims and -1", [1, 3], [v("expand", [2, 1, -1, 3])]),
  c("expand a 0-dim tensor", [], [v("expand", [2, 2])]),
  c("broadcast_to", [3], [v("broadcast_to", [2, 3])]),
  c("narrow of the leading dim", [4, 3], [v("narrow", 0, 1, 2)]),
  c("narrow of an inner dim", [4, 3], [v("narrow", 1, 1, 2)]),
  c("narrow, negative start", [5, 2], [v("narrow", 0, -3, 2)], "f64"),
  c("narrow to nothing", [4, 3], [v("narrow", 1, 3, 0)]),
  c("select of an inner dim", [4, 3], [v("select", 1, 2)], "i64"),
  c("select, negative index", [4, 3], [v("select", 0, -1)]),
  c("slice with a step", [6, 2], [v("slice", 0, 1, null, 2)]),
  c("slice of an inner dim with a step, out-of-range ends", [2, 7], [v("slice", 1, -100, 100, 3)]),
  c("slice past the end (empty, offset at the end)", [4, 3], [v("slice", 0, 9, null, 1)]),
  c("split of an inner dim, the second piece", [3, 4], [piece("split", 1, 3, 1)]),
  c("split into sections", [6, 2], [piece("split", 2, [1, 2, 3], 0)]),
  c("chunk of an inner dim, the last piece", [2, 5], [piece("chunk", 2, 3, 1)], "i32"),
  c("unbind of an inner dim", [3, 4], [piece("unbind", 3, 1)], "f64"),
  c("squeeze every size-1 dim", [1, 3, 1, 2], [v("squeeze")]),
  c("squeeze one dim, of a transposed tensor", [3, 1, 2], [v("transpose", 0, 2), v("squeeze", 1)]),
  c("squeeze of a dim that is not size 1 is itself", [3, 2], [v("squeeze", 0)]),
  c("unsqueeze in the middle of a stepped slice", [6, 2], [v("slice", 0, 0, null, 2), v("unsqueeze", 1)]),
  c("unsqueeze at the end", [2, 3], [v("t"), v("unsqueeze", -1)]),
  c("diagonal", [3, 4], [v("diagonal")]),
  c("diagonal above, of other dims", [2, 3, 4], [v("diagonal", 1, 2, 1)]),
  c("diagonal below", [4, 3], [v("diagonal", -2)]),
  c("diagonal off the end (empty)", [3, 3], [v("diagonal", 5)]),
  c("unfold", [7], [v("unfold", 0, 2, 3)]),
  c("unfold of an inner dim, windows that overlap (fill only)", [2, 5], [v("unfold", 1, 2, 1)]),
  c("unfold of a 0-dim tensor", [], [v("unfold", 0, 1, 1)]),
  c("as_strided", [12], [v("as_strided", [3, 2], [3, 2], 1)]),
  c("as_strided of a view takes its storage offset", [3, 4], [v("narrow", 0, 1, 2), v("as_strided", [2, 2], [1, 4])]),
  c("as_strided past the storage is refused (torch's message)", [4], [v("as_strided", [3], [2])]),
  c("as_strided with overlapping elements (fill only)", [5], [v("as_strided", [2, 2], [1, 1])]),
  c("alias (detach's view)", [2, 3], [v("transpose", 0, 1), v("alias")]),
  c("contiguous of a contiguous tensor is itself", [2, 3], [v("contiguous")]),
  c("contiguous of a transposed tensor copies", [2, 3], [v("t"), v("contiguous")]),
  c("flatten of a contiguous block", [2, 3, 4], [v("flatten", 1)]),
  c("flatten that must copy", [2, 3, 4], [v("transpose", 1, 2), v("flatten")]),
  c("flatten of one dim is itself", [3, 4], [v("t"), v("flatten", 1, 1)]),
  c("views of views: offsets and strides compose", [4, 5, 6], [v("narrow", 0, 1, 3), v("select", 2, 4), v("t"), v("slice", 1, 1, null, 2), v("unsqueeze", 0)]),
  c("size-1 and size-0 dims", [1, 0, 3], [v("permute", [2, 0, 1]), v("expand", [3, 4, 0])]),
]
// Where a view's elements overlap, the order of an add_'s writes is each kernel's own (torch's too): only fill_ is exact through it.
for (const [i, p] of CASES.entries()) if (p.name.endsWith("(fill only)")) CASES[i] = { ...p, steps: [...p.steps.slice(0, -3), { write: 0, op: "mul_", arg: 2 }, { write: -1, op: "fill_", arg: 7 }] }

const callOp = (op: string, x: RemoteTensor, args: ReadonlyArray<unknown>): RemoteTensor | RemoteTensor[] =>
  (ops as unknown as Record<string, (...a: unknown[]) => RemoteTensor | RemoteTensor[]>)[op]!(x, ...args)

/** This worker's layout of t (its shim's), as the fixture gives it. */
const workerLayout = async (t: RemoteTensor): Promise<{ stride: number[]; offset: number; contiguous: boolean }> => {
  const [[strides, offset, contiguous]] = (await run(mesh.fetchAll(t, { fn: "tests/controller/fixtures:layoutOf" }))) as [[number[], number, number]]
  return { stride: strides, offset, contiguous: contiguous === 1 }
}

/** Runs a program here: each step's record, the controller's layout, and the worker's layout where they must agree. */
const runHere = async (p: Program): Promise<{ steps: Recorded[]; worker: Array<{ stride: number[]; offset: number; contiguous: boolean } | undefined> }> => {
  const base = tensor(p.t, p.shape)
  const made: RemoteTensor[] = [base], steps: Recorded[] = [], worker: Array<{ stride: number[]; offset: number; contiguous: boolean } | undefined> = []
  for (const s of p.steps) {
    try {
      if ("write" in s) (ops as unknown as Record<string, (t: RemoteTensor, x: number) => void>)[s.op]!(made.at(s.write)!, s.arg)
      else {
        const r = callOp(s.op, made.at(-1)!, s.args)
        made.push(Array.isArray(r) ? r[s.piece ?? 0]! : r)
      }
    } catch (e) {
      steps.push({ error: (e as Error).message })
      worker.push(undefined)
      if ("write" in s) continue
      break
    }
    const x = made.at(-1)!
    steps.push({ shape: [...x.shape!], stride: x.stride(), offset: x.storageOffset(), contiguous: x.isContiguous(), base: await values(base), view: await values(x) })
    worker.push(await workerLayout(x))
  }
  return { steps, worker }
}

/** Compares a program's run with torch's: errors by torch's message (ours names the op and the tensors too). */
const expectTorch = (ours: { steps: Recorded[]; worker: Array<{ stride: number[]; offset: number; contiguous: boolean } | undefined> }, theirs: { steps: Recorded[]; error?: string }, what: string) => {
  expect(theirs.error, what).toBeUndefined()
  expect(ours.steps.length, what).toBe(theirs.steps.length)
  theirs.steps.forEach((want, i) => {
    const got = ours.steps[i]!, at = `${what}, step ${i}`
    if ("error" in want) {
      expect("error" in got ? got.error : `no error: ${JSON.stringify(got)}`, at).toContain(want.error)
      return
    }
    expect(got, at).toEqual(want)
    // The worker's views lie where the controller's rules say (the contiguity flag is the shim's own reading of its strides).
    expect(ours.worker[i], at).toEqual({ stride: want.stride, offset: want.offset, contiguous: want.contiguous })
  })
}

describeUnless(torchMissing())("views against torch 1.13: values, strides, offsets, writes both ways", () => {
  let torch: TorchServer
  beforeAll(() => void (torch = new TorchServer(new URL("./views_ref.py", import.meta.url).pathname)))
  afterAll(() => torch?.close())
  const ask = (id: number, p: Program) => torch.ask<{ steps: Recorded[]; error?: string }>(id, { t: p.t, shape: p.shape, data: iota(p.shape.reduce((a, b) => a * b, 1)), steps: p.steps })

  CASES.forEach((p, id) => test(p.name, async () => {
    const want = ask(id, p)
    expectTorch(await runHere(p), await want, p.name)
  }, 30_000)) // the first case waits for torch to import (seconds on a loaded machine)

  test("random chains of view ops with random in-place writes between them", async () => {
    const rng = seeded(0x5eed)
    const programs = Array.from({ length: RANDOM_PROGRAMS }, (_, i) => randomProgram(rng, `random ${i}`))
    const answers = programs.map((p, i) => ask(10_000 + i, p))
    for (let i = 0; i < programs.length; i++) {
      const p = programs[i]!
      expectTorch(await runHere(p), await answers[i]!, `${p.name}: ${p.shape} ${JSON.stringify(p.steps)}`)
    }
  }, 240_000)
})

const RANDOM_PROGRAMS = 60

/** A small deterministic generator (mulberry32). */
const seeded = (seed: number) => () => {
  seed = (seed + 0x6d2b79f5) | 0
  let x = Math.imul(seed ^ (seed >>> 15), 1 | seed)
  x = (x + Math.imul(x ^ (x >>> 7), 61 | x)) ^ x
  return ((x ^ (x >>> 14)) >>> 0) / 4294967296
}

/** Shapes and strides the generator tracks (torch's, by the same rules the test checks). */
interface Tracked { readonly shape: number[]; readonly strides: number[]; readonly offset: number }

/** A random program: a base of 0 to 3 dims, up to 7 view ops, writes at random points (to the base, a view on the way, or the last). */
const randomProgram = (r: () => number, name: string): Program => {
  const int = (lo: number, hi: number) => lo + Math.floor(r() * (hi - lo + 1))
  const pick = <A>(xs: ReadonlyArray<A>): A => xs[int(0, xs.length - 1)]!
  const shape = Array.from({ length: int(1, 3) }, () => (r() < 0.08 ? 0 : int(1, 4)))
  const steps: Step[] = []
  // What each tensor made so far is: its shape, and whether a write could land twice on one element (then only fill_).
  const made: Array<{ shape: number[]; repeats: boolean }> = [{ shape, repeats: false }]
  for (let n = int(1, 7); n > 0; n--) {
    const cur = made.at(-1)!, s = cur.shape, nd = s.length
    const dim = () => int(-nd, nd - 1)
    const step: Step | undefined = ((): Step | undefined => {
      switch (pick(["reshape", "view", "transpose", "permute", "t", "expand", "narrow", "select", "slice", "split", "chunk", "unbind", "squeeze", "unsqueeze", "diagonal", "unfold", "flatten", "contiguous", "alias"])) {
        case "reshape": case "view": {
          const numel = s.reduce((a, b) => a * b, 1), to = factor(numel, r)
          if (to.length > 0 && r() < 0.3) to[int(0, to.length - 1)] = -1
          return v(r() < 0.5 ? "reshape" : "view", to)
        }
        case "transpose": return nd === 0 ? undefined : v("transpose", dim(), dim())
        case "permute": return v("permute", s.map((_, i) => i).sort(() => r() - 0.5))
        case "t": return nd > 2 ? undefined : v("t")
        case "expand": {
          if (nd > 5) return undefined
          const lead = r() < 0.3 ? [int(1, 3)] : []
          return v("expand", [...lead, ...s.map((d) => (d === 1 ? int(0, 3) : r() < 0.5 ? -1 : d))])
        }
        case "narrow": {
          if (nd === 0) return undefined
          const d = dim(), size = s.at(d)!, start = int(0, size), length = int(0, size - start)
          return v("narrow", d, r() < 0.3 && start < size ? start - size : start, length)
        }
        case "select": {
          const ok = s.map((x, i) => (x > 0 ? i : -1)).filter((i) => i >= 0)
          if (ok.length === 0) return undefined
          const d = pick(ok), i = int(0, s[d]! - 1)
          return v("select", d, r() < 0.3 ? i - s[d]! : i)
        }
        case "slice": {
          if (nd === 0) return undefined
          const d = dim(), size = s.at(d)!, end = () => (r() < 0.2 ? null : int(-size - 2, size + 2))
          return v("slice", d, end(), end(), int(1, 3))
        }
        case "split": return nd === 0 ? undefined : piece("split", 0, int(1, 3), dim())
        case "chunk": return nd === 0 ? undefined : piece("chunk", 0, int(1, 3), dim())
        case "unbind": {
          const ok = s.map((x, i) => (x > 0 ? i : -1)).filter((i) => i >= 0)
          if (ok.length === 0) return undefined
          const d = pick(ok)
          return piece("unbind", int(0, s[d]! - 1), d)
        }
        case "squeeze": return r() < 0.5 || nd === 0 ? v("squeeze") : v("squeeze", dim())
        case "unsqueeze": return nd > 5 ? undefined : v("unsqueeze", int(-nd - 1, nd))
        case "diagonal": {
          if (nd < 2) return undefined
          const d1 = int(0, nd - 1)
          let d2 = int(0, nd - 2)
          if (d2 >= d1) d2++
          return v("diagonal", int(-3, 3), d1, d2)
        }
        case "unfold": {
          if (nd === 0 || nd > 5) return undefined
          const d = dim()
          return v("unfold", d, int(0, s.at(d)!), int(1, 3))
        }
        case "flatten": return nd === 0 ? v("flatten") : v("flatten", int(0, nd - 1), nd - 1)
        case "contiguous": return v("contiguous")
        default: return v("alias")
      }
    })()
    if (step === undefined || "write" in step) continue
    const next = shapeAfter(step, s)
    if (next === undefined) continue
    steps.push(step)
    // unfold's windows may overlap, where the order of an add_'s writes is the kernel's own: only fill_ is exact there.
    made.push({ shape: next, repeats: cur.repeats || step.op === "unfold" })
    if (r() < 0.5) {
      const k = int(0, made.length - 1)
      steps.push({ write: k, op: made[k]!.repeats ? "fill_" : pick(["add_", "mul_", "fill_"]), arg: int(-3, 9) })
    }
  }
  return { name, t: pick(["f32", "f64", "i64"] as const), shape, steps }
}

/** A random shape of `numel` elements (its prime factors dealt into up to 3 dims, some 1s between). */
const factor = (numel: number, r: () => number): number[] => {
  if (numel === 0) return [0, Math.floor(r() * 3) + 1].sort(() => r() - 0.5)
  const primes: number[] = []
  for (let n = numel, p = 2; n > 1; ) if (n % p === 0) (primes.push(p), (n /= p)); else p++
  const dims = Array.from({ length: 1 + Math.floor(r() * 3) }, () => 1)
  for (const p of primes) dims[Math.floor(r() * dims.length)]! *= p
  return dims
}

/** The shape after a view step (undefined: a step the generator drops, one that would pass the shim's 8 dims). */
const shapeAfter = (step: { readonly op: string; readonly args: ReadonlyArray<unknown>; readonly piece?: number }, s: number[]): number[] | undefined => {
  try {
    const out = infer(step.op, [t("f64", ...s), ...step.args])[step.piece ?? 0]
    return out === undefined || out.shape.length > 8 ? undefined : [...out.shape]
  } catch {
    return undefined // arguments the op refuses (a transpose of a 0-dim tensor's dims, say): not a step
  }
}

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

  test("an inner dim's narrow is a view (no bytes), and a reshape torch would copy takes its own bytes and is independent of the base", async () => {
    const probe = tensor("f32", [1])
    const x = tensor("f32", [64, 64])
    const before = await workerMemory(probe)
    const cols = ops.narrow(x, 1, 0, 16)
    expect((await workerMemory(probe)).bytes).toBe(before.bytes)
    const flat = ops.reshape(ops.t(x), [-1])
    expect((await workerMemory(probe)).bytes - before.bytes).toBe(64 * 64 * 4)
    ops.fill_(x, 0)
    expect((await values(cols)).slice(0, 3)).toEqual([0, 0, 0])
    expect((await values(flat)).slice(0, 3)).toEqual([0, 64, 128])
    cols.release()
    flat.release()
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

  test("the same elements in another layout overlap partly (torch refuses x.add_(x.t())); in the same layout fully (x.add_(x.view(...)) runs); gaps make it torch's too-hard case, not refused", async () => {
    const x = tensor("f32", [3, 3])
    const transposed = await run(Effect.flip(eager(() => ops.add_(x, ops.t(x)))))
    expect(transposed.reason).toBe("overlap")
    ops.add_(x, ops.view(ops.view(x, [9]), [3, 3]))
    expect(await values(x)).toEqual(iota(9).map((i) => 2 * i))
    // Columns 0 and 2 written from column 1: a strided view with gaps, interleaved with its input (torch's values).
    ops.add_(ops.slice(x, 1, 0, null, 2), ops.narrow(x, 1, 1, 1))
    expect(await values(x)).toEqual([2, 2, 6, 14, 8, 18, 26, 14, 30])
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

describe("layouts the controller does not know", () => {
  test("a view of a tensor of unknown shape shares its storage, its layout unknown: stride() and the rest refuse, naming what they need; an in-place op through it is refused as a possible overlap", async () => {
    const unknown = await run(mesh.call("tests/controller/fixtures:rankValue", []))
    const row = ops.select(unknown, 0, 1)
    expect(row.version).toBe(unknown.version)
    for (const f of [() => row.stride(), () => row.storageOffset(), () => row.isContiguous()])
      expect(() => f()).toThrow(/needs its shape and layout, which the controller does not know/)
    const refused = await run(Effect.flip(eager(() => ops.add_(unknown, row))))
    expect(refused.reason).toBe("overlap")
    expect(await values(row)).toEqual([1, 1])
  })
})

describe("views in compiled steps", () => {
  test("each replay makes the same views: a write through a transposed row and a diagonal reaches the argument, and an unfold of a transpose reads it", async () => {
    const step = compile((x: RemoteTensor) => {
      ops.mul_(ops.select(ops.t(x), 0, 1), 10)
      ops.add_(ops.diagonal(x), 1)
      return ops.sum(ops.unfold(ops.t(x), 1, 2, 1))
    })
    const x = tensor("f64", [3, 3])
    const sums: number[] = []
    for (let call = 0; call < 3; call++) sums.push((await values(await run(step(x) as Effect.Effect<RemoteTensor, unknown>)))[0]!)
    expect(step.traces).toBe(1)
    // Per call: column 1 times 10, then the diagonal plus 1; the windows down each column read its middle row twice.
    const want = iota(9), expectSums: number[] = []
    for (let call = 0; call < 3; call++) {
      for (const i of [1, 4, 7]) want[i]! *= 10
      for (const i of [0, 4, 8]) want[i]! += 1
      expectSums.push([0, 1, 2].reduce((a, c) => a + want[c]! + 2 * want[3 + c]! + want[6 + c]!, 0))
    }
    expect(await values(x)).toEqual(want)
    expect(sums).toEqual(expectSums)
  })
})

describe("views a compiled step returns", () => {
  test("each replay's results lie where the trace's did: a transpose of the argument shares its storage, split pieces of a new tensor share theirs; an argument of another layout traces again", async () => {
    const step = compile((x: RemoteTensor) => [ops.t(x), ...ops.split(ops.add(x, 1), 1, 0)])
    for (let call = 0; call < 3; call++) {
      const x = tensor("f64", [2, 3])
      const [xt, top, bottom] = (await run(step(x) as Effect.Effect<RemoteTensor[], unknown>))
      expect([xt!.stride(), xt!.storageOffset(), xt!.isContiguous(), bottom!.stride(), bottom!.storageOffset()]).toEqual([[1, 3], 0, false, [3, 1], 3])
      ops.mul_(xt!, 2)
      expect(x.version).toBe(1)
      expect(await values(x)).toEqual(iota(6).map((i) => 2 * i))
      ops.add_(top!, 1)
      expect(bottom!.version).toBe(1)
      expect([...(await values(top!)), ...(await values(bottom!))]).toEqual([2, 3, 4, 4, 5, 6])
    }
    expect(step.traces).toBe(1)
    const y = ops.t(tensor("f64", [3, 2]))
    const [yt] = await run(step(y) as Effect.Effect<RemoteTensor[], unknown>)
    expect(step.traces).toBe(2)
    expect([yt!.stride(), yt!.isContiguous(), await values(yt!)]).toEqual([[2, 1], true, iota(6)])
  })
})

describe("backward through views", () => {
  test("the backward of transpose, permute, unsqueeze, expand and reshape issues views and reductions only, and the leaf keeps a dense copy (torch's AccumulateGrad)", async () => {
    const x = (tensor("f64", [2, 3, 4]) as RemoteTensor<"f64">).requiresGrad_()
    const y = ops.reshape(ops.permute(ops.transpose(x, 0, 1), [2, 0, 1]), [4, 6])
    const loss = ops.sum(ops.expand(ops.unsqueeze(y, 0), [5, 4, 6]))
    const issued: string[] = []
    const issue = mesh.issue.bind(mesh)
    const spy = spyOn(mesh, "issue").mockImplementation((fn, ...rest) => (issued.push(fn), issue(fn, ...rest)))
    try {
      loss.backward()
    } finally {
      spy.mockRestore()
    }
    const VIEWS_AND_SUMS = new Set(["ops.ones", "ops.expand", "ops.sum", "ops.reshape", "ops.permute", "ops.transpose"])
    // The one copy is the leaf's own gradient, dense in its layout: the permuted gradient does not obey it.
    expect(issued.filter((f) => !VIEWS_AND_SUMS.has(f))).toEqual(["ops.clone"])
    expect(await values(x.grad!)).toEqual(new Array(24).fill(5))
    expect(x.grad!.isContiguous()).toBe(true)
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

/** An operand of an elementwise call: a base of its own and the view steps that make it. */
interface Operand { readonly t: DType; readonly shape: number[]; readonly data: number[]; readonly chain: Array<{ op: string; args: unknown[] }> }
interface Call { readonly operands: Operand[]; readonly call: string; readonly args: ReadonlyArray<unknown> }
type Answer = { dtype: DType; shape: number[]; stride: number[]; contiguous: boolean; values: number[] } | { error: string }

/** Each family's calls, by arity: k is operand k, a number a number, a string a dtype. */
const CALLS: ReadonlyArray<{ readonly call: string; readonly args: ReadonlyArray<number | string | { operand: number }> ; readonly cond?: true }> = [
  ...["neg", "abs", "exp", "sqrt", "sin", "sigmoid", "relu", "floor", "tanh", "log"].map((call) => ({ call, args: [{ operand: 0 }] })),
  ...["add", "sub", "mul", "div", "maximum", "gt", "eq"].map((call) => ({ call, args: [{ operand: 0 }, { operand: 1 }] })),
  { call: "mul", args: [{ operand: 0 }, 2] }, { call: "add", args: [{ operand: 0 }, 0.5] }, { call: "pow", args: [{ operand: 0 }, 2] }, { call: "div", args: [{ operand: 0 }, 3] },
  { call: "where", args: [{ operand: 0 }, { operand: 1 }, { operand: 2 }], cond: true },
  { call: "masked_fill", args: [{ operand: 0 }, { operand: 1 }, 1.5], cond: true },
  { call: "lerp", args: [{ operand: 0 }, { operand: 1 }, 0.25] },
  { call: "addcmul", args: [{ operand: 0 }, { operand: 1 }, { operand: 2 }] },
  { call: "to", args: [{ operand: 0 }, "other dtype"] },
  { call: "add_", args: [{ operand: 0 }, { operand: 1 }] }, { call: "mul_", args: [{ operand: 0 }, 2] },
  { call: "lerp_", args: [{ operand: 0 }, { operand: 1 }, 0.5] },
]

/**
 * A random elementwise call on operands made by 0 to 2 view steps each (a permute, a stepped
 * slice, a narrow, an expand of size-1 dims), broadcast against each other; its values are
 * positive and nonzero, so every op's are finite. An in-place call's target is never expanded.
 */
const randomCall = (r: () => number): Call => {
  const int = (lo: number, hi: number) => lo + Math.floor(r() * (hi - lo + 1))
  const pick = <A>(xs: ReadonlyArray<A>): A => xs[int(0, xs.length - 1)]!
  const c = pick(CALLS), t = pick(["f32", "f64"] as const)
  const shape = Array.from({ length: int(2, 4) }, () => int(1, 5))
  const count = Math.max(...c.args.map((a) => (typeof a === "object" ? a.operand + 1 : 0)))
  const operands = Array.from({ length: count }, (_, k): Operand => {
    const written = k === 0 && c.call.endsWith("_")
    // Its own shape: the result's, or one that broadcasts to it (leading dims gone, some dims 1);
    // masked_fill's input the result's (a mask broadcast past its input is refused here, not in torch 1.13).
    let target = written || (k === 0 && c.call === "masked_fill") ? [...shape] : shape.slice(r() < 0.2 ? int(1, shape.length - 1) : 0).map((d) => (r() < 0.2 ? 1 : d))
    const chain: Array<{ op: string; args: unknown[] }> = []
    for (let n = int(0, 2); n > 0; n--) {
      const nd = target.length
      switch (pick(written ? ["permute", "slice", "narrow"] : ["permute", "slice", "narrow", "expand"])) {
        case "permute": {
          const dims = target.map((_, i) => i).sort(() => r() - 0.5), pre = new Array<number>(nd)
          dims.forEach((d, i) => (pre[d] = target[i]!))
          chain.unshift({ op: "permute", args: [dims] }), (target = pre)
          break
        }
        case "slice": {
          const d = int(0, nd - 1), start = int(0, 1)
          chain.unshift({ op: "slice", args: [d, start, null, 2] }), (target = target.map((x, i) => (i === d ? 2 * x + start - (r() < 0.5 ? 1 : 0) : x)))
          break
        }
        case "narrow": {
          const d = int(0, nd - 1), start = int(0, 2)
          chain.unshift({ op: "narrow", args: [d, start, target[d]] }), (target = target.map((x, i) => (i === d ? x + start + int(0, 1) : x)))
          break
        }
        default: {
          const to = [...target]
          chain.unshift({ op: "expand", args: [to] }), (target = target.map((x) => (r() < 0.5 ? 1 : x)))
        }
      }
    }
    const numel = target.reduce((a, b) => a * b, 1), bool = c.cond === true && k === (c.call === "where" ? 0 : 1)
    return { t: bool ? "bool" : t, shape: target, data: iota(numel).map((i) => (bool ? (i * 7) % 3 === 0 ? 1 : 0 : 1 + ((i * 5) % 11) * 0.25)), chain }
  })
  const args = c.args.map((a) => (a === "other dtype" ? (t === "f32" ? "f64" : "f32") : a))
  return { operands, call: c.call, args }
}

/** Runs a call here: the controller's answer and the worker's layout of the result. */
const callHere = async (c: Call): Promise<{ answer: Answer; dense: boolean; worker?: { stride: number[]; offset: number; contiguous: boolean } }> => {
  const xs = c.operands.map((o) => o.chain.reduce((x, s) => callOp(s.op, x, s.args) as RemoteTensor, tensor(o.t, o.shape, o.data)))
  const args = c.args.map((a) => (typeof a === "object" && a !== null ? xs[(a as { operand: number }).operand] : a))
  let r: RemoteTensor
  try {
    const out = (ops as unknown as Record<string, (...a: unknown[]) => RemoteTensor | undefined>)[c.call]!(...args)
    r = c.call.endsWith("_") ? xs[0]! : out!
  } catch (e) {
    return { answer: { error: (e as Error).message }, dense: true }
  }
  const answer = { dtype: r.dtype!, shape: [...r.shape!], stride: r.stride(), contiguous: r.isContiguous(), values: await values(r) }
  return { answer, dense: xs.every((x) => x.isContiguous()), worker: await workerLayout(r) }
}

describeUnless(torchMissing())("elementwise results laid out as torch's TensorIterator lays them out", () => {
  let torch: TorchServer
  beforeAll(() => void (torch = new TorchServer(new URL("./views_ref.py", import.meta.url).pathname)))
  afterAll(() => torch?.close())

  test("random unary, binary, scalar, ternary, cast and in-place calls on permuted, sliced and expanded operands: torch's dtype, shape, strides and values; the worker's strides are the controller's", async () => {
    const rng = seeded(0x1a70)
    const calls = [...FIXED_CALLS, ...Array.from({ length: RANDOM_CALLS }, () => randomCall(rng))]
    const answers = calls.map((c, i) => torch.ask<Answer>(20_000 + i, { ...c }))
    let strided = 0
    for (let i = 0; i < calls.length; i++) {
      const c = calls[i]!, want = await answers[i]!, what = JSON.stringify(c)
      expect("error" in want ? want.error : undefined, what).toBeUndefined()
      const { answer: got, dense, worker } = await callHere(c)
      if ("error" in got || "error" in want) throw new Error(`${what}: ${JSON.stringify(got)}`)
      // A size-1 dim's stride addresses nothing: where every operand is contiguous the result is row-major without
      // looking at theirs (torch orders by them, so its size-1 strides may differ; its is_contiguous is the same), and
      // torch's fast setup, which keeps the operands' own, depends on whether it wrapped a number (x * 2, where).
      // Elsewhere every stride is torch's.
      const wrapped = c.call === "where" || c.args.some((a) => typeof a === "number")
      const steps = (x: { shape: number[]; stride: number[] }) => x.stride.map((s, d) => ((dense || wrapped) && x.shape[d] === 1 ? "size 1" : s))
      expect({ dtype: got.dtype, shape: got.shape, stride: steps(got), contiguous: got.contiguous }, what).toEqual({ dtype: want.dtype, shape: want.shape, stride: steps(want), contiguous: want.contiguous })
      expect(got.values.length, what).toBe(want.values.length)
      const tol = got.dtype === "f32" ? 1e-6 : 1e-12
      got.values.forEach((x, j) => expect(Math.abs(x - want.values[j]!) <= tol * Math.max(1, Math.abs(want.values[j]!)), `${what}: element ${j}: ${x} vs torch's ${want.values[j]}`).toBe(true))
      expect(worker, what).toEqual({ stride: got.stride, offset: c.call.endsWith("_") ? worker!.offset : 0, contiguous: got.contiguous })
      if (!want.contiguous) strided++
    }
    // The cases reach the rule: a good share of torch's results are not row-major.
    expect(strided).toBeGreaterThan(RANDOM_CALLS / 8)
  }, 240_000)
})

const RANDOM_CALLS = 150

const operand = (shape: number[], ...chain: Array<{ op: string; args: unknown[] }>): Operand =>
  ({ t: "f32", shape, data: iota(shape.reduce((a, b) => a * b, 1)).map((i) => 1 + i * 0.5), chain })
/** Calls the rule's uncommon branches decide. */
const FIXED_CALLS: Call[] = [
  // [1, 3] with strides (1, 1) and a stepped [1, 3]: equal strides put the size-3 dim first, torch's (1, 1).
  { operands: [operand([3, 1], { op: "permute", args: [[1, 0]] }), operand([1, 6], { op: "slice", args: [1, 0, null, 2] })], call: "add", args: [{ operand: 0 }, { operand: 1 }] },
  // a transposed operand after a stepped one: the first decides (row-major), the other way round transposed.
  { operands: [operand([4, 6], { op: "slice", args: [1, 0, null, 2] }), operand([3, 4], { op: "t", args: [] })], call: "mul", args: [{ operand: 0 }, { operand: 1 }] },
  { operands: [operand([3, 4], { op: "t", args: [] }), operand([4, 6], { op: "slice", args: [1, 0, null, 2] })], call: "mul", args: [{ operand: 0 }, { operand: 1 }] },
  // an expanded operand first decides nothing: the transposed one after it lays the result out.
  { operands: [operand([4, 1], { op: "expand", args: [[4, 3]] }), operand([3, 4], { op: "t", args: [] })], call: "sub", args: [{ operand: 0 }, { operand: 1 }] },
]
