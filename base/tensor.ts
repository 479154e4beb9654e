/**
 * The leaf the native side (ffi/) and src/ share: element types and their codes, devices, and
 * a dense tensor in host memory with its printing. It imports nothing of ours, so ffi/ needs
 * nothing from src/ (the protocol re-exports these for the wire).
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

/** How many elements a tensor of `shape` holds. */
export const numelOf = (shape: ReadonlyArray<number>): number => {
  let n = 1
  for (const d of shape) n *= d
  return n
}

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
