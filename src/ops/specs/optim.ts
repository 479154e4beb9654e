/**
 * The fused optimizer ops: one command steps a whole parameter group in place (torch 2's
 * `torch._fused_sgd_` and `torch._fused_adamw_`, with the step count as a number), and the two
 * ops of clipping by global norm (each tensor's sum of squares, then every gradient scaled by
 * torch's clip coefficient). Parameters are f32 or f64, each with its gradient and state
 * buffers of one dtype and shape. The hyper-parameter checks are torch.optim's constructors',
 * exported so src/optim refuses a bad value when the optimizer is made, not first at a step.
 */
import type { DType } from "../../protocol/values.ts"
import { bad, describe, type TensorMeta } from "../meta.ts"
import { NOT_DIFFERENTIABLE } from "../grad.ts"
import { arg, kw } from "../params.ts"
import { isFloating } from "../promotion.ts"
import { spec } from "../spec.ts"

/** What is wrong with SGD's hyper-parameters (torch.optim.SGD's constructor checks), or undefined. */
export const sgdOptionsProblem = (o: { lr: number; momentum: number; dampening: number; weightDecay: number; nesterov: boolean }): string | undefined =>
  !(o.lr >= 0) ? `invalid learning rate: ${o.lr}`
  : !(o.momentum >= 0) ? `invalid momentum value: ${o.momentum}`
  : !(o.weightDecay >= 0) ? `invalid weight_decay value: ${o.weightDecay}`
  : !Number.isFinite(o.dampening) ? `invalid dampening value: ${o.dampening}`
  : o.nesterov && (o.momentum <= 0 || o.dampening !== 0) ? "nesterov momentum requires a momentum and zero dampening"
  : undefined

/** What is wrong with AdamW's hyper-parameters (torch.optim.AdamW's constructor checks), or undefined. */
export const adamwOptionsProblem = (o: { lr: number; beta1: number; beta2: number; eps: number; weightDecay: number }): string | undefined =>
  !(o.lr >= 0) ? `invalid learning rate: ${o.lr}`
  : !(o.eps >= 0) ? `invalid epsilon value: ${o.eps}`
  : !(o.beta1 >= 0 && o.beta1 < 1) ? `invalid beta parameter at index 0: ${o.beta1}`
  : !(o.beta2 >= 0 && o.beta2 < 1) ? `invalid beta parameter at index 1: ${o.beta2}`
  : !(o.weightDecay >= 0) ? `invalid weight_decay value: ${o.weightDecay}`
  : undefined

/** Refuses the call when `problem` names one. */
const refuseIf = (op: string, problem: string | undefined): void => {
  if (problem !== undefined) bad(op, problem)
}

/** Each list has one tensor per parameter (or none, where `optional` says it is not used), of its dtype and shape. */
const checkGroup = (op: string, params: ReadonlyArray<TensorMeta>, lists: Readonly<Record<string, { readonly ts: ReadonlyArray<TensorMeta>; readonly used: boolean }>>): void => {
  for (const [i, p] of params.entries())
    if (p.dtype !== "f32" && p.dtype !== "f64") bad(op, `params[${i}] is ${describe(p)}; the fused steps take f32 or f64 (keep f32 master weights)`)
  for (const [name, { ts, used }] of Object.entries(lists)) {
    if (ts.length !== (used ? params.length : 0)) bad(op, `${name} has ${ts.length} tensors for ${params.length} params${used ? "" : " (it is not used: pass [])"}`)
    for (const [i, t] of ts.entries()) {
      const p = params[i]!
      if (t.dtype !== p.dtype || t.shape.length !== p.shape.length || t.shape.some((d, j) => d !== p.shape[j]))
        bad(op, `${name}[${i}] is ${describe(t)} but params[${i}] is ${describe(p)}`)
    }
  }
}

const floatingList = (op: string, name: string, ts: ReadonlyArray<TensorMeta>): void => {
  for (const [i, t] of ts.entries()) if (!isFloating(t.dtype)) bad(op, `${name}[${i}] is ${describe(t)}; it needs a floating dtype`)
}

