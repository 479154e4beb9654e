// SGD and AdamW on a real worker against torch.optim (torch 1.13, tests/optim/torch_optim.py)
// on the same parameters and gradients over several steps: every parameter after every step,
// and the state at the end (moments, momentum buffers, step counts), for f32 and f64, each
// hyper-parameter on and off; parameter groups, skipped parameters and a learning rate changed
// per step; one fused command per group; refusals that leave the state as it was; and the
// schedules against torch's LinearLR and CosineAnnealingLR.
import { afterAll, beforeAll, expect, spyOn, test } from "bun:test"
import { Effect, ManagedRuntime } from "effect"
import { compile, Controller, ControllerError, HostTensor, inStep, param, type ControllerApi, type Mesh, type RemoteTensor } from "../../src/controller/index.ts"
import { AdamW, cosineDecay, linearWarmup, SGD, warmupCosine } from "../../src/optim/index.ts"
import { describeUnless } from "../skip.ts"
import { fromJson, torchMissing, TorchServer } from "../torch.ts"
import { host } from "../worker/build.ts"

const SERVER = new URL("./torch_optim.py", import.meta.url).pathname
const missing = torchMissing()

type Float = "f32" | "f64"
/**
 * |ours - torch| <= atol + rtol * |torch| after several steps. We compute op for op as torch's
 * loop does, but torch's vectorised kernels fuse `a + alpha * b` into one multiply-add (its
 * scalar tails do not), so an element can differ by an ulp a step.
 */
const TOLERANCE: Readonly<Record<Float, { rtol: number; atol: number }>> = { f64: { rtol: 1e-13, atol: 1e-15 }, f32: { rtol: 1e-6, atol: 1e-7 } }

let seed = 4242
const rnd = () => ((seed = (seed * 1103515245 + 12345) % 2 ** 31) / 2 ** 31)
interface T { readonly t: Float; readonly shape: number[]; readonly data: number[] }
const tensor = (t: Float, shape: number[], scale = 1): T => {
  const n = shape.reduce((a, b) => a * b, 1)
  return { t, shape, data: Array.from({ length: n }, () => (t === "f32" ? Math.fround : Number)((rnd() * 2 - 1) * scale)) }
}

/** Our option names for torch's keyword arguments. */
const TORCH_NAMES: Readonly<Record<string, string>> = { weightDecay: "weight_decay" }
const torchOptions = (o: Readonly<Record<string, unknown>>) => Object.fromEntries(Object.entries(o).map(([k, v]) => [TORCH_NAMES[k] ?? k, v]))

interface Case {
  readonly name: string
  readonly optimizer: "SGD" | "AdamW"
  readonly dtype: Float
  readonly shapes: number[][]
  readonly groups: ReadonlyArray<{ readonly params: number[]; readonly options: Readonly<Record<string, unknown>> }>
  readonly steps: number
  /** Whether param i has no gradient at step s (torch: .grad None, skipped). */
  readonly skip?: (s: number, i: number) => boolean
  /** Each group's lr at step s (a schedule), else the options'. */
  readonly lrs?: (s: number) => number[]
  /** A gradient whose first element is NaN. */
  readonly nanGrad?: { readonly step: number; readonly param: number }
}
const one = (name: string, optimizer: Case["optimizer"], dtype: Float, options: Record<string, unknown>, steps = 5): Case =>
  ({ name, optimizer, dtype, shapes: [[3, 4], [5], []], groups: [{ params: [0, 1, 2], options }], steps })

