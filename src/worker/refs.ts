/**
 * The worker's environment: numbered refs to values (tensors, streams, meshes) or to the
 * DependentOnError that poisoned them. A value may sit under several refs (borrows, an
 * in-place result); owned resources are disposed when the last ref to them goes.
 */
import { Ref, HostTensor, SharedTensor } from "../protocol/values.ts"
import { SegmentRefused } from "../net/shm.ts"
import type { WorkerUploads } from "../net/uploads.ts"
import type { DirectReads } from "./direct.ts"
import { Tensor } from "../../ffi/tensor.ts"
import type { Native } from "../../ffi/native.ts"
import type { Stream } from "../../ffi/stream.ts"
import { DependentOnError, UnknownRef, WrongRefType } from "./errors.ts"

/** Values the env owns (tensors, streams, meshes) are Disposable: disposed with their last ref. */
const isOwned = (v: unknown): v is Disposable =>
  typeof v === "object" && v !== null && typeof (v as Partial<Disposable>)[Symbol.dispose] === "function"

/** Where a tensor goes that is let go while a collective in flight holds its memory (inflight.ts). */
export interface Deferrer {
  /** True when it keeps `t` to free later. */
  defer(t: Tensor): boolean
}

/** An owned value with its count of holding refs under an env's key. */
type Held = Disposable & { [key: symbol]: number | undefined }

/** How many more forgotten entries than live ones RefEnv keeps before it compacts its map. */
const COMPACT_SLACK = 1 << 16

export class RefEnv {
  constructor(private readonly later?: Deferrer) {}

  /**
   * Ref -> value; a forgotten ref stays as an undefined entry (`dead` of them) until they
   * outnumber the live ones by COMPACT_SLACK: JSC's Map rehashes as it shrinks and grows, so a
   * delete then a set of the same id cost ~0.3 us where overwriting the entry costs 0.07, and a
   * recording's call forgets and redefines the same scratch ids every time.
   */
  private values = new Map<number, unknown>()
  private dead = 0
  /**
   * How many refs of this env hold an owned value: a count on the value itself, under this
   * env's own key (a Map keyed by the values cost a third of a microsecond per fresh result,
   * most of a replayed one-element op's time).
   */
  private readonly holds = Symbol("refs holding")

  /** Binds ref to value, releasing what it held before if nothing else holds it. */
  define(ref: Ref, value: unknown): void {
    this.bind(ref.id, value)
  }

  private bind(id: number, value: unknown): void {
    const old = this.values.get(id)
    if (old === undefined && this.dead > 0 && this.values.has(id)) this.dead--
    this.values.set(id, value)
    if (isOwned(value)) (value as Held)[this.holds] = ((value as Held)[this.holds] ?? 0) + 1
    if (old !== undefined) this.drop(old)
  }

  /**
   * Binds `to` to what `from` holds, its poison included (a recording's formal to its actual,
   * a call's result to the recording's); false, binding nothing, when `from` is undefined.
   */
  alias(to: number, from: number): boolean {
    const v = this.values.get(from)
    if (v === undefined) return false
    this.bind(to, v)
    return true
  }

  has(id: number): boolean {
    return this.values.get(id) !== undefined
  }

  /** The value of a ref; throws the stored DependentOnError, or UnknownRef. */
  get(ref: Ref): unknown {
    const v = this.values.get(ref.id)
    if (v === undefined) throw new UnknownRef({ id: ref.id, message: `unknown ref ${ref.id}` })
    if (v instanceof DependentOnError) throw v
    return v
  }

  /** What a ref holds (a poison too), or undefined: a lookup that never throws. */
  peek(id: number): unknown {
    return this.values.get(id)
  }

  /** The stored poison of a ref, if any, without throwing. */
  errorOf(ref: Ref): DependentOnError | undefined {
    const v = this.values.get(ref.id)
    return v instanceof DependentOnError ? v : undefined
  }

  /** Forgets one ref; false when it was not defined. */
  delete(id: number): boolean {
    const v = this.values.get(id)
    if (v === undefined) return false
    this.forget(id)
    this.drop(v)
    return true
  }

  /**
   * Forgets one ref as delete does, but hands its value to the caller instead of disposing it
   * when this was its last ref: that value, or undefined when another ref still holds it (or
   * the ref was not defined).
   */
  take(id: number): unknown {
    const v = this.values.get(id)
    if (v === undefined) return undefined
    this.forget(id)
    if (!isOwned(v)) return v
    const n = (v as Held)[this.holds]! - 1
    ;(v as Held)[this.holds] = n
    return n === 0 ? v : undefined
  }

