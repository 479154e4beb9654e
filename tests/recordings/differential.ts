/**
 * The randomised differential check of compile's numbers: random small step programs
 * (arithmetic, clamps, fills, branches and loop counts on numbers, integer tensors that a
 * fraction promotes) reading numbers from plain arguments, an array, a plain object and a class
 * instance mutated between calls, and replay parameters (param()) where a program passes a
 * number straight to an op; each called several times with random numbers (often the last
 * call's again, so replays happen), each call's result compared with the same program run op
 * by op, in dtype and every element (Object.is: NaN and -0 count). A compiled call may also be
 * refused, naming the argument; a call that fails op by op must fail compiled too.
 */
import { Effect, ManagedRuntime } from "effect"
import { compile, Controller, opsOn, param, type Mesh, type RemoteTensor } from "../../src/controller/index.ts"

/** mulberry32: a small seeded generator. */
const generator = (seed: number) => () => {
  seed = (seed + 0x6d2b79f5) | 0
  let t = Math.imul(seed ^ (seed >>> 15), 1 | seed)
  t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t
  return ((t ^ (t >>> 14)) >>> 0) / 4294967296
}
type Random = ReturnType<typeof generator>
const pick = <T>(r: Random, xs: ReadonlyArray<T>): T => xs[Math.floor(r() * xs.length)]!

/** Values where a probe or a replay could go wrong: infinities, NaN, -0, large, promoting fractions, branch thresholds. */
const VALUES = [0, -0, 1, 2, 3, 5, 7, 10, 11, 20, 0.5, 0.25, -1.5, 1e-3, 1e22, -1e22, Infinity, -Infinity, NaN]
const drawValue = (r: Random): number => (r() < 0.7 ? pick(r, VALUES) : r() < 0.5 ? Math.floor(r() * 40) - 20 : (r() - 0.5) * 100)

/** Where an instruction's number comes from. */
type Source = { readonly kind: "plain"; readonly i: number } | { readonly kind: "cfg"; readonly key: "a" | "b" } | { readonly kind: "holder"; readonly inner: boolean } | { readonly kind: "param"; readonly i: number }

type Instruction =
  | { readonly op: "mul" | "add" | "sub" | "clampMax" | "clampMin" | "fill"; readonly from: Source }
  | { readonly op: "branch"; readonly from: Source; readonly threshold: number; readonly a: number; readonly b: number }
  | { readonly op: "loop"; readonly from: Source }

interface Program {
  readonly dtype: "f32" | "i32"
  readonly plain: number
  readonly params: number
  readonly body: ReadonlyArray<Instruction>
}

class Holder {
  constructor(public v: number, public inner = { w: 0 }) {}
  value(inner: boolean): number {
    return inner ? this.inner.w : this.v
  }
}

interface Numbers {
  readonly plain: number[]
  readonly cfg: { a: number; b: number }
  readonly holder: Holder
  readonly params: number[]
}

const PLAIN = 2, PARAMS = 2

const drawProgram = (r: Random): Program => {
  const params = Math.floor(r() * (PARAMS + 1))
  const anySource = (straight: boolean): Source => {
    const k = r()
    if (straight && params > 0 && k < 0.35) return { kind: "param", i: Math.floor(r() * params) }
    if (k < 0.6) return { kind: "plain", i: Math.floor(r() * PLAIN) }
    if (k < 0.8) return { kind: "cfg", key: r() < 0.5 ? "a" : "b" }
    return { kind: "holder", inner: r() < 0.5 }
  }
  const body: Instruction[] = []
  const n = 1 + Math.floor(r() * 4)
  for (let i = 0; i < n; i++) {
    const op = pick(r, ["mul", "add", "sub", "clampMax", "clampMin", "fill", "branch", "loop"] as const)
    if (op === "branch") body.push({ op, from: anySource(false), threshold: pick(r, [0, 2, 10]), a: pick(r, [0.5, 2, 3]), b: pick(r, [1, -1, 0.25]) })
    else if (op === "loop") body.push({ op, from: anySource(false) })
    else body.push({ op, from: anySource(true) })
  }
  return { dtype: r() < 0.4 ? "i32" : "f32", plain: PLAIN, params, body }
}

const describeProgram = (p: Program): string =>
  `${p.dtype} x; ${p.body.map((s) => `${s.op}(${s.from.kind === "plain" ? `n${s.from.i}` : s.from.kind === "param" ? `p${s.from.i}` : s.from.kind === "cfg" ? `cfg.${s.from.key}` : s.from.inner ? "holder.inner.w" : "holder.v"}${s.op === "branch" ? ` > ${s.threshold} ? mul(${s.a}) : add(${s.b})` : ""})`).join("; ")}`

/** The program as a step: what it reads it reads the way model code would. */
const stepOf = (p: Program) => (x: RemoteTensor, plain: number[], cfg: { a: number; b: number }, holder: Holder, params: number[]): RemoteTensor => {
  const value = (s: Source): number =>
    s.kind === "plain" ? plain[s.i]! : s.kind === "param" ? params[s.i]! : s.kind === "cfg" ? cfg[s.key] : s.inner ? holder.inner.w : holder.value(false)
  let h = x
  for (const s of p.body) {
    const v = value(s.from)
    switch (s.op) {
      case "mul": h = h.mul(v); break
      case "add": h = h.add(v); break
      case "sub": h = h.sub(v); break
      case "clampMax": h = h.clamp({ max: v }); break
      case "clampMin": h = h.clamp({ min: v }); break
      case "fill": h = h.add(opsOn(h.mesh).full([4], v)); break
      case "branch": h = v > s.threshold ? h.mul(s.a) : h.add(s.b); break
      case "loop":
        for (let i = 0; i < Math.min(v, 3); i++) h = h.add(1)
        break
    }
  }
  return h
}

