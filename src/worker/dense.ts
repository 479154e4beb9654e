/**
 * Dense buffers for the communication libraries: Gloo and NCCL send and receive one block of
 * memory, so a strided view goes through a contiguous copy of its elements, and one that is
 * written (an in-place collective, a receive) gets the copy's elements back through the view.
 */
import * as k from "../../ffi/ops.ts"
import type { Stream } from "../../ffi/stream.ts"
import { Tensor } from "../../ffi/tensor.ts"

/**
 * fn of t's elements as one dense buffer: t itself when it is contiguous, else a copy, written
 * back through t when `written` and fn returns, and freed; a result that is the copy is t.
 */
export const throughDense = <R>(t: Tensor, stream: Stream, written: boolean, fn: (buffer: Tensor) => R): R => {
  if (t.contiguous) return fn(t)
  const copy = Tensor.empty(t.native, t.dtype, t.shape)
  try {
    k.cast(copy, t, stream)
    const r = fn(copy)
    if (written) k.cast(t, copy, stream)
    return (r === (copy as unknown) ? t : r) as R
  } finally {
    copy.free()
  }
}
