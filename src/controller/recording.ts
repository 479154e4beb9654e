/**
 * Recordings (Monarch's `compile`): a step's commands recorded on its first call for a given
 * signature, defined once on each worker (DefineRecording), and replayed by every later call
 * with one CallRecording per worker that maps the call's tensors, numbers and results to refs.
 *
 * The signature is what the commands depend on: each tensor argument's dtype, shape, mesh and
 * stream (and which arguments are the same tensor), every other non-numeric argument, and the
 * structure of the arguments. Numbers are replay parameters: the first trace is followed by one
 * probe per numeric argument (the step traced again, sending nothing, with that number changed)
 * to see where it goes. A number that goes straight into commands becomes a parameter there; one
 * that changes the commands, the shapes, or goes in through arithmetic becomes part of the
 * signature instead, and a new value of it traces again. Every trace after the first says why.
 *
 * A call takes one ident per recorded command, so that a failure on a worker is reported
 * against the command that failed (its label and call site); on the controller each result
 * depends only on the commands and inputs its value came from, so a failure poisons exactly
 * what it would have outside a recording. Temporaries live only during a call on the workers
 * and never on the controller; their handles from the trace are retired.
 */
import { Effect } from "effect"
import type { WorkerMessage } from "../protocol/messages.ts"
import { NDSlice } from "../protocol/ndslice.ts"
import { HostTensor, Ref, TensorFactory } from "../protocol/values.ts"
import { Controller } from "./controller.ts"
import type { Core } from "./core.ts"
import { ControllerError, RemoteError } from "./errors.ts"
import type { Exchange, Node } from "./graph.ts"
import { RemoteTensor } from "./handles.ts"
import { CallSite } from "./sites.ts"
import type { Storage } from "./storage.ts"
import { Trace, type Traced } from "./trace.ts"

export interface CompileOptions {
  /** Trace the second call too and fail it, naming both call sites, if it issued other commands. */
  readonly verify?: boolean
  /** Told why each trace after the first was made (default: a line on stderr). */
  readonly onRetrace?: (why: string) => void
  /** The step's name in messages (default: the function's name). */
  readonly name?: string
  /**
   * Recordings kept at once (default 8), one per signature: a trace past that deletes the one
   * called least recently on the workers (DeleteRecording); its signature traces again if it comes back.
   */
  readonly maxRecordings?: number
  /**
   * Calls per signature run op by op before it is traced (default 0), so that state a step
   * makes on its first call (an optimizer's moments, a momentum buffer) exists before the
   * step is recorded; recorded, that call's commands would make it afresh on every replay.
   */
  readonly warmup?: number
}

/** A compiled step: call it like the step; it returns an Effect of the step's result. */
export interface Compiled<A extends ReadonlyArray<unknown>, R, E, Rq> {
  (...args: A): Effect.Effect<R, E | ControllerError, Rq | Controller>
  /** Traces made so far (the first call's included). */
  readonly traces: number
  /** Why each trace after the first was made. */
  readonly retraces: ReadonlyArray<string>
  /** The numbers of its recordings defined on the workers now (DeleteRecording's). */
  readonly recordings: ReadonlyArray<number>
  /**
   * Deletes its recordings on the workers (after the calls already made, which still run);
   * a later call is refused. Dropping the compiled step does the same once it is collected.
   */
  dispose(): void
  [Symbol.dispose](): void
}

// ---- arguments ---------------------------------------------------------------------------

/** One leaf of the arguments: what the signature holds of it, and where it is. */
interface Leaf {
  /** Where it is ("argument 1.lr"), when flatten was asked for paths (messages only need them). */
  readonly path: string
  /** What it is, for the signature (objects by identity; the leaves in order give the structure). */
  readonly key: string
  readonly value: unknown
  /** For a tensor given twice: the index of its first place among the tensors. */
  readonly same: number
}

/** The arguments of one call, flattened. */
interface Flat {
  readonly tensors: RemoteTensor[]
  readonly numbers: number[]
  readonly leaves: Leaf[]
  /** The signature without the numbers. */
  readonly key: string
}

const ids = new WeakMap<object, number>()
let nextId = 0
const idOf = (o: object): number => {
  let id = ids.get(o)
  if (id === undefined) ids.set(o, (id = nextId++))
  return id
}

const isPlain = (v: object): boolean => {
  const proto: unknown = Object.getPrototypeOf(v)
  return proto === Object.prototype || proto === null
}

const isTree = (v: unknown): v is object =>
  typeof v === "object" && v !== null && !(v instanceof HostTensor) && !(v instanceof Uint8Array) && !(v instanceof RemoteTensor) && isPlain(v)

const metaText = (t: RemoteTensor): string => (t.meta ? `${t.meta.dtype}[${t.meta.shape}]` : "a tensor of unknown shape")

/** A leaf as messages say it. */
const textOf = (l: Leaf): string => {
  const v = l.value
  if (typeof v === "number") return "a number"
  if (v instanceof RemoteTensor) return l.same >= 0 ? `the same tensor as tensor argument ${l.same}` : `${metaText(v)} on ${v.mesh}, stream ${v.stream.ref.id}`
  if (Array.isArray(v)) return `an array of ${v.length}`
  if (isTree(v)) return `an object with keys ${Object.keys(v).join(", ")}`
  return typeof v === "string" ? JSON.stringify(v) : String(v)
}