const CASES: Case[] = [
  ...(["f32", "f64"] as const).flatMap((t) => [
    one(`SGD plain ${t}`, "SGD", t, { lr: 0.1 }),
    one(`SGD momentum, dampening, weight decay ${t}`, "SGD", t, { lr: 0.05, momentum: 0.9, dampening: 0.1, weightDecay: 0.01 }),
    one(`SGD nesterov with weight decay ${t}`, "SGD", t, { lr: 0.05, momentum: 0.8, nesterov: true, weightDecay: 0.1 }),
    one(`SGD maximize with momentum ${t}`, "SGD", t, { lr: 0.02, momentum: 0.5, maximize: true }),
    // torch negates the gradient before adding the weight decay: the other order differs.
    one(`SGD maximize with weight decay ${t}`, "SGD", t, { lr: 0.05, weightDecay: 0.3, maximize: true }),
    one(`SGD maximize with weight decay and momentum ${t}`, "SGD", t, { lr: 0.05, weightDecay: 0.3, momentum: 0.7, maximize: true }),
    one(`AdamW defaults ${t}`, "AdamW", t, {}, 6),
    one(`AdamW betas, eps, weight decay ${t}`, "AdamW", t, { lr: 0.01, betas: [0.8, 0.95], eps: 1e-6, weightDecay: 0.1 }, 6),
    one(`AdamW amsgrad ${t}`, "AdamW", t, { lr: 0.02, amsgrad: true, weightDecay: 0.05 }, 6),
    one(`AdamW maximize, no weight decay ${t}`, "AdamW", t, { lr: 0.01, maximize: true, weightDecay: 0 }),
  ]),
  {
    name: "AdamW two groups, a parameter skipped at steps 1 and 2, lr per step from a schedule",
    optimizer: "AdamW", dtype: "f64", shapes: [[2, 3], [4], [3, 2], [1]], steps: 6,
    groups: [{ params: [0, 1], options: { lr: 0.01 } }, { params: [2, 3], options: { lr: 0.03, weightDecay: 0 } }],
    skip: (s, i) => i === 1 && (s === 1 || s === 2),
    lrs: (s) => { const a = warmupCosine({ lr: 0.01, warmup: 2, total: 6 }); return [a(s), 3 * a(s)] },
  },
  {
    name: "SGD momentum, two groups, a parameter without a gradient at first",
    optimizer: "SGD", dtype: "f32", shapes: [[4, 2], [3]], steps: 5,
    groups: [{ params: [0], options: { lr: 0.1, momentum: 0.9 } }, { params: [1], options: { lr: 0.2, momentum: 0.5, dampening: 0.5 } }],
    skip: (s, i) => i === 1 && s < 2,
  },
  // amsgrad's running maximum is torch.maximum's: a NaN in exp_avg_sq wins and stays in max_exp_avg_sq.
  { ...one("AdamW amsgrad with a NaN gradient at step 1 f32", "AdamW", "f32", { lr: 0.02, amsgrad: true }, 3), nanGrad: { step: 1, param: 1 } },
]

const numbersOf = (v: unknown): number[] => [...(v as HostTensor).toArray()].map(Number)
/** The elements of `ours` that are not within tolerance of `theirs` (index, ours, torch's), the first few. */
const mismatches = (ours: number[], theirs: ReadonlyArray<number | string>, t: Float) => {
  const { rtol, atol } = TOLERANCE[t]
  return ours.map((v, j) => [j, v, fromJson(theirs[j]!)] as const).filter(([, v, w]) => !(Math.abs(v - w) <= atol + rtol * Math.abs(w) || (Number.isNaN(v) && Number.isNaN(w)))).slice(0, 4)
}

