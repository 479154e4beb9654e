/**
 * What SGD and AdamW share: parameter groups (each with its own hyper-parameters, `lr` among
 * them, which a schedule changes between steps), the per-parameter state they keep on the
 * workers, and a step that issues one fused command per group and mesh (and state step
 * count), never one per element-wise op. Gradients come from autograd (each parameter's
 * `.grad`) or are given as (parameter, gradient) pairs; a parameter without one is skipped,
 * as torch skips a `.grad` of None. A step the controller refuses (a gradient of the wrong
 * shape or dtype, a bad hyper-parameter) changes no state: every command is checked first.
 */
import { refuse } from "../controller/errors.ts"
import { RemoteTensor } from "../controller/tensor.ts"
import type { Mesh } from "../controller/mesh.ts"
import { noGrad, zeroGrad } from "../controller/autograd.ts"
import { escape } from "../controller/lifetime.ts"
import { opsOn } from "../controller/ops.ts"
import { OpArgumentError } from "../ops/meta.ts"
import { inferOutputs, opNamed } from "../ops/registry.ts"

/** Gradients given to a step: (parameter, gradient) pairs, or a map from parameter to gradient. */
export type Gradients = ReadonlyMap<RemoteTensor, RemoteTensor> | ReadonlyArray<readonly [RemoteTensor, RemoteTensor]>

/** A group of parameters and the hyper-parameters it steps with (O: the optimizer's options). */
export interface ParamGroup<O> {
  readonly params: ReadonlyArray<RemoteTensor>
  /** Mutable: a learning-rate schedule sets `lr` before a step. */
  options: O
}

/** What a constructor takes: the parameters, or groups of them each overriding some options. */
export type Params<O> = ReadonlyArray<RemoteTensor> | ReadonlyArray<{ readonly params: ReadonlyArray<RemoteTensor> } & Partial<O>>


/** One fused command to issue: the op, its arguments and keyword arguments, on a mesh. */
export interface FusedCall {
  readonly mesh: Mesh
  readonly op: "_fused_sgd_" | "_fused_adamw_"
  readonly args: ReadonlyArray<unknown>
  readonly kwargs: Readonly<Record<string, unknown>>
  /** Applied to the optimizer's state once every command of the step has been checked. */
  readonly commit: () => void
}

/**
 * What a step may be told instead of reading the optimizer's state: the step number (1 for the
 * first), for every parameter it steps. A compiled training step passes it in as an argument,
 * so that its replays take it as a parameter (the state's own count advances only when the
 * step's JavaScript runs, once per trace).
 */
export interface StepAt {
  readonly step?: number
}

/** A (parameter, gradient) of one group, with the parameter's mesh checked. */
export interface Stepped {
  readonly param: RemoteTensor
  readonly grad: RemoteTensor
}

/**
 * An optimizer's state as torch's state_dict() shapes it: `state`, per parameter (by its index
 * over every group's parameters, in order) that has taken a step, its step count and its
 * buffers by torch's names (`exp_avg`, `exp_avg_sq`, `max_exp_avg_sq`, `momentum_buffer`);
 * `param_groups`, each group's options and its parameters' indices. A state tree for `save`.
 */
export interface OptimizerStateDict<O> {
  readonly state: { readonly [index: string]: { readonly step: number; readonly [buffer: string]: RemoteTensor | number } }
  readonly param_groups: ReadonlyArray<O & { readonly params: ReadonlyArray<number> }>
}

export abstract class Optimizer<O extends { lr: number }, S extends { readonly step: number }> {
  readonly paramGroups: ParamGroup<O>[]
  /**
   * Each parameter's state, from its first step on: how many steps it took and its buffers on
   * the workers (made zero before the step that first uses them, kept once it is issued).
   */
  readonly state = new Map<RemoteTensor, S>()

  /** torch's name of each state buffer, and its field in S. */
  protected abstract readonly buffers: ReadonlyArray<readonly [string, keyof S & string]>

