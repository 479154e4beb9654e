/**
 * The typed op surface: `ops.<torch name>(...)` and the same ops as methods of a tensor
 * (`x.matmul(w).add(b).relu()`), each derived from the registry (src/ops/registry.ts): its
 * parameters give the call's types (positional in torch's order, then an optional object of
 * keyword arguments), its dtype kind gives the result's dtype type, and its rule gives the
 * result's metadata at once.
 *
 * Where the boundary with Effect sits: an op call is synchronous and only queues a command,
 * like torch's eager calls; it returns the result handle with its dtype and shape, or throws
 * the ControllerError the registry's check raised (a bad shape, dtype or keyword) before
 * anything is sent. Model code is therefore plain code, with no `yield*` per op. `eager(f)`
 * runs such code as an Effect whose typed failure is that ControllerError (so `catchTag`
 * catches a refusal; any other throw stays a defect). What happens on the workers surfaces
 * where a value is awaited: `t.fetch()` is an Effect failing with RemoteError or WorkerLost.
 */
import { Effect } from "effect"
import { FROM_PARTS, type GradOps } from "../ops/grad.ts"
import { isTensorMeta, type TensorMeta } from "../ops/meta.ts"
import { type Op, type OpName, OPS, type ParamsOf, type ResultDtypeOf, type ReturnsOf } from "../ops/registry.ts"
import type { CallForms, Param } from "../ops/params.ts"
import { type Composition, layoutOperands, mutatedParams, type OpSpec, type ReturnKind } from "../ops/spec.ts"
import { isContiguous, pointwiseStrides, type Strided } from "../ops/strided.ts"
import { HostTensor, ITEM_SIZE, type DType, type FloatNumber } from "../protocol/values.ts"
import { ControllerError } from "./errors.ts"
import { TensorHandle } from "./handles.ts"
import type { Mesh } from "./mesh.ts"
import type { PlacementSpec } from "./placement.ts"
import { refuse } from "./errors.ts"
import { tapeOp, refuseInPlace } from "./autograd.ts"
import type { RemoteTensor } from "./tensor.ts"
import { autocastArguments, autocastDtype } from "./autocast.ts"

type FloatingDType = "f32" | "f64" | "f16" | "bf16"
type IntegralDType = "bool" | "u8" | "i32"

/** The dtype a tensor argument has at the type level (DType when unknown). */
type DTypeOf<V> = V extends RemoteTensor<infer D> ? D : never

/** Promotion at the type level where it is certain: one dtype, or a float tensor with a number. */
type Promoted<D extends DType, O> = [O] extends [number | FloatNumber] ? (D extends FloatingDType ? D : DType)
  : [DTypeOf<O>] extends [never] ? DType : [DTypeOf<O>] extends [D] ? ([D] extends [DTypeOf<O>] ? D : DType) : DType

/** The result dtype of an op of dtype kind K, given the first tensor's D and the other arguments. */
type ResultDType<K, D extends DType, Rest extends ReadonlyArray<unknown>> =
  K extends "same" ? D
  : K extends "bool" ? "bool"
  : K extends "float" ? (D extends FloatingDType ? D : "f32")
  : K extends "promote" ? Promoted<D, Rest[0]>
  : K extends "divide" ? Divided<Promoted<D, Rest[0]>>
  : K extends "sum" ? (Rest extends readonly [...unknown[], { readonly dtype: infer X extends DType }] ? X : D extends IntegralDType ? "i64" : D)
  : K extends "to" ? (Rest extends readonly [infer X extends DType, ...unknown[]] ? X : Rest extends readonly [{ readonly dtype: infer X extends DType }] ? X : D)
  : K extends "other" ? (Rest extends readonly [RemoteTensor<infer X>, ...unknown[]] ? X : DType)
  : K extends "created" ? (Rest extends readonly [...unknown[], { readonly dtype: infer X extends DType }] ? X : "f32")
  : K extends "like" ? (Rest extends readonly [...unknown[], { readonly dtype: infer X extends DType }] ? X : D)
  : K extends "arange" ? Arange<Rest>
  : K extends "index" ? "i64"
  : DType

