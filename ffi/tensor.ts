/**
 * Tensor: a shim tensor handle with its dtype, shape and device. Free it with `free()` (or a
 * `using` declaration) when done; a FinalizationRegistry frees forgotten ones on GC, only as
 * a safety net. On cpu, a small tensor's freed handle is kept for the next tensor of the same
 * dtype and shape (HandlePool): most commands' outputs are the shapes of the last ones.
 */
import { ptr, toArrayBuffer, type Pointer } from "bun:ffi"
import { DTYPES, HostTensor, ITEM_SIZE, dtypeCode, numelOf, type Device, type DType } from "../base/tensor.ts"
import { type Native, shimError } from "./native.ts"
import { MAX_DIMS, ShimStatus } from "./symbols.ts"
import type { Stream } from "./stream.ts"

const forgotten = new FinalizationRegistry<{ native: Native; handle: Pointer }>(({ native, handle }) => {
  live--
  native.shim.shim_tensor_free(handle)
})

/** Tensor handles of this process not yet freed (views included). */
let live = 0
export const liveTensorCount = (): number => live

/**
 * Handles of freed small cpu tensors, by dtype and shape, for Tensor.empty to reuse instead of
 * a shim allocation and free per command. NOTE: cpu only: there kernels finish before their
 * call returns, so a freed tensor's memory is idle; a cuda kernel may still be reading it on
 * its stream (the cuda shim has its own stream-aware cache). Never a view's handle, nor that
 * of a tensor a live view shares memory with (Tensor.views). Bounded: POOL_HANDLES per dtype
 * and shape, POOL_TENSOR_BYTES each, so it holds at most a few MiB; emptied when an
 * allocation fails for memory.
 */
class HandlePool {
  private readonly free = new Map<number, Array<{ readonly handle: Pointer; readonly shape: ReadonlyArray<number>; readonly nbytes: number }>>()
  /** Bytes of the tensors kept (the shim counts them as in use). */
  bytes = 0

  /** A number naming a dtype, rank and element count (the shape itself is compared on take). */
  private static key(code: number, shape: ReadonlyArray<number>, numel: number): number {
    return (numel * (MAX_DIMS + 1) + shape.length) * 8 + code
  }

  take(code: number, shape: ReadonlyArray<number>): Pointer | undefined {
    const numel = numelOf(shape)
    if (numel > POOL_NUMEL) return undefined
    const list = this.free.get(HandlePool.key(code, shape, numel))
    if (list === undefined) return undefined
    for (let i = list.length - 1; i >= 0; i--) {
      const e = list[i]!
      if (e.shape.length === shape.length && e.shape.every((d, j) => d === shape[j])) {
        list[i] = list[list.length - 1]!
        list.pop()
        this.bytes -= e.nbytes
        return e.handle
      }
    }
    return undefined
  }

  /** Keeps `handle` for reuse; false when it is not kept (then free it). */
  put(code: number, shape: ReadonlyArray<number>, nbytes: number, handle: Pointer): boolean {
    if (nbytes > POOL_TENSOR_BYTES) return false
    const key = HandlePool.key(code, shape, numelOf(shape))
    let list = this.free.get(key)
    if (list === undefined) this.free.set(key, (list = []))
    if (list.length >= POOL_HANDLES) return false
    list.push({ handle, shape, nbytes })
    this.bytes += nbytes
    return true
  }

  /** Frees every handle kept. */
  drain(native: Native): void {
    for (const list of this.free.values()) for (const e of list) native.check(native.shim.shim_tensor_free(e.handle), "shim_tensor_free")
    this.free.clear()
    this.bytes = 0
  }

  get size(): number {
    let n = 0
    for (const list of this.free.values()) n += list.length
    return n
  }
}

const POOL_HANDLES = 16
const POOL_TENSOR_BYTES = 4096
const POOL_NUMEL = POOL_TENSOR_BYTES
const pools = new WeakMap<Native, HandlePool>()
/** The pool of a cpu backend (undefined on cuda). */
const poolOf = (native: Native): HandlePool | undefined => {
  if (native.device !== "cpu") return undefined
  let pool = pools.get(native)
  if (pool === undefined) pools.set(native, (pool = new HandlePool()))
  return pool
}

/** Whether a tensor of `shape` would fit under the memory limit once the pool's tensors are freed. */
const fitsWithout = (native: Native, pool: HandlePool, code: number, shape: ReadonlyArray<number>): boolean => {
  const { inUse, limit } = native.memoryUsage()
  return limit === 0 || inUse - pool.bytes + numelOf(shape) * ITEM_SIZE[DTYPES[code]!] <= limit
}