/** The dtype a sum of squares is kept in: f64 when a tensor is, else f32 (it accumulates in double either way). */
export const sumOfSquaresDtype = (ts: ReadonlyArray<TensorMeta>): DType => (ts.some((t) => t.dtype === "f64") ? "f64" : "f32")

export const optim = {
  _fused_sgd_: spec(
    [arg("params", "tensors"), arg("grads", "tensors"), arg("momentum_buffers", "tensors"), kw("lr", "scalar", 1e-3), kw("momentum", "scalar", 0), kw("dampening", "scalar", 0),
      kw("weight_decay", "scalar", 0), kw("nesterov", "bool", false), kw("maximize", "bool", false), kw("is_first_step", "bool", false)],
    (a, op) => {
      refuseIf(op, sgdOptionsProblem({ lr: a.lr, momentum: a.momentum, dampening: a.dampening, weightDecay: a.weight_decay, nesterov: a.nesterov }))
      checkGroup(op, a.params, { grads: { ts: a.grads, used: true }, momentum_buffers: { ts: a.momentum_buffers, used: a.momentum !== 0 } })
      return []
    },
    NOT_DIFFERENTIABLE,
    { mutates: ["params", "momentum_buffers"] },
  ),
  _fused_adamw_: spec(
    [arg("params", "tensors"), arg("grads", "tensors"), arg("exp_avgs", "tensors"), arg("exp_avg_sqs", "tensors"), arg("max_exp_avg_sqs", "tensors"),
      kw("step", "int", 1), kw("lr", "scalar", 1e-3), kw("beta1", "scalar", 0.9), kw("beta2", "scalar", 0.999), kw("eps", "scalar", 1e-8),
      kw("weight_decay", "scalar", 1e-2), kw("amsgrad", "bool", false), kw("maximize", "bool", false)],
    (a, op) => {
      refuseIf(op, adamwOptionsProblem({ lr: a.lr, beta1: a.beta1, beta2: a.beta2, eps: a.eps, weightDecay: a.weight_decay }))
      if (a.step < 1) bad(op, `step is ${a.step}; the first step is 1`)
      checkGroup(op, a.params, {
        grads: { ts: a.grads, used: true }, exp_avgs: { ts: a.exp_avgs, used: true }, exp_avg_sqs: { ts: a.exp_avg_sqs, used: true },
        max_exp_avg_sqs: { ts: a.max_exp_avg_sqs, used: a.amsgrad },
      })
      return []
    },
    NOT_DIFFERENTIABLE,
    { mutates: ["params", "exp_avgs", "exp_avg_sqs", "max_exp_avg_sqs"] },
  ),
  /** The sum of every element's square over the tensors, a 0-d tensor (accumulated in double). */
  _sum_of_squares: spec([arg("tensors", "tensors")], ({ tensors }, op) => {
    floatingList(op, "tensors", tensors)
    return [{ dtype: sumOfSquaresDtype(tensors), shape: [] }]
  }, (c, o) => ({ tensors: () => c.args.tensors.map((t) => o.mul(o.mul(t, c.grad), 2)) })),
  /**
   * Every tensor times torch's clip coefficient, min(max_norm / (total_norm + 1e-6), 1),
   * computed in total_norm's dtype (clip_grad_norm_'s last step).
   */
  _clip_by_total_norm_: spec([arg("tensors", "tensors"), arg("total_norm", "tensor"), arg("max_norm", "scalar")], ({ tensors, total_norm }, op) => {
    floatingList(op, "tensors", tensors)
    if (!isFloating(total_norm.dtype) || total_norm.shape.reduce((a, b) => a * b, 1) !== 1) bad(op, `total_norm must be one floating element, got ${describe(total_norm)}`)
    return []
  }, NOT_DIFFERENTIABLE, { mutates: ["tensors"] }),
}