/** arange's dtype: the keyword's, else i64 when every bound is an integral literal (f32 when one is not). */
type Arange<A> = A extends readonly [...unknown[], { readonly dtype: infer X extends DType }] ? X
  : A extends ReadonlyArray<number> ? (number extends A[number] ? DType : `${A[number]}` extends `${bigint}` ? "i64" : "f32") : DType

/** True division: a floating promotion stays, an integer one gives f32, an unknown one stays unknown. */
type Divided<P extends DType> = [P] extends [FloatingDType] ? P : [DType] extends [P] ? DType : "f32"

type Tail<P> = P extends readonly [Param, ...infer R extends ReadonlyArray<Param>] ? R : readonly []

/** The names a first tensor parameter has in torch (`input`; `tensor` for split and one_hot). */
const SELF_NAMES: ReadonlyArray<string> = ["input", "tensor"]

/** Ops whose first parameter is the tensor itself (`input`, or `tensor`): those become methods. */
type MethodName = { [N in OpName]: ParamsOf<N> extends readonly [Param<"input" | "tensor", "tensor" | "tensorOrScalar">, ...ReadonlyArray<Param>] ? N : never }[OpName]

/** Whether a call (its arguments after the input) gives max's or min's dim: then it returns values and indices. */
type GivesDim<Rest> = Rest extends readonly [number, ...unknown[]] ? true : Rest extends readonly [{ readonly dim: number }] ? true : false

/** What a call returns (the spec's ReturnKind), T being its result tensor's type. */
type Returned<R, T extends RemoteTensor, Rest> =
  R extends "none" ? void
  : R extends "tensors" ? T[]
  : R extends "valuesIndices" ? (GivesDim<Rest> extends true ? [values: T, indices: RemoteTensor<"i64">] : T)
  : R extends "pair" ? [values: T, indices: RemoteTensor<"i64">]
  : T

/** `ops.<name>`: every argument as torch takes it; the first tensor's dtype types the result. */
export type OpFunction<N extends OpName> = <const A extends CallForms<ParamsOf<N>, RemoteTensor>>(...args: A) =>
  Returned<ReturnsOf<N>, RemoteTensor<ResultDType<ResultDtypeOf<N>, FirstDType<A>, ResultDtypeOf<N> extends "arange" ? A : A extends readonly [unknown, ...infer R] ? R : A>>, A extends readonly [unknown, ...infer R] ? R : A>

/** The dtype of a call's first argument: a tensor's, or a list of tensors' (cat, stack). */
type FirstDType<A> = A extends readonly [infer F, ...unknown[]]
  ? F extends RemoteTensor<infer D> ? D : F extends ReadonlyArray<RemoteTensor<infer D>> ? D : DType
  : DType

/** A tensor method: the op with the tensor as its `input`. */
export type OpMethod<N extends OpName, D extends DType> = <const A extends CallForms<Tail<ParamsOf<N>>, RemoteTensor>>(...args: A) =>
  Returned<ReturnsOf<N>, RemoteTensor<ResultDType<ResultDtypeOf<N>, D, A>>, A>

export type Ops = { readonly [N in OpName]: OpFunction<N> }
export type TensorMethods<D extends DType> = { readonly [N in MethodName]: OpMethod<N, D> }

const isKwargs = (v: unknown): v is Record<string, unknown> =>
  typeof v === "object" && v !== null && Object.getPrototypeOf(v) === Object.prototype

/** The mesh of the first tensor in the arguments (a list of tensors included). */
const meshOf = (args: ReadonlyArray<unknown>): Mesh | undefined => {
  for (const a of args) {
    if (a instanceof TensorHandle) return a.mesh
    if (Array.isArray(a)) for (const x of a) if (x instanceof TensorHandle) return x.mesh
  }
  return undefined
}

