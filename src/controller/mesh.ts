/**
 * Meshes and the handles a controller program holds: a Mesh is a set of ranks with named
 * dims; a RemoteTensor is a ref defined on a mesh's ranks (with its dtype and shape when
 * they are known); a RemoteStream is a stream on every rank. Every method issues commands
 * through the Core and returns an Effect.
 */
import { Effect, type Scope } from "effect"
import type { TensorMeta } from "../ops/meta.ts"
import { inferOutputs, opNamed, UNKNOWN_TENSOR } from "../ops/registry.ts"
import { planCollective } from "../ops/collectives.ts"
import type { Reduction, Value } from "../protocol/messages.ts"
import { NDSlice } from "../protocol/ndslice.ts"
import { hostTensorProblem, INT64_MIN, MAX_NDIM, UINT64_MAX } from "../protocol/validate.ts"
import { DTYPES, HostTensor, TensorFactory, type Ref } from "../protocol/values.ts"
import type { Core } from "./core.ts"
import { ControllerError, type RemoteError, type WorkerLost } from "./errors.ts"

/** A stream that exists on every rank. */
export class RemoteStream {
  constructor(readonly ref: Ref) {}
}

interface BorrowState {
  readonly id: number
  readonly ranks: ReadonlyArray<number>
  used: boolean
  /** The scope closed: the alias is deleted on the workers. */
  dropped: boolean
}

const dropped = new FinalizationRegistry<{ core: Core; ranks: ReadonlyArray<number>; id: number }>(({ core, ranks, id }) => core.release(ranks, [id]))

/** A tensor on the ranks of a mesh. Dropping the handle deletes it on the workers. */
export class RemoteTensor {
  #released = false

  constructor(
    readonly mesh: Mesh,
    readonly ref: Ref,
    /** dtype and shape, when the controller can know them. */
    readonly meta: TensorMeta | undefined,
    /** The stream that produced it (the one a borrow waits on). */
    readonly stream: RemoteStream,
    /** @internal set on a borrow's alias */
    readonly borrow?: BorrowState,
  ) {
    if (!borrow) dropped.register(this, { core: mesh.core, ranks: mesh.ranks, id: ref.id }, this)
  }

  /** Whether release() was called (or a borrow's scope closed): the handle can no longer be used. */
  get released(): boolean {
    return this.#released || this.borrow?.dropped === true
  }

  get dtype() {
    return this.meta?.dtype
  }

  get shape() {
    return this.meta?.shape
  }

  /** Deletes the tensor on its workers now (with the next batch); later uses fail. */
  release(): void {
    if (this.#released || this.borrow) return
    this.#released = true
    dropped.unregister(this)
    this.mesh.core.release(this.mesh.ranks, [this.ref.id])
  }

  toString(): string {
    return `RemoteTensor(${this.ref.id}${this.meta ? ` ${this.meta.dtype}[${this.meta.shape}]` : ""} on ${this.mesh})`
  }
}

export interface CallOptions {
  readonly stream?: RemoteStream
  /** Tensors the function changes in place: poisoned too when it fails. */
  readonly mutates?: ReadonlyArray<RemoteTensor>
  /**
   * A user function's results: how many, or their dtypes and shapes (needed later by
   * reduce and send). Built-ins know theirs.
   */
  readonly results?: number | ReadonlyArray<TensorMeta>
}

export interface FetchOptions {
  /** Apply this function on the worker before sending (e.g. "ops.sum"). */
  readonly fn?: string
  readonly stream?: RemoteStream
}

export type Failure = RemoteError | WorkerLost | ControllerError

const refuse = (message: string) => new ControllerError({ message })

/** What one command's argument trees read, gathered while converting them to the wire. */
class Reads {
  /** Ref ids of the tensors read. */
  readonly inputs: number[] = []
  /** Borrows read for the first time, once each. */
  readonly borrows: BorrowState[] = []
  /** Whether every tensor read has a known dtype and shape. */
  known = true
}

/** A result's metadata as given by the program: later commands (reduce, send) put it on the wire. */
const checkMeta = (m: TensorMeta, i: number): TensorMeta => {
  const shapeOk = Array.isArray(m?.shape) && m.shape.length <= MAX_NDIM && m.shape.every((d) => Number.isSafeInteger(d) && d >= 0)
  if (!DTYPES.includes(m?.dtype) || !shapeOk) throw refuse(`results[${i}]: ${JSON.stringify(m)} is not a dtype (${DTYPES.join(", ")}) and a shape of at most ${MAX_NDIM} sizes`)
  return m
}

/** A tree of arguments with tensors replaced by their metadata (UNKNOWN_TENSOR where unknown). */
const metasOf = (v: unknown): unknown => {
  if (typeof v !== "object" || v === null || v instanceof HostTensor || v instanceof Uint8Array) return v
  if (v instanceof RemoteTensor) return v.meta ?? UNKNOWN_TENSOR
  if (Array.isArray(v)) return v.map(metasOf)
  return Object.fromEntries(Object.keys(v).map((k) => [k, metasOf((v as Record<string, unknown>)[k])]))
}

export class Mesh {
  readonly ranks: ReadonlyArray<number>
  /** Meshes found to hold every rank of this one, so their tensors need no per-command rank check. */
  private readonly covering = new WeakSet<Mesh>()
  /** Slices and flattenings of this mesh, by names and layout (see `derive`). */
  private readonly derived = new Map<string, Mesh>()