  constructor(params: Params<O>, defaults: O, private readonly optionsProblem: (o: O) => string | undefined, readonly name: string) {
    const groups = params.length > 0 && !isTensorList(params) ? params : [{ params: params as ReadonlyArray<RemoteTensor> }]
    const seen = new Set<RemoteTensor>()
    this.paramGroups = groups.map(({ params: ps, ...overrides }, i) => {
      const options = { ...defaults, ...overrides } as O
      const problem = optionsProblem(options)
      if (problem !== undefined) throw refuse("optimizer", `${name}: ${problem}`)
      for (const p of ps) {
        if (seen.has(p)) throw refuse("optimizer", `${name}: ${p} appears in more than one parameter group (group ${i})`)
        if (p.meta === undefined) throw refuse("unknown-meta", `${name}: ${p} has no known dtype and shape (give a user function's results as metadata)`)
        seen.add(p)
      }
      return { params: [...ps], options }
    })
  }

  /** The learning rate of every group (a schedule's setting: `opt.lr = schedule(t)`). */
  set lr(lr: number) {
    for (const g of this.paramGroups) g.options = { ...g.options, lr }
  }

  get lr(): number {
    return this.paramGroups[0]?.options.lr ?? 0
  }

  /**
   * One optimizer step, in place on the workers: reads each parameter's `.grad`, or the
   * gradients given. Throws the ControllerError of a refused step before anything is sent.
   */
  step(grads?: Gradients, at: StepAt = {}): void {
    const given = grads === undefined ? undefined : grads instanceof Map ? grads as ReadonlyMap<RemoteTensor, RemoteTensor> : new Map(grads as ReadonlyArray<readonly [RemoteTensor, RemoteTensor]>)
    if (given) for (const p of given.keys()) if (!this.paramGroups.some((g) => g.params.includes(p))) throw refuse("optimizer", `${this.name}.step: ${p} is not one of its parameters`)
    const calls: FusedCall[] = []
    for (const group of this.paramGroups) {
      const byMesh = new Map<Mesh, Stepped[]>()
      for (const param of group.params) {
        const grad = given ? given.get(param) : param.grad
        if (grad === undefined) continue
        if (grad.mesh !== param.mesh) throw refuse("mesh", `${this.name}.step: the gradient ${grad} of ${param} is on another mesh`)
        const list = byMesh.get(param.mesh) ?? []
        byMesh.set(param.mesh, list)
        list.push({ param, grad })
      }
      for (const [mesh, stepped] of byMesh) calls.push(...this.plan(mesh, group.options, stepped, at))
    }
    for (const c of calls) check(c)
    // A step is not part of the model: nothing goes on the tape (and parameters that require grad may be written in place).
    noGrad(() => {
      for (const c of calls) {
        const fused = opsOn(c.mesh)[c.op] as (...args: unknown[]) => RemoteTensor
        fused(...c.args, c.kwargs)
        c.commit()
      }
    })
  }

  /**
   * The state to save (torch's state_dict()): the buffers themselves, not copies, and each
   * group's options. `save(mesh, { opt: opt.stateDict(), ... }, dir)` writes it.
   */
  stateDict(): OptimizerStateDict<O> {
    const state: Record<string, Record<string, RemoteTensor | number>> = {}
    this.paramGroups.flatMap((g) => g.params).forEach((p, i) => {
      const s = this.state.get(p) as (S & Record<string, unknown>) | undefined
      if (s === undefined) return
      const entry: Record<string, RemoteTensor | number> = { step: s.step }
      for (const [name, field] of this.buffers) if (s[field] !== undefined) entry[name] = s[field] as RemoteTensor
      state[String(i)] = entry
    })
    let index = 0
    return { state: state as OptimizerStateDict<O>["state"], param_groups: this.paramGroups.map((g) => ({ ...g.options, params: g.params.map(() => index++) })) }
  }