/**
 * One call's numbers: each drawn afresh or the last call's again, half the time each; or (two
 * calls in five) all but the replay parameters the last call's, so that the call may replay.
 */
const drawNumbers = (r: Random, p: Program, last: Numbers | undefined, cfg: { a: number; b: number }, holder: Holder): Numbers => {
  const keep = r() < 0.4
  const again = (old: number | undefined) => (old !== undefined && (keep || r() < 0.5) ? old : drawValue(r))
  // The same objects every call, their fields changed in place.
  cfg.a = again(last?.cfg.a), cfg.b = again(last?.cfg.b)
  holder.v = again(last?.holder.v), holder.inner.w = again(last?.holder.inner.w)
  return {
    plain: Array.from({ length: p.plain }, (_, i) => again(last?.plain[i])),
    cfg: { ...cfg }, holder,
    params: Array.from({ length: p.params }, (_, i) => (last !== undefined && r() < 0.5 ? last.params[i]! : drawValue(r))),
  }
}

export interface Tally {
  programs: number
  /** Programs every call of which held. */
  programsHeld: number
  calls: number
  /** Calls whose compiled result was the op-by-op one (or refused naming the argument, or failed as op by op did). */
  held: number
  traces: number
  replays: number
  refused: number
  readonly problems: string[]
}

const elements = (v: unknown): number[] => Array.from(v as ArrayLike<number | bigint>, Number)
const sameElements = (a: number[], b: number[]) => a.length === b.length && a.every((x, i) => Object.is(x, b[i]))

const CALLS = 5

/** `programs` random programs from `seed`, each called CALLS times, compiled and op by op, on a 2-rank mesh. */
export const differential = async (programs: number, seed: number): Promise<Tally> => {
  const rt = ManagedRuntime.make(Controller.local({ world: 2, onWorkerLine: () => {} }))
  const tally: Tally = { programs: 0, programsHeld: 0, calls: 0, held: 0, traces: 0, replays: 0, refused: 0, problems: [] }
  try {
    const run = <A, E>(e: Effect.Effect<A, E, Controller>) => rt.runPromise(e)
    const ctl = await run(Effect.service(Controller))
    const mesh: Mesh = await run(ctl.mesh({ dp: 2 }))
    const on = opsOn(mesh)
    const inputs = { f32: on.arange(4).to("f32").sub(1.5), i32: on.arange(4).to("i32").sub(1) }
    const fetched = async (t: RemoteTensor) => {
      const h = await run(t.fetch())
      return { dtype: h.dtype, values: elements(h.toArray()) }
    }
    for (let k = 0; k < programs; k++) {
      const r = generator(seed + k)
      const p = drawProgram(r)
      const step = stepOf(p)
      const compiled = compile(step, { onRetrace: () => {}, maxRecordings: 4 })
      const cfg = { a: 0, b: 0 }, holder = new Holder(0)
      let last: Numbers | undefined
      const problemsBefore = tally.problems.length
      const where = (c: number, n: Numbers) =>
        `seed ${seed + k} (program ${k}: ${describeProgram(p)}), call ${c} with plain [${n.plain}], cfg ${JSON.stringify(n.cfg)}, holder.v ${n.holder.v}, holder.inner.w ${n.holder.inner.w}, params [${n.params}]`
      for (let c = 0; c < CALLS; c++) {
        const n = (last = drawNumbers(r, p, last, cfg, holder))
        const x = inputs[p.dtype]
        tally.calls++
        const tracesBefore = compiled.traces
        let eager: { dtype: string; values: number[] } | string
        try {
          const t = step(x, n.plain, cfg, holder, n.params)
          eager = await fetched(t)
          if (t !== x) t.release()
        } catch (e) {
          eager = `fails: ${(e as Error).message}`
        }
        const outcome = await run(Effect.result(compiled(x, n.plain, cfg, holder, n.params.map(param))))
        if (outcome._tag === "Failure") {
          const message = (outcome.failure as { message?: string }).message ?? String(outcome.failure)
          if (typeof eager === "string") tally.held++
          else if (/argument \d/.test(message)) tally.held++, tally.refused++
          else tally.problems.push(`${where(c, n)}: compiled failed (${message}), op by op gave ${JSON.stringify(eager)}`)
          continue
        }
        const got = await fetched(outcome.success)
        if (outcome.success !== x) outcome.success.release()
        if (compiled.traces === tracesBefore) tally.replays++
        if (typeof eager !== "string" && got.dtype === eager.dtype && sameElements(got.values, eager.values)) tally.held++
        else tally.problems.push(`${where(c, n)}: compiled gave ${got.dtype} [${got.values}], op by op ${typeof eager === "string" ? eager : `${eager.dtype} [${eager.values}]`}`)
      }
      tally.traces += compiled.traces
      tally.programs++
      if (tally.problems.length === problemsBefore) tally.programsHeld++
      compiled.dispose()
    }
  } finally {
    await rt.dispose()
  }
  return tally
}