/** The arguments' leaves in order (with their paths when `paths`: a trace, or a message, needs them). */
const flatten = (args: ReadonlyArray<unknown>, paths = false): Flat => {
  const tensors: RemoteTensor[] = [], numbers: number[] = [], leaves: Leaf[] = []
  let key = ""
  const leaf = (path: string, k: string, value: unknown, same = -1) => {
    leaves.push({ path, key: k, value, same })
    key += k + "|"
  }
  const walk = (v: unknown, path: string): void => {
    if (typeof v === "number") {
      numbers.push(v)
      return leaf(path, "n", v)
    }
    if (v instanceof RemoteTensor) {
      const same = tensors.indexOf(v)
      tensors.push(v)
      return leaf(path, same >= 0 ? `=${same}` : `${v.meta ? `${v.meta.dtype}[${v.meta.shape}]` : "?"}@${idOf(v.mesh)}/${v.stream.ref.id}`, v, same)
    }
    if (Array.isArray(v)) {
      leaf(path, `[${v.length}`, v)
      for (let i = 0; i < v.length; i++) walk(v[i], paths ? `${path}[${i}]` : "")
      return
    }
    if (isTree(v)) {
      const keys = Object.keys(v)
      leaf(path, `{${JSON.stringify(keys)}`, v)
      for (const k of keys) walk((v as Record<string, unknown>)[k], paths ? `${path}.${k}` : "")
      return
    }
    leaf(path, typeof v === "object" && v !== null ? `@${idOf(v)}` : `${typeof v}:${String(v)}`, v)
  }
  for (let i = 0; i < args.length; i++) walk(args[i], paths ? `argument ${i}` : "")
  return { tensors, numbers, leaves, key }
}

/** The paths of the numbers among `flat`'s leaves. */
const numberPaths = (flat: Flat): string[] => flat.leaves.flatMap((l) => (typeof l.value === "number" ? [l.path] : []))

/** The arguments with numbers replaced, in flatten's order. */
const withNumbers = (args: ReadonlyArray<unknown>, numbers: ReadonlyArray<number>): unknown[] => {
  let i = 0
  const walk = (v: unknown): unknown => {
    if (typeof v === "number") return numbers[i++]
    if (v instanceof RemoteTensor) return v
    if (Array.isArray(v)) return v.map(walk)
    if (typeof v === "object" && v !== null && !(v instanceof HostTensor) && !(v instanceof Uint8Array) && isPlain(v))
      return Object.fromEntries(Object.keys(v).map((k) => [k, walk((v as Record<string, unknown>)[k])]))
    return v
  }
  return args.map(walk)
}

/** Another value of the same kind, unlike any the step was given: integers stay integers. */
const probeValue = (v: number, i: number): number => (Number.isInteger(v) ? v + 1_000_003 + i : v * 1.5 + 0.0625 * (i + 1) + 1e-3)

// ---- traces ------------------------------------------------------------------------------

interface Traced1<R> {
  readonly trace: Trace
  readonly value: R
}

/** What a trace's retired handles say when used again (and how a second trace's use of one is told apart). */
const madeInside = (name: string) => `was made inside compile(${name})'s step and not returned from it`

const messageOf = (e: unknown): string => (e as { message?: string }).message ?? String(e)

/** Runs the step with Core recording instead of sending; the trace's handles are retired after. */
const traced = <A extends ReadonlyArray<unknown>, R, E, Rq>(core: Core, name: string, step: (...args: A) => unknown, args: ReadonlyArray<unknown>, called: CallSite | undefined): Effect.Effect<Traced1<R>, E | ControllerError, Rq> =>
  Effect.suspend(() => {
    const trace = new Trace(name, () => core.site(4), called) // between a borrow's method and here: its post, Core.post, Trace.post, this
    core.tracing = trace
    const end = Effect.sync(() => {
      if (core.tracing === trace) core.tracing = undefined
      for (const t of trace.handles) t.retire(`${t} ${madeInside(name)}: it lived only during that call`)
    })
    let body: Effect.Effect<R, E | ControllerError, Rq>
    try {
      const out = step(...(args as A))
      body = (Effect.isEffect(out) ? out : Effect.succeed(out)) as Effect.Effect<R, E, Rq>
    } catch (e) {
      body = e instanceof ControllerError ? Effect.fail(e) : Effect.die(e)
    }
    // Retired once the value is read: the calls return this call's handles in their place.
    return body.pipe(Effect.map((value) => ({ trace, value })), Effect.ensuring(end))
  })

type Path = ReadonlyArray<string | number>

/** How two traces of the same step differ: a structural difference, or numbers at paths. */
interface Difference {
  structural: string | undefined
  readonly numbers: Array<{ readonly command: number; readonly path: Path; readonly a: number; readonly b: number }>
}