/** Issues `ops.<name>` on `mesh` (or the first tensor's) and returns what its ReturnKind says (an in-place op: its input). */
const invoke = (name: OpName, mesh: Mesh | undefined, given: ReadonlyArray<unknown>): RemoteTensor | RemoteTensor[] | undefined => {
  const all = autocastDtype() === null ? given : autocastArguments(name, given, (t, dtype) => invoke("to", t.mesh, [t, dtype]) as RemoteTensor)
  const last = all.at(-1)
  const kwargs = isKwargs(last) ? last : {}
  const args = isKwargs(last) ? all.slice(0, -1) : all
  const on = mesh ?? meshOf(args) ?? meshOf(Object.values(kwargs))
  if (on === undefined) throw refuse("argument", `ops.${name} has no tensor argument to take a mesh from; use opsOn(mesh).${name}`)
  const op = OPS[name]
  if ((op as OpSpec).backward === FROM_PARTS) return compose(op as Op, on, args, kwargs)
  const mutated = mutatedTensors(op, args, kwargs)
  if (mutated.length > 0) refuseInPlace(name, mutated)
  const views = op.view === undefined ? undefined : viewLayouts(op as Op, args, kwargs)
  const site = on.core.site(1)
  const results = on.issue(`ops.${name}`, args, kwargs, mutated.length > 0 ? { mutates: mutated } : {}, site)
  if (op.mutates) return mutated[0]!
  const returns = op.returns as ReturnKind
  if (returns === "tensor" && results.length !== 1) throw refuse("op-rule", `ops.${name} has ${results.length} results`)
  if (views !== undefined) results.forEach((r, i) => { if (views.layouts?.[i] !== null) r.viewOf(views.input, views.layouts?.[i] ?? null) })
  else if (op.pointwise) layOut(op as OpSpec, args, kwargs, results[0]!)
  tapeOp(surface, name, args, kwargs, results, site)
  switch (returns) {
    case "none": return undefined
    case "tensors": case "pair": return results
    case "valuesIndices": return results.length === 1 ? results[0]! : results
    default: return results[0]!
  }
}

const metaOf = (name: string) => (t: TensorHandle): TensorMeta =>
  t.meta ?? (() => { throw refuse("unknown-meta", `ops.${name} is composed from other ops on the controller, which needs the dtype and shape of ${t}`) })()

/**
 * A composite op (spec.ts's `composite`): its rule checks the call, then its parts are issued in
 * its place (each recorded by the tape as it goes); a result that is an input is cloned, as the
 * op makes a new tensor.
 */
const compose = (op: Op, on: Mesh, args: ReadonlyArray<unknown>, kwargs: Readonly<Record<string, unknown>>): RemoteTensor => {
  const meta = metaOf(op.name), isTensor = (v: unknown): v is RemoteTensor => v instanceof TensorHandle
  const asMeta = (v: unknown): unknown => (v instanceof TensorHandle ? meta(v) : Array.isArray(v) ? v.map(asMeta) : v)
  let rule: ReadonlyArray<TensorMeta>
  try {
    const bound = op.bind(args.map(asMeta), Object.fromEntries(Object.entries(kwargs).map(([k, v]) => [k, asMeta(v)])), isTensorMeta)
    rule = (op as OpSpec).outputs(bound as never, op.name)
  } catch (e) {
    throw refuse("op-rule", (e as Error).message)
  }
  const want = rule[0]!, parts: GradOps<RemoteTensor> = opsOn(on)
  const result = ((op as OpSpec).composed as Composition<ReadonlyArray<Param>>)(op.bind(args, kwargs, isTensor) as never, parts, meta, op.name, rule)
  const got = meta(result)
  if (got.dtype !== want.dtype || got.shape.join() !== want.shape.join()) throw refuse("op-rule", `ops.${op.name}'s parts gave ${got.dtype}[${got.shape}], its rule ${want.dtype}[${want.shape}]`)
  return [...args, ...Object.values(kwargs)].flat().includes(result) ? parts.clone(result) : result
}

