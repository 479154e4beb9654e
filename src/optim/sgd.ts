/**
 * SGD as torch.optim.SGD (torch 1.13): momentum with dampening, weight decay, nesterov,
 * maximize. Each group's step is one `ops._fused_sgd_` per mesh; a parameter's momentum buffer
 * starts as its first step's direction, as torch's does.
 *
 *   const opt = new SGD(params, { lr: 0.1, momentum: 0.9, nesterov: true })
 */
import type { RemoteTensor } from "../controller/tensor.ts"
import type { Mesh } from "../controller/mesh.ts"
import { sgdOptionsProblem } from "../ops/specs/optim.ts"
import { Optimizer, type FusedCall, type Params, type Stepped } from "./optimizer.ts"

export interface SGDOptions {
  lr: number
  momentum: number
  dampening: number
  weightDecay: number
  nesterov: boolean
  maximize: boolean
}

/** A parameter's SGD state: steps taken and (with momentum) its buffer, on the parameter's ranks. */
export interface SGDState {
  readonly step: number
  readonly momentumBuffer: RemoteTensor | undefined
}

/** torch.optim.SGD's defaults (torch requires lr; 1e-3 here, as the fused op's). */
export const SGD_DEFAULTS: SGDOptions = { lr: 1e-3, momentum: 0, dampening: 0, weightDecay: 0, nesterov: false, maximize: false }

export class SGD extends Optimizer<SGDOptions, SGDState> {
  protected readonly buffers = [["momentum_buffer", "momentumBuffer"]] as const

  constructor(params: Params<SGDOptions>, options: Partial<SGDOptions> = {}) {
    super(params, { ...SGD_DEFAULTS, ...options }, sgdOptionsProblem, "SGD")
  }

  protected plan(mesh: Mesh, o: SGDOptions, stepped: ReadonlyArray<Stepped>): FusedCall[] {
    // A parameter without a momentum buffer starts one (its first momentum step); the others decay theirs: two commands at most.
    const byFirst = new Map<boolean, Array<Stepped & { readonly next: SGDState }>>()
    for (const s of stepped) {
      const was = this.state.get(s.param)
      const first = was?.momentumBuffer === undefined
      const next: SGDState = { step: (was?.step ?? 0) + 1, momentumBuffer: o.momentum !== 0 && first ? this.zerosLike(s.param) : was?.momentumBuffer }
      const list = byFirst.get(first) ?? []
      byFirst.set(first, list)
      list.push({ ...s, next })
    }
    return [...byFirst].map(([first, list]) => ({
      mesh, op: "_fused_sgd_",
      args: [list.map((s) => s.param), list.map((s) => s.grad), o.momentum !== 0 ? list.map((s) => s.next.momentumBuffer!) : []],
      kwargs: { lr: o.lr, momentum: o.momentum, dampening: o.dampening, weight_decay: o.weightDecay, nesterov: o.nesterov, maximize: o.maximize, is_first_step: first },
      commit: () => list.forEach((s) => this.state.set(s.param, s.next)),
    }))
  }
}
