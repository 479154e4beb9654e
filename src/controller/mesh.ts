/**
 * Meshes: a set of ranks with named dims, and the commands a program issues on them. Every
 * method issues commands through the Core and returns an Effect; arguments go through
 * arguments.ts, the handles are in handles.ts, borrows in borrows.ts, and the rank geometry
 * (slices, flattening, coordinates) is NDSlice's.
 */
import { Effect, type Scope } from "effect"
import type { TensorMeta } from "../ops/meta.ts"
import { inferOutputs, opNamed } from "../ops/registry.ts"
import { planCollective } from "../ops/collectives.ts"
import type { Reduction, Value } from "../protocol/messages.ts"
import type { NDSlice } from "../protocol/ndslice.ts"
import { TensorFactory, type Ref } from "../protocol/values.ts"
import { Arguments, checkMeta, metasOf, Reads } from "./arguments.ts"
import { borrow, firstUses } from "./borrows.ts"
import type { Core } from "./core.ts"
import { ControllerError, refuse, type Failure } from "./errors.ts"
import type { Exchange } from "./graph.ts"
import { checkOwner, LiveCount, RemoteStream } from "./handles.ts"
import { RemoteTensor } from "./tensor.ts"
import { checkCollectiveGrad, tapeCollectiveGrad, tapeSendGrad } from "./meshgrad.ts"
import { afterCollective, afterSend, type PlacementSpec } from "./placement.ts"
import type { CallSite } from "./sites.ts"
import { refuseOverlap } from "./storage.ts"

export interface CallOptions {
  readonly stream?: RemoteStream
  /** Tensors the function changes in place: poisoned too when it fails. */
  readonly mutates?: ReadonlyArray<RemoteTensor>
  /**
   * A user function's results: how many, or their dtypes and shapes (needed later by
   * reduce and send). Built-ins know theirs.
   */
  readonly results?: number | ReadonlyArray<TensorMeta>
  /**
   * A user function that runs its own collectives (FunctionContext.group): the dims of this
   * mesh its group spans. Each rank's results then depend on every member of its group, as a
   * reduce's do: a member's failure or loss fails the call on all of them.
   */
  readonly dims?: string | ReadonlyArray<string>
}

export interface ReduceOptions {
  readonly scatter?: boolean
  readonly inplace?: boolean
  readonly stream?: RemoteStream
  /** The result's placement, where the collective's own rule (placement.ts) is not what the program means. */
  readonly placement?: PlacementSpec
}

export interface FetchOptions {
  /** Apply this function on the worker before sending (e.g. "ops.sum"). */
  readonly fn?: string
  readonly stream?: RemoteStream
  /** Fail with DeadlineExceeded when the value is not final this long after the call (default: the controller's deadlineMs). */
  readonly deadlineMs?: number
}

/**
 * Per built-in, the arguments of its last call the rule accepted, as the rule saw them (each
 * tensor's meta object, each scalar), and what it gave. NOTE: model code calls an op on the
 * same tensors again and again (a step's in-place updates, a loop's), the rules are pure and
 * metas are never changed, so such a call reuses the outcome instead of binding and running
 * the rule (a fifth of an op call's cost). Only calls of tensors and scalars, no keywords.
 */
const lastRule = new Map<string, { readonly keys: unknown[]; readonly metas: ReadonlyArray<TensorMeta | undefined> }>()

/** What the rule of a call of tensors and scalars depends on, or undefined when it takes anything else. */
const ruleKeys = (args: ReadonlyArray<unknown>, kwargs: Readonly<Record<string, unknown>>): unknown[] | undefined => {
  for (const _ in kwargs) return undefined
  const keys = new Array<unknown>(args.length)
  for (let i = 0; i < args.length; i++) {
    const a = args[i]
    if (a instanceof RemoteTensor) {
      if (a.meta === undefined) return undefined
      keys[i] = a.meta
    } else if (a === null || (typeof a !== "object" && typeof a !== "function")) keys[i] = a
    else return undefined
  }
  return keys
}

const sameKeys = (a: ReadonlyArray<unknown>, b: ReadonlyArray<unknown>): boolean => {
  if (a.length !== b.length) return false
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return false
  return true
}

/** Runs `f` as an Effect, failing with a ControllerError for anything it throws. */
const attempt = <A>(f: () => A): Effect.Effect<A, ControllerError> =>
  Effect.try({ try: f, catch: (e) => (e instanceof ControllerError ? e : refuse("thrown", e instanceof Error ? e.message : String(e))) })