  /**
   * Restores a stateDict() (torch's load_state_dict()), a loaded checkpoint's among them: each
   * group's options, and each parameter's step and buffers, copied into new buffers on the
   * parameter's ranks with its placement (the given tensors stay the caller's). The groups must
   * hold as many parameters as this optimizer's, each buffer the parameter's mesh, dtype and
   * shape; anything else is refused and nothing changes.
   */
  loadStateDict(dict: OptimizerStateDict<O>): void {
    const where = `${this.name}.loadStateDict`
    const groups = dict?.param_groups
    if (!Array.isArray(groups) || groups.length !== this.paramGroups.length)
      throw refuse("optimizer", `${where}: the state has ${Array.isArray(groups) ? groups.length : "no"} parameter groups, the optimizer ${this.paramGroups.length}`)
    const options = groups.map((g, i) => {
      const { params, ...rest } = g
      const mine = this.paramGroups[i]!
      if (!Array.isArray(params) || params.length !== mine.params.length)
        throw refuse("optimizer", `${where}: group ${i} of the state has ${Array.isArray(params) ? params.length : "no"} parameters, the optimizer's ${mine.params.length}`)
      const o = { ...mine.options, ...rest } as O
      const problem = this.optionsProblem(o)
      if (problem !== undefined) throw refuse("optimizer", `${where}: group ${i}: ${problem}`)
      return o
    })
    const params = this.paramGroups.flatMap((g) => g.params)
    const known = new Set(["step", ...this.buffers.map(([name]) => name)])
    const entries = Object.entries(dict.state ?? {}).map(([key, entry]) => {
      const p = params[Number(key)]
      if (!/^\d+$/.test(key) || p === undefined) throw refuse("optimizer", `${where}: state ${key} names no parameter (the optimizer has ${params.length})`)
      const step = entry?.step
      if (!(typeof step === "number" && Number.isSafeInteger(step) && step >= 0)) throw refuse("optimizer", `${where}: state ${key}'s step is ${step}, not a count of steps`)
      for (const name of Object.keys(entry)) if (!known.has(name)) throw refuse("optimizer", `${where}: state ${key} has ${name}; a ${this.name} state holds ${[...known].join(", ")}`)
      for (const [name] of this.buffers) {
        const t = entry[name]
        if (t === undefined) continue
        if (!(t instanceof RemoteTensor)) throw refuse("optimizer", `${where}: state ${key}'s ${name} is not a tensor`)
        if (t.released) throw refuse("released", `${where}: state ${key}'s ${name} ${t} was released`)
        if (t.mesh !== p.mesh) throw refuse("mesh", `${where}: state ${key}'s ${name} ${t} is not on ${p}'s mesh`)
        if (t.meta === undefined || t.meta.dtype !== p.meta!.dtype || t.meta.shape.join(",") !== p.meta!.shape.join(","))
          throw refuse("optimizer", `${where}: state ${key}'s ${name} is ${t.meta ? `${t.meta.dtype}[${t.meta.shape}]` : "of unknown dtype and shape"} but its parameter is ${p.meta!.dtype}[${p.meta!.shape}]`)
      }
      return [p, entry] as const
    })
    noGrad(() => {
      this.paramGroups.forEach((g, i) => (g.options = options[i]!))
      const old = [...this.state.values()]
      this.state.clear()
      for (const [p, entry] of entries) {
        const s: Record<string, unknown> = { step: entry.step }
        for (const [name, field] of this.buffers) {
          const t = entry[name] as RemoteTensor | undefined
          if (t === undefined) continue
          const copy = opsOn(p.mesh).clone(t).place(p.placement)
          escape(copy)
          s[field] = copy
        }
        this.state.set(p, s as unknown as S)
      }
      for (const s of old) for (const [, field] of this.buffers) (s[field] as RemoteTensor | undefined)?.release()
    })
  }

  /** Drops every parameter's `.grad`, releasing it on the workers (torch's zero_grad(set_to_none=True)). */
  zeroGrad(): void {
    for (const g of this.paramGroups) zeroGrad(g.params)
  }

  /** The fused commands of one group's parameters on one mesh. */
  protected abstract plan(mesh: Mesh, options: O, stepped: ReadonlyArray<Stepped>, at: StepAt): FusedCall[]

  /**
   * Zeros of p's dtype, shape and placement on p's ranks: a state buffer's start (checkpoints
   * read its placement). It outlives the step scope it is made in, as a leaf's .grad does.
   */
  protected zerosLike(p: RemoteTensor): RemoteTensor {
    const meta = p.meta!
    const buffer = opsOn(p.mesh).zeros(meta.shape as number[], { dtype: meta.dtype }).place(p.placement)
    escape(buffer)
    return buffer
  }
}

const isTensorList = (ps: ReadonlyArray<unknown>): ps is ReadonlyArray<RemoteTensor> => ps.every((p) => !(typeof p === "object" && p !== null && "params" in p))

/** The op's own rule over the call's metadata, so a refused call is refused before any command of the step is sent. */
const check = (c: FusedCall): void => {
  const metas = (v: unknown): unknown => (Array.isArray(v) ? v.map(metas) : (v as RemoteTensor).meta)
  try {
    inferOutputs(opNamed(c.op)!, c.args.map(metas), c.kwargs, true)
  } catch (e) {
    throw e instanceof OpArgumentError ? refuse("op-rule", e.message) : e
  }
}
