/**
 * What a step reads of the objects it is given by identity (a class instance): while tracing,
 * each is behind a proxy that notes every read; a later call fits the recording only if each
 * read finds the same again. Also the arguments as the step gets them (stepArgs).
 */
import { FloatNumber, HostTensor } from "../../protocol/values.ts"
import { RemoteStream } from "../handles.ts"
import { Mesh } from "../mesh.ts"
import { RemoteTensor } from "../tensor.ts"
import { Param, numberText } from "./params.ts"
import { isPlain, isTree } from "./signature.ts"

/** One read of an object given by identity: the value at `path` from the call's objects[object] (or its keys). */
export interface ObjectRead {
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
export class Reader {
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
export const readAgain = (root: object | undefined, read: ObjectRead): unknown => {
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
export const readPath = (objectPaths: ReadonlyArray<string>, r: ObjectRead): string =>
  `${objectPaths[r.object]}${r.path.map((k) => (typeof k === "symbol" ? `[${String(k)}]` : `.${k}`)).join("")}${r.keys ? " (its keys)" : ""}`

/** A value read from an object, as messages say it. */
export const valueText = (v: unknown): string => {
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
export const stepArgs = (args: ReadonlyArray<unknown>, values: ReadonlyArray<number>, reader?: Reader): unknown[] => {
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
