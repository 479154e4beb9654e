/**
 * What the op rules reason about: a tensor's metadata (dtype and shape, no values), and the
 * error a rule raises when an op is called with arguments it cannot take. Pure: the
 * controller infers shapes with these, and the worker checks with the same ones.
 */
import { Data } from "effect"
import { DTYPES, FloatNumber, type DType } from "../protocol/values.ts"

/** What is known of a tensor without its values. */
export interface TensorMeta {
  readonly dtype: DType
  readonly shape: ReadonlyArray<number>
}

/** A built-in called with arguments it cannot take (on the controller it becomes a ControllerError). */
export class OpArgumentError extends Data.TaggedError("OpArgumentError")<{ readonly message: string }> {}

export { numelOf } from "../../base/tensor.ts"

/** Whether two shapes are equal (a plain loop: the worker checks inputs with it per command). */
export const sameShape = (a: ReadonlyArray<number>, b: ReadonlyArray<number>): boolean => {
  if (a.length !== b.length) return false
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return false
  return true
}

/** Anything with a dtype and a shape: a worker Tensor, a HostTensor, a TensorMeta. */
export const isTensorMeta = (v: unknown): v is TensorMeta =>
  typeof v === "object" && v !== null && "dtype" in v && "shape" in v && Array.isArray((v as TensorMeta).shape) &&
  (DTYPES as ReadonlyArray<unknown>).includes((v as TensorMeta).dtype)

/** "f32[2, 3]" for a tensor, the kind of anything else, for error messages. */
export const describe = (v: unknown): string =>
  isTensorMeta(v) ? `${v.dtype}[${v.shape.join(", ")}]` : v === null ? "null" : Array.isArray(v) ? "array" : v instanceof FloatNumber ? String(v) : typeof v

/** Throws the OpArgumentError of `ops.<op>`. */
export const bad = (op: string, message: string): never => {
  throw new OpArgumentError({ message: `ops.${op}: ${message}` })
}
