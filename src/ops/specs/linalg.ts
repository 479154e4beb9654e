/**
 * Products beyond matmul, mm and bmm (layout.ts): baddbmm (beta input + alpha batch1 @ batch2)
 * and outer (with torch's alias ger). Their dtype rules are torch 1.13's: baddbmm gives
 * batch1's dtype, needs batch2 to have it, casts input to it and refuses bool; outer promotes
 * its two vectors as mul does.
 */
import { bad, describe } from "../meta.ts"
import { arg, kw } from "../params.ts"
import { broadcastShapes, isFloating } from "../promotion.ts"
import { fused, spec } from "../spec.ts"
import { castTo, composeDtype } from "../rules.ts"
import { planBinary } from "./elementwise.ts"
import { matmulShape } from "./layout.ts"

const baddbmmParams = [arg("input", "tensor"), arg("batch1", "tensor"), arg("batch2", "tensor"), kw("beta", "scalar", 1), kw("alpha", "scalar", 1)] as const
const outerParams = [arg("input", "tensor"), arg("vec2", "tensor")] as const

const outer = spec(outerParams, ({ input, vec2 }, op) => {
  if (input.shape.length !== 1 || vec2.shape.length !== 1) bad(op, `needs two 1-D tensors, got ${describe(input)} and ${describe(vec2)}`)
  return [planBinary(op, "arithmetic", { dtype: input.dtype, shape: [input.shape[0]!, 1] }, vec2).result]
  // d/d input[i] = sum_j g[i, j] vec2[j], and the same for vec2 over i.
}, (c, o) => ({
  input: () => o.sum(o.mul(c.grad, c.args.vec2), 1, false),
  vec2: () => o.sum(o.mul(c.grad, o.unsqueeze(c.args.input, 1)), 0, false),
}), { dtype: "promote" })

export const linalg = {
  /** Forward: the product, scaled by alpha, plus beta input; f16 and bf16 in f32, rounded once at the end, as torch's kernel accumulates. */
  baddbmm: fused(baddbmmParams, ({ input, batch1, batch2, beta, alpha }, op) => {
    if (batch1.shape.length !== 3 || batch2.shape.length !== 3 || batch1.shape[0] !== batch2.shape[0])
      bad(op, `needs 3-D batch1 and batch2 with one batch size: ${describe(batch1)} @ ${describe(batch2)}`)
    if (batch1.dtype === "bool") bad(op, `not defined on bool (${describe(batch1)})`)
    // torch 1.13 truncates a fractional alpha or beta for integers; later torch refuses it, as we do.
    if (!isFloating(batch1.dtype) && !(Number.isInteger(alpha) && Number.isInteger(beta)))
      bad(op, `alpha and beta must be integers for ${describe(batch1)}, got alpha=${alpha}, beta=${beta}`)
    const product = matmulShape(op, batch1, batch2)
    if (input.shape.length > 3 || broadcastShapes(op, [input.shape, product.shape]).join() !== product.shape.join())
      bad(op, `input ${describe(input)} does not broadcast to the product's [${product.shape}]`)
    return [product]
  }, (c, o) => ({
    // The tape sums input's gradient to its shape; beta 0 gives it zeros, as torch.
    input: () => o.mul(c.grad, c.args.beta),
    batch1: () => o.mul(o.matmul(c.grad, o.transpose(c.args.batch2, 1, 2)), c.args.alpha),
    batch2: () => o.mul(o.matmul(o.transpose(c.args.batch1, 1, 2), c.grad), c.args.alpha),
  }), (a, o, meta, _, [out]) => {
    const dtype = composeDtype(out!.dtype), as = (t: typeof a.input) => castTo(o, meta, t, dtype)
    const product = o.matmul(as(a.batch1), as(a.batch2)), scaled = a.alpha === 1 ? product : o.mul(product, a.alpha)
    return a.beta === 0 ? scaled : o.add(scaled, a.beta === 1 ? as(a.input) : o.mul(as(a.input), a.beta))
  }, { dtype: "other" }),
  outer,
  ger: outer,
}
