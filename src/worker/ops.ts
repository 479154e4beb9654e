/**
 * monarch-bun's worker-side API for user functions (`module:export` in a CallFunction): type a
 * function with `defineFunction` and run built-ins from it with `op`.
 *
 *   export const scaled = defineFunction((ctx, x: unknown, k: number) => op(ctx, "mul", [x, k]))
 */
export { op } from "./kernels/dispatch.ts"
export { OpArgumentError, type TensorMeta } from "../ops/meta.ts"
export { defineFunction, type FunctionContext, type Group, type GroupReduction, type RemoteFunction } from "./function.ts"
export type { Tensor } from "../../ffi/tensor.ts"
export { float, FloatNumber } from "../protocol/values.ts"
