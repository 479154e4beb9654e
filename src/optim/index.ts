/**
 * monarch-bun's optimizers: SGD and AdamW stepping parameters in place on the workers, one
 * fused command per parameter group and mesh; gradient clipping by global norm across data-
 * and tensor-parallel shards; learning-rate schedules.
 *
 *   const opt = new AdamW(params, { lr: 3e-4, weightDecay: 0.1 })
 *   const lr = warmupCosine({ lr: 3e-4, warmup: 100, total: 5000 })
 *   for (let t = 0; t < 5000; t++) {
 *     ... loss.backward() ...
 *     yield* clipGradNorm(params.map((p) => p.grad!), 1.0)
 *     opt.lr = lr(t)
 *     opt.step()
 *     opt.zeroGrad()
 *   }
 */
export { AdamW, ADAMW_DEFAULTS, type AdamWOptions, type AdamWState } from "./adamw.ts"
export { clipGradNorm } from "./clip.ts"
export { Optimizer, type Gradients, type OptimizerStateDict, type ParamGroup, type Params, type StepAt } from "./optimizer.ts"
export { constant, cosineDecay, linearWarmup, warmupCosine, type Schedule } from "./schedule.ts"
export { GRAD_SCALER_DEFAULTS, GradScaler, type GradScalerOptions, type GradScalerState, type Steppable } from "./scaler.ts"
export { SGD, SGD_DEFAULTS, type SGDOptions, type SGDState } from "./sgd.ts"