export class Mesh {
  readonly ranks: ReadonlyArray<number>
  /** What this mesh's live tensor handles hold on its workers: refs, and bytes where known. */
  readonly live = new LiveCount()
  private readonly args = new Arguments(this)
  /** Slices and flattenings of this mesh, by names and layout (see `derive`). */
  private readonly derived = new Map<string, Mesh>()
  /** Per set of dims, how a collective over them makes each rank depend on its group. */
  private readonly groups = new Map<string, Exchange>()

  constructor(
    readonly core: Core,
    readonly ref: Ref,
    readonly names: ReadonlyArray<string>,
    /** The ranks, laid out along the dims. */
    readonly layout: NDSlice,
    readonly defaultStream: RemoteStream,
    /** Where a sub-mesh sits in the mesh it was sliced from: "pp=1 of 2" per fixed dim. */
    readonly place: ReadonlyArray<string> = [],
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
    return `Mesh(${[...this.place, ...this.names.map((n, i) => `${n}=${this.layout.sizes[i]}`)].join(", ")})`
  }

  /** Refuses dim names this mesh does not have, naming the ones it has. */
  private checkDims(names: ReadonlyArray<string>): void {
    const unknown = names.filter((d) => !this.names.includes(d))
    if (unknown.length > 0) throw refuse("argument", `${this} has no dim ${unknown.join(", ")} (its dims: ${this.names.join(", ") || "none"})`)
  }

  /** t was written in place: its memory's version moves (and a recording's replay will move it again). */
  private wrote(t: RemoteTensor): void {
    t.storage.version++
    this.core.sink.wrote(t.storage)
  }

  /** The stream a command runs on: `given` when this controller made it, else the default. */
  private streamFor(given: RemoteStream | undefined): RemoteStream {
    if (given === undefined) return this.defaultStream
    checkOwner(this.core, given)
    return given
  }

  /** Converts `v` for a command (refusing what the wire cannot carry) and issues its borrows' first uses. */
  private read(v: unknown, reads = new Reads()): { value: Value; reads: Reads } {
    const value = this.args.convert(v, reads)
    firstUses(this.core, reads.borrows)
    return { value, reads }
  }

  /** The results' metadata: a built-in's from its rule, a user function's from options. */
  private resultMetas(fn: string, args: ReadonlyArray<unknown>, kwargs: Readonly<Record<string, unknown>>, known: boolean, results: CallOptions["results"]): ReadonlyArray<TensorMeta | undefined> {
    if (results !== undefined) return typeof results === "number" ? Array.from({ length: results }, () => undefined) : results.map(checkMeta)
    if (!fn.startsWith("ops.")) return [undefined]
    const keys = ruleKeys(args, kwargs)
    const last = keys === undefined ? undefined : lastRule.get(fn)
    if (last !== undefined && sameKeys(last.keys, keys!)) return last.metas
    const op = opNamed(fn.slice(4))
    if (!op) throw refuse("argument", `no built-in ${fn}`)
    let metas: ReadonlyArray<TensorMeta | undefined>
    try {
      metas = inferOutputs(op, metasOf(args) as unknown[], metasOf(kwargs) as Record<string, unknown>, known)
    } catch (e) {
      throw refuse("op-rule", (e as Error).message)
    }
    if (keys !== undefined) lastRule.set(fn, { keys, metas })
    return metas
  }

