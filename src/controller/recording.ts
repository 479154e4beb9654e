/**
 * Recordings (Monarch's `compile`): a step's commands recorded on its first call for a given
 * signature, defined once on each worker (DefineRecording), and replayed by every later call
 * with one CallRecording per worker that maps the call's tensors, replay parameters and results
 * to refs.
 *
 * The signature is what the commands may depend on: each tensor argument's dtype, shape, mesh
 * and stream (and which arguments are the same tensor), every other argument, numbers included
 * (a JavaScript number cannot be traced, so nothing proves one unused: a new value traces
 * again), the structure of the arguments, and what the step read of an object given by
 * identity (a class instance: read through a proxy while tracing, read again on every call).
 * The numbers the program names with param() are replay parameters instead: checked on every
 * trace by tracing once more with other values (sending nothing), a parameter found where it
 * was, with its new value, is sent with each call; one whose value changes the commands, the
 * tensors' dtypes or shapes, or that goes in through arithmetic is refused, naming it. Every
 * trace after the first says why it was made.
 *
 * A call takes one ident per recorded command, so that a failure on a worker is reported
 * against the command that failed (its label and call site); on the controller each result
 * depends only on the commands and inputs its value came from, so a failure poisons exactly
 * what it would have outside a recording. Temporaries live only during a call on the workers
 * and never on the controller; their handles from the trace are retired. A replay's handles
 * carry what the trace's had: dtype, shape and placement.
 */
import { Effect } from "effect"
import type { WorkerMessage } from "../protocol/messages.ts"
import { NDSlice } from "../protocol/ndslice.ts"
import { FloatNumber, HostTensor, Ref, TensorFactory } from "../protocol/values.ts"
import { autocastDtype } from "./autocast.ts"
import { Controller } from "./controller.ts"
import type { Core } from "./core.ts"
import { ControllerError, RemoteError } from "./errors.ts"
import type { Exchange, Node } from "./graph.ts"
import { RemoteStream, RemoteTensor } from "./handles.ts"
import { Mesh } from "./mesh.ts"
import { samePlacement } from "./placement.ts"
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

/** A number a compiled step takes as a replay parameter: see param(). */
export class Param {
  constructor(readonly value: number) {}

  toString(): string {
    return `param(${this.value})`
  }
}

/**
 * Names a number of a compiled step's call as a replay parameter (a learning rate, a step
 * count): the step gets the number, and a call with another value replays the recording with
 * it. Every other number is part of the signature (a new value traces again).
 */
export const param = (value: number): Param => {
  if ((value as unknown) instanceof FloatNumber) throw new ControllerError({ message: `param(${value}): a replay parameter is an integer or a fraction; pass ${value} as a plain argument (part of the signature)` })
  if (typeof value !== "number") throw new ControllerError({ message: `param(value): a replay parameter is a number, not ${typeof value}` })
  return new Param(value)
}

/** A step's arguments as a compiled call takes them: any number (in arrays and plain objects too) may be a param(). */
export type WithParams<T> = T extends number ? T | Param
  : T extends RemoteTensor | HostTensor | Uint8Array | ((...args: never[]) => unknown) ? T
  : T extends ReadonlyArray<unknown> | Record<string, unknown> ? { [K in keyof T]: WithParams<T[K]> }
  : T

