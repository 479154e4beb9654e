/**
 * Values that travel inside messages besides plain msgpack data: references to
 * worker-side objects, host tensors, tensor recipes and error reports. Each has its
 * own msgpack ext type (see ext.ts and docs/protocol.md).
 */
import type { Device, DType } from "../../base/tensor.ts"

export { DTYPES, dtypeCode, HostTensor, ITEM_SIZE, type Device, type DType, type ElementArray, type ElementArrayOf } from "../../base/tensor.ts"

/** A numbered reference into a worker's environment (a tensor, stream, mesh, borrow). */
export class Ref {
  constructor(readonly id: number) {}
}

/**
 * A number that is a float whatever its value: msgpack's float64 on the wire (Python's
 * float), where JavaScript's one number type cannot tell 2.0 from 2. Ops promote an integer
 * tensor with a float to f32, with an integer not (torch's rule). A float with a fraction
 * needs no wrapper: 2.5 is a float as it is.
 */
export class FloatNumber {
  constructor(readonly value: number) {}

  toString(): string {
    return `float(${this.value})`
  }
}

/**
 * `value` as a float operand (`x.mul(float(2))` promotes an integer x as torch's `x * 2.0`).
 * An integral value past 32 bits is refused where it is sent (the wire cannot tell it from an
 * integer: see isWireFloat in validate.ts).
 */
export const float = (value: number): FloatNumber => new FloatNumber(value)

/**
 * How to make a tensor without its value: a worker whose input is poisoned still has to
 * join a collective or a send, and uses `factory` zeros of the right shape to do it.
 */
export class TensorFactory {
  constructor(
    readonly shape: ReadonlyArray<number>,
    readonly dtype: DType,
    readonly device: Device,
  ) {}
}

/**
 * A host tensor's bytes placed by the controller in a shared-memory upload segment both ends map
 * (src/net/uploads.ts): `dtype` and `shape` from byte `offset` of segment `segment`. It stands
 * for a HostTensor in an argument tree; the worker copies it into the tensor it makes and tells
 * the controller (UploadTaken), which may then reuse those bytes.
 */
export class SharedTensor {
  constructor(
    readonly segment: number,
    readonly offset: number,
    readonly dtype: DType,
    readonly shape: ReadonlyArray<number>,
  ) {}
}

/** One frame of a worker-side stack trace. */
export interface Frame {
  readonly file: string
  readonly line: number
  readonly function: string
}

/**
 * A failure as reported over the wire: the error's type name, its message and frames, and
 * its reason when the error has one (a CommError's: timeout, peer-lost, ...).
 */
export class ErrorPayload {
  constructor(
    readonly type: string,
    readonly message: string,
    readonly frames: ReadonlyArray<Frame>,
    readonly reason?: string,
  ) {}
}
