/**
 * A command's arguments on their way to the wire: handles become refs (noting what the command
 * reads), and what the wire cannot carry is refused at the call with the protocol's own
 * checks (scalarProblem, hostTensorProblem), before anything is queued. Also the metadata the
 * program gives for results, and argument trees read as metadata for the built-ins' rules.
 */
import type { TensorMeta } from "../ops/meta.ts"
import { UNKNOWN_TENSOR } from "../ops/registry.ts"
import { floatProblem, hostTensorProblem, isWireFloat, MAX_NDIM, scalarProblem } from "../protocol/validate.ts"
import type { Value } from "../protocol/messages.ts"
import { DTYPES, FloatNumber, HostTensor, SharedTensor, type DType } from "../protocol/values.ts"
import type { BorrowState } from "./borrows.ts"
import { refuse } from "./errors.ts"
import type { Core } from "./core.ts"
import { checkOwner, TensorHandle } from "./handles.ts"

const NO_BORROWS: BorrowState[] = Object.freeze([]) as unknown as BorrowState[]

/** What one command's argument trees read, gathered while converting them to the wire. */
export class Reads {
  /** Ref ids of the tensors read. */
  readonly inputs: number[] = []
  /** Borrows read for the first time, once each (one shared empty list until there is one: most commands read none). */
  borrows: BorrowState[] = NO_BORROWS
  /** Whether every tensor read has a known dtype and shape. */
  known = true
}

/** The mesh a command runs on, as its arguments see it. */
export interface CommandMesh {
  /** The controller it belongs to: tensors of another are refused. */
  readonly core: Core
  readonly ranks: ReadonlyArray<number>
  toString(): string
}

/**
 * Converts the arguments of the commands of one mesh. Called once per argument of every
 * command, so it walks the tree once and checks a tensor's mesh once per pair of meshes.
 */
export class Arguments {
  /** Meshes found to hold every rank of this one, so their tensors need no per-command rank check. */
  private readonly covering = new WeakSet<object>()

  constructor(private readonly mesh: CommandMesh) {}

  /**
   * A tree of arguments as it goes on the wire, noting in `reads` what it reads: tensors must
   * live on (at least) the mesh's ranks.
   */
  convert(v: unknown, reads: Reads): Value {
    if (v === null) return v
    if (typeof v !== "object") {
      const problem = scalarProblem(v)
      if (problem !== undefined) throw refuse("argument", problem)
      return v as Value
    }
    if (v instanceof TensorHandle) {
      checkOwner(this.mesh.core, v)
      if (v.released) throw refuse("released", v.retired ?? `${v} was released`)
      if (v.mesh !== this.mesh && !this.covering.has(v.mesh)) {
        const missing = this.mesh.ranks.filter((r) => !v.mesh.layout.contains(r))
        if (missing.length > 0) throw refuse("mesh", `${v} is not on ranks [${missing}] of ${this.mesh}`)
        this.covering.add(v.mesh)
      }
      reads.inputs.push(v.ref.id)
      this.mesh.core.sink.read(v)
      if (v.borrow && !v.borrow.used && !reads.borrows.includes(v.borrow)) (reads.borrows === NO_BORROWS ? (reads.borrows = []) : reads.borrows).push(v.borrow)
      if (!v.meta) reads.known = false
      return v.ref
    }
    if (v instanceof HostTensor) {
      const problem = hostTensorProblem(v)
      if (problem !== undefined) throw refuse("argument", problem)
      return v
    }
    if (v instanceof Uint8Array) return v
    // A typed array of a tensor dtype is that 1-dim host tensor, its bytes as they are (no copy).
    if (ArrayBuffer.isView(v)) {
      const dtype = typedDtype(v)
      if (dtype === undefined) throw refuse("argument", `a ${v.constructor.name} is not a tensor's elements (Float32Array, Float64Array, Float16Array, Int32Array or BigInt64Array; a Uint8Array is bytes)`)
      const n = (v as Float32Array).length
      return new HostTensor(dtype, [n], new Uint8Array(v.buffer, v.byteOffset, v.byteLength))
    }
    // A host block already in the upload segment (fromHost's, placed through Sink.share).
    if (v instanceof SharedTensor) return v
    if (v instanceof FloatNumber) {
      if (!isWireFloat(v.value)) throw refuse("argument", floatProblem(v.value))
      return v
    }
    if (Array.isArray(v)) {
      const out = new Array<Value>(v.length)
      for (let i = 0; i < v.length; i++) out[i] = this.convert(v[i], reads)
      return out
    }
    // Like the wire, only plain objects are maps: a stream, a mesh or any other instance is refused.
    const proto: unknown = Object.getPrototypeOf(v)
    if (proto !== Object.prototype && proto !== null) throw refuse("argument", `a ${v.constructor?.name ?? "non-plain object"} cannot be an argument`)
    const keys = Object.keys(v)
    return keys.length === 0 ? {} : Object.fromEntries(keys.map((k) => [k, this.convert((v as Record<string, unknown>)[k], reads)]))
  }
}

/** The dtype whose elements a typed array holds, or undefined for one that holds none's. */
const typedDtype = (v: ArrayBufferView): DType | undefined =>
  v instanceof Float32Array ? "f32" : v instanceof Float64Array ? "f64" : v instanceof Int32Array ? "i32" : v instanceof BigInt64Array ? "i64"
  : typeof Float16Array !== "undefined" && v instanceof Float16Array ? "f16" : undefined

/** A result's metadata as given by the program: later commands (reduce, send) put it on the wire. */
export const checkMeta = (m: TensorMeta, i: number): TensorMeta => {
  const shapeOk = Array.isArray(m?.shape) && m.shape.length <= MAX_NDIM && m.shape.every((d) => Number.isSafeInteger(d) && d >= 0)
  if (!DTYPES.includes(m?.dtype) || !shapeOk) throw refuse("argument", `results[${i}]: ${JSON.stringify(m)} is not a dtype (${DTYPES.join(", ")}) and a shape of at most ${MAX_NDIM} sizes`)
  return m
}

/** A tree of arguments with tensors replaced by their metadata (UNKNOWN_TENSOR where unknown). */
export const metasOf = (v: unknown): unknown => {
  if (typeof v !== "object" || v === null || v instanceof HostTensor || v instanceof SharedTensor || v instanceof Uint8Array || v instanceof FloatNumber) return v
  if (v instanceof TensorHandle) return v.meta ?? UNKNOWN_TENSOR
  if (ArrayBuffer.isView(v)) {
    const dtype = typedDtype(v)
    return dtype === undefined ? v : { dtype, shape: [(v as Float32Array).length] }
  }
  if (Array.isArray(v)) return v.map(metasOf)
  return Object.fromEntries(Object.keys(v).map((k) => [k, metasOf((v as Record<string, unknown>)[k])]))
}
