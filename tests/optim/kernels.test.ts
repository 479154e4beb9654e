// The shim's fused steps refuse what they cannot do, before writing anything: a dtype other
// than f32/f64, tensors that do not match the parameter, buffers that share memory (the loops
// treat them as distinct arrays), a step number below 1, nesterov without momentum, unknown flags.
import { expect, test } from "bun:test"
import { loadNative, ShimError } from "../../ffi/native.ts"
import * as k from "../../ffi/ops.ts"
import { Tensor } from "../../ffi/tensor.ts"
import type { DType } from "../../src/protocol/values.ts"

const native = loadNative("cpu")
const t = (dtype: DType, n: number, v = 0.5) => {
  const x = Tensor.empty(native, dtype, [n])
  k.fill(x, v)
  return x
}
const ADAM = { lr: 0.1, beta1: 0.9, beta2: 0.99, eps: 1e-8, weightDecay: 0, step: 1, amsgrad: false, maximize: false }
const SGD = { lr: 0.1, momentum: 0.9, dampening: 0, weightDecay: 0, nesterov: false, maximize: false, first: true }
const refusal = (f: () => void): string => {
  try {
    f()
  } catch (e) {
    if (e instanceof ShimError) return `${e.reason}: ${e.message}`
    throw e
  }
  return "ok"
}

test("bad fused steps are refused with a reason, and write nothing", () => {
  const p = t("f32", 4), g = t("f32", 4), m = t("f32", 4), v = t("f32", 4)
  const alias = m.view([4])
  expect([
    refusal(() => k.adamw(t("f16", 4), t("f16", 4), t("f16", 4), t("f16", 4), undefined, ADAM)),
    refusal(() => k.adamw(p, t("f32", 3), m, v, undefined, ADAM)),
    refusal(() => k.adamw(p, t("f64", 4), m, v, undefined, ADAM)),
    refusal(() => k.adamw(p, g, m, alias, undefined, ADAM)),
    refusal(() => k.adamw(p, alias, m, v, undefined, ADAM)),
    refusal(() => k.adamw(p, g, m, v, undefined, { ...ADAM, amsgrad: true })),
    refusal(() => k.adamw(p, g, m, v, undefined, { ...ADAM, step: 0 })),
    refusal(() => k.sgd(p, g, undefined, SGD)),
    refusal(() => k.sgd(p, g, g, SGD)),
    refusal(() => k.sgd(p, g, undefined, { ...SGD, momentum: 0, nesterov: true })),
    refusal(() => k.sgd(t("i64", 4), t("i64", 4), undefined, { ...SGD, momentum: 0 })),
  ]).toEqual([
    "Unsupported: shim_adamw: param is f16; the fused steps take f32 or f64 (keep f32 master weights)",
    "Invalid: shim_adamw: grad is f32[3] but param is f32[4] (same dtype and element count needed)",
    "Invalid: shim_adamw: grad is f64[4] but param is f32[4] (same dtype and element count needed)",
    "Invalid: shim_adamw: exp_avg and exp_avg_sq share memory",
    "Invalid: shim_adamw: grad and exp_avg share memory",
    "Invalid: shim_adamw: max_exp_avg_sq is null",
    "Invalid: shim_adamw: step is 0; the first step is 1",
    "Invalid: shim_sgd: momentum_buf is null",
    "Invalid: shim_sgd: grad and momentum_buf share memory",
    "Invalid: shim_sgd: nesterov needs a nonzero momentum",
    "Unsupported: shim_sgd: param is i64; the fused steps take f32 or f64 (keep f32 master weights)",
  ])
  const flags = native.shim.shim_sgd(p.handle, g.handle, null, 0.1, 0, 0, 0, 64, null)
  expect([flags, String(native.shim.shim_last_error())]).toEqual([1, "shim_sgd: unknown flags 0x40"])
  expect([...p.toHost().toArray()]).toEqual([0.5, 0.5, 0.5, 0.5])
})
