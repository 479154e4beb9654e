/**
 * Host tensors read straight from the socket into the tensors made of them: for a CallFunction
 * frame's first large host tensor (src/protocol/locate.ts), the link's frame reader asks for
 * memory to put its elements in, and gets a new tensor's own (cpu; a device tensor's memory is
 * not host memory, so there the frame keeps them). Looking up the command's arguments then takes
 * that tensor for the HostTensor decoded at the same place of the frame, with no copy. A tensor
 * whose command never looks it up (one that failed first) is freed with its frame, by the
 * collector (the tensors' safety net); until then it counts against the memory limit, as any
 * tensor does.
 */
import type { Native } from "../../ffi/native.ts"
import { Tensor } from "../../ffi/tensor.ts"
import type { Located } from "../protocol/locate.ts"
import type { HostTensor } from "../protocol/values.ts"

export class DirectReads {
  /** Per frame's memory, the tensors read straight for it by the byte offset of their elements. */
  private readonly made = new WeakMap<ArrayBufferLike, Map<number, Tensor>>()
  /** Tensors and bytes read straight (tests and the bench read them). */
  readonly counts = { tensors: 0, bytes: 0 }

  constructor(private readonly native: Native) {}

  /** Memory for a located tensor of frame `body`: a new tensor's, kept for the frame; undefined when it cannot be made (past the memory limit, say) or is not host memory. */
  into(body: Uint8Array, located: Located): Uint8Array | undefined {
    let t: Tensor
    try {
      t = Tensor.empty(this.native, located.dtype, located.shape)
    } catch {
      return undefined
    }
    const bytes = t.hostBytes()
    if (bytes === undefined || bytes.byteLength !== located.bytes) {
      t.free()
      return undefined
    }
    let frame = this.made.get(body.buffer)
    if (frame === undefined) this.made.set(body.buffer, (frame = new Map()))
    frame.set(body.byteOffset + located.at, t)
    this.counts.tensors++
    this.counts.bytes += located.bytes
    return bytes
  }

  /**
   * The tensor read straight for `host` (decoded from such a frame, its elements left unwritten
   * there), taken once; undefined for any other HostTensor. One that is not what the decoded
   * HostTensor says gives its bytes back to the frame and is freed, so the frame is whole again.
   */
  take(host: HostTensor): Tensor | undefined {
    const frame = this.made.get(host.data.buffer)
    const t = frame?.get(host.data.byteOffset)
    if (t === undefined) return undefined
    frame!.delete(host.data.byteOffset)
    if (t.dtype === host.dtype && t.nbytes === host.data.byteLength && t.shape.length === host.shape.length && t.shape.every((d, i) => d === host.shape[i])) return t
    host.data.set(t.hostBytes()!.subarray(0, host.data.byteLength))
    t.free()
    return undefined
  }
}
