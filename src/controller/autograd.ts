/**
 * Autograd on the controller: the tape (src/autograd) bound to remote tensors and the typed
 * op surface. An op call with an input that requires grad records a node whose backward is
 * the op's declared rule (src/ops/grad.ts), given this surface as its ops; backward is
 * therefore ordinary commands on the mesh, queued like any others.
 *
 *   const w = on.randn([4, 3]).requiresGrad_()
 *   const loss = x.matmul(w).relu().sum()
 *   loss.backward()                 // w.grad is set (summed into on later calls)
 *   const [gw] = grad(loss2, [w])   // or the gradients as values
 *
 * All of it is synchronous, like every op call: a refusal (no grad to take, a graph already
 * consumed, an in-place op on a tensor that requires grad, a backward that would read a saved
 * tensor written in place since: torch's version counter, storage.ts) throws a ControllerError.
 *
 * Autograd sits below the op layer (ops.ts calls tapeOp and refuseInPlace on every op) and
 * reaches it through the OpSurface it is given, not an import: ops.ts passes its own to
 * tapeOp, tensor.ts to backward, grad and detach.
 */
import { backwardFrom, type TapeOps, Entry, isTaping, noGrad, tapeCall, requiresGrad, type Site } from "../autograd/tape.ts"
import { obeysLayoutContract } from "../ops/strided.ts"
import { FROM_PARTS, type GradContext, type GradOps, NOT_DIFFERENTIABLE, sumTo } from "../ops/grad.ts"
import type { TensorMeta } from "../ops/meta.ts"
import type { Param } from "../ops/params.ts"
import { isFloating } from "../ops/promotion.ts"
import { type OpName, OPS } from "../ops/registry.ts"
import { SAVES } from "../ops/saves.ts"
import type { DType } from "../protocol/values.ts"
import { refuse } from "./errors.ts"
import { TensorHandle } from "./handles.ts"
import { withoutAutocast } from "./autocast.ts"
import { escape } from "./lifetime.ts"
import type { Mesh } from "./mesh.ts"
import type { Ops } from "./ops.ts"
import type { RemoteTensor } from "./tensor.ts"

export { noGrad }

/** The op layer autograd issues its commands through: every op on `mesh`, or (no mesh) on the first tensor argument's. */
export type OpSurface = (mesh?: Mesh) => Ops

/** The tensors made by ops while the tape tracks a step (a rule's temporaries included). */
let made: RemoteTensor[] | undefined

/** The ops rules are given on a mesh: the typed surface (the compiler checks it against GradOps), noting what each call made. */
const ruleOps = new WeakMap<Mesh, GradOps<RemoteTensor>>()
const opsFor = (on: OpSurface, mesh: Mesh): GradOps<RemoteTensor> => {
  let o = ruleOps.get(mesh)
  if (o === undefined) {
    const surface: GradOps<RemoteTensor> = on(mesh)
    o = Object.fromEntries(Object.entries(surface).map(([name, f]) => [name, (...args: unknown[]) => {
      const t = (f as (...a: unknown[]) => RemoteTensor)(...args)
      made?.push(t)
      return t
    }])) as unknown as GradOps<RemoteTensor>
    ruleOps.set(mesh, o)
  }
  return o
}

const metaOf = (t: RemoteTensor): TensorMeta => t.meta ?? (() => { throw refuse("unknown-meta", `autograd needs the dtype and shape of ${t}`) })()

const backend = (on: OpSurface, mesh: Mesh): TapeOps<RemoteTensor> => {
  const noted = (t: RemoteTensor) => (made?.push(t), t)
  return {
    ones: (like) => noted(on(mesh).ones([...metaOf(like).shape], { dtype: metaOf(like).dtype })),
    // A gradient lives on its tensor's mesh, which after a send is not the root's.
    zeros: (like) => opsFor(on, like.mesh).zeros([...metaOf(like).shape], { dtype: metaOf(like).dtype }),
    add: (a, b) => opsFor(on, a.mesh).add(a, b),
    fit: (g, to) => {
      const m = metaOf(g), summed = sumTo(opsFor(on, g.mesh), g, m.shape, to.shape)
      return m.dtype === to.dtype ? summed : opsFor(on, g.mesh).to(summed, to.dtype)
    },
    copy: (t) => on().clone(t),
    track: (f) => {
      const outer = made
      made = []
      try {
        // rules run in the dtypes forward chose (torch runs backward outside autocast)
        const value = withoutAutocast(f)
        return { value, made }
      } finally {
        made = outer
      }
    },
    refuse,
  }
}

