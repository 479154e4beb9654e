/**
 * The handles a controller program holds: a tensor handle is a ref defined on a mesh's ranks
 * (with its dtype and shape when they are known); a RemoteStream is a stream on every rank.
 * TensorHandle is what every tensor handle is (its ref, metadata, memory and lifetime); the
 * class a program holds, RemoteTensor (tensor.ts), adds the ops, autograd and placement to it.
 * `release()` deletes a tensor on its workers at once, and so does the step scope it was made
 * in when that closes (lifetime.ts); a handle the program drops is deleted after GC (the
 * registry below), a safety net. Each mesh counts what its live handles hold (LiveCount). Every handle (and mesh) carries its owner, the Core of the
 * controller that made it: its ref ids mean nothing to another controller, which refuses it.
 */
import type { Entry } from "../autograd/tape.ts"
import { numelOf, type TensorMeta } from "../ops/meta.ts"
import { contiguousStrides, isContiguous, type Strided } from "../ops/strided.ts"
import { ITEM_SIZE, type DType, type Ref } from "../protocol/values.ts"
import type { BorrowState } from "./borrows.ts"
import type { Core } from "./core.ts"
import { ControllerError, refuse } from "./errors.ts"
import type { Mesh } from "./mesh.ts"
import { Storage } from "./storage.ts"
import type { RemoteTensor } from "./tensor.ts"

/** A stream that exists on every rank. */
export class RemoteStream {
  constructor(
    /** The controller that made it. */
    readonly core: Core,
    readonly ref: Ref,
  ) {}

  toString(): string {
    return `RemoteStream(${this.ref.id})`
  }
}

/** The refusal of a handle another controller made (its ref ids would name this one's own refs). */
export const foreignHandle = (handle: object): ControllerError =>
  new ControllerError({ reason: "foreign", message: `${handle} belongs to another controller; a handle can be used only with the controller that made it` })

/** Throws foreignHandle unless controller `core` made `handle`. */
export const checkOwner = (core: Core, handle: { readonly core: Core }): void => {
  if (handle.core !== core) throw foreignHandle(handle)
}

/** What a mesh holds on its workers through its live tensor handles (Mesh.live). */
export class LiveCount {
  /** Tensor refs defined and not released (a borrow's alias not counted). */
  refs = 0
  /** Their bytes, of those whose dtype and shape the controller knows. */
  bytes = 0
}

/**
 * What the registry deletes once a handle is collected. Registered with no unregister token
 * (a token registration measured ~10x the cost of one without in Bun's JSC, ~0.6-1.5 us per
 * fresh handle), so release() and retire() mark it `done` instead of unregistering.
 */
class Dropped {
  done = false
  constructor(
    readonly mesh: Mesh,
    readonly id: number,
    readonly bytes: number,
  ) {}
}

/**
 * A tensor handle garbage collected without release(): deleted in the next batch, or only
 * reported when the controller's gcRelease is off. A safety net: release is deterministic
 * (release(), step scopes in lifetime.ts); nothing forces GC.
 */
const dropped = new FinalizationRegistry<Dropped>((d) => {
  if (d.done) return
  if (d.mesh.core.collected(d.mesh.ranks, d.id, () => `RemoteTensor(${d.id} on ${d.mesh})`)) countRelease(d.mesh.live, d.bytes)
})

const bytesOf = (meta: TensorMeta | undefined): number => (meta === undefined ? 0 : numelOf(meta.shape) * ITEM_SIZE[meta.dtype])

const countRelease = (live: LiveCount, bytes: number): void => {
  live.refs--
  live.bytes -= bytes
}

/**
 * A tensor on the ranks of a mesh: its ref, dtype and shape, the memory it lies in, and its
 * lifetime. Dropping the handle deletes it on the workers. D types its dtype where the op that
 * made it tells (its fetched values are then typed arrays of that dtype). Only RemoteTensor
 * (tensor.ts) is made; the modules below it take this class for `instanceof`.
 */
export class TensorHandle<D extends DType = DType> {
  #released = false
  /** Holds the autograd tape keeps while backward may read it: a release() waits for the last. */
  #holds = 0
  #releasing = false
  /** @internal Its place on the autograd tape (src/autograd), when it requires grad or was made from one that does. */
  autograd: Entry<RemoteTensor> | undefined = undefined
  /** @internal The memory it lies in on its workers, shared with its views (storage.ts), and its first element's index there. */
  storage: Storage
  /** @internal */
  offset = 0
  /** @internal Its strides in the storage (elements): undefined for row-major (every result but a view's). */
  strides: ReadonlyArray<number> | undefined = undefined
  /** Why a handle made while compile recorded a step cannot be used (it names no tensor on the workers). */
  #retired: string | undefined
  /** Its entry in the registry (none for a borrow's alias). */
  #dropped: Dropped | undefined

