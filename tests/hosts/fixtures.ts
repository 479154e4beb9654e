// User functions for the multi-host checks ("tests/hosts/fixtures:<export>"): each rank's inputs,
// built on the worker from the formulas in plan.ts, and where the worker runs.
import { networkInterfaces } from "node:os"
import { Tensor } from "../../ffi/tensor.ts"
import { defineFunction, type FunctionContext } from "../../src/worker/function.ts"
import { HostTensor, type DType } from "../../src/protocol/values.ts"
import { N, M, rowValue, vectorValue } from "./plan.ts"

/** The dtypes plan.ts uses, as typed arrays. */
const bytesOf = (dtype: DType, values: number[]): Uint8Array => {
  switch (dtype) {
    case "f32": return new Uint8Array(Float32Array.from(values).buffer)
    case "f64": return new Uint8Array(Float64Array.from(values).buffer)
    case "i32": return new Uint8Array(Int32Array.from(values).buffer)
    case "i64": return new Uint8Array(BigInt64Array.from(values, BigInt).buffer)
    default: throw new Error(`the multi-host inputs do not use ${dtype}`)
  }
}

const upload = (ctx: FunctionContext, dtype: DType, shape: number[], values: number[]) =>
  Tensor.fromHost(ctx.native, new HostTensor(dtype, shape, bytesOf(dtype, values)), ctx.stream)

/** This rank's [N] vector. */
export const vector = defineFunction((ctx, dtype: DType) =>
  upload(ctx, dtype, [N], Array.from({ length: N }, (_, i) => vectorValue(ctx.rank, i))))

/** This rank's [rows, M] input. */
export const rows = defineFunction((ctx, dtype: DType, count: number) =>
  upload(ctx, dtype, [count, M], Array.from({ length: count * M }, (_, x) => rowValue(ctx.rank, Math.floor(x / M), x % M))))

/** The worker's non-loopback IPv4 addresses: which host (namespace) it runs in. */
export const addresses = defineFunction(() =>
  Object.values(networkInterfaces()).flat().filter((a) => a !== undefined && a.family === "IPv4" && !a.internal).map((a) => a!.address))