/** A compiled step: call it like the step; it returns an Effect of the step's result. */
export interface Compiled<A extends ReadonlyArray<unknown>, R, E, Rq> {
  (...args: { [K in keyof A]: WithParams<A[K]> }): Effect.Effect<R, E | ControllerError, Rq | Controller>
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
  /** The replay parameters' values, in order, and their paths. */
  readonly params: number[]
  readonly paramPaths: string[]
  /** The objects given by identity (not plain objects or arrays, tensors or bytes), in order, and their paths. */
  readonly objects: object[]
  readonly objectPaths: string[]
  readonly leaves: Leaf[]
  /** The signature, but for what the step reads of `objects`. */
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

/** A number as the signature and messages write it: every value its own (-0 too). */
const numberText = (v: number): string => (Object.is(v, -0) ? "-0" : String(v))

/**
 * Another value for the i-th replay parameter, of the same kind (an integer, or a fraction:
 * ops promote an integer tensor with a float, which a fraction is, not with an integer, so the kind is part of
 * the signature), near it (the same sign, a probability stays one), or the value itself where
 * it has no other of its kind (a value that is not finite, or past the integers' precision).
 */
const probeValue = (v: number, i: number): number => {
  if (Number.isInteger(v)) return Math.abs(v) < 2 ** 52 ? v + 1 + i : v
  if (!Number.isFinite(v) || Math.abs(v) < 2 ** -1000) return v
  for (let k = i; ; k++) {
    const p = v * (0.75 - k / 1024)
    if (!Number.isInteger(p) && p !== v) return p
  }
}

/** What the signature holds of a replay parameter: its kind, or its value where it has no other of its kind. */
const paramKind = (v: number): string => (Object.is(probeValue(v, 0), v) ? numberText(v) : Number.isInteger(v) ? "an integer" : "a fraction")

const metaText = (t: RemoteTensor): string => (t.meta ? `${t.meta.dtype}[${t.meta.shape}]` : "a tensor of unknown shape")

/** A leaf as messages say it. */
const textOf = (l: Leaf): string => {
  const v = l.value
  if (typeof v === "number") return numberText(v)
  if (v instanceof FloatNumber) return `float(${numberText(v.value)})`
  if (v instanceof Param) return `a replay parameter (${paramKind(v.value)})`
  if (v instanceof RemoteTensor) return l.same >= 0 ? `the same tensor as tensor argument ${l.same}` : `${metaText(v)} on ${v.mesh}, stream ${v.stream.ref.id}`
  if (Array.isArray(v)) return `an array of ${v.length}`
  if (isTree(v)) return `an object with keys ${Object.keys(v).join(", ")}`
  if (typeof v === "object" && v !== null) return `another ${v.constructor?.name ?? "object"}`
  if (typeof v === "function") return "another function"
  return typeof v === "string" ? JSON.stringify(v) : String(v)
}

/** The arguments' leaves in order (with their paths when `paths`: a trace, or a message, needs them). */
const flatten = (args: ReadonlyArray<unknown>, paths = false): Flat => {
  const tensors: RemoteTensor[] = [], params: number[] = [], paramPaths: string[] = [], objects: object[] = [], objectPaths: string[] = [], leaves: Leaf[] = []
  let key = ""
  const leaf = (path: string, k: string, value: unknown, same = -1) => {
    leaves.push({ path, key: k, value, same })
    key += k + "|"
  }
  const walk = (v: unknown, path: string): void => {
    if (typeof v === "number") return leaf(path, `n${numberText(v)}`, v)
    // A float is its value too, told from the integer of that value (it promotes differently).
    if (v instanceof FloatNumber) return leaf(path, `f${numberText(v.value)}`, v)
    if (v instanceof Param) {
      params.push(v.value)
      paramPaths.push(path)
      return leaf(path, `p${paramKind(v.value)}`, v)
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
    if (typeof v === "object" && v !== null && !(v instanceof HostTensor) && !(v instanceof Uint8Array)) objects.push(v), objectPaths.push(path)
    leaf(path, (typeof v === "object" && v !== null) || typeof v === "function" ? `@${idOf(v)}` : `${typeof v}:${String(v)}`, v)
  }
  for (let i = 0; i < args.length; i++) walk(args[i], paths ? `argument ${i}` : "")
  return { tensors, params, paramPaths, objects, objectPaths, leaves, key }
}

// ---- what a step reads of objects ----------------------------------------------------------

/** One read of an object given by identity: the value at `path` from the call's objects[object] (or its keys). */
interface ObjectRead {
  readonly object: number
  readonly path: ReadonlyArray<PropertyKey>
  /** The value read (objects by identity), or with `keys` the object's own keys, joined. */
  readonly value: unknown
  readonly keys: boolean
}

const nativeCode = /\{\s*\[native code\]\s*\}\s*$/
const natives = new WeakMap<object, boolean>()
/** Whether an object's class is the engine's (a Map, a Date): their methods refuse a proxy. */
const isNative = (v: object): boolean => {
  const proto: unknown = Object.getPrototypeOf(v)
  if (proto === null || typeof proto !== "object") return false
  let n = natives.get(proto)
  if (n === undefined) {
    const ctor: unknown = (proto as { constructor?: unknown }).constructor
    natives.set(proto, (n = typeof ctor === "function" && nativeCode.test(Function.prototype.toString.call(ctor))))
  }
  return n
}

/** Whether the step's reads of `v` are followed: a user's object, array or plain object (handles and the engine's classes are kept whole). */
const followed = (v: unknown): v is object =>
  typeof v === "object" && v !== null && !(v instanceof RemoteTensor) && !(v instanceof HostTensor) && !ArrayBuffer.isView(v) && !(v instanceof Param) && !(v instanceof FloatNumber) &&
  !(v instanceof Mesh) && !(v instanceof RemoteStream) && (Array.isArray(v) || isPlain(v) || !isNative(v))

/** Follows what one trace's step reads of the objects it was given by identity, through proxies. */
class Reader {
  readonly reads: ObjectRead[] = []
  /** Set once the trace ends: a proxy the step kept records nothing after. */
  done = false
  private readonly proxies = new WeakMap<object, object>()
  private readonly targets = new WeakMap<object, object>()

  /** `target` behind a proxy that notes every read (objects read are followed in turn). */
  follow(target: object, object: number, path: ReadonlyArray<PropertyKey>): object {
    const known = this.proxies.get(target)
    if (known !== undefined) return known
    const reader = this
    const proxy = new Proxy(target, {
      get(t, key, receiver) {
        const v: unknown = Reflect.get(t, key, receiver)
        if (reader.done) return v
        if (followed(v)) return reader.follow(v, object, [...path, key])
        reader.reads.push({ object, path: [...path, key], value: v, keys: false })
        return v
      },
      ownKeys(t) {
        const keys = Reflect.ownKeys(t)
        if (!reader.done) reader.reads.push({ object, path, value: keys.map(String).join(), keys: true })
        return keys
      },
    })
    this.proxies.set(target, proxy)
    this.targets.set(proxy, target)
    return proxy
  }

  /** `v` with the proxies in it (returned by the step) replaced by their objects. */
  unwrap(v: unknown): unknown {
    if (typeof v !== "object" || v === null) return v
    const target = this.targets.get(v)
    if (target !== undefined) return target
    if (Array.isArray(v)) return v.map((x) => this.unwrap(x))
    if (isTree(v)) return Object.fromEntries(Object.entries(v).map(([k, x]) => [k, this.unwrap(x)]))
    return v
  }
}

/** What `read` finds in `root` now (undefined where its path no longer leads anywhere, or a getter throws). */
const readAgain = (root: object | undefined, read: ObjectRead): unknown => {
  try {
    let at: unknown = root
    for (const key of read.path) {
      if ((typeof at !== "object" && typeof at !== "function") || at === null) return undefined
      at = Reflect.get(at, key)
    }
    if (!read.keys) return at
    return typeof at === "object" && at !== null ? Reflect.ownKeys(at).map(String).join() : undefined
  } catch {
    return undefined
  }
}

/** A read as messages say where it is: "argument 1.scale". */
const readPath = (objectPaths: ReadonlyArray<string>, r: ObjectRead): string =>
  `${objectPaths[r.object]}${r.path.map((k) => (typeof k === "symbol" ? `[${String(k)}]` : `.${k}`)).join("")}${r.keys ? " (its keys)" : ""}`

/** A value read from an object, as messages say it. */
const valueText = (v: unknown): string => {
  if (typeof v === "number") return numberText(v)
  if (typeof v === "string") return JSON.stringify(v)
  if (typeof v === "function") return "a function"
  if (typeof v === "object" && v !== null) return v instanceof RemoteTensor || v instanceof Mesh ? String(v) : `a ${v.constructor?.name ?? "object"}`
  return String(v)
}

/**
 * The arguments as the step gets them: each param() its value (`values`, in order), and when
 * tracing (`reader`) each object given by identity behind a proxy that notes what the step
 * reads of it. Arrays and plain objects that hold neither are the program's own.
 */
const stepArgs = (args: ReadonlyArray<unknown>, values: ReadonlyArray<number>, reader?: Reader): unknown[] => {
  let p = 0, o = 0
  const walk = (v: unknown): unknown => {
    if (v instanceof Param) return values[p++]
    if (typeof v !== "object" || v === null || v instanceof RemoteTensor || v instanceof HostTensor || v instanceof Uint8Array || v instanceof FloatNumber) return v
    if (Array.isArray(v)) {
      const out = v.map(walk)
      return out.some((x, i) => x !== v[i]) ? out : v
    }
    if (isPlain(v)) {
      const keys = Object.keys(v), out = keys.map((k) => walk((v as Record<string, unknown>)[k]))
      return out.some((x, i) => x !== (v as Record<string, unknown>)[keys[i]!]) ? Object.fromEntries(keys.map((k, i) => [k, out[i]])) : v
    }
    const object = o++
    return reader !== undefined && followed(v) ? reader.follow(v, object, []) : v
  }
  return args.map(walk)
}

// ---- traces ------------------------------------------------------------------------------

interface Traced1<R> {
  readonly trace: Trace
  readonly value: R
  /** What the step read of the objects it was given by identity. */
  readonly reads: ReadonlyArray<ObjectRead>
}

/** What a trace's retired handles say when used again (and how a second trace's use of one is told apart). */
const madeInside = (name: string) => `was made inside compile(${name})'s step and not returned from it`

const messageOf = (e: unknown): string => (e as { message?: string }).message ?? String(e)

/**
 * Runs the step with Core recording instead of sending, its replay parameters at `values`;
 * the trace's handles are retired after.
 */
const traced = <A extends ReadonlyArray<unknown>, R, E, Rq>(core: Core, name: string, step: (...args: A) => unknown, args: ReadonlyArray<unknown>, values: ReadonlyArray<number>, called: CallSite | undefined): Effect.Effect<Traced1<R>, E | ControllerError, Rq> =>
  Effect.suspend(() => {
    const trace = new Trace(name, () => core.site(4), called) // between a borrow's method and here: its post, Core.post, Trace.post, this
    const reader = new Reader()
    core.tracing = trace
    const end = Effect.sync(() => {
      reader.done = true
      if (core.tracing === trace) core.tracing = undefined
      for (const t of trace.handles) t.retire(`${t} ${madeInside(name)}: it lived only during that call`)
    })
    let body: Effect.Effect<R, E | ControllerError, Rq>
    try {
      const out = step(...(stepArgs(args, values, reader) as unknown as A))
      body = (Effect.isEffect(out) ? out : Effect.succeed(out)) as Effect.Effect<R, E, Rq>
    } catch (e) {
      body = e instanceof ControllerError ? Effect.fail(e) : Effect.die(e)
    }
    // Retired once the value is read: the calls return this call's handles in their place.
    return body.pipe(Effect.map((value) => ({ trace, value: reader.unwrap(value) as R, reads: reader.reads })), Effect.ensuring(end))
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
    // Dtypes and shapes the controller knows come from the trace: a replay cannot change them.
    const ha = a.handles, hb = b.handles
    const shape = (t: RemoteTensor | undefined) => (t?.meta ? `${t.meta.dtype}[${t.meta.shape}]` : "unknown")
    const at = ha.findIndex((t, i) => shape(t) !== shape(hb[i]))
    if (ha.length !== hb.length || at >= 0) d.structural = `the tensors it makes have other dtypes or shapes (${shape(ha[at])}, then ${shape(hb[at])})`
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
  /** Per param of the recording: which replay parameter of the arguments it is. */
  readonly params: ReadonlyArray<number>
  /** What the step read of the objects it was given by identity: a call fits when each reads the same again. */
  readonly reads: ReadonlyArray<ObjectRead>
  /** The tensors the step read but was not given, each with the first command that read it: a call refuses one released. */
  readonly captured: ReadonlyArray<{ readonly tensor: RemoteTensor; readonly by: string }>
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

/** Where a replay parameter goes in the commands. */
type Positions = ReadonlyArray<{ readonly command: number; readonly path: Path }>

const build = <R>(core: Core, name: string, traced: Traced1<R>, flat: Flat, at: ReadonlyArray<Positions>): { recording: Recording<R>; defines: ReturnType<typeof definitions> } => {
  const { trace, value } = traced
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
  const captured = formalIds.flatMap((id) => {
    const tensor = argIndex.has(id) ? undefined : trace.read.get(id)
    return tensor === undefined ? [] : [{ tensor, by: describeCommand(commands.find((c) => c.inputs.includes(id))!) }]
  })
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
  // Parameters: each replay parameter that goes into commands, as a ref of its own there.
  const params: number[] = [], paramIds: number[] = []
  const rewritten = commands.map((c) => renameRefs(c.message, placeholders) as WorkerMessage)
  at.forEach((positions, i) => {
    if (positions.length === 0) return
    const ref = core.newRef()
    params.push(i)
    paramIds.push(ref.id)
    for (const { command, path } of positions) rewritten[command] = replaceAt(rewritten[command], path, ref) as WorkerMessage
  })
  const id = nextRecording++
  const ranks = [...new Set(commands.flatMap((c) => c.ranks))].sort((a, b) => a - b)
  const recording: Recording<R> = {
    id, core, trace, args: flat.tensors, ranks, formals, params, reads: traced.reads, captured,
    paramAt: params.map((i) => at[i]!), outputs, parts, cover, value, calls: 0, usedAt: 0,
    written: [
      ...flat.tensors.flatMap((t, arg) => (trace.written.has(t.storage) ? [{ arg }] : [])),
      ...[...trace.written].filter((s) => !flat.tensors.some((t) => t.storage === s)),
    ],
  }
  return { recording, defines: definitions(id, trace, rewritten, ranks, formalIds.map((f) => placeholders.get(f)!.id), paramIds, outputRefs) }
}

/**
 * One call: idents, the graph's parts, one CallRecording per worker, and the step's value with
 * this call's handles; refused, sending nothing, when a tensor the step captured was released.
 */
const call = <R>(core: Core, name: string, recording: Recording<R>, flat: Flat): Effect.Effect<R, ControllerError> => {
  const gone = recording.captured.find((c) => c.tensor.released)
  if (gone !== undefined)
    return Effect.fail(new ControllerError({ message: `compile(${name}): ${gone.tensor}, a tensor the step captured (read by ${gone.by}), was released, and a replay reads it: give the step that tensor as an argument, or compile it again` }))
  const actuals = recording.formals.map((f) => ("arg" in f ? flat.tensors[f.arg]!.ref : new Ref(f.ref)))
  const fresh = new Map<RemoteTensor, RemoteTensor>()
  const results = recording.outputs.map((o) => {
    if ("formal" in o) return actuals[o.formal]!
    const t = o.made, ref = core.newRef(), made = new RemoteTensor(t.mesh, ref, t.meta, t.stream)
    samePlacement(t, made)
    fresh.set(t, made)
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
  if (commands.length > 0) core.post(recording.ranks, { _tag: "CallRecording", ident: first, recording: recording.id, results, actuals, params: recording.params.map((i) => flat.params[i]!) })
  for (const w of recording.written) ("arg" in w ? flat.tensors[w.arg]!.storage : w).version++
  recording.calls++
  core.recordings.touch(recording.id)
  return Effect.succeed(rebuild(recording.value, fresh, recording.args, flat.tensors) as R)
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

/** A trace of the step, or its failure as a ControllerError (a throw in the step included). */
type Attempt<R> = { readonly _tag: "Success"; readonly success: Traced1<R> } | { readonly _tag: "Failure"; readonly failure: unknown }

/**
 * Why the step cannot be replayed, from a trace with the same arguments (`again`), or
 * undefined: a replay repeats the first trace, so a step whose commands depend on what its
 * earlier calls left behind is not one recording. One that uses a tensor its first trace made
 * (state made on a first call, an optimizer's moments) needs warmup; one that issues other
 * commands (a count it keeps) needs that to be an argument.
 */
const repeatProblem = <R>(name: string, again: Attempt<R>, flat: Flat, first: Trace): string | undefined => {
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
}

/**
 * Where each replay parameter goes, from a trace with the parameters at `values` (nothing is
 * sent): each found where it was in the first trace, with its new value, and nothing else
 * changed. Or why not: the step fails, its commands or tensors change, or a number changes
 * that is none of the parameters (one reached a command through arithmetic).
 */
const positionsIn = <R>(again: Attempt<R>, flat: Flat, values: ReadonlyArray<number>, first: Trace): { at: Positions[] } | { why: string } => {
  if (again._tag === "Failure") return { why: `the step fails (${messageOf(again.failure)})` }
  const d = compareTraces(first, flat.tensors, again.success.trace, flat.tensors)
  if (d.structural !== undefined) return { why: `it changes the commands or the tensors (${d.structural})` }
  const at: Array<Array<{ command: number; path: Path }>> = flat.params.map(() => [])
  for (const n of d.numbers) {
    const i = flat.params.findIndex((v, j) => Object.is(n.a, v) && Object.is(n.b, values[j]))
    if (i < 0) return { why: `it reaches ${describeCommand(first.commands[n.command]!)} through arithmetic (${numberText(n.a)} there, then ${numberText(n.b)}), which a replay cannot redo: compute that number outside the step and pass it` }
    at[i]!.push({ command: n.command, path: n.path })
  }
  return { at }
}

/**
 * Checks the first trace with one more (nothing is sent): with the same arguments when the
 * call names no replay parameter, else with every parameter at another value, which also
 * finds where each goes. A difference is then traced down: the same arguments again (state
 * the arguments do not hold), then one parameter at a time, to name the one at fault.
 */
const checkTrace = <A extends ReadonlyArray<unknown>, R, E, Rq>(core: Core, name: string, step: (...args: A) => unknown, args: ReadonlyArray<unknown>, flat: Flat, first: Trace, called: CallSite | undefined) =>
  Effect.gen(function* () {
    const attempt = (values: ReadonlyArray<number>) => Effect.result(traced<A, R, E, Rq>(core, name, step, args, values, called).pipe(
      Effect.catchDefect((d) => Effect.fail(new ControllerError({ message: messageOf(d) }))),
    )) as Effect.Effect<Attempt<R>, never, Rq>
    const refuse = (why: string) => new ControllerError({ message: `compile(${name}): ${why}` })
    const probes = flat.params.map(probeValue)
    const again = yield* attempt(probes)
    if (flat.params.length === 0) {
      const problem = repeatProblem(name, again, flat, first)
      return problem === undefined ? [] : yield* refuse(problem)
    }
    const found = positionsIn(again, flat, probes, first)
    if ("at" in found) return found.at
    const problem = repeatProblem(name, yield* attempt(flat.params), flat, first)
    if (problem !== undefined) return yield* refuse(problem)
    let culprit = 0, why = found.why
    for (let i = 0; i < flat.params.length && flat.params.length > 1; i++) {
      const one = flat.params.map((v, j) => (j === i ? probes[i]! : v))
      const alone = positionsIn(yield* attempt(one), flat, one, first)
      if ("why" in alone) {
        culprit = i, why = alone.why
        break
      }
    }
    const path = flatten(args, true).paramPaths[culprit]
    return yield* refuse(`${path} is a replay parameter (param(${numberText(flat.params[culprit]!)})), but with another value (${numberText(probes[culprit]!)}) ${why}; pass it as a plain number instead (part of the signature: each new value traces again)`)
  })

/** Signatures a compiled step counts warmup calls of at once (numbers that change on every call make a new one each). */
const WARMING = 64

/** Forgets a recording on the workers that hold it: after its calls so far, which still run. */
const deleteOnWorkers = (r: Recording<unknown>): void => {
  r.core.recordings.forget(r.id)
  if (r.ranks.length > 0) r.core.post(r.ranks, { _tag: "DeleteRecording", recording: r.id })
}

/** Forgets a recording in its step's cache and on the workers: past maxRecordings, or to make room on the workers (Core.recordings). */
const drop = <R>(cache: Map<string, Array<Recording<R>>>, recording: Recording<R>): void => {
  for (const [k, rs] of cache) {
    if (!rs.includes(recording)) continue
    const rest = rs.filter((r) => r !== recording)
    if (rest.length > 0) cache.set(k, rest)
    else cache.delete(k)
  }
  deleteOnWorkers(recording)
}

/** `drop` for Core.recordings, made out here so that it holds the cache and not the compiled step (which may then be collected). */
const evictor = <R>(cache: Map<string, Array<Recording<R>>>, recording: Recording<R>) => () => drop(cache, recording)

/** A compiled step collected without dispose(): its recordings (held here, not the step) are deleted then. */
const collected = new FinalizationRegistry((cache: Map<string, Array<Recording<unknown>>>) => {
  for (const rs of cache.values()) rs.forEach(deleteOnWorkers)
})

/** The first of the recording's reads that reads otherwise in this call's objects. */
const unlikeRead = (recording: Recording<unknown>, flat: Flat): ObjectRead | undefined =>
  recording.reads.find((r) => !Object.is(readAgain(flat.objects[r.object], r), r.value))

/** Why a call with `args` does not fit the recording made for `recorded` (flattened with their paths). */
const mismatch = (recording: Recording<unknown>, recorded: Flat, flat: Flat): string => {
  if (flat.key !== recorded.key) {
    const was = recorded.leaves, now = flat.leaves
    const i = now.findIndex((l, j) => l.path !== was[j]?.path || l.key !== was[j]?.key)
    const at = i < 0 ? was.length : i
    const path = now[at]?.path ?? was[at]?.path ?? "the arguments"
    return `${path}: ${was[at]?.path === path ? textOf(was[at]!) : "nothing"}, now ${now[at]?.path === path ? textOf(now[at]!) : "nothing"}`
  }
  const r = unlikeRead(recording, flat)
  return r === undefined ? "the same signature, whose recording was deleted (maxRecordings)"
    : `${readPath(flat.objectPaths, r)}: ${valueText(r.value)}, now ${valueText(readAgain(flat.objects[r.object], r))} (read by the step)`
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
  /** Per signature not traced yet, the calls run op by op so far (warmup); the oldest forgotten past WARMING. */
  const warmed = new Map<string, number>()
  let last: { args: ReadonlyArray<unknown>; recording: Recording<R> } | undefined
  const retraces: string[] = []
  let traces = 0

  const record = (core: Core, args: ReadonlyArray<unknown>, flat: Flat, called: CallSite | undefined) =>
    Effect.gen(function* () {
      const first = yield* traced<A, R, E, Rq>(core, name, step, args, flat.params, called)
      traces++
      const at = yield* checkTrace<A, R, E, Rq>(core, name, step, args, flat, first.trace, called)
      const { recording, defines } = build(core, name, first, flat, at)
      // Room on the workers first: the deletions go before the definition.
      const tooBig = core.recordings.admit(recording.id, first.trace.commands.length, evictor(cache, recording))
      if (tooBig !== undefined) return yield* new ControllerError({ message: `compile(${name}): ${tooBig}` })
      for (const d of defines) core.post(d.ranks, d.message)
      return recording
    })

  const find = (flat: Flat) => cache.get(flat.key)?.find((r) => unlikeRead(r, flat) === undefined)

  /** Keeps a new recording; past maxRecordings, the one called least recently is deleted. */
  const keep = (key: string, recording: Recording<R>) => {
    cache.set(key, [...(cache.get(key) ?? []), recording])
    const all = [...cache.values()].flat()
    if (all.length <= maxRecordings) return
    drop(cache, all.reduce((a, b) => (b.usedAt < a.usedAt ? b : a)))
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
        warmed.delete(flat.key)
        recording.usedAt = ++clock
        keep(flat.key, recording)
      } else {
        const again = yield* traced<A, R, E, Rq>(core, name, step, args, flat.params, called)
        traces++
        const diverged = verifyAgainst(recording, again.trace, flat)
        if (diverged !== undefined)
          return yield* new ControllerError({ message: `compile(${name}, { verify: true }): the step's second call issued other commands than its first: ${diverged}` })
      }
      last = { args, recording }
      return yield* call(core, name, recording, flat)
    })

  const compiled = (...args: ReadonlyArray<unknown>) => {
    const flat = flatten(args), scopeDtype = autocastDtype()
    // Where the program calls the step (as Core.site is for each command), when it will be traced.
    const called = needsTrace(find(flat)) ? CallSite.capture(4) : undefined // this, `compiled`, the user's, one spare
    return Effect.flatMap(Effect.service(Controller), (ctl) => {
      const core = ctl.core
      if (disposed) return Effect.fail(new ControllerError({ message: `compile(${name}) was disposed: its recordings are deleted; compile the step again to call it` }))
      if (core.tracing) return Effect.fail(new ControllerError({ message: `compile(${name}) was called while compile(${core.tracing.name}) records its step; call it outside, or let the outer step be one recording` }))
      // the step runs when its Effect does, after an autocast scope around this call has closed
      if (scopeDtype !== null) return Effect.fail(new ControllerError({ message: `compile(${name}) was called inside autocast("${scopeDtype}"), which ends before the step runs; call autocast inside the step` }))
      const found = find(flat)
      if (found === undefined && (warmed.get(flat.key) ?? 0) < warmup) {
        warmed.set(flat.key, (warmed.get(flat.key) ?? 0) + 1)
        if (warmed.size > WARMING) warmed.delete(warmed.keys().next().value!)
        return Effect.suspend(() => {
          const out = step(...(stepArgs(args, flat.params) as unknown as A))
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
      return call(core, name, found!, flat)
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