/** Per op that writes in place, each parameter it writes with its position, found once (this runs per op call). */
const writtenAt = new Map<unknown, ReadonlyArray<readonly [string, number]>>()
const NONE: RemoteTensor[] = []

/** The tensors an in-place op writes, from the parameters it names (by position or keyword; lists flattened). */
const mutatedTensors = (op: (typeof OPS)[OpName], args: ReadonlyArray<unknown>, kwargs: Readonly<Record<string, unknown>>): RemoteTensor[] => {
  if ((op as OpSpec).mutates === undefined) return NONE
  let written = writtenAt.get(op)
  if (written === undefined) {
    const params = op.params as ReadonlyArray<Param>
    written = mutatedParams(op as OpSpec).map((n) => [n, params.findIndex((p) => p.name === n)] as const)
    writtenAt.set(op, written)
  }
  if (written.length === 0) return NONE
  const out: RemoteTensor[] = []
  for (const [n, i] of written) {
    const v = (i >= 0 && i < args.length ? args[i] : undefined) ?? kwargs[n]
    if (Array.isArray(v)) { for (const t of v) if (t instanceof TensorHandle) out.push(t as RemoteTensor) }
    else if (v instanceof TensorHandle) out.push(v as RemoteTensor)
  }
  if (out.length === 0) throw refuse("argument", `ops.${op.name} writes in place, but was given no tensor to write (${written.map(([n]) => n).join(", ")})`)
  return out
}

/**
 * Where a view op's results lie in its input's storage (its rule's `view`), worked out before the
 * call is sent, so torch's refusals (a view across strides, as_strided past the storage) come
 * first: each a layout, null for a result that is a copy; layouts undefined where the input's
 * is not known (its results then share its storage, their layouts unknown).
 */
const viewLayouts = (op: Op, args: ReadonlyArray<unknown>, kwargs: Readonly<Record<string, unknown>>): { readonly input: RemoteTensor; readonly layouts: ReadonlyArray<Strided | null> | undefined } => {
  try {
    const bound = op.bind(args, kwargs, (v): v is RemoteTensor => v instanceof TensorHandle) as Record<string, unknown>
    const key = "input" in bound ? "input" : "tensor", input = bound[key] as RemoteTensor, x = input.layout
    if (x === undefined) return { input, layouts: undefined }
    const a = { ...bound, [key]: input.meta }, spec = op as OpSpec
    return { input, layouts: spec.view!({ ...x, storage: input.storage.numel }, a as never, spec.outputs(a as never, op.name), op.name) }
  } catch (e) {
    throw refuse("op-rule", (e as Error).message)
  }
}

/**
 * A pointwise op's result in its operands' memory order (strided.ts's pointwiseStrides), as its
 * workers allocate it; where every operand is contiguous (the usual call) it stays row-major and
 * nothing is worked out.
 */
const layOut = (op: OpSpec, args: ReadonlyArray<unknown>, kwargs: Readonly<Record<string, unknown>>, result: TensorHandle): void => {
  if (result.meta === undefined) return
  const at = layoutOperands(op)
  let dense = true
  for (const i of at) {
    const v = i < args.length ? args[i] : kwargs[op.params[i]!.name]
    if (v instanceof TensorHandle && v.strides !== undefined && (v.meta === undefined || !isContiguous(v.meta.shape, v.strides))) dense = false
  }
  if (dense) return
  const operands: Strided[] = []
  for (const i of at) {
    const v = i < args.length ? args[i] : kwargs[op.params[i]!.name]
    if (!(v instanceof TensorHandle)) continue
    if (v.layout === undefined) return
    operands.push(v.layout)
  }
  result.strides = pointwiseStrides(result.meta.shape, operands)
}