  constructor(
    readonly core: Core,
    readonly ref: Ref,
    readonly names: ReadonlyArray<string>,
    /** The ranks, laid out along the dims. */
    readonly layout: NDSlice,
    readonly defaultStream: RemoteStream,
  ) {
    this.ranks = [...layout]
  }

  /** Dim name -> size. */
  get dims(): Readonly<Record<string, number>> {
    return Object.fromEntries(this.names.map((n, i) => [n, this.layout.sizes[i]!]))
  }

  get size(): number {
    return this.ranks.length
  }

  toString(): string {
    return `Mesh(${this.names.map((n, i) => `${n}=${this.layout.sizes[i]}`).join(", ")})`
  }

  /**
   * A tree of arguments as it goes on the wire, noting in `reads` what it reads: tensors must
   * live on (at least) this mesh's ranks. Called once per argument of every command, so it
   * walks the tree once and checks a tensor's mesh once per pair of meshes.
   */
  private convert(v: unknown, reads: Reads): Value {
    if (typeof v !== "object" || v === null) {
      if (v === undefined) throw refuse("undefined cannot be an argument (the wire carries null)")
      if (typeof v === "function" || typeof v === "symbol") throw refuse(`a ${typeof v} cannot be an argument`)
      if (typeof v === "bigint" && (v < INT64_MIN || v > UINT64_MAX)) throw refuse(`bigint ${v} does not fit in 64 bits`)
      return v as Value
    }
    if (v instanceof RemoteTensor) {
      if (v.released) throw refuse(`${v} was released`)
      if (v.mesh !== this && !this.covering.has(v.mesh)) {
        const missing = this.ranks.filter((r) => !v.mesh.layout.contains(r))
        if (missing.length > 0) throw refuse(`${v} is not on ranks [${missing}] of ${this}`)
        this.covering.add(v.mesh)
      }
      reads.inputs.push(v.ref.id)
      if (v.borrow && !v.borrow.used && !reads.borrows.includes(v.borrow)) reads.borrows.push(v.borrow)
      if (!v.meta) reads.known = false
      return v.ref
    }
    if (v instanceof RemoteStream || v instanceof Mesh) throw refuse(`a ${v.constructor.name} cannot be an argument`)
    if (v instanceof HostTensor) {
      const problem = hostTensorProblem(v)
      if (problem !== undefined) throw refuse(problem)
      return v
    }
    if (v instanceof Uint8Array) return v
    if (Array.isArray(v)) {
      const out = new Array<Value>(v.length)
      for (let i = 0; i < v.length; i++) out[i] = this.convert(v[i], reads)
      return out
    }
    const keys = Object.keys(v)
    return keys.length === 0 ? {} : Object.fromEntries(keys.map((k) => [k, this.convert((v as Record<string, unknown>)[k], reads)]))
  }

