/**
 * Loss scaling for f16 (torch.cuda.amp.GradScaler): f16's smallest normal is 6e-5, so small
 * gradients underflow to zero in an f16 backward; scaling the loss by S before backward scales
 * every gradient by S, and unscaling them (times 1/S, in f32 as torch's inv_scale) before the
 * step undoes it. A step whose gradients hold an inf or NaN (S too large: f16 overflowed) is
 * skipped and S backs off; after `growthInterval` good steps in a row it grows, as torch's
 * _amp_update_scale_ does.
 *
 *   const scaler = new GradScaler()
 *   const loss = autocast("f16", () => model.loss(x, y))
 *   scaler.scale(loss).backward()
 *   const stepped = yield* scaler.step(opt)   // unscales (unless unscale_ ran), fetches the check, steps or skips
 *   scaler.update()
 *
 * The check is one 0-d tensor per unscale_ (the sum of g * 0 over every gradient: NaN exactly
 * when one is not finite), all-reduced over the mesh (a tp shard's inf reaches every rank) and
 * fetched by step, which waits for it: torch's step reads found_inf with .item() too.
 */
import { Effect } from "effect"
import { refuse } from "../controller/errors.ts"
import { noGrad } from "../controller/autograd.ts"
import type { Failure } from "../controller/errors.ts"
import type { RemoteTensor } from "../controller/tensor.ts"
import { allReduce } from "../controller/meshgrad.ts"
import { opsOn } from "../controller/ops.ts"
import type { HostTensor } from "../controller/index.ts"
import type { StepAt } from "./optimizer.ts"

export interface GradScalerOptions {
  readonly initScale?: number
  readonly growthFactor?: number
  readonly backoffFactor?: number
  readonly growthInterval?: number
  /** false: scale, unscale_ and update do nothing and step steps (torch's enabled=False). */
  readonly enabled?: boolean
}

/** torch's defaults. */
export const GRAD_SCALER_DEFAULTS = { initScale: 2 ** 16, growthFactor: 2, backoffFactor: 0.5, growthInterval: 2000, enabled: true } as const

/** torch's GradScaler.state_dict(). */
export interface GradScalerState {
  readonly scale: number
  readonly growth_factor: number
  readonly backoff_factor: number
  readonly growth_interval: number
  readonly _growth_tracker: number
}

/** What the scaler needs of an optimizer (SGD, AdamW): its parameters, whose `.grad` it unscales, and its step. */
export interface Steppable {
  readonly paramGroups: ReadonlyArray<{ readonly params: ReadonlyArray<RemoteTensor> }>
  step(grads?: undefined, at?: StepAt): void
}

export class GradScaler {
  private scaleValue: number
  private growthTracker = 0
  private growthFactor: number
  private backoffFactor: number
  private growthInterval: number
  readonly enabled: boolean
  /** Each optimizer unscaled since the last update, with its check. */
  private readonly checks = new Map<Steppable, RemoteTensor>()
  /** Whether a step since the last update found an inf or NaN (undefined: no step yet). */
  private foundInf: boolean | undefined = undefined

  constructor(options: GradScalerOptions = {}) {
    const o = { ...GRAD_SCALER_DEFAULTS, ...options }
    if (!(o.initScale > 0) || !Number.isFinite(o.initScale)) throw refuse("argument", `GradScaler: initScale must be a positive finite number, got ${o.initScale}`)
    if (!(o.growthFactor > 1)) throw refuse("argument", `GradScaler: growthFactor must be above 1, got ${o.growthFactor}`)
    if (!(o.backoffFactor > 0 && o.backoffFactor < 1)) throw refuse("argument", `GradScaler: backoffFactor must be between 0 and 1, got ${o.backoffFactor}`)
    if (!Number.isInteger(o.growthInterval) || o.growthInterval < 1) throw refuse("argument", `GradScaler: growthInterval must be a positive integer, got ${o.growthInterval}`)
    this.scaleValue = o.initScale
    this.growthFactor = o.growthFactor
    this.backoffFactor = o.backoffFactor
    this.growthInterval = o.growthInterval
    this.enabled = o.enabled
  }

  /** The scale now. */
  getScale(): number {
    return this.enabled ? this.scaleValue : 1
  }

  /** The loss times the scale (the loss itself when disabled). */
  scale(loss: RemoteTensor): RemoteTensor {
    return this.enabled ? loss.mul(this.scaleValue) : loss
  }