const isTensorArg = (v: unknown): v is RemoteTensor => v instanceof TensorHandle
const TENSOR_KINDS: ReadonlySet<string> = new Set(["tensor", "tensorOrScalar", "tensors"])

/** Whether a tensor in an argument tree requires grad (the check every op call makes while taping: no allocation). */
const anyRequiresGrad = (v: unknown): boolean => {
  if (isTensorArg(v)) return v.autograd !== undefined && requiresGrad(v)
  if (Array.isArray(v)) {
    for (const x of v) if (anyRequiresGrad(x)) return true
    return false
  }
  if (typeof v === "object" && v !== null && Object.getPrototypeOf(v) === Object.prototype)
    for (const k in v) if (anyRequiresGrad((v as Record<string, unknown>)[k])) return true
  return false
}

/**
 * @internal The typed surface's check before an in-place op: while taping, a tensor that
 * requires grad may not change in place (backward would read changed values). An optimizer
 * step runs inside noGrad().
 */
export const refuseInPlace = (name: OpName, mutated: ReadonlyArray<RemoteTensor>): void => {
  if (!isTaping()) return
  const t = mutated.find((m) => m.autograd !== undefined && requiresGrad(m))
  if (t !== undefined) throw refuse("autograd", `ops.${name} changes ${t}, which requires grad, in place; do it inside noGrad() (as an optimizer step does), or on a detach()ed copy`)
}

/**
 * The tensors the rule of a call reads the values of (torch's saved tensors, src/ops/saves.ts): of
 * each input that requires grad, what its gradient needs; for an op not listed, every tensor.
 */
const savedBy = (name: OpName, bound: Readonly<Record<string, unknown>>, owners: ReadonlyArray<{ name: string }>, inputs: ReadonlyArray<RemoteTensor>, results: ReadonlyArray<RemoteTensor>): RemoteTensor[] => {
  const declared = SAVES[name]
  if (declared === undefined) return [...inputs, ...results]
  const saves = typeof declared === "function" ? declared(bound as never) : declared
  const out = new Set<RemoteTensor>()
  inputs.forEach((t, i) => {
    if (!requiresGrad(t)) return
    for (const n of saves[owners[i]!.name] ?? []) {
      const v = n === "result" ? results[0] : n === "result1" ? results[1] : bound[n]
      if (isTensorArg(v)) out.add(v)
    }
  })
  return [...out]
}