  /**
   * @internal The ref ids a command outside this class reads in `v` (ControllerApi.send):
   * refuses released handles and issues the first uses of borrows, as the methods here do.
   */
  reads(v: unknown): number[] {
    const reads = new Reads()
    this.convert(v, reads)
    this.firstUses(reads.borrows)
    return reads.inputs
  }

  /** A borrow's first use waits on the stream it came from, once, before the command. */
  private firstUses(borrows: ReadonlyArray<BorrowState>): void {
    for (const b of borrows) {
      b.used = true
      this.core.post(b.ranks, { _tag: "BorrowFirstUse", borrow: b.id })
    }
  }

  /** The results' metadata: a built-in's from its rule, a user function's from options. */
  private resultMetas(fn: string, args: ReadonlyArray<unknown>, kwargs: Readonly<Record<string, unknown>>, known: boolean, results: CallOptions["results"]): ReadonlyArray<TensorMeta | undefined> {
    if (results !== undefined) return typeof results === "number" ? Array.from({ length: results }, () => undefined) : results.map(checkMeta)
    if (!fn.startsWith("ops.")) return [undefined]
    const op = opNamed(fn.slice(4))
    if (!op) throw refuse(`no built-in ${fn}`)
    try {
      return inferOutputs(op, metasOf(args) as unknown[], metasOf(kwargs) as Record<string, unknown>, known)
    } catch (e) {
      throw refuse((e as Error).message)
    }
  }

  /** Issues a CallFunction; returns one handle per result. */
  private issueCall(fn: string, args: ReadonlyArray<unknown>, kwargs: Readonly<Record<string, unknown>>, opts: CallOptions, site: string | undefined): RemoteTensor[] {
    const reads = new Reads()
    const wireArgs = this.convert(args, reads) as Value[], wireKwargs = this.convert(kwargs, reads) as Record<string, Value>
    const known = reads.known
    const mutates = opts.mutates ?? []
    const mutated = mutates.map((t) => t.ref)
    this.convert(mutates, reads)
    const metas = this.resultMetas(fn, args, kwargs, known, opts.results)
    const stream = opts.stream ?? this.defaultStream
    const results = metas.map(() => this.core.newRef())
    const defines = results.map((r) => r.id)
    for (const r of mutated) defines.push(r.id)
    this.firstUses(reads.borrows)
    this.core.command(this.ranks, fn, reads.inputs, defines, site, (ident) => ({
      _tag: "CallFunction", ident, results, mutates: mutated, function: fn, args: wireArgs, kwargs: wireKwargs, stream: stream.ref,
    }))
    return results.map((r, i) => new RemoteTensor(this, r, metas[i], stream))
  }

  /** Calls a function on every rank; its one result as a handle. */
  call(fn: string, args: ReadonlyArray<unknown> = [], kwargs: Readonly<Record<string, unknown>> = {}, opts: CallOptions = {}): Effect.Effect<RemoteTensor, ControllerError> {
    const site = this.core.site()
    return Effect.try({
      try: () => {
        const results = this.issueCall(fn, args, kwargs, opts, site)
        if (results.length !== 1) throw refuse(`${fn} has ${results.length} results; use callMany`)
        return results[0]!
      },
      catch: (e) => (e instanceof ControllerError ? e : refuse(String(e))),
    })
  }

  /** Calls a function with several (or no) results. */
  callMany(fn: string, args: ReadonlyArray<unknown> = [], kwargs: Readonly<Record<string, unknown>> = {}, opts: CallOptions = {}): Effect.Effect<RemoteTensor[], ControllerError> {
    const site = this.core.site()
    return Effect.try({ try: () => this.issueCall(fn, args, kwargs, opts, site), catch: (e) => (e instanceof ControllerError ? e : refuse(String(e))) })
  }

  /** Calls an in-place function: `mutates` are changed, nothing new is defined. */
  run(fn: string, args: ReadonlyArray<unknown>, kwargs: Readonly<Record<string, unknown>> = {}, opts: CallOptions = {}): Effect.Effect<void, ControllerError> {
    const site = this.core.site()
    return Effect.try({ try: () => void this.issueCall(fn, args, kwargs, { results: 0, ...opts }, site), catch: (e) => (e instanceof ControllerError ? e : refuse(String(e))) })
  }