  /**
   * Divides the gradients of `opt`'s parameters by the scale in place (times 1/scale rounded to
   * f32, as torch's) and makes this step's check; once per optimizer between updates.
   */
  unscale_(opt: Steppable): void {
    if (!this.enabled) return
    if (this.checks.has(opt)) throw refuse("argument", "GradScaler.unscale_ was already called on this optimizer since the last update()")
    const grads = opt.paramGroups.flatMap((g) => g.params).flatMap((p) => (p.grad === undefined ? [] : [p.grad]))
    if (grads.length === 0) throw refuse("argument", "GradScaler.unscale_: no parameter of the optimizer has a gradient")
    const mesh = grads[0]!.mesh, on = opsOn(mesh), inverse = Math.fround(1 / this.scaleValue)
    const check = noGrad(() => {
      let total: RemoteTensor | undefined
      for (const g of grads) {
        g.mul_(inverse)
        // g * 0 is 0 where g is finite and NaN where it is inf or NaN
        const bad = on.sum(on.mul(g, 0)).to("f32")
        total = total === undefined ? bad : total.add(bad)
      }
      return mesh.names.length === 0 ? total! : allReduce(total!, [...mesh.names])
    })
    this.checks.set(opt, check)
  }

  /**
   * Unscales `opt`'s gradients unless unscale_ did, waits for the check, and steps `opt` when every
   * gradient is finite: whether it stepped. Disabled, it steps.
   */
  step(opt: Steppable, at?: StepAt): Effect.Effect<boolean, Failure> {
    const self = this
    return Effect.gen(function* () {
      if (!self.enabled) return (opt.step(undefined, at), true)
      if (!self.checks.has(opt)) self.unscale_(opt)
      const check = self.checks.get(opt)!
      const value = ((yield* check.mesh.fetch(check)) as HostTensor<"f32">).toArray()[0]!
      const finite = !Number.isNaN(value)
      self.foundInf = (self.foundInf ?? false) || !finite
      if (finite) opt.step(undefined, at)
      return finite
    })
  }

  /**
   * The scale for the next step: times backoffFactor if a step since the last update found an inf
   * or NaN (and the count of good steps back to 0), else one more good step, and times
   * growthFactor (if that stays finite) once there are growthInterval of them. `newScale` sets it
   * instead. Forgets this step's checks.
   */
  update(newScale?: number): void {
    if (!this.enabled) return
    if (newScale !== undefined) {
      if (!(newScale > 0) || !Number.isFinite(newScale)) throw refuse("argument", `GradScaler.update: newScale must be a positive finite number, got ${newScale}`)
      this.scaleValue = newScale
    } else {
      if (this.foundInf === undefined) throw refuse("argument", "GradScaler.update: no step() was taken since the last update")
      if (this.foundInf) {
        this.scaleValue = Math.fround(this.scaleValue * this.backoffFactor)
        this.growthTracker = 0
      } else if (++this.growthTracker === this.growthInterval) {
        const grown = Math.fround(this.scaleValue * this.growthFactor)
        if (Number.isFinite(grown)) this.scaleValue = grown
        this.growthTracker = 0
      }
    }
    this.foundInf = undefined
    this.checks.clear()
  }

  stateDict(): GradScalerState {
    return { scale: this.scaleValue, growth_factor: this.growthFactor, backoff_factor: this.backoffFactor, growth_interval: this.growthInterval, _growth_tracker: this.growthTracker }
  }

  /** Takes a stateDict()'s scale, factors, interval and count of good steps (torch's load_state_dict). */
  loadStateDict(state: GradScalerState): void {
    const ok = state.scale > 0 && state.growth_factor > 1 && state.backoff_factor > 0 && state.backoff_factor < 1 &&
      Number.isInteger(state.growth_interval) && state.growth_interval >= 1 && Number.isInteger(state._growth_tracker) && state._growth_tracker >= 0
    if (!ok) throw refuse("argument", `GradScaler.loadStateDict: not a GradScaler state: ${JSON.stringify(state)}`)
    this.scaleValue = state.scale
    this.growthFactor = state.growth_factor
    this.backoffFactor = state.backoff_factor
    this.growthInterval = state.growth_interval
    this.growthTracker = state._growth_tracker
  }
}