/** Tensor handles kept for reuse on this backend (for tests and counters). */
export const pooledHandles = (native: Native): number => poolOf(native)?.size ?? 0

/** Bytes of live tensors: what the shim counts in use, less what the pool keeps for reuse. */
export const liveTensorBytes = (native: Native): number => native.memoryUsage().inUse - (poolOf(native)?.bytes ?? 0)

/** Scratch for shim_tensor_as_strided's and shim_tensor_layout's strides and outputs. */
const stridesArg = new BigInt64Array(MAX_DIMS)
const layoutOuts = new BigInt64Array(2)

const checkShape = (shape: ReadonlyArray<number>, op: string): void => {
  if (shape.length > MAX_DIMS) throw shimError(ShimStatus.INVALID, op, `${shape.length} dims, at most ${MAX_DIMS}`)
  for (const d of shape)
    if (!Number.isSafeInteger(d) || d < 0) throw shimError(ShimStatus.INVALID, op, `bad shape [${shape}]`)
}

/** Row-major strides of shape (a size-1 dim's counts nothing, as the shim's). */
const rowMajor = (shape: ReadonlyArray<number>): number[] => {
  const s = new Array<number>(shape.length)
  for (let d = shape.length - 1, acc = 1; d >= 0; d--) (s[d] = acc), (acc *= Math.max(shape[d]!, 1))
  return s
}

/** The shim's is_contiguous (shim_strides_contiguous): no elements, or row-major past size-1 dims. */
const stridesContiguous = (shape: ReadonlyArray<number>, strides: ReadonlyArray<number>): boolean => {
  if (shape.includes(0)) return true
  for (let d = shape.length - 1, acc = 1; d >= 0; d--) {
    if (shape[d] === 1) continue
    if (strides[d] !== acc) return false
    acc *= shape[d]!
  }
  return true
}

export class Tensor implements Disposable {
  #handle: Pointer | null
  /** The tensor whose memory this one views (undefined: its own memory). */
  #base: Tensor | undefined = undefined
  /** Live views of this tensor's memory: while any is, its handle is not pooled. */
  #views = 0
  /** Whether the FinalizationRegistry frees it if it is forgotten (see `owned`). */
  #tracked: boolean
  /** Its strides as made (asStrided); undefined: row-major for its shape. */
  #strides: ReadonlyArray<number> | undefined = undefined
  /**
   * Whether its strides are row-major for its shape, size-1 dims aside (torch's is_contiguous,
   * the shim's rule): worked out where the tensor is made, so a command's check of an operand
   * is this one read, not a shim call.
   */
  contiguous = true
  /** Whether a dim of size > 1 has stride 0 (an expand): no op may write it. */
  expanded = false

  private constructor(
    readonly native: Native,
    handle: Pointer,
    readonly dtype: DType,
    readonly shape: ReadonlyArray<number>,
    tracked: boolean,
  ) {
    this.#handle = handle
    this.#tracked = tracked
    live++
    if (tracked) forgotten.register(this, { native, handle }, this)
  }

  /** An uninitialised tensor. */
  static empty(native: Native, dtype: DType, shape: ReadonlyArray<number>): Tensor {
    return Tensor.allocate(native, dtype, shape, true)
  }

  /**
   * An uninitialised tensor with no finalizer: for a caller that frees it or hands it to an
   * owner before anything else runs (a command's outputs, which the worker's env holds and
   * frees). Registering and unregistering each was a tenth of a one-element op's worker time.
   * `track()` gives it the safety net after all when it reaches code that may forget it.
   */
  static owned(native: Native, dtype: DType, shape: ReadonlyArray<number>): Tensor {
    return Tensor.allocate(native, dtype, shape, false)
  }

  /**
   * As `owned`, laid out with `strides`, a dense order of its dims (a pointwise result in its
   * operands' memory order): numel elements of memory of its own, viewed with those strides.
   */
  static ownedStrided(native: Native, dtype: DType, shape: ReadonlyArray<number>, strides: ReadonlyArray<number>): Tensor {
    const flat = Tensor.allocate(native, dtype, [numelOf(shape)], false)
    for (let i = 0; i < strides.length; i++) stridesArg[i] = BigInt(strides[i]!)
    const status = native.shim.shim_tensor_as_strided(flat.handle, shape.length, native.shapeArg(shape), ptr(stridesArg), 0, native.outsPtr)
    // The view holds the memory now: the flat header goes, not to the pool (its memory is not free).
    const handle = flat.#handle!
    flat.#handle = null
    live--
    native.check(native.shim.shim_tensor_free(handle), "shim_tensor_free")
    native.check(status, "shim_tensor_as_strided")
    const t = new Tensor(native, native.outPtr(), dtype, [...shape], false)
    t.#strides = [...strides]
    t.contiguous = stridesContiguous(shape, strides)
    return t
  }