  /** Issues a CallFunction; returns one handle per result. */
  private issueCall(fn: string, args: ReadonlyArray<unknown>, kwargs: Readonly<Record<string, unknown>>, opts: CallOptions, site: CallSite | undefined): RemoteTensor[] {
    const reads = new Reads()
    const wireArgs = this.args.convert(args, reads) as Value[], wireKwargs = this.args.convert(kwargs, reads) as Record<string, Value>
    const known = reads.known
    // The mutated tensors are read too: converting them checks them and notes the reads.
    const mutated = opts.mutates === undefined || opts.mutates.length === 0 ? [] : this.args.convert(opts.mutates, reads) as Ref[]
    // A built-in writing memory its inputs share (storage.ts) is refused here, by either path (ops.add_ or mesh.run).
    if (mutated.length > 0 && fn.startsWith("ops.")) refuseOverlap(fn.slice(4), opts.mutates!, args, kwargs)
    const metas = this.resultMetas(fn, args, kwargs, known, opts.results)
    const stream = this.streamFor(opts.stream)
    // Plain loops: this runs per op call.
    const results = new Array<Ref>(metas.length), defines = new Array<number>(metas.length)
    for (let i = 0; i < metas.length; i++) defines[i] = (results[i] = this.core.newRef()).id
    for (const r of mutated) defines.push(r.id)
    if (reads.borrows.length > 0) firstUses(this.core, reads.borrows)
    // Results given as metadata are declared to the workers, which check what the function returns against them.
    const group = opts.dims === undefined ? undefined : this.callGroup(fn, opts.dims)
    // A group follows `declared` on the wire: without declarations, each result declares nothing (nil).
    const declared = Array.isArray(opts.results) ? metas.map((m) => m ?? null) : group === undefined ? undefined : metas.map(() => null)
    // No spread of an empty object per command for the fields only a group call has.
    this.core.sink.command(this.ranks, fn, reads.inputs, defines, site, group === undefined
      ? (ident) => ({ _tag: "CallFunction", ident, results, mutates: mutated, function: fn, args: wireArgs, kwargs: wireKwargs, stream: stream.ref, declared })
      : (ident) => ({ _tag: "CallFunction", ident, results, mutates: mutated, function: fn, args: wireArgs, kwargs: wireKwargs, stream: stream.ref, declared, mesh: this.ref, dims: group }),
    group === undefined ? undefined : this.groupExchange(group))
    // Each tensor written in place moves its storage's version (what autograd checks its saved tensors by).
    if (opts.mutates !== undefined) for (const t of opts.mutates) this.wrote(t)
    const handles = new Array<RemoteTensor>(results.length)
    for (let i = 0; i < results.length; i++) handles[i] = new RemoteTensor(this, results[i]!, metas[i], stream)
    return handles
  }

  /**
   * @internal fromHost's sharded form: one CallFunction of `fn` whose arguments differ per rank
   * (`argsOf(rank)`, host values only), each rank sent only its own; its one result's metadata
   * comes from the first rank's arguments (every rank's must agree).
   */
  issueEach(fn: string, argsOf: (rank: number) => ReadonlyArray<unknown>, site: CallSite | undefined = this.core.site()): RemoteTensor {
    const wire = new Map<number, Value[]>()
    let metas: ReadonlyArray<TensorMeta | undefined> | undefined
    for (const r of this.ranks) {
      const args = argsOf(r), reads = new Reads()
      wire.set(r, this.args.convert(args, reads) as Value[])
      if (reads.inputs.length > 0) throw refuse("argument", `${fn} with per-rank arguments takes host values only`)
      metas ??= this.resultMetas(fn, args, {}, true, undefined)
    }
    if (metas!.length !== 1) throw refuse("argument", `${fn} has ${metas!.length} results; a per-rank call makes one`)
    const stream = this.defaultStream, result = this.core.newRef()
    this.core.sink.commandEach(this.ranks, fn, [], [result.id], site, (ident, rank) => ({
      _tag: "CallFunction", ident, results: [result], mutates: [], function: fn, args: wire.get(rank)!, kwargs: {}, stream: stream.ref, declared: undefined,
    }))
    return new RemoteTensor(this, result, metas![0], stream)
  }

  /**
   * @internal The typed ops' entry (src/controller/ops.ts): issues a CallFunction now and
   * returns its results, or throws the ControllerError that refused it.
   */
  issue(fn: string, args: ReadonlyArray<unknown>, kwargs: Readonly<Record<string, unknown>>, opts: CallOptions, site: CallSite | undefined = this.core.site()): RemoteTensor[] {
    return this.issueCall(fn, args, kwargs, opts, site)
  }

  /** Calls a function on every rank; its one result as a handle. */
  call(fn: string, args: ReadonlyArray<unknown> = [], kwargs: Readonly<Record<string, unknown>> = {}, opts: CallOptions = {}): Effect.Effect<RemoteTensor, ControllerError> {
    const site = this.core.site()
    return attempt(() => {
      const results = this.issueCall(fn, args, kwargs, opts, site)
      if (results.length !== 1) throw refuse("argument", `${fn} has ${results.length} results; use callMany`)
      return results[0]!
    })
  }

