/**
 * Mixed precision: an autocast scope (torch.autocast). Inside `autocast("bf16", f)` (or "f16")
 * each op call on the controller first casts its floating tensor arguments by torch's lists:
 * - the low list (matmul and its forms, linear, attention, the convolutions) runs in the low
 *   type: f32 (and f16 or bf16, not f64) arguments are cast to it; the kernels accumulate in f32
 *   and round once;
 * - the f32 list (losses, and on "cuda" the reductions, norms, softmax and the pointwise ops torch
 *   lists) runs in f32: low-type arguments are cast up;
 * - every other op runs in the dtypes it is given (torch's promotion then picks the result's).
 * `lists` picks whose lists: "cpu" (default) is torch 1.13's CPU autocast, for the ops this
 * registry has; "cuda" is torch's CUDA autocast's. A leaf that requires grad (a parameter: the
 * f32 master weight) is cast once per outermost scope and that low copy reused, as torch caches
 * it; gradients reach the f32 leaf through the cast's rule, so an optimizer steps the f32
 * masters. Backward rules run outside the scope (the tape runs them with autocast off), as
 * torch's backward runs in the dtypes forward chose.
 */
import type { OpName } from "../ops/registry.ts"
import type { DType } from "../protocol/values.ts"
import { refuse } from "./errors.ts"
import { TensorHandle } from "./handles.ts"
import type { RemoteTensor } from "./tensor.ts"

export type LowDType = "bf16" | "f16"
export type AutocastLists = "cpu" | "cuda"

/** The ops that run in the low type (both lists: torch's CPU and CUDA lists agree on these). */
const LOW: ReadonlySet<OpName> = new Set<OpName>(["matmul", "_matmul_t", "mm", "bmm", "baddbmm", "linear", "scaled_dot_product_attention", "conv1d", "conv2d"])

/** torch 1.13's CPU f32 list, for this registry's ops: the losses, prod; pad's reflect and replicate (reflection_pad, replication_pad). */
const CPU_F32: ReadonlySet<OpName> = new Set<OpName>(["cross_entropy", "nll_loss", "mse_loss", "prod"])

/** torch's CUDA f32 list, for this registry's ops: pointwise ops that lose range, reductions, norms, softmax and the losses. */
const CUDA_F32: ReadonlySet<OpName> = new Set<OpName>([
  "exp", "log", "log1p", "expm1", "rsqrt", "reciprocal", "pow", "softplus", "layer_norm", "group_norm", "rms_norm", "norm",
  "sum", "prod", "cumsum", "cumprod", "logsumexp", "softmax", "log_softmax", "cross_entropy", "nll_loss", "mse_loss",
])

interface Scope {
  readonly dtype: LowDType | null
  readonly lists: AutocastLists
}

let scope: Scope = { dtype: null, lists: "cpu" }
/** The low copies of leaves that require grad, for the outermost enabled scope. */
let cache: Map<RemoteTensor, RemoteTensor> | undefined

/**
 * Runs f with ops autocast to `dtype` (null: autocast off inside, as torch.autocast(enabled=False));
 * synchronous code only, like every op call. Scopes nest; the cache of cast parameters lives as
 * long as the outermost enabled one.
 */
export const autocast = <A>(dtype: LowDType | null, f: () => A, options: { readonly lists?: AutocastLists } = {}): A => {
  if (dtype !== null && dtype !== "bf16" && dtype !== "f16") throw refuse("argument", `autocast takes "bf16", "f16" or null, got ${JSON.stringify(dtype)}`)
  const lists = options.lists ?? scope.lists
  if (lists !== "cpu" && lists !== "cuda") throw refuse("argument", `autocast's lists are "cpu" or "cuda", got ${JSON.stringify(lists)}`)
  const before = scope, beforeCache = cache
  scope = { dtype, lists }
  if (dtype !== null && cache === undefined) cache = new Map()
  try {
    return f()
  } finally {
    scope = before
    cache = beforeCache
  }
}

/** The low type ops are autocast to now, or null. */
export const autocastDtype = (): LowDType | null => scope.dtype

/** @internal Runs f with autocast off (backward rules). */
export const withoutAutocast = <A>(f: () => A): A => (scope.dtype === null ? f() : autocast(null, f))

/** What `name` runs in under the scope now: the low type, f32, or undefined (as given). */
const targetOf = (name: OpName, all: ReadonlyArray<unknown>): DType | undefined => {
  if (scope.dtype === null) return undefined
  if (LOW.has(name)) return scope.dtype
  if ((scope.lists === "cpu" ? CPU_F32 : CUDA_F32).has(name)) return "f32"
  // torch's CPU list has reflection_pad and replication_pad
  if (name === "pad" && scope.lists === "cpu" && all.some((a) => a === "reflect" || a === "replicate" || (isKwargs(a) && (a.mode === "reflect" || a.mode === "replicate")))) return "f32"
  return undefined
}

const isKwargs = (v: unknown): v is Record<string, unknown> => typeof v === "object" && v !== null && Object.getPrototypeOf(v) === Object.prototype

/** A cast is due for a floating tensor other than f64 (torch leaves f64 alone) whose dtype is not the target's. */
const eligible = (t: RemoteTensor, to: DType): boolean => {
  const d = t.meta?.dtype
  return d !== undefined && d !== to && (d === "f32" || d === "f16" || d === "bf16")
}

/**
 * @internal A call's arguments (its kwargs object last, if any) with their tensors cast as the
 * scope says for op `name`; the same array when nothing is cast. `to` issues one cast.
 */
export const autocastArguments = (name: OpName, all: ReadonlyArray<unknown>, to: (t: RemoteTensor, dtype: DType) => RemoteTensor): ReadonlyArray<unknown> => {
  const target = targetOf(name, all)
  if (target === undefined) return all
  let changed = false
  const castOne = (t: RemoteTensor): RemoteTensor => {
    if (!eligible(t, target)) return t
    changed = true
    // a parameter's low copy, once per scope (torch caches the casts of leaves that require grad)
    const cacheable = target !== "f32" && t.meta!.dtype === "f32" && t.autograd?.leaf === true
    const hit = cacheable ? cache?.get(t) : undefined
    if (hit !== undefined) return hit
    const cast = to(t, target)
    if (cacheable) cache?.set(t, cast)
    return cast
  }
  const walk = (v: unknown): unknown =>
    v instanceof TensorHandle ? castOne(v as RemoteTensor) : Array.isArray(v) ? v.map(walk) : isKwargs(v) ? Object.fromEntries(Object.entries(v).map(([k, x]) => [k, walk(x)])) : v
  const out = all.map(walk)
  return changed ? out : all
}

/** The op names each list casts, for docs and tests: low, and f32 for "cpu" and "cuda". */
export const AUTOCAST_LISTS = { low: [...LOW], cpu: [...CPU_F32, "pad (reflect, replicate)"], cuda: [...CUDA_F32] } as const