const functions = (mesh: Mesh | undefined): Ops =>
  Object.fromEntries((Object.keys(OPS) as OpName[]).map((name) => [name, (...args: unknown[]) => invoke(name, mesh, args)])) as never

/** Every op; the mesh is the first tensor argument's. */
export const ops: Ops = functions(undefined)

/** Every op on one mesh: creation ops (zeros, arange, randn, ...) need one. */
export const opsOn = (mesh: Mesh): Ops => functions(mesh)

/** The op layer as autograd is given it (autograd.ts's OpSurface): on `mesh`, or on the first tensor argument's. */
export const surface = (mesh?: Mesh): Ops => (mesh === undefined ? ops : opsOn(mesh))

/**
 * Host values onto every rank of `mesh`, as torch.tensor(data, device=...) puts them on a
 * device: the HostTensor travels with the command and each rank makes its copy (`ops.clone`).
 * With a `placement` that shards a dim over mesh dims (`{ dp: shard(0) }`: each dp rank its
 * rows), the controller splits the host value and sends each rank only its block; the result
 * has that placement. A dim that does not split evenly is refused unless `uneven` says what to do,
 * as torch's DistributedSampler does with a dataset that does not divide: "pad" gives each block
 * ceil(n / parts) rows, the rows past the end taken again from the start (drop_last=False);
 * "drop" gives each floor(n / parts), leaving off the last rows (drop_last=True). A partial
 * placement is refused.
 */
export const fromHost = <D extends DType>(mesh: Mesh, host: HostTensor<D>, placement?: PlacementSpec, options: FromHostOptions = {}): RemoteTensor<D> => {
  const uneven = options.uneven
  if (uneven !== undefined && uneven !== "pad" && uneven !== "drop") throw refuse("argument", `fromHost: uneven is "pad" or "drop", not ${JSON.stringify(uneven)}`)
  const sharding = placement === undefined ? [] : mesh.names.flatMap((name, i) => {
    const d = placement[name]
    if (d?.kind === "partial") throw refuse("placement", `fromHost: a host value is whole, so it cannot be placed partial on ${name}`)
    return d?.kind === "shard" ? [{ meshDim: i, dim: d.dim }] : []
  })
  if (sharding.length === 0) {
    if (uneven !== undefined) throw refuse("placement", `fromHost: uneven: "${uneven}" is for a sharded placement; this one shards no dim`)
    const t = invoke("clone", mesh, [host]) as RemoteTensor<D>
    return placement === undefined ? t : t.place(placement)
  }
  const ndim = host.shape.length
  for (const { dim } of sharding) if (!Number.isInteger(dim) || dim < 0 || dim >= ndim) throw refuse("placement", `fromHost: shard(${dim}) names no dim of a ${ndim}-dim host tensor`)
  // Per tensor dim, how many blocks it splits into (the sizes of the mesh dims sharding it).
  const parts = host.shape.map((_, k) => sharding.filter((s) => s.dim === k).reduce((n, s) => n * mesh.layout.sizes[s.meshDim]!, 1))
  host.shape.forEach((size, k) => {
    if (size % parts[k]! !== 0 && uneven === undefined)
      throw refuse("placement", `fromHost: dim ${k} of ${host.dtype}[${host.shape}] (${size}) does not split into ${parts[k]} equal blocks; pass { uneven: "pad" } or { uneven: "drop" } (DistributedSampler's drop_last=False or True)`)
    if (size === 0 && uneven === "pad" && parts[k]! > 1) throw refuse("placement", `fromHost: dim ${k} of ${host.dtype}[${host.shape}] is empty: there are no rows to pad with`)
  })
  const sizes = host.shape.map((size, k) => (uneven === "pad" ? Math.ceil(size / parts[k]!) : Math.floor(size / parts[k]!)))
  const t = mesh.issueEach("ops.clone", (rank) => {
    const coords = mesh.layout.coordinates(rank)!
    // A dim sharded over several mesh dims is split by them in mesh order (the first outermost).
    const index = host.shape.map(() => 0)
    for (const s of sharding) index[s.dim] = index[s.dim]! * mesh.layout.sizes[s.meshDim]! + coords[s.meshDim]!
    const starts = index.map((b, k) => b * sizes[k]!)
    // Straight into the upload segment when the rank's link has one: the block's one copy.
    return [mesh.core.sink.share([rank], host.dtype, sizes, (into) => copyBlock(host, starts, sizes, into)) ?? hostBlock(host, starts, sizes)]
  }, mesh.core.site(1)) as RemoteTensor<D>
  return t.place(placement!)
}

