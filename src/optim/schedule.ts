/**
 * Learning-rate schedules as plain functions of the step number (0 for the first step): the lr
 * that step uses. Set it before each step: `opt.lr = schedule(t); opt.step()`. They are
 * torch's schedulers in closed form: LinearLR's warmup and CosineAnnealingLR's decay.
 */

/** The lr of step t. */
export type Schedule = (t: number) => number

/** Always lr. */
export const constant = (lr: number): Schedule => () => lr

/**
 * torch's LinearLR: lr times a factor going linearly from startFactor to endFactor over
 * `steps` steps, then endFactor.
 */
export const linearWarmup = (o: { readonly lr: number; readonly steps: number; readonly startFactor?: number; readonly endFactor?: number }): Schedule => {
  const { lr, steps, startFactor = 1 / 3, endFactor = 1 } = o
  if (!(steps > 0)) throw new RangeError(`linearWarmup: steps must be positive, got ${steps}`)
  return (t) => lr * (startFactor + (endFactor - startFactor) * Math.min(t, steps) / steps)
}

/** torch's CosineAnnealingLR (closed form): from lr down to minLr over `steps` steps, half a cosine. */
export const cosineDecay = (o: { readonly lr: number; readonly steps: number; readonly minLr?: number }): Schedule => {
  const { lr, steps, minLr = 0 } = o
  if (!(steps > 0)) throw new RangeError(`cosineDecay: steps must be positive, got ${steps}`)
  return (t) => minLr + (lr - minLr) * (1 + Math.cos(Math.PI * Math.min(t, steps) / steps)) / 2
}

/**
 * Warmup then cosine decay (torch's SequentialLR of LinearLR and CosineAnnealingLR, the
 * usual GPT schedule): `warmup` steps rising to lr, then down to minLr by step `total`.
 */
export const warmupCosine = (o: { readonly lr: number; readonly warmup: number; readonly total: number; readonly minLr?: number; readonly startFactor?: number }): Schedule => {
  if (!(o.total > o.warmup)) throw new RangeError(`warmupCosine: total (${o.total}) must exceed warmup (${o.warmup})`)
  const down = cosineDecay({ lr: o.lr, steps: o.total - o.warmup, minLr: o.minLr })
  if (o.warmup <= 0) return down
  const up = linearWarmup({ lr: o.lr, steps: o.warmup, startFactor: o.startFactor })
  return (t) => (t < o.warmup ? up(t) : down(t - o.warmup))
}