/** A ref as both traces can compare it: the trace's own by order of definition, arguments by position, the rest by id. */
const canonical = (trace: Trace, args: ReadonlyArray<RemoteTensor>): ((id: number) => string) => {
  const own = new Map([...trace.defined].map((id, i) => [id, `made ${i}`]))
  const arg = new Map<number, string>()
  args.forEach((t, i) => arg.has(t.ref.id) || arg.set(t.ref.id, `tensor argument ${i}`))
  return (id) => own.get(id) ?? arg.get(id) ?? `ref ${id}`
}

const describeCommand = (c: Traced): string => `${c.label}${c.site?.format() ? ` issued at ${c.site.format()}` : ""}`

const compareTraces = (a: Trace, aArgs: ReadonlyArray<RemoteTensor>, b: Trace, bArgs: ReadonlyArray<RemoteTensor>): Difference => {
  const d: Difference = { structural: undefined, numbers: [] }
  const ca = canonical(a, aArgs), cb = canonical(b, bArgs)
  const n = Math.max(a.commands.length, b.commands.length)
  for (let k = 0; k < n && d.structural === undefined; k++) {
    const x = a.commands[k], y = b.commands[k]
    if (x === undefined || y === undefined) {
      d.structural = x === undefined ? `command ${k}: none, then ${describeCommand(y!)}` : `command ${k}: ${describeCommand(x)}, then none`
      break
    }
    const why = (what: string) => (d.structural = `command ${k}: ${describeCommand(x)}, then ${describeCommand(y)}: ${what}`)
    if (x.ranks.join() !== y.ranks.join()) why(`ranks [${x.ranks}] then [${y.ranks}]`)
    const walk = (u: unknown, v: unknown, path: Path, borrow: boolean): void => {
      if (d.structural !== undefined) return
      if (typeof u === "number" && typeof v === "number") {
        if (borrow) return void (ca(u) !== cb(v) && why(`${path.join(".")}: another borrow`))
        if (!Object.is(u, v)) d.numbers.push({ command: k, path, a: u, b: v })
        return
      }
      if (u instanceof Ref && v instanceof Ref) return void (ca(u.id) !== cb(v.id) && why(`${path.join(".")}: ${ca(u.id)}, then ${cb(v.id)}`))
      if (u instanceof TensorFactory && v instanceof TensorFactory)
        return void ((u.dtype !== v.dtype || u.shape.join() !== v.shape.join()) && why(`${path.join(".")}: ${u.dtype}[${u.shape}], then ${v.dtype}[${v.shape}]`))
      if (u instanceof NDSlice && v instanceof NDSlice) return void (String(u) !== String(v) && why(`${path.join(".")}: ${u}, then ${v}`))
      if (u instanceof HostTensor && v instanceof HostTensor)
        return void ((u.dtype !== v.dtype || u.shape.join() !== v.shape.join() || Buffer.compare(u.data, v.data) !== 0) && why(`${path.join(".")}: another host tensor`))
      if (u instanceof Uint8Array && v instanceof Uint8Array) return void (Buffer.compare(u, v) !== 0 && why(`${path.join(".")}: other bytes`))
      if (Array.isArray(u) && Array.isArray(v)) {
        if (u.length !== v.length) return void why(`${path.join(".")}: ${u.length} items, then ${v.length}`)
        return u.forEach((w, i) => walk(w, v[i], [...path, i], false))
      }
      if (typeof u === "object" && u !== null && typeof v === "object" && v !== null && isPlain(u) && isPlain(v)) {
        const ku = Object.keys(u), kv = Object.keys(v)
        if (ku.join() !== kv.join()) return void why(`${path.join(".")}: keys ${ku.join(", ")}, then ${kv.join(", ")}`)
        return ku.forEach((key) => walk((u as Record<string, unknown>)[key], (v as Record<string, unknown>)[key], [...path, key], key === "borrow" && (x.message._tag.startsWith("Borrow"))))
      }
      if (!Object.is(u, v)) why(`${path.join(".")}: ${String(u)}, then ${String(v)}`)
    }
    walk(x.message, y.message, [], false)
  }
  if (d.structural === undefined) {
    // Shapes the controller knows come from the trace: a number that changes them must be in the signature.
    const ha = a.handles, hb = b.handles
    const shape = (t: RemoteTensor | undefined) => (t?.meta ? `${t.meta.dtype}[${t.meta.shape}]` : "unknown")
    const at = ha.findIndex((t, i) => shape(t) !== shape(hb[i]))
    if (ha.length !== hb.length || at >= 0) d.structural = `the tensors it makes have other shapes (${shape(ha[at])}, then ${shape(hb[at])})`
  }
  return d
}

/** `v` with each Ref that `names` renames replaced (plain arrays and objects walked; other values kept). */
const renameRefs = (v: unknown, names: ReadonlyMap<number, Ref>): unknown => {
  if (v instanceof Ref) return names.get(v.id) ?? v
  if (Array.isArray(v)) return v.map((x) => renameRefs(x, names))
  if (typeof v === "object" && v !== null && isPlain(v))
    return Object.fromEntries(Object.entries(v).map(([k, x]) => [k, renameRefs(x, names)]))
  return v
}

