// What the registry's rule tests share: tensor metas, a controller-side inference, and the
// message of the OpArgumentError a call is refused with.
import { expect } from "bun:test"
import { OpArgumentError, type TensorMeta } from "../../src/ops/meta.ts"
import { inferOutputs, opNamed } from "../../src/ops/registry.ts"

export const t = (dtype: TensorMeta["dtype"], ...shape: number[]): TensorMeta => ({ dtype, shape })
export const infer = (name: string, args: unknown[], kwargs: Record<string, unknown> = {}) => inferOutputs(opNamed(name)!, args, kwargs, true)
export const refusal = (f: () => unknown): string => {
  try {
    f()
  } catch (e) {
    expect(e).toBeInstanceOf(OpArgumentError)
    return (e as Error).message
  }
  throw new Error("expected an OpArgumentError")
}