/** @internal The typed surface's hook (ops.ts, which passes itself as `on`): records the node of `ops.<name>` when an input requires grad. */
export const tapeOp = (on: OpSurface, name: OpName, args: ReadonlyArray<unknown>, kwargs: Readonly<Record<string, unknown>>, results: ReadonlyArray<RemoteTensor>, site: Site | undefined): void => {
  if (!isTaping() || !(anyRequiresGrad(args) || anyRequiresGrad(kwargs))) return
  const op = OPS[name]
  // A composite op is never issued by the controller: its parts were recorded instead.
  if (op.backward === NOT_DIFFERENTIABLE || op.backward === FROM_PARTS) return
  const rule = op.backward
  const bound = op.bind(args, kwargs, isTensorArg) as Record<string, unknown>
  const tensorParams = (op.params as ReadonlyArray<Param>).filter((p) => TENSOR_KINDS.has(p.kind))
  // Edges in parameter order; a list of tensors (cat, stack) gives one edge per tensor.
  const inputs: RemoteTensor[] = [], owners: Array<{ name: string; index: number | undefined }> = []
  for (const p of tensorParams) {
    const v = bound[p.name]
    if (Array.isArray(v)) v.forEach((t, index) => { if (isTensorArg(t)) (inputs.push(t), owners.push({ name: p.name, index })) })
    else if (isTensorArg(v)) (inputs.push(v), owners.push({ name: p.name, index: undefined }))
  }
  for (const t of inputs) metaOf(t)
  const checked = savedBy(name, bound, owners, inputs, results)
  // Each floating result is its own node (split's pieces, max's values; not indices or masks),
  // its rule told which one it is and given every result (dropout's mask).
  results.forEach((result, at) => {
    if (result.meta === undefined || !isFloating(result.meta.dtype)) return
    tapeCall(`ops.${name}`, result, inputs, [...inputs, ...results], (grad, needs) => {
      const c: GradContext<ReadonlyArray<Param>, RemoteTensor> = { args: bound as never, out: result, outs: results, index: at, grad, meta: metaOf, layout: (t) => t.layout }
      const thunks = (rule as (c: unknown, o: GradOps<RemoteTensor>) => Record<string, (() => RemoteTensor | ReadonlyArray<RemoteTensor>) | undefined>)(c, opsFor(on, result.mesh))
      const values = new Map<string, RemoteTensor | ReadonlyArray<RemoteTensor> | undefined>()
      return owners.map(({ name, index }, i) => {
        if (!needs[i]) return undefined
        if (!values.has(name)) values.set(name, thunks[name]?.())
        const v = values.get(name)
        return index === undefined ? (v as RemoteTensor | undefined) : (v as ReadonlyArray<RemoteTensor> | undefined)?.[index]
      })
    }, checked, site)
  })
}

/**
 * Records a call the registry does not know (a collective, a send, a custom function) on the
 * tape: `output` was made from `inputs`, and `backward` gives each input's gradient from the
 * output's (undefined for none), issuing ordinary commands. The gradients it returns become the
 * tape's, released once used (`grad` itself excepted); its other temporaries are its own to
 * release. Nothing is recorded unless an input requires grad and taping is on; `saved`
 * (default: inputs and output) are kept until it runs.
 */
export const recordBackward = (name: string, output: RemoteTensor, inputs: ReadonlyArray<RemoteTensor>, backward: (grad: RemoteTensor) => ReadonlyArray<RemoteTensor | undefined>, saved: ReadonlyArray<RemoteTensor> = [...inputs, output]): void => {
  if (!isTaping() || !anyRequiresGrad(inputs)) return
  if (output.meta === undefined || !isFloating(output.meta.dtype)) throw refuse("autograd", `${name}: a gradient needs a floating result of known dtype and shape, got ${output}`)
  for (const t of inputs) metaOf(t)
  tapeCall(name, output, inputs, saved, (grad, needs) => backward(grad).map((g, i) => {
    if (g !== undefined && g !== grad) made?.push(g)
    return needs[i] ? g : undefined
  }))
}

/**
 * A function with its own gradient (torch.autograd.Function, tfjs customGrad): `f` computes the
 * value off the tape and returns it with its backward, which gives each tensor argument's
 * gradient from the value's.
 */
export const customGrad = <A extends ReadonlyArray<RemoteTensor>>(name: string, f: (...inputs: A) => { readonly value: RemoteTensor; readonly backward: (grad: RemoteTensor) => ReadonlyArray<RemoteTensor | undefined> }) =>
  (...inputs: A): RemoteTensor => {
    const { value, backward } = noGrad(() => f(...inputs))
    recordBackward(name, value, inputs, backward, [])
    return value
  }

/** What grad and gradGenerator take besides the tensors. */
export interface GradOptions {
  /** The gradient of the output (default ones; needed when it is not a scalar). */
  readonly gradOutput?: RemoteTensor
}

const seedFor = (output: RemoteTensor, opts: GradOptions): RemoteTensor | undefined => {
  if (opts.gradOutput !== undefined) {
    const want = metaOf(output), got = metaOf(opts.gradOutput)
    if (want.shape.join() !== got.shape.join()) throw refuse("autograd", `gradOutput ${opts.gradOutput} does not match ${output}`)
    return opts.gradOutput
  }
  if (metaOf(output).shape.length > 0) throw refuse("autograd", `a gradient can be implied only for a scalar output; ${output} needs gradOutput`)
  return undefined
}