/** `message` with the value at `path` replaced. */
const replaceAt = (v: unknown, path: Path, by: unknown): unknown => {
  if (path.length === 0) return by
  const [head, ...rest] = path
  if (Array.isArray(v)) return v.map((x, i) => (i === head ? replaceAt(x, rest, by) : x))
  const o = v as Record<string, unknown>
  return { ...o, [head!]: replaceAt(o[head!], rest, by) }
}

// ---- the recording -----------------------------------------------------------------------

/** Where a formal's actual comes from at each call. */
type Source = { readonly arg: number } | { readonly ref: number }

/** An output: a new tensor (the trace's handle gives its mesh, stream and metadata) or a formal the step redefines. */
type Output = { readonly made: RemoteTensor } | { readonly formal: number }

/** The results one command of the recording defines, as the graph sees them. */
interface Part {
  readonly command: number
  readonly ranks: ReadonlyArray<number>
  /** Formals its value depends on. */
  readonly formals: ReadonlyArray<number>
  readonly outputs: ReadonlyArray<number>
  readonly exchange: Exchange | undefined
  readonly label: string
  readonly site: CallSite | undefined
}

interface Recording<R> {
  readonly id: number
  /** The controller it is defined through (a compiled step may be called under several). */
  readonly core: Core
  readonly trace: Trace
  /** The trace's arguments' tensors (for verify's comparison). */
  readonly args: ReadonlyArray<RemoteTensor>
  readonly ranks: ReadonlyArray<number>
  readonly formals: ReadonlyArray<Source>
  /** Per param: which number of the arguments it is. */
  readonly params: ReadonlyArray<number>
  /** Per number of the arguments: the value it must have (in the signature), or undefined (a parameter, or unused). */
  readonly fixed: ReadonlyArray<number | undefined>
  /** Why each fixed number is fixed. */
  readonly fixedWhy: ReadonlyArray<string | undefined>
  /** Per param: the commands and paths it goes to (for verify). */
  readonly paramAt: ReadonlyArray<ReadonlyArray<{ readonly command: number; readonly path: Path }>>
  readonly outputs: ReadonlyArray<Output>
  readonly parts: ReadonlyArray<Part>
  /** Per command: the parts whose value depends on it. */
  readonly cover: ReadonlyArray<ReadonlyArray<number>>
  readonly value: R
  /** The memory each call writes in place (its version moves): an argument's, or a captured tensor's. */
  readonly written: ReadonlyArray<{ readonly arg: number } | Storage>
  /** Calls so far. */
  calls: number
  /** When it was last called, in the compiled step's calls (which one to replace first). */
  usedAt: number
}

let nextRecording = 1

/** Per rank, the DefineRecording it gets (ranks with the same commands share one message, encoded once). */
const definitions = (id: number, trace: Trace, commands: ReadonlyArray<WorkerMessage>, ranks: ReadonlyArray<number>, formals: ReadonlyArray<number>, params: ReadonlyArray<number>, results: ReadonlyArray<number>) => {
  const byCommands = new Map<string, { ranks: number[]; message: WorkerMessage }>()
  for (const r of ranks) {
    const mine = trace.commands.flatMap((c, k) => (c.ranks.includes(r) ? [k] : []))
    const key = mine.join()
    let d = byCommands.get(key)
    if (d === undefined) {
      byCommands.set(key, (d = { ranks: [], message: { _tag: "DefineRecording", recording: id, idents: trace.commands.length, formals, params, results, commands: mine.map((k) => commands[k]!) } }))
    }
    d.ranks.push(r)
  }
  return [...byCommands.values()]
}

/** The exchange of several commands at once: a rank depends on the union of its peers in each. */
const unionExchange = (exchanges: ReadonlyArray<Exchange>): Exchange | undefined => {
  if (exchanges.length === 0) return undefined
  if (exchanges.length === 1) return exchanges[0]
  const peers = new Map<number, ReadonlyArray<number>>()
  return {
    peers: (r) => {
      let p = peers.get(r)
      if (p === undefined) peers.set(r, (p = [...new Set(exchanges.flatMap((e) => e.peers(r)))]))
      return p
    },
    reads: (r) => exchanges.some((e) => e.reads(r)),
  }
}

