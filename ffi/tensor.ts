/**
 * Tensor: a shim tensor handle with its dtype, shape and device. Free it with `free()` (or a
 * `using` declaration) when done; a FinalizationRegistry frees forgotten ones on GC, only as
 * a safety net.
 */
import { ptr, type Pointer } from "bun:ffi"
import { HostTensor, ITEM_SIZE, dtypeCode, type Device, type DType } from "../src/protocol/values.ts"
import { type Native, shimError } from "./native.ts"
import { MAX_DIMS, ShimStatus } from "./symbols.ts"
import { numelOf } from "../src/ops/meta.ts"
import type { Stream } from "./stream.ts"

const forgotten = new FinalizationRegistry<{ native: Native; handle: Pointer }>(({ native, handle }) => {
  native.shim.shim_tensor_free(handle)
})

const checkShape = (shape: ReadonlyArray<number>, op: string): void => {
  if (shape.length > MAX_DIMS) throw shimError(ShimStatus.INVALID, op, `${shape.length} dims, at most ${MAX_DIMS}`)
  for (const d of shape)
    if (!Number.isSafeInteger(d) || d < 0) throw shimError(ShimStatus.INVALID, op, `bad shape [${shape}]`)
}

export class Tensor implements Disposable {
  #handle: Pointer | null

  private constructor(
    readonly native: Native,
    handle: Pointer,
    readonly dtype: DType,
    readonly shape: ReadonlyArray<number>,
  ) {
    this.#handle = handle
    forgotten.register(this, { native, handle }, this)
  }

  /** An uninitialised tensor. */
  static empty(native: Native, dtype: DType, shape: ReadonlyArray<number>): Tensor {
    checkShape(shape, "Tensor.empty")
    const code = dtypeCode(dtype)
    if (code < 0) throw shimError(ShimStatus.INVALID, "Tensor.empty", `unknown dtype ${String(dtype)}`)
    native.check(native.shim.shim_tensor_alloc(code, shape.length, native.shapeArg(shape), native.outsPtr), "shim_tensor_alloc")
    return new Tensor(native, native.outPtr(), dtype, [...shape])
  }

  /** A tensor holding a copy of host bytes. */
  static fromHost(native: Native, host: HostTensor, stream?: Stream): Tensor {
    const t = Tensor.empty(native, host.dtype, host.shape)
    if (host.data.byteLength !== t.nbytes) {
      t.free()
      throw shimError(ShimStatus.INVALID, "Tensor.fromHost", `${host.data.byteLength} bytes for ${host.dtype}[${host.shape}] (${t.nbytes} expected)`)
    }
    if (t.nbytes > 0) native.check(native.shim.shim_tensor_copy_in(t.handle, ptr(host.data), t.nbytes, stream?.handle ?? null), "shim_tensor_copy_in")
    return t
  }

  get handle(): Pointer {
    if (this.#handle === null) throw shimError(ShimStatus.INVALID, "Tensor", `use of a freed ${this}`)
    return this.#handle
  }

  get freed(): boolean {
    return this.#handle === null
  }

  get device(): Device {
    return this.native.device
  }

  get numel(): number {
    return numelOf(this.shape)
  }

  get nbytes(): number {
    return this.numel * ITEM_SIZE[this.dtype]
  }

  /** A copy in host memory (waits for the stream's earlier work). */
  toHost(stream?: Stream): HostTensor {
    const data = new Uint8Array(this.nbytes)
    if (data.byteLength > 0)
      this.native.check(this.native.shim.shim_tensor_copy_out(this.handle, ptr(data), data.byteLength, stream?.handle ?? null), "shim_tensor_copy_out")
    return new HostTensor(this.dtype, this.shape, data)
  }

  /** The same memory under another shape with the same element count. */
  view(shape: ReadonlyArray<number>): Tensor {
    checkShape(shape, "Tensor.view")
    if (numelOf(shape) !== this.numel) throw shimError(ShimStatus.INVALID, "Tensor.view", `cannot view ${this} as [${shape}]`)
    this.native.check(this.native.shim.shim_tensor_view(this.handle, shape.length, this.native.shapeArg(shape), this.native.outsPtr), "shim_tensor_view")
    return new Tensor(this.native, this.native.outPtr(), this.dtype, [...shape])
  }

  /** Releases the handle now; later uses fail with a ShimError. Freeing twice is a no-op. */
  free(): void {
    const handle = this.#handle
    if (handle === null) return
    this.#handle = null
    forgotten.unregister(this)
    this.native.check(this.native.shim.shim_tensor_free(handle), "shim_tensor_free")
  }

  [Symbol.dispose](): void {
    this.free()
  }

  toString(): string {
    return `Tensor(${this.dtype}[${this.shape.join(", ")}] on ${this.device})`
  }
}