  constructor(
    readonly mesh: Mesh,
    readonly ref: Ref,
    /** dtype and shape, when the controller can know them. */
    readonly meta: (TensorMeta & { readonly dtype: D }) | undefined,
    /** The stream that produced it (the one a borrow waits on). */
    readonly stream: RemoteStream,
    /** Set on a borrow's alias, which its scope deletes instead of the registry. */
    readonly borrow?: BorrowState,
  ) {
    this.storage = new Storage(meta === undefined ? undefined : numelOf(meta.shape))
    if (!borrow) {
      const bytes = bytesOf(meta)
      this.#dropped = new Dropped(mesh, ref.id, bytes)
      dropped.register(this, this.#dropped)
      mesh.live.refs++
      mesh.live.bytes += bytes
      mesh.core.scopes.adopt(this)
    }
    mesh.core.sink.made(this)
  }

  /** Why the handle cannot be used though it was not released: it was made while recording a step. */
  get retired(): string | undefined {
    return this.#retired
  }

  /** @internal Makes a handle of a recording's trace unusable, deleting nothing (the workers never had it). */
  retire(why: string): void {
    this.#retired = why
    if (this.#dropped && !this.#dropped.done) {
      this.#dropped.done = true
      countRelease(this.mesh.live, this.#dropped.bytes)
    }
  }

  /** Whether release() was called (or a borrow's scope closed): the handle can no longer be used. */
  get released(): boolean {
    return this.#released || this.#retired !== undefined || this.borrow?.dropped === true
  }

  /** The controller that made it (its mesh's). */
  get core(): Core {
    return this.mesh.core
  }

  get dtype(): D | undefined {
    return this.meta?.dtype
  }

  get shape() {
    return this.meta?.shape
  }

  /** How many times its memory was written in place (torch's _version; its views share the count). */
  get version(): number {
    return this.storage.version
  }

  /**
   * @internal Makes it a view of `base`'s storage: with base's own layout (a borrow's alias), or
   * the one a view op's rule gave (none where base's shape is unknown, and so is this one's).
   */
  viewOf(base: TensorHandle, at?: Strided | null): this {
    this.storage = base.storage
    if (at === undefined) (this.offset = base.offset), (this.strides = base.strides)
    else if (at !== null) (this.offset = at.offset), (this.strides = at.strides)
    return this
  }

  /** @internal Its shape, strides and offset in its storage, where the controller knows them. */
  get layout(): Strided | undefined {
    const meta = this.meta
    if (meta === undefined) return undefined
    return { shape: meta.shape, strides: this.strides ?? contiguousStrides(meta.shape), offset: this.offset }
  }

  private knownLayout(what: string): Strided {
    return this.layout ?? (() => { throw refuse("unknown-meta", `${what} of ${this} needs its shape and layout, which the controller does not know`) })()
  }

  /** torch's stride(): how many elements of its storage each dim steps over. */
  stride(): number[] {
    return [...this.knownLayout("stride()").strides]
  }

  /** torch's storage_offset(): its first element's index in its storage. */
  storageOffset(): number {
    return this.knownLayout("storageOffset()").offset
  }

  /** torch's is_contiguous(): its strides are row-major, size-1 dims aside. */
  isContiguous(): boolean {
    const l = this.knownLayout("isContiguous()")
    return isContiguous(l.shape, l.strides)
  }

  /** @internal The tape saved it: a release() waits until letGo(). */
  hold(): void {
    this.#holds++
  }

  /** @internal */
  letGo(): void {
    if (--this.#holds === 0 && this.#releasing) this.release()
  }

  /**
   * Deletes the tensor on its workers now (in command order, with this batch); later uses fail. A tensor the
   * autograd tape saved for backward is deleted once backward has used it (or the graph is dropped).
   */
  release(): void {
    if (this.#released || this.#retired !== undefined || this.borrow) return
    if (!this.#releasing) {
      this.#releasing = true
      this.autograd?.released()
    }
    // The tape letting go (just above) may have finished the release already.
    if (this.#released || this.#holds > 0) return
    this.#released = true
    this.#dropped!.done = true
    countRelease(this.mesh.live, this.#dropped!.bytes)
    this.mesh.core.sink.release(this.mesh.ranks, [this.ref.id])
  }

  toString(): string {
    return `RemoteTensor(${this.ref.id}${this.meta ? ` ${this.meta.dtype}[${this.meta.shape}]` : ""} on ${this.mesh})`
  }
}