  /**
   * A collective over one or more dims: all_reduce (`sum`, `avg`, ...), all_gather
   * (`stack`), reduce_scatter (`scatter`), all_to_all (`stack` with `scatter`).
   */
  reduce(t: RemoteTensor, dims: string | ReadonlyArray<string>, reduction: Reduction, opts: { scatter?: boolean; inplace?: boolean; stream?: RemoteStream } = {}): Effect.Effect<RemoteTensor, ControllerError> {
    const site = this.core.site()
    return Effect.try({
      try: () => {
        const names = typeof dims === "string" ? [dims] : [...dims]
        const unknown = names.filter((d) => !this.names.includes(d))
        if (unknown.length > 0) throw refuse(`${this} has no dim ${unknown.join(", ")}`)
        if (!t.meta) throw refuse(`reduce needs the dtype and shape of ${t}; give the function's results as metadata (CallOptions.results)`)
        const { scatter = false, inplace = false } = opts
        const plan = planCollective(t.meta, names.reduce((p, d) => p * this.dims[d]!, 1), reduction, scatter, inplace)
        if (typeof plan === "string") throw refuse(`reduce over ${names.join("+")}: ${plan}`)
        const stream = opts.stream ?? this.defaultStream
        const result = inplace ? t.ref : this.core.newRef()
        const reads = new Reads()
        this.convert(t, reads)
        this.firstUses(reads.borrows)
        this.core.command(this.ranks, `reduce ${reduction}${scatter ? " scatter" : ""} over ${names.join("+")}`, [t.ref.id], [result.id], site, (ident) => ({
          _tag: "Reduce", ident, result, tensor: t.ref, factory: new TensorFactory(t.meta!.shape, t.meta!.dtype, this.core.device), mesh: this.ref, stream: stream.ref,
          dims: names, reduction, scatter, inplace,
        }))
        return inplace ? t : new RemoteTensor(this, result, plan.result, stream)
      },
      catch: (e) => (e instanceof ControllerError ? e : refuse(String(e))),
    })
  }

  private rankAt(at: number | Readonly<Record<string, number>>): number {
    if (typeof at === "number") {
      if (!Number.isInteger(at) || at < 0 || at >= this.size) throw refuse(`index ${at} is outside ${this}`)
      return this.layout.rankAt(at)
    }
    let rank = this.layout.offset
    this.names.forEach((n, i) => {
      const c = at[n] ?? 0
      if (!Number.isInteger(c) || c < 0 || c >= this.layout.sizes[i]!) throw refuse(`${n}=${c} is outside ${this}`)
      rank += c * this.layout.strides[i]!
    })
    return rank
  }

  /** A FetchValue to the ranks `ranks()` picks; a bad rank or argument is a ControllerError. */
  private fetchFrom(ranks: () => ReadonlyArray<number>, value: unknown, opts: FetchOptions, site: string | undefined) {
    return Effect.suspend(() => {
      const targets = ranks(), reads = new Reads()
      const object = this.convert(value, reads)
      this.firstUses(reads.borrows)
      return this.core.fetch(targets, reads.inputs, opts.fn ?? "fetch", site, (ident) => ({
        _tag: "FetchValue", ident, mutates: [], function: opts.fn ?? null, object, stream: (opts.stream ?? this.defaultStream).ref,
      }))
    }).pipe(Effect.catchDefect((e) => Effect.fail(e instanceof ControllerError ? e : refuse(String(e)))))
  }

  /**
   * The value of `value` (tensors, or a tree holding them) on one rank, by index or by
   * coordinates (default: the first rank). Fails with the RemoteError it depends on.
   */
  fetch(value: unknown, at: number | Readonly<Record<string, number>> = 0, opts: FetchOptions = {}): Effect.Effect<Value, Failure> {
    return this.fetchFrom(() => [this.rankAt(at)], value, opts, this.core.site()).pipe(Effect.map((values) => values[0]!))
  }

  /** The value on every rank of the mesh, in mesh order. */
  fetchAll(value: unknown, opts: FetchOptions = {}): Effect.Effect<ReadonlyArray<Value>, Failure> {
    return this.fetchFrom(() => this.ranks, value, opts, this.core.site())
  }

