/**
 * A compiled call's signature: its arguments flattened to leaves (tensors by dtype, shape, mesh
 * and stream, and which are the same tensor; numbers by value; replay parameters by kind; the
 * structure of arrays and plain objects; other objects by identity), and how messages name a leaf.
 */
import { isContiguous } from "../../ops/strided.ts"
import { FloatNumber, HostTensor } from "../../protocol/values.ts"
import { RemoteTensor } from "../tensor.ts"
import { Param, numberText, paramKind } from "./params.ts"

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
export interface Flat {
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

export const isPlain = (v: object): boolean => {
  const proto: unknown = Object.getPrototypeOf(v)
  return proto === Object.prototype || proto === null
}

export const isTree = (v: unknown): v is object =>
  typeof v === "object" && v !== null && !(v instanceof HostTensor) && !(v instanceof Uint8Array) && !(v instanceof RemoteTensor) && isPlain(v)

/**
 * A tensor argument's layout, where it is not row-major from its storage's start: the views a
 * step makes of it, and the strides of what it returns, are the trace's only for that layout.
 */
const layoutKey = (t: RemoteTensor): string => {
  const l = t.layout
  return l === undefined || (l.offset === 0 && isContiguous(l.shape, l.strides)) ? "" : ` strides [${l.strides}] from ${l.offset}`
}

const metaText = (t: RemoteTensor): string => (t.meta ? `${t.meta.dtype}[${t.meta.shape}]${layoutKey(t)}` : "a tensor of unknown shape")

/** A leaf as messages say it. */
export const textOf = (l: Leaf): string => {
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
export const flatten = (args: ReadonlyArray<unknown>, paths = false): Flat => {
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
      return leaf(path, same >= 0 ? `=${same}` : `${v.meta ? `${v.meta.dtype}[${v.meta.shape}]${layoutKey(v)}` : "?"}@${idOf(v.mesh)}/${v.stream.ref.id}`, v, same)
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
