/**
 * Stream and Event: ordered queues of device work and points in them. On cpu, work runs as
 * it is issued and events are complete once recorded; on cuda they are CUDA streams and events.
 */
import type { Pointer } from "bun:ffi"
import type { Native } from "./native.ts"

export class Event implements Disposable {
  private constructor(readonly native: Native, readonly handle: Pointer) {}

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

  destroy(): void {
    this.native.check(this.native.shim.shim_event_destroy(this.handle), "shim_event_destroy")
  }

  [Symbol.dispose](): void {
    this.destroy()
  }
}

export class Stream implements Disposable {
  private constructor(
    readonly native: Native,
    /** null: the device's default stream. */
    readonly handle: Pointer | null,
  ) {}

  static default(native: Native): Stream {
    return new Stream(native, null)
  }

  static create(native: Native): Stream {
    native.check(native.shim.shim_stream_create(native.outsPtr), "shim_stream_create")
    return new Stream(native, native.outPtr())
  }

  get isDefault(): boolean {
    return this.handle === null
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

  destroy(): void {
    if (this.handle !== null) this.native.check(this.native.shim.shim_stream_destroy(this.handle), "shim_stream_destroy")
  }

  [Symbol.dispose](): void {
    this.destroy()
  }
}