  /** Whether some ref still holds this value. */
  isHeld(value: object): boolean {
    return ((value as Held)[this.holds] ?? 0) > 0
  }

  /** Forgets every ref and releases everything owned. */
  clear(): void {
    for (const id of [...this.values.keys()]) this.delete(id)
    this.values = new Map()
    this.dead = 0
  }

  get size(): number {
    return this.values.size - this.dead
  }

  /** Marks a defined ref forgotten (its entry left undefined), compacting once the dead outnumber the live by COMPACT_SLACK. */
  private forget(id: number): void {
    this.values.set(id, undefined)
    if (++this.dead <= this.values.size - this.dead + COMPACT_SLACK) return
    const live = new Map<number, unknown>()
    for (const [k, v] of this.values) if (v !== undefined) live.set(k, v)
    this.values = live
    this.dead = 0
  }

  private drop(value: unknown): void {
    if (!isOwned(value)) return
    const n = (value as Held)[this.holds]! - 1
    ;(value as Held)[this.holds] = n
    if (n > 0) return
    if (value instanceof Tensor && this.later?.defer(value)) return
    value[Symbol.dispose]()
  }
}

/** Looks a typed value up: the ref must hold an instance of `kind`. */
export const getAs = <T>(env: RefEnv, ref: Ref, kind: Function & { readonly prototype: T }, what: string): T => {
  const v = env.get(ref)
  if (v instanceof kind) return v as T
  throw new WrongRefType({ message: `ref ${ref.id} holds ${kindOf(v)}, expected ${what}` })
}

/** What kind of value `v` is, for messages: its class's name, "null", or its typeof. */
export const kindOf = (v: unknown): string =>
  v === null ? "null" : typeof v === "object" ? (v.constructor?.name ?? "an object") : typeof v

/** Where a command's host tensors may already be: the link's upload segment, the tensors its frame was read into. */
export interface HostSources {
  readonly uploads?: WorkerUploads | undefined
  readonly direct?: DirectReads | undefined
}

/**
 * Replaces every Ref in an argument tree by its value, and every HostTensor or SharedTensor
 * (copied out of the link's upload segment; or the tensor the frame was read into) by a device
 * tensor (recorded in `uploads`, so the caller can free the ones nothing kept).
 * Throws DependentOnError for a poisoned ref, UnknownRef for a missing one.
 */
export const resolveTree = (env: RefEnv, value: unknown, native: Native, stream: Stream, uploads: Tensor[], from: HostSources = {}): unknown => {
  if (value instanceof Ref) return env.get(value)
  if (value instanceof HostTensor) {
    const t = from.direct?.take(value) ?? Tensor.fromHost(native, value, stream)
    uploads.push(t)
    return t
  }
  if (value instanceof SharedTensor) {
    const t = fromShared(native, value, stream, from.uploads)
    uploads.push(t)
    return t
  }
  if (Array.isArray(value)) {
    // A loop, not map: map's callback was a tenth of a one-element command's time.
    const out = new Array<unknown>(value.length)
    for (let i = 0; i < value.length; i++) out[i] = resolveTree(env, value[i], native, stream, uploads, from)
    return out
  }
  if (value !== null && typeof value === "object" && Object.getPrototypeOf(value) === Object.prototype) {
    const out: Record<string, unknown> = {}
    for (const key in value) out[key] = resolveTree(env, (value as Record<string, unknown>)[key], native, stream, uploads, from)
    return out
  }
  return value
}

/**
 * A tensor made from an upload segment's bytes: one copy, out of the segment into its memory,
 * finished (a device's copy waited for) before the controller is told it may reuse the region.
 */
const fromShared = (native: Native, value: SharedTensor, stream: Stream, shared: WorkerUploads | undefined): Tensor => {
  if (shared === undefined) throw new SegmentRefused({ message: `a SharedTensor (upload segment ${value.segment}) came over a link that maps no upload segment` })
  const bytes = shared.bytesOf(value)
  const t = Tensor.empty(native, value.dtype, value.shape)
  try {
    t.copyIn(bytes, stream)
    if (native.device !== "cpu") stream.synchronize()
  } catch (e) {
    t.free()
    throw e
  }
  shared.done(value)
  return t
}

/** The tensors of a result tree, depth first, in order. */
export const flattenTensors = (value: unknown, out: Tensor[] = []): Tensor[] => {
  if (value instanceof Tensor) out.push(value)
  else if (Array.isArray(value)) for (const v of value) flattenTensors(v, out)
  else if (value !== null && typeof value === "object" && Object.getPrototypeOf(value) === Object.prototype)
    for (const key in value) flattenTensors((value as Record<string, unknown>)[key], out)
  return out
}