/**
 * The gradients of `output` with respect to each of `inputs` as soon as each is final, in
 * backward order, issued through `on` (tensor.ts's gradGenerator).
 */
export function* gradientsOf(on: OpSurface, output: RemoteTensor, inputs: ReadonlyArray<RemoteTensor>, opts: GradOptions): Generator<readonly [RemoteTensor, RemoteTensor]> {
  yield* backwardFrom(backend(on, output.mesh), output, seedFor(output, opts), inputs)
}

/** Sets each parameter's .grad to none, releasing it (torch's zero_grad(set_to_none=True)). */
export const zeroGrad = (params: Iterable<RemoteTensor>): void => {
  for (const p of params) {
    const e = p.autograd
    if (e?.grad === undefined) continue
    e.grad.release()
    e.grad = undefined
  }
}

/** What a tensor handle gains for autograd (RemoteTensor implements it, tensor.ts). */
export interface TensorGrad<D extends DType> {
  /** Whether gradients flow to (or through) it. */
  readonly requiresGrad: boolean
  /** Makes it a leaf that collects gradients (floating tensors only); returns it. */
  requiresGrad_(on?: boolean): RemoteTensor<D>
  /** The gradient backward() accumulated into this leaf, if any. */
  grad: RemoteTensor<D> | undefined
  /** Accumulates d(this)/d(leaf) into every leaf's .grad that requires grad (this a scalar, or given gradOutput). */
  backward(gradOutput?: RemoteTensor): void
  /** The same values, cut from the graph (a view; no copy). */
  detach(): RemoteTensor<D>
}

/** requiresGrad_: `t` made a leaf that requires grad (on), or no longer one (off). */
export const requireGrad = (t: RemoteTensor, on: boolean): void => {
  if (!on) {
    if (t.autograd?.leaf) t.autograd = undefined
    return
  }
  if (t.autograd?.node) throw refuse("autograd", `${t} was made by ${t.autograd.node.name}; only a leaf can be made to require grad (detach() it first)`)
  const m = metaOf(t)
  if (!isFloating(m.dtype)) throw refuse("autograd", `only floating tensors can require grad, got ${t}`)
  t.autograd ??= new Entry<RemoteTensor>(true, undefined)
}

/** Setting a leaf's .grad. */
export const setGrad = (t: RemoteTensor, g: RemoteTensor | undefined): void => {
  if (!t.autograd?.leaf) throw refuse("autograd", `${t} is not a leaf that requires grad`)
  // A leaf's gradient outlives the step that made it (lifetime.ts).
  if (g !== undefined) escape(g)
  t.autograd.grad = g
}

/** The gradient a leaf keeps: g, or its copy where g's layout breaks torch's contract (an expanded g, which a later add_ could not write). */
const keptGrad = (on: OpSurface, leaf: RemoteTensor, g: RemoteTensor): RemoteTensor => {
  const gl = g.layout, vl = leaf.layout
  if (gl === undefined || vl === undefined || obeysLayoutContract(gl, vl)) return g
  const copy = noGrad(() => on().clone(g))
  g.release()
  return copy
}

/** backward(): accumulates `t`'s gradient into every leaf's .grad, issued through `on`. */
export const backward = (on: OpSurface, t: RemoteTensor, gradOutput: RemoteTensor | undefined): void => {
  for (const [leaf, g] of backwardFrom(backend(on, t.mesh), t, seedFor(t, { gradOutput }), undefined)) {
    const e = leaf.autograd!
    if (e.grad === undefined) {
      const kept = keptGrad(on, leaf, g)
      escape(kept)
      e.grad = kept
    } else noGrad(() => {
      on().add_(e.grad!, g)
      g.release()
    })
  }
}

/** detach(): the same values, cut from the graph (a view issued through `on`). */
export const detach = (on: OpSurface, t: RemoteTensor): RemoteTensor => noGrad(() => on().alias(t))
