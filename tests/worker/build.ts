/** Message builders and value readers for the worker tests. */
import { Ref, HostTensor, TensorFactory, type DType } from "../../src/protocol/values.ts"
import { NDSlice } from "../../src/protocol/ndslice.ts"
import type { CallFunction, FetchValue, Reduce, SendTensor, Value, WorkerMessage } from "../../src/protocol/messages.ts"

export const ref = (id: number) => new Ref(id)

/** Stream ref used by every test: created first, as the default stream. */
export const STREAM = ref(1)
export const createStream: WorkerMessage = { _tag: "CreateStream", result: STREAM, default: true }

export const call = (ident: number, results: number[], fn: string, args: Value[] = [], opts: { kwargs?: Record<string, Value>; mutates?: number[]; stream?: Ref } = {}): CallFunction => ({
  _tag: "CallFunction", ident, results: results.map(ref), mutates: (opts.mutates ?? []).map(ref), function: fn, args, kwargs: opts.kwargs ?? {}, stream: opts.stream ?? STREAM,
})

export const fetch = (ident: number, object: Value, fn: string | null = null, opts: { mutates?: number[]; stream?: Ref } = {}): FetchValue => ({
  _tag: "FetchValue", ident, mutates: (opts.mutates ?? []).map(ref), function: fn, object, stream: opts.stream ?? STREAM,
})

export const mesh = (result: number, names: string[], sizes: number[]): WorkerMessage => ({
  _tag: "CreateDeviceMesh", result: ref(result), names, ranks: NDSlice.contiguous(sizes),
})

export const reduce = (ident: number, result: number, tensor: number, meshRef: number, dims: string[], reduction: Reduce["reduction"], factory: TensorFactory, opts: { scatter?: boolean; inplace?: boolean } = {}): Reduce => ({
  _tag: "Reduce", ident, result: ref(result), tensor: ref(tensor), factory, mesh: ref(meshRef), stream: STREAM, dims, reduction, scatter: opts.scatter ?? false, inplace: opts.inplace ?? false,
})

export const send = (ident: number, result: number, from: NDSlice, to: NDSlice, tensor: number, factory: TensorFactory): SendTensor => ({
  _tag: "SendTensor", ident, result: ref(result), fromRanks: from, toRanks: to, tensor: ref(tensor), factory, stream: STREAM,
})

export const factory = (shape: number[], dtype: DType = "f32") => new TensorFactory(shape, dtype, "cpu")

/** bf16 bits of a value bf16 represents (its f32 bits' top half). */
const bf16Bits = (x: number): number => new Uint32Array(Float32Array.of(x).buffer)[0]! >>> 16

/** A host tensor of values its dtype represents (f16 and bf16 values already rounded to it). */
export const host = (dtype: DType, shape: number[], values: number[]): HostTensor => {
  const Ctor = { f32: Float32Array, f64: Float64Array, f16: Float16Array, i32: Int32Array, u8: Uint8Array, bool: Uint8Array } as Record<string, any>
  const arr = dtype === "i64" ? BigInt64Array.from(values.map(BigInt)) : dtype === "bf16" ? Uint16Array.from(values, bf16Bits) : new Ctor[dtype](values)
  return new HostTensor(dtype, shape, new Uint8Array(arr.buffer))
}

/** The elements of a fetched tensor as numbers. */
export const numbers = (v: unknown): number[] => {
  if (!(v instanceof HostTensor)) throw new Error(`expected a HostTensor, got ${Bun.inspect(v)}`)
  const b = v.data.slice().buffer
  switch (v.dtype) {
    case "f32": return [...new Float32Array(b)]
    case "f64": return [...new Float64Array(b)]
    case "i32": return [...new Int32Array(b)]
    case "i64": return [...new BigInt64Array(b)].map(Number)
    case "u8": case "bool": return [...new Uint8Array(b)]
    default: throw new Error(`numbers: ${v.dtype} not handled in tests`)
  }
}