const build = <R>(core: Core, name: string, trace: Trace, flat: Flat, value: R, numbers: { fixed: Array<number | undefined>; fixedWhy: Array<string | undefined>; at: Array<Array<{ command: number; path: Path }>> }): { recording: Recording<R>; defines: ReturnType<typeof definitions> } => {
  const commands = trace.commands
  // Formals: refs read before the trace defines them, in order of first read.
  const formalIds: number[] = [], formalIndex = new Map<number, number>()
  const definer = new Map<number, number>()
  const deps: Array<{ commands: number[]; formals: number[] }> = []
  commands.forEach((c, k) => {
    const dep = { commands: [] as number[], formals: [] as number[] }
    for (const id of c.inputs) {
      const by = definer.get(id)
      if (by !== undefined) dep.commands.push(by)
      else {
        let f = formalIndex.get(id)
        if (f === undefined) formalIndex.set(id, (f = formalIds.push(id) - 1))
        dep.formals.push(f)
      }
    }
    deps.push(dep)
    for (const id of c.defines) definer.set(id, k)
  })
  const argIndex = new Map<number, number>()
  flat.tensors.forEach((t, i) => argIndex.has(t.ref.id) || argIndex.set(t.ref.id, i))
  const formals: Source[] = formalIds.map((id) => (argIndex.has(id) ? { arg: argIndex.get(id)! } : { ref: id }))
  // Outputs: the tensors the step made and returned, then the formals it redefined.
  const outputs: Output[] = [], outputRefs: number[] = [], tracedRefs: number[] = []
  const returned = new Set<RemoteTensor>()
  const collect = (v: unknown): void => {
    if (v instanceof RemoteTensor) {
      if (trace.defined.has(v.ref.id) && !formalIndex.has(v.ref.id) && !returned.has(v)) returned.add(v), outputs.push({ made: v }), outputRefs.push(v.ref.id), tracedRefs.push(v.ref.id)
    } else if (Array.isArray(v)) v.forEach(collect)
    else if (typeof v === "object" && v !== null && isPlain(v)) Object.values(v).forEach(collect)
  }
  collect(value)
  // Inside the recording a formal is a ref of its own: the actual's ref is the program's, which the call must not forget.
  const placeholders = new Map(formalIds.map((id) => [id, core.newRef()]))
  formalIds.forEach((id, f) => {
    if (definer.has(id)) outputs.push({ formal: f }), outputRefs.push(placeholders.get(id)!.id), tracedRefs.push(id)
  })
  // One part per command that defines outputs: what its value depends on.
  const byCommand = new Map<number, number[]>()
  tracedRefs.forEach((id, o) => {
    const k = definer.get(id)!
    byCommand.set(k, [...(byCommand.get(k) ?? []), o])
  })
  const cover: number[][] = commands.map(() => [])
  const parts: Part[] = [...byCommand.entries()].sort(([a], [b]) => a - b).map(([k, outs], p) => {
    const seen = new Set<number>([k]), stack = [k], fs = new Set<number>()
    while (stack.length > 0) {
      const j = stack.pop()!
      cover[j]!.push(p)
      for (const f of deps[j]!.formals) fs.add(f)
      for (const i of deps[j]!.commands) if (!seen.has(i)) seen.add(i), stack.push(i)
    }
    const c = commands[k]!
    return {
      command: k, ranks: c.ranks, formals: [...fs], outputs: outs, label: `${name}: ${c.label}`, site: c.site,
      exchange: unionExchange([...seen].flatMap((j) => (commands[j]!.exchange ? [commands[j]!.exchange!] : []))),
    }
  })
  // Parameters: each number that goes straight into commands, as a ref of its own there.
  const params: number[] = [], paramIds: number[] = []
  const rewritten = commands.map((c) => renameRefs(c.message, placeholders) as WorkerMessage)
  numbers.at.forEach((positions, i) => {
    if (positions.length === 0 || numbers.fixed[i] !== undefined) return
    const ref = core.newRef()
    params.push(i)
    paramIds.push(ref.id)
    for (const { command, path } of positions) rewritten[command] = replaceAt(rewritten[command], path, ref) as WorkerMessage
  })
  const id = nextRecording++
  const ranks = [...new Set(commands.flatMap((c) => c.ranks))].sort((a, b) => a - b)
  const recording: Recording<R> = {
    id, core, trace, args: flat.tensors, ranks, formals, params, fixed: numbers.fixed, fixedWhy: numbers.fixedWhy,
    paramAt: params.map((i) => numbers.at[i]!), outputs, parts, cover, value, calls: 0, usedAt: 0,
    written: [
      ...flat.tensors.flatMap((t, arg) => (trace.written.has(t.storage) ? [{ arg }] : [])),
      ...[...trace.written].filter((s) => !flat.tensors.some((t) => t.storage === s)),
    ],
  }
  return { recording, defines: definitions(id, trace, rewritten, ranks, formalIds.map((f) => placeholders.get(f)!.id), paramIds, outputRefs) }
}

/** One call: idents, the graph's parts, one CallRecording per worker, and the step's value with this call's handles. */
const call = <R>(core: Core, recording: Recording<R>, flat: Flat): R => {
  const actuals = recording.formals.map((f) => ("arg" in f ? flat.tensors[f.arg]!.ref : new Ref(f.ref)))
  const fresh = new Map<RemoteTensor, RemoteTensor>()
  const results = recording.outputs.map((o) => {
    if ("formal" in o) return actuals[o.formal]!
    const t = o.made, ref = core.newRef()
    fresh.set(t, new RemoteTensor(t.mesh, ref, t.meta, t.stream))
    return ref
  })
  const commands = recording.trace.commands
  const nodes: Node[] = []
  const first = core.span(recording.ranks, commands.length, (rank, offset, error) => {
    const c = commands[offset]!
    const failure = new RemoteError({
      ident: first + offset, rank, function: c.label, type: error.type, reason: error.message, kind: error.reason, frames: error.frames, site: c.site?.format(),
    })
    for (const p of recording.cover[offset]!) core.graph.fail(nodes[p]!, failure, rank)
  })
  for (const p of recording.parts) nodes.push(core.graph.add(first + p.command, p.ranks, p.formals.map((f) => actuals[f]!.id), [], p.label, p.site, p.exchange))
  recording.parts.forEach((p, i) => core.graph.define(p.outputs.map((o) => results[o]!.id), nodes[i]!))
  if (commands.length > 0) core.post(recording.ranks, { _tag: "CallRecording", ident: first, recording: recording.id, results, actuals, params: recording.params.map((i) => flat.numbers[i]!) })
  for (const w of recording.written) ("arg" in w ? flat.tensors[w.arg]!.storage : w).version++
  recording.calls++
  return rebuild(recording.value, fresh, recording.args, flat.tensors) as R
}