  /** The sub-mesh at fixed coordinates of some dims (those dims go away). */
  slice(at: Readonly<Record<string, number>>): Effect.Effect<Mesh, ControllerError> {
    return Effect.try({
      try: () => {
        let offset = this.layout.offset
        const names: string[] = [], sizes: number[] = [], strides: number[] = []
        this.names.forEach((n, i) => {
          const c = at[n]
          if (c === undefined) {
            names.push(n)
            sizes.push(this.layout.sizes[i]!)
            strides.push(this.layout.strides[i]!)
          } else if (!Number.isInteger(c) || c < 0 || c >= this.layout.sizes[i]!) throw refuse(`${n}=${c} is outside ${this}`)
          else offset += c * this.layout.strides[i]!
        })
        const unknown = Object.keys(at).filter((n) => !this.names.includes(n))
        if (unknown.length > 0) throw refuse(`${this} has no dim ${unknown.join(", ")}`)
        return this.derive(names, new NDSlice(offset, sizes, strides))
      },
      catch: (e) => (e instanceof ControllerError ? e : refuse(String(e))),
    })
  }

  /** The same ranks as one dim `name` (the dims must nest, as in a row-major mesh). */
  flatten(name: string): Effect.Effect<Mesh, ControllerError> {
    return Effect.try({
      try: () => {
        const { sizes, strides } = this.layout
        for (let i = 0; i + 1 < sizes.length; i++)
          if (strides[i] !== strides[i + 1]! * sizes[i + 1]!) throw refuse(`${this} does not flatten: its dims do not nest`)
        return this.derive([name], new NDSlice(this.layout.offset, [this.size], [strides.at(-1) ?? 1]))
      },
      catch: (e) => (e instanceof ControllerError ? e : refuse(String(e))),
    })
  }

  /**
   * The mesh over `layout` with dims `names`, made once: meshes are never deleted on the
   * workers, so a program slicing in a loop would otherwise add a mesh, and the communicators
   * its collectives open, per iteration.
   */
  private derive(names: ReadonlyArray<string>, layout: NDSlice): Mesh {
    const key = `${JSON.stringify(names)}${layout}`
    let mesh = this.derived.get(key)
    if (mesh === undefined) this.derived.set(key, (mesh = createMesh(this.core, names, layout, this.defaultStream)))
    return mesh
  }

  /**
   * Uses `t` on another stream for the scope: BorrowCreate now, BorrowFirstUse before the
   * first command that uses the alias, BorrowLastUse and BorrowDrop when the scope closes.
   */
  borrow(t: RemoteTensor, to: RemoteStream): Effect.Effect<RemoteTensor, never, Scope.Scope> {
    return Effect.acquireRelease(
      Effect.sync(() => {
        const alias = this.core.newRef()
        const state: BorrowState = { id: alias.id, ranks: t.mesh.ranks, used: false, dropped: false }
        this.core.graph.alias(alias.id, t.ref.id)
        this.core.post(t.mesh.ranks, { _tag: "BorrowCreate", result: alias, tensor: t.ref, from: t.stream.ref, to: to.ref, alreadyBorrowed: false })
        return new RemoteTensor(t.mesh, alias, t.meta, to, state)
      }),
      (alias) => Effect.sync(() => {
        const b = alias.borrow!
        b.dropped = true
        if (b.used) this.core.post(b.ranks, { _tag: "BorrowLastUse", borrow: b.id })
        this.core.post(b.ranks, { _tag: "BorrowDrop", borrow: b.id })
        this.core.release(b.ranks, [b.id])
      }),
    )
  }
}

/** Defines a mesh on its ranks (CreateDeviceMesh) and returns it. */
export const createMesh = (core: Core, names: ReadonlyArray<string>, layout: NDSlice, defaultStream: RemoteStream): Mesh => {
  if (names.length !== layout.ndim) throw refuse(`${names.length} dim names for ${layout.ndim} dims`)
  if (new Set(names).size !== names.length) throw refuse(`repeated dim name in [${names}]`)
  const ref = core.newRef()
  const mesh = new Mesh(core, ref, names, layout, defaultStream)
  core.post(mesh.ranks, { _tag: "CreateDeviceMesh", result: ref, names, ranks: layout })
  return mesh
}