  /** Puts the tensor under the FinalizationRegistry (a no-op when it is already). */
  track(): this {
    if (!this.#tracked && this.#handle !== null) {
      forgotten.register(this, { native: this.native, handle: this.#handle }, this)
      this.#tracked = true
    }
    return this
  }

  private static allocate(native: Native, dtype: DType, shape: ReadonlyArray<number>, tracked: boolean): Tensor {
    checkShape(shape, "Tensor.empty")
    const code = dtypeCode(dtype)
    if (code < 0) throw shimError(ShimStatus.INVALID, "Tensor.empty", `unknown dtype ${String(dtype)}`)
    const pool = poolOf(native)
    const kept = pool?.take(code, shape)
    if (kept !== undefined) return new Tensor(native, kept, dtype, [...shape], tracked)
    let status = native.shim.shim_tensor_alloc(code, shape.length, native.shapeArg(shape), native.outsPtr)
    if (status === ShimStatus.NOMEM && pool !== undefined && pool.bytes > 0 && fitsWithout(native, pool, code, shape)) {
      pool.drain(native)
      status = native.shim.shim_tensor_alloc(code, shape.length, native.shapeArg(shape), native.outsPtr)
    }
    native.check(status, "shim_tensor_alloc")
    return new Tensor(native, native.outPtr(), dtype, [...shape], tracked)
  }

  /** A tensor holding a copy of host bytes. */
  static fromHost(native: Native, host: HostTensor, stream?: Stream): Tensor {
    const t = Tensor.empty(native, host.dtype, host.shape)
    if (host.data.byteLength !== t.nbytes) {
      t.free()
      throw shimError(ShimStatus.INVALID, "Tensor.fromHost", `${host.data.byteLength} bytes for ${host.dtype}[${host.shape}] (${t.nbytes} expected)`)
    }
    t.copyIn(host.data, stream)
    return t
  }

  /** Overwrites its elements with `bytes` (exactly its byte size), in stream order. */
  copyIn(bytes: Uint8Array, stream?: Stream): void {
    if (bytes.byteLength !== this.nbytes) throw shimError(ShimStatus.INVALID, "Tensor.copyIn", `${bytes.byteLength} bytes for ${this} (${this.nbytes} expected)`)
    if (this.nbytes > 0) this.native.check(this.native.shim.shim_tensor_copy_in(this.handle, ptr(bytes), this.nbytes, stream?.handle ?? null), "shim_tensor_copy_in")
  }

  get handle(): Pointer {
    if (this.#handle === null) throw shimError(ShimStatus.INVALID, "Tensor", `use of a freed ${this}`)
    return this.#handle
  }

  /** Whether its memory is shared: it is a view, or a live view reads its memory. */
  get shared(): boolean {
    return this.#base !== undefined || this.#views > 0
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
    this.copyOut(data, stream)
    return new HostTensor(this.dtype, this.shape, data)
  }

  /** Copies its elements into `into` (exactly nbytes long; waits for the stream's earlier work). */
  copyOut(into: Uint8Array, stream?: Stream): void {
    if (into.byteLength !== this.nbytes) throw shimError(ShimStatus.INVALID, "Tensor.copyOut", `${into.byteLength} bytes given for ${this} (${this.nbytes} bytes)`)
    if (into.byteLength > 0)
      this.native.check(this.native.shim.shim_tensor_copy_out(this.handle, ptr(into), into.byteLength, stream?.handle ?? null), "shim_tensor_copy_out")
  }

  /**
   * Its elements' memory as bytes that host code reads and writes in place (cpu), or undefined
   * (cuda), or for a non-contiguous tensor (its elements are not one block). A view, valid only while this tensor lives and not ordered with any stream: for a
   * tensor no queued work touches, such as one just made to fill.
   */
  hostBytes(): Uint8Array<ArrayBuffer> | undefined {
    if (this.nbytes === 0) return new Uint8Array(0)
    if (!this.contiguous) return undefined
    this.native.check(this.native.shim.shim_tensor_host_data(this.handle, this.native.outsPtr), "shim_tensor_host_data")
    const at = this.native.outPtr()
    return at === null || (at as unknown as number) === 0 ? undefined : new Uint8Array(toArrayBuffer(at, 0, this.nbytes))
  }

  /** The same memory under another shape with the same element count (a reshape). */
  view(shape: ReadonlyArray<number>): Tensor {
    checkShape(shape, "Tensor.view")
    if (numelOf(shape) !== this.numel) throw shimError(ShimStatus.INVALID, "Tensor.view", `cannot view ${this} as [${shape}]`)
    return this.share(0, shape)
  }

  /**
   * The block of numel(shape) elements from element `offset` of this one's memory, under
   * `shape` (a narrow, select or split that leaves one contiguous block): no copy; a write
   * through either is seen by the other, and the memory lives while either does.
   */
  block(offset: number, shape: ReadonlyArray<number>): Tensor {
    checkShape(shape, "Tensor.block")
    if (!Number.isSafeInteger(offset) || offset < 0 || offset + numelOf(shape) > this.numel)
      throw shimError(ShimStatus.INVALID, "Tensor.block", `[${shape}] from element ${offset} does not fit in ${this}`)
    return this.share(offset, shape)
  }

  /**
   * torch.as_strided: a view of this tensor's memory with `shape` and `strides` (in elements,
   * none negative) from element `storageOffset` of the memory (absolute, as torch's). The shim
   * refuses one that reaches outside the memory. A write through either is seen by the other.
   */
  asStrided(shape: ReadonlyArray<number>, strides: ReadonlyArray<number>, storageOffset: number): Tensor {
    checkShape(shape, "Tensor.asStrided")
    if (strides.length !== shape.length || !strides.every(Number.isSafeInteger) || !Number.isSafeInteger(storageOffset))
      throw shimError(ShimStatus.INVALID, "Tensor.asStrided", `strides [${strides}] from ${storageOffset} for [${shape}]`)
    for (let i = 0; i < strides.length; i++) stridesArg[i] = BigInt(strides[i]!)
    this.native.check(
      this.native.shim.shim_tensor_as_strided(this.handle, shape.length, this.native.shapeArg(shape), ptr(stridesArg), storageOffset, this.native.outsPtr),
      "shim_tensor_as_strided",
    )
    const v = this.viewOf(shape)
    v.#strides = [...strides]
    v.contiguous = stridesContiguous(shape, strides)
    v.expanded = v.numel > 0 && shape.some((d, i) => d > 1 && strides[i] === 0)
    return v
  }

  /** Its strides in elements (row-major for a tensor that is not an asStrided view). */
  get strides(): ReadonlyArray<number> {
    return this.#strides ?? rowMajor(this.shape)
  }

  /** Its strides (in elements), storage offset and whether it is contiguous, as the shim holds them. */
  layout(): { readonly strides: ReadonlyArray<number>; readonly storageOffset: number; readonly contiguous: boolean } {
    layoutOuts[1] = 0n
    this.native.check(this.native.shim.shim_tensor_layout(this.handle, ptr(stridesArg), ptr(layoutOuts), ptr(layoutOuts, 8)), "shim_tensor_layout")
    return {
      strides: Array.from(stridesArg.subarray(0, this.shape.length), Number),
      storageOffset: Number(layoutOuts[0]),
      contiguous: layoutOuts[1] !== 0n,
    }
  }

  private share(offset: number, shape: ReadonlyArray<number>): Tensor {
    this.native.check(this.native.shim.shim_tensor_view(this.handle, offset, shape.length, this.native.shapeArg(shape), this.native.outsPtr), "shim_tensor_view")
    return this.viewOf(shape)
  }

  /** The view handle the last shim call made, sharing this tensor's memory. */
  private viewOf(shape: ReadonlyArray<number>): Tensor {
    const v = new Tensor(this.native, this.native.outPtr(), this.dtype, [...shape], true)
    const base = this.#base ?? this
    v.#base = base
    base.#views++
    return v
  }

  /** The tensor that owns this one's memory: its base for a view, else itself. */
  get root(): Tensor {
    return this.#base ?? this
  }

  /** Releases the handle now; later uses fail with a ShimError. Freeing twice is a no-op. */
  free(): void {
    const handle = this.#handle
    if (handle === null) return
    this.#handle = null
    live--
    if (this.#tracked) forgotten.unregister(this)
    const base = this.#base
    if (base !== undefined) base.#views--
    // (the pool keeps memory by shape for row-major tensors: a strided one's header is freed)
    else if (this.#views === 0 && this.#strides === undefined && poolOf(this.native)?.put(dtypeCode(this.dtype), this.shape, this.nbytes, handle)) return
    this.native.check(this.native.shim.shim_tensor_free(handle), "shim_tensor_free")
  }

  [Symbol.dispose](): void {
    this.free()
  }

  toString(): string {
    return `Tensor(${this.dtype}[${this.shape.join(", ")}] on ${this.device})`
  }
}