/** The step's value with the trace's tensors replaced by this call's: new results, or the arguments they were. */
const rebuild = (v: unknown, fresh: ReadonlyMap<RemoteTensor, RemoteTensor>, traceArgs: ReadonlyArray<RemoteTensor>, args: ReadonlyArray<RemoteTensor>): unknown => {
  if (v instanceof RemoteTensor) {
    const made = fresh.get(v)
    if (made) return made
    const i = traceArgs.indexOf(v)
    return i >= 0 ? args[i] : v
  }
  if (Array.isArray(v)) return v.map((x) => rebuild(x, fresh, traceArgs, args))
  if (typeof v === "object" && v !== null && isPlain(v))
    return Object.fromEntries(Object.entries(v).map(([k, x]) => [k, rebuild(x, fresh, traceArgs, args)]))
  return v
}

// ---- compile -----------------------------------------------------------------------------

/**
 * Why the step cannot be replayed, found by tracing it once more with the same arguments
 * (nothing is sent), or undefined: a replay repeats the first trace, so a step whose commands
 * depend on what its earlier calls left behind is not one recording. One that uses a tensor its
 * first trace made (state made on a first call, an optimizer's moments) needs warmup; one that
 * issues other commands (a count it keeps) needs that to be an argument.
 */
const repeatProblem = <A extends ReadonlyArray<unknown>, R, E, Rq>(core: Core, name: string, step: (...args: A) => unknown, args: ReadonlyArray<unknown>, flat: Flat, first: Trace, called: CallSite | undefined) =>
  Effect.gen(function* () {
    const again = yield* Effect.result(traced<A, R, E, Rq>(core, name, step, args, called).pipe(
      Effect.catchDefect((d) => Effect.fail(new ControllerError({ message: messageOf(d) }))),
    ))
    if (again._tag === "Failure") {
      // Another failure (a step that releases a tensor it was given, say) leaves nothing to compare.
      const why = messageOf(again.failure)
      return why.includes(madeInside(name))
        ? `traced again, its step uses a tensor its first trace made (${why}): state made on its first call, such as an optimizer's moments, would be made afresh by every replay; compile it with { warmup: 1 } so that call runs op by op before the step is traced`
        : undefined
    }
    const d = compareTraces(first, flat.tensors, again.success.trace, flat.tensors)
    const n = d.numbers[0]
    const differs = d.structural ?? (n && `command ${n.command}: ${describeCommand(first.commands[n.command]!)}: ${n.path.join(".")}: ${n.a}, then ${n.b}`)
    return differs === undefined ? undefined
      : `traced twice with the same arguments, its step issued other commands (${differs}): they depend on something its arguments do not hold (a count it keeps, say); pass that as an argument`
  })

/**
 * Where each number of the arguments goes: traced again with that one number changed (nothing
 * is sent), a number found where it was, with its new value, is a parameter there. One that
 * changes anything else, or makes the step fail, is fixed: part of the signature.
 */
const probeNumbers = <A extends ReadonlyArray<unknown>, R, E, Rq>(core: Core, name: string, step: (...args: A) => unknown, args: ReadonlyArray<unknown>, flat: Flat, first: Trace, called: CallSite | undefined) =>
  Effect.gen(function* () {
    const fixed: Array<number | undefined> = [], fixedWhy: Array<string | undefined> = [], at: Array<Array<{ command: number; path: Path }>> = []
    const paths = numberPaths(flatten(args, true))
    for (let i = 0; i < flat.numbers.length; i++) {
      const v = flat.numbers[i]!, probe = probeValue(v, i)
      const changed = flat.numbers.map((x, j) => (j === i ? probe : x))
      const fix = (why: string) => {
        fixed.push(v)
        fixedWhy.push(`${paths[i]} (a number) is part of the signature: ${why}`)
        at.push([])
      }
      // A throw with the other value (an index out of range, a check in the step) fixes the number too.
      const again = yield* Effect.result(traced<A, R, E, Rq>(core, name, step, withNumbers(args, changed), called).pipe(
        Effect.catchDefect((d) => Effect.fail(new ControllerError({ message: d instanceof Error ? d.message : String(d) }))),
      ))
      if (again._tag === "Failure") {
        fix(`with another value the step fails (${(again.failure as { message?: string }).message ?? String(again.failure)})`)
        continue
      }
      const d = compareTraces(first, flat.tensors, again.success.trace, flat.tensors)
      if (d.structural !== undefined) {
        fix(`another value changes the commands (${d.structural})`)
        continue
      }
      const derived = d.numbers.find((n) => !(Object.is(n.a, v) && Object.is(n.b, probe)))
      if (derived !== undefined) {
        fix(`it reaches ${describeCommand(first.commands[derived.command]!)} through arithmetic (${derived.a} there), which a replay cannot redo; pass that number itself`)
        continue
      }
      fixed.push(undefined)
      fixedWhy.push(undefined)
      at.push(d.numbers.map((n) => ({ command: n.command, path: n.path })))
    }
    return { fixed, fixedWhy, at }
  })

