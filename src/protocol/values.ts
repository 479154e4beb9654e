/**
 * Values that travel inside messages besides plain msgpack data: references to
 * worker-side objects, host tensors, tensor recipes and error reports. Each has its
 * own msgpack ext type (see ext.ts and docs/protocol.md).
 */
import { formatTensor } from "./print.ts"

/** Element types; the numeric code is shared by the C ABI (c/shim.h) and the wire. */
export const DTYPES = ["f32", "f64", "f16", "bf16", "i32", "i64", "u8", "bool"] as const
export type DType = (typeof DTYPES)[number]

/** Bytes per element of each dtype. */
export const ITEM_SIZE: Readonly<Record<DType, number>> = {
  f32: 4, f64: 8, f16: 2, bf16: 2, i32: 4, i64: 8, u8: 1, bool: 1,
}

export const dtypeCode = (d: DType): number => DTYPES.indexOf(d)

export type Device = "cpu" | "cuda"

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

/** The typed array a host tensor's elements read as (bf16 widens to float32). */
export type ElementArray = Float32Array | Float64Array | Float16Array | Int32Array | BigInt64Array | Uint8Array

/** The typed array a host tensor of dtype D reads as. */
export type ElementArrayOf<D extends DType> = D extends "f32" | "bf16" ? Float32Array : D extends "f64" ? Float64Array
  : D extends "f16" ? Float16Array : D extends "i32" ? Int32Array : D extends "i64" ? BigInt64Array : Uint8Array

/** A dense, contiguous tensor in host memory, as carried by the wire (little-endian bytes). */
export class HostTensor<D extends DType = DType> {
  constructor(
    readonly dtype: D,
    readonly shape: ReadonlyArray<number>,
    /** numel x itemsize bytes; may be a view into a received frame. */
    readonly data: Uint8Array,
  ) {}

  /** The elements as a typed array (a copy, so it is aligned and owned). */
  toArray(): ElementArrayOf<D> {
    return this.elements() as ElementArrayOf<D>
  }

  /** Its values as torch prints a tensor (abbreviated past 1000 elements): `HostTensor([[1.0000, 2.5000], ...], dtype=f64)`. */
  toString(): string {
    return formatTensor("HostTensor", this.dtype, this.shape, this.elements(), (d) => d)
  }

  /** What console.log and Bun.inspect print: its values, not its bytes. */
  [Symbol.for("nodejs.util.inspect.custom")](): string {
    return this.toString()
  }

  private elements(): ElementArray {
    const bytes = this.data.slice().buffer
    switch (this.dtype as DType) {
      case "f32": return new Float32Array(bytes)
      case "f64": return new Float64Array(bytes)
      case "f16": return new Float16Array(bytes)
      case "bf16": return Float32Array.from(new Uint16Array(bytes), (b) => new Float32Array(new Uint32Array([b << 16]).buffer)[0]!)
      case "i32": return new Int32Array(bytes)
      case "i64": return new BigInt64Array(bytes)
      case "u8": case "bool": return new Uint8Array(bytes)
    }
  }
}

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