describeUnless(missing)("optimizers against torch.optim 1.13", () => {
  let rt: ManagedRuntime.ManagedRuntime<Controller, unknown>
  let ctl: ControllerApi
  let mesh: Mesh
  let torch: TorchServer
  const run = <A, E>(e: Effect.Effect<A, E, Controller>) => rt.runPromise(e)
  const upload = (x: T): Promise<RemoteTensor> => run(mesh.call("ops.clone", [host(x.t, x.shape, x.data)]))

  beforeAll(async () => {
    rt = ManagedRuntime.make(Controller.local({ world: 1, onWorkerLine: () => {} }))
    ctl = await rt.runPromise(Effect.service(Controller))
    mesh = await run(ctl.mesh({ all: 1 }))
    torch = new TorchServer(SERVER)
    expect((await torch.ask(-1, { kind: "schedule", scheduler: "LinearLR", lr: 1, kwargs: {}, steps: 1 })).error).toBeUndefined()
  }, 90_000)
  afterAll(async () => {
    torch?.close()
    await rt?.dispose()
  })

  const make = (cs: Case, ps: RemoteTensor[]): AdamW | SGD => {
    const groups = cs.groups.map((g) => ({ params: g.params.map((i) => ps[i]!), ...g.options }))
    return cs.optimizer === "SGD" ? new SGD(groups as never) : new AdamW(groups as never)
  }

  for (const [id, cs] of CASES.entries()) {
    test(cs.name, async () => {
      const init = cs.shapes.map((s) => tensor(cs.dtype, s))
      const grads = Array.from({ length: cs.steps }, (_, s) => cs.shapes.map((shape, i) => (cs.skip?.(s, i) ? null : tensor(cs.dtype, shape, 2))))
      if (cs.nanGrad) grads[cs.nanGrad.step]![cs.nanGrad.param]!.data[0] = NaN
      const want = torch.ask(id, {
        kind: "optimizer", optimizer: cs.optimizer, params: init,
        groups: cs.groups.map((g) => ({ params: g.params, ...torchOptions(g.options) })),
        steps: grads.map((gs, s) => ({ grads: gs, lrs: cs.lrs?.(s) ?? null })),
      })
      const ps = await Promise.all(init.map(upload))
      const opt = make(cs, ps)
      const history: number[][][] = []
      for (const [s, gs] of grads.entries()) {
        const pairs: Array<[RemoteTensor, RemoteTensor]> = []
        for (const [i, g] of gs.entries()) if (g) pairs.push([ps[i]!, await upload(g)])
        cs.lrs?.(s).forEach((lr, i) => (opt.paramGroups[i]!.options.lr = lr))
        opt.step(pairs)
        history.push(await Promise.all(ps.map(async (p) => numbersOf(await run(p.fetch())))))
      }
      const theirs = await want
      expect(theirs.error).toBeUndefined()
      for (const [s, step] of history.entries())
        for (const [i, values] of step.entries()) expect({ step: s, param: i, bad: mismatches(values, theirs.params[s][i], cs.dtype) }).toEqual({ step: s, param: i, bad: [] })
      // The state torch keeps, by torch's names.
      for (const [i, p] of ps.entries()) {
        const st = opt.state.get(p) as Record<string, unknown> | undefined
        const ref = theirs.state[i] as Record<string, number | number[]>
        const buffers = cs.optimizer === "SGD" ? { momentum_buffer: st?.momentumBuffer } : { exp_avg: st?.expAvg, exp_avg_sq: st?.expAvgSq, max_exp_avg_sq: st?.maxExpAvgSq }
        for (const [name, t] of Object.entries(buffers)) {
          if (ref[name] === undefined) continue
          expect({ param: i, name, bad: mismatches(numbersOf(await run((t as RemoteTensor).fetch())), ref[name] as number[], cs.dtype) }).toEqual({ param: i, name, bad: [] })
        }
        if (ref.step !== undefined) expect({ param: i, step: st?.step }).toEqual({ param: i, step: ref.step as number })
      }
    }, 60_000)
  }

  test("with autograd: a step reads each parameter's .grad (outside noGrad), zeroGrad drops them", async () => {
    const x = await upload(tensor("f32", [4, 3]))
    const [w1, w2] = await Promise.all([upload(tensor("f32", [3, 2])), upload(tensor("f32", [3, 2]))])
    const [v1, v2] = [w1!.clone(), w2!.clone()]
    for (const w of [w1!, v1!]) w.requiresGrad_()
    const byGrad = new AdamW([w1!], { lr: 0.1 }), byPairs = new AdamW([v1!], { lr: 0.1 })
    x.matmul(w1!).tanh().sum().backward()
    expect(w1!.grad).toBeDefined()
    const g = w1!.grad!.clone()
    byGrad.step()
    byPairs.step([[v1!, g]])
    expect(numbersOf(await run(w1!.fetch()))).toEqual(numbersOf(await run(v1!.fetch())))
    expect(numbersOf(await run(w1!.fetch()))).not.toEqual(numbersOf(await run(w2!.fetch())))
    byGrad.zeroGrad()
    expect(w1!.grad).toBeUndefined()
    // No gradient: nothing to step.
    byGrad.step()
    expect((byGrad.state.get(w1!) as { step: number }).step).toBe(1)
  })

  test("a step is one fused command per group (per step count), whatever the number of parameters", async () => {
    const ps = await Promise.all([[4], [2, 2], [3], [5], [1], [6]].map((s) => upload(tensor("f32", s))))
    const opt = new AdamW([{ params: ps.slice(0, 4) }, { params: ps.slice(4), lr: 0.1 }])
    const gs = await Promise.all(ps.map((p) => upload(tensor("f32", [...p.shape!]))))
    const command = spyOn(ctl.core, "command")
    try {
      const fused = () => command.mock.calls.filter(([, label]) => label.startsWith("ops._fused")).length
      opt.step(ps.map((p, i) => [p, gs[i]!] as const))
      expect(fused()).toBe(2)
      opt.step(ps.slice(1).map((p, i) => [p, gs[i + 1]!] as const))
      expect(fused()).toBe(4)
      // ps[0] is a step behind now: its group steps as two commands.
      opt.step(ps.map((p, i) => [p, gs[i]!] as const))
      expect(fused()).toBe(7)
      expect(ps.map((p) => (opt.state.get(p) as { step: number }).step)).toEqual([2, 3, 3, 3, 3, 3])
    } finally {
      command.mockRestore()
    }
  })

  test("a refused step changes nothing; bad hyper-parameters are refused when the optimizer is made", async () => {
    const p = await upload(tensor("f64", [3])), q = await upload(tensor("f64", [2]))
    const opt = new SGD([p, q], { lr: 0.1, momentum: 0.9 })
    const g = await upload(tensor("f64", [3])), wrong = await upload(tensor("f64", [4])), f32 = await upload(tensor("f32", [2]))
    const before = numbersOf(await run(p.fetch()))
    for (const pairs of [[[p, g], [q, f32]], [[p, wrong]]] as Array<Array<[RemoteTensor, RemoteTensor]>>) {
      const refusal = (() => { try { opt.step(pairs) } catch (e) { return e } })()
      expect(refusal).toBeInstanceOf(ControllerError)
      expect((refusal as Error).message).toMatch(/grads\[\d\] is f(32|64)\[\d\] but params\[\d\] is f64\[\d\]/)
    }
    expect(opt.state.size).toBe(0)
    expect(numbersOf(await run(p.fetch()))).toEqual(before)
    expect(() => opt.step([[g, g]])).toThrow("is not one of its parameters")
    expect(() => new SGD([p], { lr: 0.1, nesterov: true })).toThrow("SGD: nesterov momentum requires a momentum and zero dampening")
    expect(() => new AdamW([p], { betas: [0.9, 1] })).toThrow("AdamW: invalid beta parameter at index 1: 1")
    expect(() => new AdamW([p], { lr: -1 })).toThrow("AdamW: invalid learning rate: -1")
    const half = await run(mesh.call("ops.to", [p], { dtype: "f16" }))
    expect(() => new AdamW([half]).step([[half, half]])).toThrow("the fused steps take f32 or f64")
    // After the refusals the first real step is still a first step (the momentum buffer starts as the gradient).
    opt.step([[p, g]])
    const buf = numbersOf(await run((opt.state.get(p)!.momentumBuffer as RemoteTensor).fetch()))
    expect(buf).toEqual(numbersOf(await run(g.fetch())))
  })

  // Optimizer state outlives the step scope that made it (as a leaf's .grad does): every step
  // in its own scope (inStep), its gradients made and released there, op by op or through a
  // compiled step (warmup: 1, the step number passed in as a replay parameter), equals torch.optim's steps.
  for (const [k, [optimizer, options]] of ([
    ["AdamW", { lr: 0.01, betas: [0.8, 0.95], weightDecay: 0.1 }],
    ["SGD", { lr: 0.05, momentum: 0.9, dampening: 0.1, weightDecay: 0.01 }],
  ] as const).entries())
    for (const compiled of [false, true])
      test(`${optimizer} with state (${Object.keys(options).join(", ")}) stepped inside step scopes${compiled ? ", through compile" : ""}, as torch.optim`, async () => {
        const shapes = [[3, 4], [5]], steps = 4
        const init = shapes.map((s) => tensor("f32", s))
        const grads = Array.from({ length: steps }, () => shapes.map((s) => tensor("f32", s, 2)))
        const want = torch.ask(2000 + 2 * k + Number(compiled), {
          kind: "optimizer", optimizer, params: init, groups: [{ params: [0, 1], ...torchOptions(options) }],
          steps: grads.map((gs) => ({ grads: gs, lrs: null })),
        })
        const ps = await Promise.all(init.map(upload))
        const opt = optimizer === "SGD" ? new SGD(ps, options) : new AdamW(ps, options)
        const stepOf = (g0: RemoteTensor, g1: RemoteTensor, t: number) => Effect.sync(() => opt.step([[ps[0]!, g0], [ps[1]!, g1]], { step: t }))
        const compiledStep = compile(stepOf, { warmup: 1, onRetrace: (why) => { throw new Error(why) } })
        // The step number is a replay parameter: as a plain number each new value would trace again.
        const step = compiled ? (g0: RemoteTensor, g1: RemoteTensor, t: number) => compiledStep(g0, g1, param(t)) : stepOf
        const history: number[][][] = []
        for (const [s, gs] of grads.entries()) {
          await run(inStep(mesh, Effect.gen(function* () {
            const [g0, g1] = yield* Effect.all(gs.map((g) => mesh.call("ops.clone", [host(g.t, g.shape, g.data)])))
            yield* step(g0!, g1!, s + 1)
          })))
          history.push(await Promise.all(ps.map(async (p) => numbersOf(await run(p.fetch())))))
        }
        if (compiled) expect(compiledStep.traces).toBe(1)
        const theirs = await want
        expect(theirs.error).toBeUndefined()
        for (const [s, values] of history.entries())
          for (const [i, v] of values.entries()) expect({ step: s, param: i, bad: mismatches(v, theirs.params[s][i], "f32") }).toEqual({ step: s, param: i, bad: [] })
      }, 60_000)

  test("schedules are torch's LinearLR and CosineAnnealingLR", async () => {
    const steps = 12
    const cases = [
      { scheduler: "LinearLR", lr: 0.3, kwargs: { start_factor: 0.1, total_iters: 5 }, ours: linearWarmup({ lr: 0.3, steps: 5, startFactor: 0.1 }) },
      { scheduler: "LinearLR", lr: 2, kwargs: { start_factor: 1, end_factor: 0.25, total_iters: 8 }, ours: linearWarmup({ lr: 2, steps: 8, startFactor: 1, endFactor: 0.25 }) },
      { scheduler: "CosineAnnealingLR", lr: 0.1, kwargs: { T_max: 10, eta_min: 0.01 }, ours: cosineDecay({ lr: 0.1, steps: 10, minLr: 0.01 }) },
    ]
    for (const [i, c] of cases.entries()) {
      const theirs = await torch.ask(1000 + i, { kind: "schedule", scheduler: c.scheduler, lr: c.lr, kwargs: c.kwargs, steps: Math.min(steps, c.kwargs.T_max ?? steps) })
      expect(theirs.error).toBeUndefined()
      const ours = (theirs.lrs as number[]).map((_, t) => c.ours(t))
      expect({ scheduler: c.scheduler, bad: ours.filter((v, t) => Math.abs(v - theirs.lrs[t]) > 1e-12 * Math.abs(theirs.lrs[t])) }).toEqual({ scheduler: c.scheduler, bad: [] })
    }
    const w = warmupCosine({ lr: 1, warmup: 4, total: 10, minLr: 0.1, startFactor: 0.25 })
    expect([0, 2, 4, 7, 10, 20].map(w)).toEqual([0.25, 0.625, 1, 0.1 + 0.9 * (1 + Math.cos(Math.PI * 3 / 6)) / 2, 0.1, 0.1])
  })
})