/** What fromHost does with a sharded dim that does not split evenly (see fromHost). */
export interface FromHostOptions {
  readonly uneven?: "pad" | "drop"
}

/** The block of `host` of `sizes` from `starts`, copied into memory of its own. */
const hostBlock = <D extends DType>(host: HostTensor<D>, starts: ReadonlyArray<number>, sizes: ReadonlyArray<number>): HostTensor<D> => {
  const out = new Uint8Array(sizes.reduce((a, b) => a * b, ITEM_SIZE[host.dtype]))
  copyBlock(host, starts, sizes, out)
  return new HostTensor(host.dtype, sizes, out)
}

/**
 * Copies the block of `host` of `sizes` from `starts` into `out`: one contiguous run per index
 * over the dims before the last split one. An index past a dim's end wraps to its start (a padded
 * block), so a run along the last split dim is then copied in pieces.
 */
const copyBlock = (host: HostTensor, starts: ReadonlyArray<number>, sizes: ReadonlyArray<number>, out: Uint8Array): void => {
  const shape = host.shape, ndim = shape.length
  const strides = new Array<number>(ndim)
  for (let d = ndim - 1, s = ITEM_SIZE[host.dtype]; d >= 0; d--) { strides[d] = s; s *= shape[d]! }
  let split = ndim - 1
  while (split >= 0 && sizes[split] === shape[split]) split--
  if (split < 0) return void out.set(host.data)
  const item = strides[split]!, n = shape[split]!, size = sizes[split]!
  const index = new Array<number>(split).fill(0)
  for (let at = 0; at < out.byteLength;) {
    let base = 0
    for (let d = 0; d < split; d++) base += ((starts[d]! + index[d]!) % shape[d]!) * strides[d]!
    for (let i = 0; i < size;) {
      const from = (starts[split]! + i) % n, count = Math.min(size - i, n - from)
      out.set(host.data.subarray(base + from * item, base + (from + count) * item), at)
      at += count * item
      i += count
    }
    for (let d = split - 1; d >= 0; d--) {
      index[d] = index[d]! + 1
      if (index[d] !== sizes[d]) break
      index[d] = 0
    }
  }
}

/**
 * Runs synchronous model code (op calls) as an Effect: a call the controller refused fails it
 * with that ControllerError (catchable by tag); any other throw is a defect.
 */
export const eager = <A>(f: () => A): Effect.Effect<A, ControllerError> =>
  Effect.suspend(() => {
    try {
      return Effect.succeed(f())
    } catch (e) {
      return e instanceof ControllerError ? Effect.fail(e) : Effect.die(e)
    }
  })

/**
 * The op methods of a tensor (RemoteTensor declares them, tensor.ts): each op whose first
 * parameter is its input tensor, called with the tensor as that input.
 */
export const OP_METHODS: ReadonlyArray<readonly [MethodName, (this: TensorHandle, ...args: unknown[]) => unknown]> =
  (Object.keys(OPS) as OpName[]).flatMap((name) => {
    const first = (OPS[name].params as ReadonlyArray<Param>)[0]
    if (first === undefined || !SELF_NAMES.includes(first.name) || (first.kind !== "tensor" && first.kind !== "tensorOrScalar")) return []
    return [[name as MethodName, function (this: TensorHandle, ...args: unknown[]) {
      return invoke(name, this.mesh, [this, ...args])
    }] as const]
  })
