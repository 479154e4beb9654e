/**
 * A command's scratch arena (Run: its context and the temporaries its kernel makes, freed when
 * the command ends) and the strided copies the kernels build on.
 */
import * as k from "../../../ffi/ops.ts"
import { Tensor } from "../../../ffi/tensor.ts"
import type { DType } from "../../protocol/values.ts"
import type { TensorMeta } from "../../ops/meta.ts"
import type { FunctionContext } from "../function.ts"

/** One command's context and its temporaries (freed when the command's kernel returns). */
export class Run {
  readonly temps: Tensor[] = []
  constructor(readonly ctx: FunctionContext) {}

  get stream() {
    return this.ctx.stream
  }

  temp(dtype: DType, shape: ReadonlyArray<number>): Tensor {
    const t = Tensor.owned(this.ctx.native, dtype, shape)
    this.temps.push(t)
    return t
  }

  /** t in dtype (t itself when it has it). */
  cast(t: Tensor, dtype: DType): Tensor {
    if (t.dtype === dtype) return t
    const out = this.temp(dtype, t.shape)
    k.cast(out, t, this.stream)
    return out
  }

  /** t broadcast to shape, materialised (t itself when it has the shape), read through t's strides. */
  expand(t: Tensor, shape: ReadonlyArray<number>): Tensor {
    if (t.shape.length === shape.length && t.shape.every((d, i) => d === shape[i])) return t
    const out = this.temp(t.dtype, shape)
    copyInto(this, out, t, broadcastStrides(t.shape, shape, t.strides))
    return out
  }

  /** t's elements, contiguous (t itself when it is). */
  contiguous(t: Tensor): Tensor {
    if (t.contiguous) return t
    const out = this.temp(t.dtype, t.shape)
    k.cast(out, t, this.stream)
    return out
  }

  /** A view of t under shape (a temporary handle on the same memory; of a contiguous copy for an operand that is not contiguous). */
  view(t: Tensor, shape: ReadonlyArray<number>): Tensor {
    const v = this.contiguous(t).view(shape)
    this.temps.push(v)
    return v
  }

  free(): void {
    for (const t of this.temps) t.free()
  }
}

export const contiguous = (shape: ReadonlyArray<number>): number[] => {
  const s = new Array<number>(shape.length)
  for (let i = shape.length - 1, acc = 1; i >= 0; i--) (s[i] = acc), (acc *= shape[i]!)
  return s
}

/** Strides reading `from` (of strides `own`, default contiguous) as if broadcast to `to`: 0 on broadcast dims. */
export const broadcastStrides = (from: ReadonlyArray<number>, to: ReadonlyArray<number>, own: ReadonlyArray<number> = contiguous(from)): k.Strided => {
  const lead = to.length - from.length
  return { offset: 0, strides: to.map((d, i) => (i < lead || from[i - lead] !== d ? 0 : own[i - lead]!)) }
}

/** out (contiguous, its own shape) = src read through `view`. */
export const copyInto = (run: Run, out: Tensor, src: Tensor, view: k.Strided): void =>
  k.copyStrided(out, { offset: 0, strides: contiguous(out.shape) }, src, view, out.shape, run.stream)

export const stridesOf = (t: TensorMeta) => contiguous(t.shape)

/** A strided copy of any rank: past the shim's 8 dims, one call per index of the leading dims. */
export const copyAnyRank = (run: Run, out: Tensor, to: k.Strided, src: Tensor, from: k.Strided, shape: ReadonlyArray<number>): void => {
  if (shape.length <= 8) return k.copyStrided(out, to, src, from, shape, run.stream)
  for (let i = 0; i < shape[0]!; i++)
    copyAnyRank(run, out, { offset: to.offset + i * to.strides[0]!, strides: to.strides.slice(1) }, src, { offset: from.offset + i * from.strides[0]!, strides: from.strides.slice(1) }, shape.slice(1))
}
export const isTensor = (v: unknown): v is Tensor => v instanceof Tensor
