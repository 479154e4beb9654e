/**
 * Host buffers recycled between large copies that go out by a socket (a fetched tensor's host
 * copy): fresh memory costs page faults (on the dev VM a copy into it ran at 0.05x-0.4x of one
 * into touched memory), so a buffer the socket has taken comes back here for the next copy. A
 * copy counts against the worker's memory limit while in flight (holdHostCopy); spare buffers do
 * not (a tensor allocation must not be refused for them): the pool's cap bounds them instead.
 */

/** Copies smaller than this take plain memory and never come back. */
export const POOLED_BYTES = 64 * 1024

/** The most spare memory a pool keeps unless told otherwise. */
export const DEFAULT_SPARE_BYTES = 256 * 1024 * 1024

export class BufferPool {
  private readonly spare: Uint8Array<ArrayBuffer>[] = []
  private spareBytes = 0

  constructor(readonly maxSpareBytes: number = DEFAULT_SPARE_BYTES) {}

  /** Memory for `bytes` (contents undefined): the smallest spare that fits without wasting half, else fresh. */
  take(bytes: number): Uint8Array<ArrayBuffer> {
    if (bytes < POOLED_BYTES) return new Uint8Array(bytes)
    let best = -1
    for (let i = 0; i < this.spare.length; i++) {
      const size = this.spare[i]!.byteLength
      if (size >= bytes && size <= 2 * bytes && (best < 0 || size < this.spare[best]!.byteLength)) best = i
    }
    // NOTE: uninitialised memory, safe because a copy fills every byte before anything reads it.
    if (best < 0) return Bun.allocUnsafe(bytes)
    const [memory] = this.spare.splice(best, 1) as [Uint8Array<ArrayBuffer>]
    this.spareBytes -= memory.byteLength
    return memory.subarray(0, bytes)
  }

  /** Gives back memory `take` gave, once nothing reads it (the socket took it); kept while under the cap. */
  give(memory: Uint8Array): void {
    const whole = new Uint8Array(memory.buffer as ArrayBuffer)
    if (whole.byteLength < POOLED_BYTES || this.spareBytes + whole.byteLength > this.maxSpareBytes) return
    this.spare.push(whole)
    this.spareBytes += whole.byteLength
  }

  /** Bytes kept for reuse now. */
  get bytes(): number {
    return this.spareBytes
  }

  /** Drops every spare buffer. */
  clear(): void {
    this.spare.length = 0
    this.spareBytes = 0
  }
}
