/**
 * AdamW composed from in-place ops, torch 1.13's single-tensor AdamW line for line: what the
 * example steps with until src/optim's fused AdamW (one command per group) is on main.
 */
import { noGrad, type RemoteTensor, zeroGrad } from "../../src/controller/index.ts"
import type { AdamWOptions } from "./twin.ts"
import type { Stepper } from "./model.ts"

export class ComposedAdamW implements Stepper {
  private steps = 0
  private readonly moments = new Map<RemoteTensor, { readonly m: RemoteTensor; readonly v: RemoteTensor }>()

  constructor(private readonly params: ReadonlyArray<RemoteTensor>, private readonly o: AdamWOptions) {}

  step(): void {
    const { lr, betas: [b1, b2], eps, weight_decay } = this.o
    const t = ++this.steps
    noGrad(() => {
      for (const p of this.params) {
        const g = p.grad
        if (g === undefined) continue
        let s = this.moments.get(p)
        if (s === undefined) this.moments.set(p, (s = { m: p.mul(0), v: p.mul(0) }))
        p.mul_(1 - lr * weight_decay)
        s.m.mul_(b1).add_(g.mul(1 - b1))
        s.v.mul_(b2).addcmul_(g, g, { value: 1 - b2 })
        const denom = s.v.sqrt().div(Math.sqrt(1 - b2 ** t)).add(eps)
        p.addcdiv_(s.m, denom, { value: -lr / (1 - b1 ** t) })
      }
    })
  }

  zeroGrad(): void {
    zeroGrad(this.params)
  }
}
