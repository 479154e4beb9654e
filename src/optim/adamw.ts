/**
 * AdamW as torch.optim.AdamW (torch 1.13): decoupled weight decay, bias-corrected moments,
 * optional amsgrad and maximize. Each group's step is one `ops._fused_adamw_` per mesh.
 *
 *   const opt = new AdamW(params, { lr: 3e-4, betas: [0.9, 0.95], weightDecay: 0.1 })
 *   opt.step()       // each parameter's .grad (or opt.step([[p, g], ...]))
 */
import type { RemoteTensor } from "../controller/tensor.ts"
import type { Mesh } from "../controller/mesh.ts"
import { adamwOptionsProblem } from "../ops/specs/optim.ts"
import { Optimizer, type FusedCall, type Params, type StepAt, type Stepped } from "./optimizer.ts"

export interface AdamWOptions {
  lr: number
  betas: readonly [number, number]
  eps: number
  weightDecay: number
  amsgrad: boolean
  maximize: boolean
}

/** A parameter's AdamW state (torch's state[p]): steps taken and the moments, on the parameter's ranks. */
export interface AdamWState {
  readonly step: number
  readonly expAvg: RemoteTensor
  readonly expAvgSq: RemoteTensor
  /** amsgrad's running maximum of expAvgSq. */
  readonly maxExpAvgSq: RemoteTensor | undefined
}

/** torch.optim.AdamW's defaults. */
export const ADAMW_DEFAULTS: AdamWOptions = { lr: 1e-3, betas: [0.9, 0.999], eps: 1e-8, weightDecay: 1e-2, amsgrad: false, maximize: false }

const problem = (o: AdamWOptions) => adamwOptionsProblem({ lr: o.lr, beta1: o.betas[0], beta2: o.betas[1], eps: o.eps, weightDecay: o.weightDecay })

export class AdamW extends Optimizer<AdamWOptions, AdamWState> {
  protected readonly buffers = [["exp_avg", "expAvg"], ["exp_avg_sq", "expAvgSq"], ["max_exp_avg_sq", "maxExpAvgSq"]] as const

  constructor(params: Params<AdamWOptions>, options: Partial<AdamWOptions> = {}) {
    super(params, { ...ADAMW_DEFAULTS, ...options }, problem, "AdamW")
  }

  protected plan(mesh: Mesh, o: AdamWOptions, stepped: ReadonlyArray<Stepped>, at: StepAt): FusedCall[] {
    // One command per step count: parameters skipped at some step (no gradient) are behind the others.
    const bySteps = new Map<number, Array<Stepped & { readonly next: AdamWState }>>()
    for (const s of stepped) {
      const was = this.state.get(s.param)
      const next: AdamWState = {
        step: at.step ?? (was?.step ?? 0) + 1,
        expAvg: was?.expAvg ?? this.zerosLike(s.param),
        expAvgSq: was?.expAvgSq ?? this.zerosLike(s.param),
        maxExpAvgSq: o.amsgrad ? was?.maxExpAvgSq ?? this.zerosLike(s.param) : was?.maxExpAvgSq,
      }
      const list = bySteps.get(next.step) ?? []
      bySteps.set(next.step, list)
      list.push({ ...s, next })
    }
    return [...bySteps].map(([step, list]) => ({
      mesh, op: "_fused_adamw_",
      args: [list.map((s) => s.param), list.map((s) => s.grad), list.map((s) => s.next.expAvg), list.map((s) => s.next.expAvgSq), o.amsgrad ? list.map((s) => s.next.maxExpAvgSq!) : []],
      kwargs: { step, lr: o.lr, beta1: o.betas[0], beta2: o.betas[1], eps: o.eps, weight_decay: o.weightDecay, amsgrad: o.amsgrad, maximize: o.maximize },
      commit: () => list.forEach((s) => this.state.set(s.param, s.next)),
    }))
  }
}