/** Forgets a recording on the workers that hold it: after its calls so far, which still run. */
const deleteOnWorkers = (r: Recording<unknown>): void => {
  if (r.ranks.length > 0) r.core.post(r.ranks, { _tag: "DeleteRecording", recording: r.id })
}

/** A compiled step collected without dispose(): its recordings (held here, not the step) are deleted then. */
const collected = new FinalizationRegistry((cache: Map<string, Array<Recording<unknown>>>) => {
  for (const rs of cache.values()) rs.forEach(deleteOnWorkers)
})

/** Whether a call with `flat` (the recording's signature) has the numbers the recording fixed. */
const fits = (recording: Recording<unknown>, flat: Flat): boolean =>
  recording.fixed.every((v, n) => v === undefined || Object.is(v, flat.numbers[n]))

/** Why a call with `args` does not fit the recording made for `recorded` (flattened with their paths). */
const mismatch = (recording: Recording<unknown>, recorded: Flat, flat: Flat): string => {
  if (flat.key !== recorded.key) {
    const was = recorded.leaves, now = flat.leaves
    const i = now.findIndex((l, j) => l.path !== was[j]?.path || l.key !== was[j]?.key)
    const at = i < 0 ? was.length : i
    const path = now[at]?.path ?? was[at]?.path ?? "the arguments"
    return `${path}: ${was[at]?.path === path ? textOf(was[at]!) : "nothing"}, now ${now[at]?.path === path ? textOf(now[at]!) : "nothing"}`
  }
  const j = recording.fixed.findIndex((v, n) => v !== undefined && !Object.is(v, flat.numbers[n]))
  return `${numberPaths(flat)[j]}: ${recording.fixed[j]}, now ${flat.numbers[j]}; ${recording.fixedWhy[j]}`
}

/** A verify trace against the recording: the difference, naming both call sites, or undefined. */
const verifyAgainst = (recording: Recording<unknown>, again: Trace, flat: Flat): string | undefined => {
  const d = compareTraces(recording.trace, recording.args, again, flat.tensors)
  if (d.structural !== undefined) return d.structural
  const allowed = new Set(recording.paramAt.flatMap((ps) => ps.map((p) => `${p.command}:${p.path.join(".")}`)))
  const bad = d.numbers.find((n) => !allowed.has(`${n.command}:${n.path.join(".")}`))
  return bad === undefined ? undefined : `command ${bad.command}: ${describeCommand(recording.trace.commands[bad.command]!)}, then ${describeCommand(again.commands[bad.command]!)}: ${bad.path.join(".")}: ${bad.a}, then ${bad.b}`
}

/**
 * Compiles `step`: its first call for a signature records the commands it issues and defines
 * them on the workers; every later call replays them with one message per worker. The step is
 * model code (op calls; sync, or an Effect using mesh.reduce, send, borrow ...); what it
 * returns (tensors anywhere in arrays and objects) is what a call returns, with this call's
 * tensors. Its temporaries die with each call. A fetch inside is refused.
 */
