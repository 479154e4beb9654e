/**
 * A raw TCP peer for the fuzz and security tests: writes exactly the bytes it is given (in
 * pieces of any size, queued under backpressure), splits what comes back into frame bodies,
 * and notices when the other side closes. Both a client (connect) and a one-connection
 * server (listenOnce, standing in for a controller) are offered.
 */
import type { Socket, TCPSocketListener } from "bun"
import { FrameReader } from "../../src/protocol/framing.ts"

/** A frame: the body's length as a u32 big-endian, then the body. */
export const frame = (body: Uint8Array): Uint8Array => {
  const out = new Uint8Array(4 + body.length)
  new DataView(out.buffer).setUint32(0, body.length)
  out.set(body, 4)
  return out
}

/** Just a length prefix claiming `length` bytes. */
export const lengthPrefix = (length: number): Uint8Array => {
  const out = new Uint8Array(4)
  new DataView(out.buffer).setUint32(0, length)
  return out
}

export class RawPeer {
  /** Frame bodies received, in order (copied). */
  readonly bodies: Uint8Array[] = []
  closed = false
  private socket: Socket<undefined> | undefined
  private readonly queue: Uint8Array[] = []
  private readonly reader = new FrameReader((body) => void this.bodies.push(body.slice()), { maxFrameBytes: 64 * 1024 * 1024 })
  private wake: (() => void) | undefined

  private handlers() {
    return {
      binaryType: "uint8array" as const,
      open: (s: Socket<undefined>) => { this.socket = s },
      data: (_s: Socket<undefined>, chunk: Uint8Array) => { this.reader.push(chunk); this.wake?.() },
      drain: () => this.flush(),
      close: () => { this.closed = true; this.wake?.() },
      error: () => { this.closed = true; this.wake?.() },
    }
  }

  static async connect(address: string): Promise<RawPeer> {
    const peer = new RawPeer()
    const colon = address.lastIndexOf(":")
    await Bun.connect<undefined>({ hostname: address.slice(0, colon), port: Number(address.slice(colon + 1)), socket: peer.handlers() })
    return peer
  }

  /**
   * A listener on loopback that accepts connections and hands each one over as a RawPeer;
   * `address` is what a worker is told (CONTROLLER_ADDR).
   */
  static listen(onPeer: (peer: RawPeer) => void): { readonly address: string; readonly stop: () => void } {
    const peers = new WeakMap<Socket<undefined>, RawPeer>()
    const listener: TCPSocketListener<undefined> = Bun.listen<undefined>({
      hostname: "127.0.0.1",
      port: 0,
      socket: {
        binaryType: "uint8array",
        open: (s) => {
          const peer = new RawPeer()
          peer.socket = s
          peers.set(s, peer)
          onPeer(peer)
        },
        data: (s, chunk) => { const p = peers.get(s)!; p.reader.push(chunk); p.wake?.() },
        drain: (s) => peers.get(s)?.flush(),
        close: (s) => { const p = peers.get(s); if (p) { p.closed = true; p.wake?.() } },
        error: (s) => { const p = peers.get(s); if (p) { p.closed = true; p.wake?.() } },
      },
    })
    return { address: `127.0.0.1:${listener.port}`, stop: () => listener.stop(true) }
  }

  /** Writes `bytes`, split into pieces of 1..`maxPiece` bytes when given (torn frames). */
  write(bytes: Uint8Array, pieces?: { readonly maxPiece: number; readonly random: () => number }): void {
    if (pieces === undefined) this.queue.push(bytes)
    else for (let at = 0; at < bytes.length; ) {
      const n = 1 + Math.floor(pieces.random() * pieces.maxPiece)
      this.queue.push(bytes.subarray(at, at + n))
      at += n
    }
    this.flush()
  }

  /** Bytes written but not yet taken by the socket. */
  get pending(): number {
    return this.queue.reduce((n, b) => n + b.length, 0)
  }

  private flush(): void {
    const s = this.socket
    if (s === undefined || this.closed) return
    while (this.queue.length > 0) {
      const next = this.queue[0]!
      const n = Math.max(s.write(next), 0)
      if (n < next.length) {
        this.queue[0] = next.subarray(n)
        return
      }
      this.queue.shift()
    }
  }

  /** Resolves true once `cond` holds, false after `ms`. */
  until(cond: () => boolean, ms: number): Promise<boolean> {
    return new Promise((resolve) => {
      const timer = setTimeout(() => { this.wake = undefined; resolve(cond()) }, ms)
      this.wake = () => {
        if (!cond()) return
        clearTimeout(timer)
        this.wake = undefined
        resolve(true)
      }
      this.wake()
    })
  }

  end(): void {
    this.socket?.end()
  }
}
