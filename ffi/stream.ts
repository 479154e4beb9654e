/**
 * Stream and Event: ordered queues of device work and points in them. On cpu, work runs as
 * it is issued and events are complete once recorded; on cuda they are CUDA streams and events.
 */
import type { Pointer } from "bun:ffi"
import { type Native, shimError } from "./native.ts"
import { ShimStatus } from "./symbols.ts"

export class Event implements Disposable {
  #handle: Pointer | null

  private constructor(readonly native: Native, handle: Pointer) {
    this.#handle = handle
  }

  /** Throws once destroyed: the shim would read freed memory. */
  get handle(): Pointer {
    if (this.#handle === null) throw shimError(ShimStatus.INVALID, "Event", "use of a destroyed event")
    return this.#handle
  }

  static create(native: Native): Event {
    native.check(native.shim.shim_event_create(native.outsPtr), "shim_event_create")
    return new Event(native, native.outPtr())
  }

  /** Completes once the work issued to `stream` so far has completed. */
  record(stream: Stream): this {
    this.native.check(this.native.shim.shim_event_record(this.handle, stream.handle), "shim_event_record")
    return this
  }

  query(): boolean {
    this.native.check(this.native.shim.shim_event_query(this.handle, this.native.outsPtr), "shim_event_query")
    return (this.native.outs[0]! & 0xffffffffn) !== 0n
  }

  synchronize(): void {
    this.native.check(this.native.shim.shim_event_synchronize(this.handle), "shim_event_synchronize")
  }

  /** Destroying twice is a no-op (a `using` declaration may follow an explicit destroy). */
  destroy(): void {
    const handle = this.#handle
    if (handle === null) return
    this.#handle = null
    this.native.check(this.native.shim.shim_event_destroy(handle), "shim_event_destroy")
  }

  [Symbol.dispose](): void {
    this.destroy()
  }
}

export class Stream implements Disposable {
  #handle: Pointer | null
  #destroyed = false

  private constructor(readonly native: Native, handle: Pointer | null) {
    this.#handle = handle
  }

  /** null: the device's default stream. Throws once destroyed. */
  get handle(): Pointer | null {
    if (this.#destroyed) throw shimError(ShimStatus.INVALID, "Stream", "use of a destroyed stream")
    return this.#handle
  }

  static default(native: Native): Stream {
    return new Stream(native, null)
  }

  static create(native: Native): Stream {
    native.check(native.shim.shim_stream_create(native.outsPtr), "shim_stream_create")
    return new Stream(native, native.outPtr())
  }

  get isDefault(): boolean {
    return this.#handle === null
  }

  /** Later work on this stream starts after `event` completes. */
  wait(event: Event): void {
    this.native.check(this.native.shim.shim_stream_wait_event(this.handle, event.handle), "shim_stream_wait_event")
  }

  /** A new event recorded at this point of the stream. */
  record(): Event {
    return Event.create(this.native).record(this)
  }

  synchronize(): void {
    this.native.check(this.native.shim.shim_stream_synchronize(this.handle), "shim_stream_synchronize")
  }

  /** Tests only: keeps the stream busy for at least `microseconds` (cuda; cpu returns at once). */
  debugSpin(microseconds: number): void {
    this.native.check(this.native.shim.shim_debug_stream_spin(this.handle, microseconds), "shim_debug_stream_spin")
  }

  /** Destroying twice is a no-op; the default stream is never destroyed. */
  destroy(): void {
    const handle = this.#handle
    if (handle === null || this.#destroyed) return
    this.#destroyed = true
    this.native.check(this.native.shim.shim_stream_destroy(handle), "shim_stream_destroy")
  }

  [Symbol.dispose](): void {
    this.destroy()
  }
}
