/** Linear algebra, layout and copies: matmul, transpose, reshape, casts, clone, copy_ and fill_. */
import { bad, describe, numelOf, type TensorMeta } from "../meta.ts"
import { arg, opt } from "../params.ts"
import { normDim } from "../rules.ts"
import { spec } from "../spec.ts"

const matmul = spec([arg("input", "tensor"), arg("other", "tensor")], ({ input: x, other: y }, op) => {
  if (x.dtype !== y.dtype) bad(op, `dtypes differ: ${describe(x)} @ ${describe(y)}`)
  if (x.shape.length < 2 || y.shape.length < 2) bad(op, `needs 2-D or batched operands: ${describe(x)} @ ${describe(y)}`)
  if (x.shape.at(-1) !== y.shape.at(-2)) bad(op, `inner dims differ: ${describe(x)} @ ${describe(y)}`)
  const batch = x.shape.slice(0, -2)
  if (y.shape.length > 2 && y.shape.slice(0, -2).join() !== batch.join()) bad(op, `batch dims differ: ${describe(x)} @ ${describe(y)}`)
  return [{ dtype: x.dtype, shape: [...batch, x.shape.at(-2)!, y.shape.at(-1)!] }]
})

/** transpose's two dims, normalised. */
export const transposeDims = (op: string, x: TensorMeta, d0: number, d1: number): [number, number] =>
  [normDim(op, d0, x.shape.length), normDim(op, d1, x.shape.length)]

const transposed = (op: string, x: TensorMeta, d0: number, d1: number): TensorMeta => {
  const [i, j] = transposeDims(op, x, d0, d1), shape = [...x.shape]
  if (shape.length > 0) [shape[i], shape[j]] = [shape[j]!, shape[i]!]
  return { dtype: x.dtype, shape }
}

/** The new shape of a reshape; one size may be -1 (inferred). */
export const reshapeShape = (op: string, x: TensorMeta, shape: ReadonlyArray<number>): number[] => {
  const dims = [...shape]
  const numel = numelOf(x.shape), unknown = dims.indexOf(-1)
  if (unknown >= 0) {
    const known = numelOf(dims.filter((_, i) => i !== unknown))
    if (known === 0 || numel % known !== 0) bad(op, `cannot infer -1 reshaping ${describe(x)} to [${dims}]`)
    dims[unknown] = numel / known
  }
  if (dims.some((d) => d < 0) || numelOf(dims) !== numel) bad(op, `cannot reshape ${describe(x)} to [${dims}]`)
  return dims
}

const same = spec([arg("input", "tensor")], ({ input }) => [input])

export const layout = {
  matmul,
  transpose: spec([arg("input", "tensor"), arg("dim0", "int"), arg("dim1", "int")], ({ input, dim0, dim1 }, op) => [transposed(op, input, dim0, dim1)]),
  t: spec([arg("input", "tensor")], ({ input }, op) => [transposed(op, input, 0, 1)]),
  reshape: spec([arg("input", "tensor"), arg("shape", "ints")], ({ input, shape }, op) => [{ dtype: input.dtype, shape: reshapeShape(op, input, shape) }], { view: true }),
  to: spec([arg("input", "tensor"), opt("dtype", "dtype", null)], ({ input, dtype }) => [{ dtype: dtype ?? input.dtype, shape: input.shape }]),
  clone: same,
  copy_: spec([arg("input", "tensor"), arg("src", "tensor")], ({ input, src }, op) => {
    if (numelOf(input.shape) !== numelOf(src.shape)) bad(op, `cannot copy ${describe(src)} into ${describe(input)}`)
    return []
  }, { mutates: "input" }),
  fill_: spec([arg("input", "tensor"), arg("value", "scalar")], () => [], { mutates: "input" }),
  noop: spec([], () => [], { results: 0 }),
}