  /** Calls a function with several (or no) results. */
  callMany(fn: string, args: ReadonlyArray<unknown> = [], kwargs: Readonly<Record<string, unknown>> = {}, opts: CallOptions = {}): Effect.Effect<RemoteTensor[], ControllerError> {
    const site = this.core.site()
    return attempt(() => this.issueCall(fn, args, kwargs, opts, site))
  }

  /** Calls an in-place function: `mutates` are changed, nothing new is defined. */
  run(fn: string, args: ReadonlyArray<unknown>, kwargs: Readonly<Record<string, unknown>> = {}, opts: CallOptions = {}): Effect.Effect<void, ControllerError> {
    const site = this.core.site()
    return attempt(() => void this.issueCall(fn, args, kwargs, { results: 0, ...opts }, site))
  }

  /**
   * Waits until this mesh has at most the controller's bound of commands in flight (issued,
   * not yet passed by every rank; CoreOptions.maxInFlight): at once when it has. Op calls are
   * synchronous and never wait, so a program applies the bound between steps: inStep
   * (lifetime.ts) does this first.
   */
  throttle(): Effect.Effect<void> {
    return this.core.whenCapacity(this.ranks)
  }

  /** Commands issued on this controller that some rank of this mesh has not passed yet. */
  get inFlight(): number {
    return this.core.inFlight(this.ranks)
  }

  /**
   * A collective over one or more dims: all_reduce (`sum`, `avg`, ...), all_gather
   * (`stack`), reduce_scatter (`scatter`), all_to_all (`stack` with `scatter`). The result's
   * placement follows from the input's (placement.ts, afterCollective), or is `placement`;
   * its gradient crosses the mesh by the rules in meshgrad.ts.
   */
  reduce(t: RemoteTensor, dims: string | ReadonlyArray<string>, reduction: Reduction, opts: ReduceOptions = {}): Effect.Effect<RemoteTensor, ControllerError> {
    const site = this.core.site()
    return attempt(() => this.issueReduce(t, dims, reduction, opts, site))
  }

  /** @internal reduce, issued now: its result, or the ControllerError that refused it, thrown (the synchronous collectives of meshgrad.ts). */
  issueReduce(t: RemoteTensor, dims: string | ReadonlyArray<string>, reduction: Reduction, opts: ReduceOptions, site: CallSite | undefined): RemoteTensor {
    const names = typeof dims === "string" ? [dims] : [...dims]
    this.checkDims(names)
    if (!t.meta) throw refuse("unknown-meta", `reduce needs the dtype and shape of ${t}; give the function's results as metadata (CallOptions.results)`)
    const { scatter = false, inplace = false } = opts
    const size = names.reduce((p, d) => p * this.dims[d]!, 1)
    const plan = planCollective(t.meta, size, reduction, scatter, inplace)
    if (typeof plan === "string") throw refuse("op-rule", `reduce over ${names.join("+")}: ${plan}`)
    const label = `reduce ${reduction}${scatter ? " scatter" : ""} over ${names.join("+")}`
    checkCollectiveGrad(label, t, this, reduction, inplace)
    const stream = this.streamFor(opts.stream)
    const result = inplace ? t.ref : this.core.newRef()
    this.read(t)
    this.core.sink.command(this.ranks, label, [t.ref.id], [result.id], site, (ident) => ({
      _tag: "Reduce", ident, result, tensor: t.ref, factory: new TensorFactory(t.meta!.shape, t.meta!.dtype, this.core.device), mesh: this.ref, stream: stream.ref,
      dims: names, reduction, scatter, inplace,
    }), this.groupExchange(names))
    if (inplace) this.wrote(t)
    const out = inplace ? t : new RemoteTensor(this, result, plan.result, stream)
    out.placement = opts.placement ?? afterCollective(t.placement, this.names, names, reduction, scatter)
    if (!inplace) tapeCollectiveGrad(label, out, t, names, size, reduction, scatter)
    return out
  }

  /** The dims a user function's group spans, checked: a set of one or more of this mesh's dims. */
  private callGroup(fn: string, dims: string | ReadonlyArray<string>): ReadonlyArray<string> {
    if (fn.startsWith("ops.")) throw refuse("argument", `${fn} is a built-in: only a user function takes a group (CallOptions.dims)`)
    const names = typeof dims === "string" ? [dims] : [...dims]
    if (names.length === 0 || new Set(names).size !== names.length) throw refuse("argument", `a call's group needs one or more distinct dims, got [${names.join(", ")}]`)
    this.checkDims(names)
    return names
  }