export function compile<A extends ReadonlyArray<unknown>, R, E = never, Rq = never>(step: (...args: A) => Effect.Effect<R, E, Rq>, options?: CompileOptions): Compiled<A, R, E, Rq>
export function compile<A extends ReadonlyArray<unknown>, R>(step: (...args: A) => R, options?: CompileOptions): Compiled<A, R, never, never>
export function compile<A extends ReadonlyArray<unknown>, R, E, Rq>(step: (...args: A) => unknown, options: CompileOptions = {}): Compiled<A, R, E, Rq> {
  const name = options.name ?? (step.name || "step")
  const onRetrace = options.onRetrace ?? ((why: string) => console.error(`monarch: ${why}`))
  const maxRecordings = options.maxRecordings ?? 8
  if (!(Number.isInteger(maxRecordings) && maxRecordings >= 1)) throw new ControllerError({ message: `compile(${name}): maxRecordings must be a positive integer, got ${maxRecordings}` })
  const cache = new Map<string, Array<Recording<R>>>()
  const warmup = options.warmup ?? 0
  if (!(Number.isInteger(warmup) && warmup >= 0)) throw new ControllerError({ message: `compile(${name}): warmup must be a non-negative integer, got ${warmup}` })
  /** Calls so far (Recording.usedAt's clock); traces under way (dispose waits for none). */
  let clock = 0, tracingNow = 0, disposed = false
  /** Per signature (without its numbers), the calls run op by op so far (warmup). */
  const warmed = new Map<string, number>()
  let last: { args: ReadonlyArray<unknown>; recording: Recording<R> } | undefined
  const retraces: string[] = []
  let traces = 0

  const record = (core: Core, args: ReadonlyArray<unknown>, flat: Flat, called: CallSite | undefined) =>
    Effect.gen(function* () {
      const first = yield* traced<A, R, E, Rq>(core, name, step, args, called)
      traces++
      const problem = yield* repeatProblem<A, R, E, Rq>(core, name, step, args, flat, first.trace, called)
      if (problem !== undefined) return yield* new ControllerError({ message: `compile(${name}): ${problem}` })
      const numbers = yield* probeNumbers<A, R, E, Rq>(core, name, step, args, flat, first.trace, called)
      const { recording, defines } = build(core, name, first.trace, flat, first.value, numbers)
      for (const d of defines) core.post(d.ranks, d.message)
      return recording
    })

  const find = (flat: Flat) => cache.get(flat.key)?.find((r) => fits(r, flat))

  /** Keeps a new recording; past maxRecordings, the one called least recently is deleted. */
  const keep = (key: string, recording: Recording<R>) => {
    cache.set(key, [...(cache.get(key) ?? []), recording])
    const all = [...cache.entries()].flatMap(([k, rs]) => rs.map((r) => ({ k, r })))
    if (all.length <= maxRecordings) return
    const oldest = all.reduce((a, b) => (b.r.usedAt < a.r.usedAt ? b : a))
    const rest = cache.get(oldest.k)!.filter((r) => r !== oldest.r)
    if (rest.length > 0) cache.set(oldest.k, rest)
    else cache.delete(oldest.k)
    deleteOnWorkers(oldest.r)
  }
  const needsTrace = (r: Recording<R> | undefined) => r === undefined || (options.verify === true && r.calls === 1)

  /** A call that traces: a new signature, or verify's second call. */
  const tracing = (core: Core, args: ReadonlyArray<unknown>, flat: Flat, found: Recording<R> | undefined, called: CallSite | undefined) =>
    Effect.gen(function* () {
      let recording = found
      if (recording === undefined) {
        if (last !== undefined) {
          const why = `compile(${name}): tracing again: ${mismatch(last.recording, flatten(last.args, true), flatten(args, true))}`
          retraces.push(why)
          onRetrace(why)
        }
        recording = yield* record(core, args, flat, called)
        recording.usedAt = ++clock
        keep(flat.key, recording)
      } else {
        const again = yield* traced<A, R, E, Rq>(core, name, step, args, called)
        traces++
        const diverged = verifyAgainst(recording, again.trace, flat)
        if (diverged !== undefined)
          return yield* new ControllerError({ message: `compile(${name}, { verify: true }): the step's second call issued other commands than its first: ${diverged}` })
      }
      last = { args, recording }
      return call(core, recording, flat)
    })

  const compiled = (...args: A) => {
    const flat = flatten(args)
    // Where the program calls the step (as Core.site is for each command), when it will be traced.
    const called = needsTrace(find(flat)) ? CallSite.capture(4) : undefined // this, `compiled`, the user's, one spare
    return Effect.flatMap(Effect.service(Controller), (ctl) => {
      const core = ctl.core
      if (disposed) return Effect.fail(new ControllerError({ message: `compile(${name}) was disposed: its recordings are deleted; compile the step again to call it` }))
      if (core.tracing) return Effect.fail(new ControllerError({ message: `compile(${name}) was called while compile(${core.tracing.name}) records its step; call it outside, or let the outer step be one recording` }))
      const found = find(flat)
      if (found === undefined && (warmed.get(flat.key) ?? 0) < warmup) {
        warmed.set(flat.key, (warmed.get(flat.key) ?? 0) + 1)
        return Effect.suspend(() => {
          const out = step(...args)
          return (Effect.isEffect(out) ? out : Effect.succeed(out)) as Effect.Effect<R, E | ControllerError, Rq>
        })
      }
      // What the step released of the tensors outside it goes after the call (that reads them), or once the trace failed.
      if (needsTrace(found)) {
        tracingNow++
        return Effect.ensuring(tracing(core, args, flat, found, called), Effect.sync(() => {
          tracingNow--
          core.releaseHeld()
        }))
      }
      found!.usedAt = ++clock
      last = { args, recording: found! }
      return Effect.succeed(call(core, found!, flat))
    })
  }
  const dispose = () => {
    if (tracingNow > 0) throw new ControllerError({ message: `compile(${name}).dispose() was called while its step is being traced (a recording in use cannot be deleted); dispose it after the call` })
    if (disposed) return
    disposed = true
    collected.unregister(compiled)
    for (const rs of cache.values()) rs.forEach(deleteOnWorkers)
    cache.clear()
  }
  collected.register(compiled, cache as Map<string, Array<Recording<unknown>>>, compiled)
  return Object.defineProperties(compiled, {
    traces: { get: () => traces },
    retraces: { get: () => retraces },
    recordings: { get: () => [...cache.values()].flat().map((r) => r.id) },
    dispose: { value: dispose },
    [Symbol.dispose]: { value: dispose },
  }) as unknown as Compiled<A, R, E, Rq>
}
