/**
 * Writing to a Bun socket with backpressure: `socket.write` may take only part of what it is
 * given; the rest waits here, in order, until the socket's drain handler calls `drain`. The
 * store's client and server use it (the framed controller links have FrameWriter).
 */
export class SocketWriter {
  private backlog: Uint8Array[] = []
  /** Bytes in the backlog: accepted by write() but not yet by the socket. */
  pendingBytes = 0

  constructor(private readonly socket: { write(data: Uint8Array): number }) {}

  /** Writes `bytes`, queueing a copy of what the socket does not take; false if it refused them. */
  write(bytes: Uint8Array): boolean {
    if (this.backlog.length > 0) {
      this.backlog.push(bytes.slice())
      this.pendingBytes += bytes.byteLength
      return true
    }
    const n = this.socket.write(bytes)
    if (n < 0) return false
    if (n < bytes.byteLength) {
      this.backlog.push(bytes.slice(n))
      this.pendingBytes += bytes.byteLength - n
    }
    return true
  }

  /** Writes what is queued, as far as the socket takes it. */
  drain(): void {
    while (this.backlog.length > 0) {
      const bytes = this.backlog[0]!
      const n = this.socket.write(bytes)
      if (n < 0) return
      this.pendingBytes -= Math.min(n, bytes.byteLength)
      if (n < bytes.byteLength) {
        this.backlog[0] = bytes.subarray(n)
        return
      }
      this.backlog.shift()
    }
  }
}