  /**
   * A collective over `dims`: each rank's result depends on every member of its group, inputs
   * included. The members of a group share one list, which the graph's walks spread once.
   */
  private groupExchange(dims: ReadonlyArray<string>): Exchange {
    const key = dims.join(",")
    let exchange = this.groups.get(key)
    if (exchange === undefined) {
      const index = dims.map((d) => this.names.indexOf(d))
      // A rank's group is each of its members' group too: made once, for all of them.
      const byRank = new Map<number, ReadonlyArray<number>>()
      for (const r of this.ranks) {
        if (byRank.has(r)) continue
        const group = index.reduce<number[]>((g, d) => g.flatMap((m) => this.layout.members(d, m)), [r])
        for (const m of group) byRank.set(m, group)
      }
      this.groups.set(key, (exchange = { peers: (r) => byRank.get(r) ?? [], reads: () => true }))
    }
    return exchange
  }

  /**
   * Sends `t` from this mesh's ranks to `to`'s, rank i to rank i (the meshes must be the same
   * size); a rank sending to itself copies. Its gradient is sent back (meshgrad.ts).
   */
  send(t: RemoteTensor, to: Mesh, opts: { readonly stream?: RemoteStream } = {}): Effect.Effect<RemoteTensor, ControllerError> {
    const site = this.core.site()
    return attempt(() => this.issueSend(t, to, opts, site))
  }

  /** @internal send, issued now: its result, or the ControllerError that refused it, thrown. */
  issueSend(t: RemoteTensor, to: Mesh, opts: { readonly stream?: RemoteStream }, site: CallSite | undefined): RemoteTensor {
    checkOwner(this.core, to)
    if (this.size !== to.size) throw refuse("mesh", `cannot send ${t} from ${this} to ${to}: sizes differ`)
    if (!t.meta) throw refuse("unknown-meta", `send needs the dtype and shape of ${t}`)
    const ranks = [...new Set([...this.ranks, ...to.ranks])].sort((a, b) => a - b)
    const stream = this.streamFor(opts.stream)
    const { reads } = this.read(t)
    const result = this.core.newRef()
    // Rank i of `to` gets rank i of this mesh's tensor: its result depends on that sender alone.
    const sender = new Map(to.ranks.map((r, i) => [r, this.ranks[i]!]))
    const senders = new Set(this.ranks)
    this.core.sink.command(ranks, "send", reads.inputs, [result.id], site, (ident) => ({
      _tag: "SendTensor", ident, result, fromRanks: this.layout, toRanks: to.layout, tensor: t.ref,
      factory: new TensorFactory(t.meta!.shape, t.meta!.dtype, this.core.device), stream: stream.ref,
    }), { peers: (r) => (sender.has(r) ? [sender.get(r)!] : []), reads: (r) => senders.has(r) })
    const out = new RemoteTensor(to, result, t.meta, stream).place(afterSend(t.placement, to))
    tapeSendGrad(out, t, this, to)
    return out
  }

  /** The rank at an index, or at coordinates of this mesh's dims (dims not given: 0). */
  private rankAt(at: number | Readonly<Record<string, number>>): number {
    if (typeof at === "number") {
      if (!Number.isInteger(at) || at < 0 || at >= this.size) throw refuse("argument", `index ${at} is outside ${this} (indices 0..${this.size - 1})`)
      return this.layout.rankAt(at)
    }
    if (typeof at !== "object" || at === null || Array.isArray(at)) throw refuse("argument", `${JSON.stringify(at)} is neither an index nor coordinates of ${this} (dims ${this.names.join(", ")})`)
    this.checkDims(Object.keys(at))
    const coords = this.names.map((n, i) => {
      const c = at[n] ?? 0, size = this.layout.sizes[i]!
      if (!Number.isInteger(c) || c < 0 || c >= size)
        throw refuse("argument", `${n}=${c} is outside ${this} (its dims: ${this.names.map((m, j) => `${m} 0..${this.layout.sizes[j]! - 1}`).join(", ")})`)
      return c
    })
    return this.layout.rankOf(coords)
  }

  /** NDSlice's answer, or its RangeError as a ControllerError naming this mesh. */
  private geometry<A>(f: () => A): A {
    try {
      return f()
    } catch (e) {
      throw e instanceof RangeError ? refuse("argument", `${this}: ${e.message.replace(/^NDSlice: /, "")} (dims ${this.names.join(", ")})`) : e
    }
  }

  /** A FetchValue to the ranks `ranks()` picks; a bad rank or argument is a ControllerError. */
  private fetchFrom(ranks: () => ReadonlyArray<number>, value: unknown, opts: FetchOptions, site: CallSite | undefined) {
    return Effect.suspend(() => {
      const targets = ranks(), stream = this.streamFor(opts.stream)
      const { value: object, reads } = this.read(value)
      return this.core.sink.fetch(targets, reads.inputs, opts.fn ?? "fetch", site, (ident) => ({
        _tag: "FetchValue", ident, mutates: [], function: opts.fn ?? null, object, stream: stream.ref,
      }), opts.deadlineMs ?? this.core.options.deadlineMs)
    }).pipe(Effect.catchDefect((e) => Effect.fail(e instanceof ControllerError ? e : refuse("thrown", String(e)))))
  }

  /**
   * The value of `value` (tensors, or a tree holding them) on one rank, by index or by
   * coordinates (default: the first rank). Fails with the RemoteError it depends on.
   */
  fetch(value: unknown, at: number | Readonly<Record<string, number>> = 0, opts: FetchOptions = {}): Effect.Effect<Value, Failure> {
    // One more frame: a tensor's own fetch() calls this.
    return this.fetchFrom(() => [this.rankAt(at)], value, opts, this.core.site(1)).pipe(Effect.map((values) => values[0]!))
  }

  /** The value on every rank of the mesh, in mesh order. */
  fetchAll(value: unknown, opts: FetchOptions = {}): Effect.Effect<ReadonlyArray<Value>, Failure> {
    return this.fetchFrom(() => this.ranks, value, opts, this.core.site())
  }

  /** The sub-mesh at fixed coordinates of some dims (those dims go away). */
  slice(at: Readonly<Record<string, number>>): Effect.Effect<Mesh, ControllerError> {
    return attempt(() => {
      this.checkDims(Object.keys(at))
      const layout = this.geometry(() => this.layout.fix(this.names.map((n) => at[n])))
      const place = this.names.flatMap((n, i) => (at[n] === undefined ? [] : [`${n}=${at[n]} of ${this.layout.sizes[i]}`]))
      return this.derive(this.names.filter((n) => at[n] === undefined), layout, [...this.place, ...place])
    })
  }

  /** The same ranks as one dim `name` (the dims must nest, as in a row-major mesh). */
  flatten(name: string): Effect.Effect<Mesh, ControllerError> {
    return attempt(() => this.derive([name], this.geometry(() => this.layout.flatten()), this.place))
  }

  /**
   * The mesh over `layout` with dims `names`, made once: meshes are never deleted on the
   * workers, so a program slicing in a loop would otherwise add a mesh, and the communicators
   * its collectives open, per iteration.
   */
  private derive(names: ReadonlyArray<string>, layout: NDSlice, place: ReadonlyArray<string>): Mesh {
    const key = `${JSON.stringify(names)}${layout}`
    let mesh = this.derived.get(key)
    if (mesh === undefined) this.derived.set(key, (mesh = createMesh(this.core, names, layout, this.defaultStream, place)))
    return mesh
  }

  /**
   * Uses `t` on another stream for the scope: BorrowCreate now, BorrowFirstUse before the
   * first command that uses the alias, BorrowLastUse and BorrowDrop when the scope closes.
   */
  borrow(t: RemoteTensor, to: RemoteStream): Effect.Effect<RemoteTensor, ControllerError, Scope.Scope> {
    return attempt(() => {
      checkOwner(this.core, t)
      checkOwner(this.core, to)
      if (t.released) throw refuse("released", `${t} was released`)
    }).pipe(Effect.andThen(borrow(this.core, t, to)))
  }
}

/** Defines a mesh on its ranks (CreateDeviceMesh) and returns it. */
export const createMesh = (core: Core, names: ReadonlyArray<string>, layout: NDSlice, defaultStream: RemoteStream, place: ReadonlyArray<string> = []): Mesh => {
  if (names.length !== layout.ndim) throw refuse("argument", `${names.length} dim names for ${layout.ndim} dims`)
  if (new Set(names).size !== names.length) throw refuse("argument", `repeated dim name in [${names}]`)
  const ref = core.newRef()
  const mesh = new Mesh(core, ref, names, layout, defaultStream, place)
  core.sink.post(mesh.ranks, { _tag: "CreateDeviceMesh", result: ref, names, ranks: layout })
  return mesh
}
