/**
 * A raw TCP peer for the fuzz and security tests: writes exactly the bytes it is given (in
 * pieces of any size, queued under backpressure), splits what comes back into frame bodies,
 * and notices when the other side closes. Both a client (connect) and a server (listen,
 * standing in for a controller) are offered, and either side of the link's handshake
 * (src/net/handshake.ts), for peers that hold the token.
 */
import type { Socket, TCPSocketListener } from "bun"
import { newNonce, proof, proves, tcpChannel, type Transcript } from "../../src/net/handshake.ts"
import { decodeControllerMessage, decodeWorkerMessage, encodeMessage } from "../../src/protocol/codec.ts"
import { FrameReader } from "../../src/protocol/framing.ts"
import type { Message, WorkerHello } from "../../src/protocol/messages.ts"

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
  /** Every byte received, as it came (copied). */
  readonly chunks: Uint8Array[] = []
  closed = false
  private socket: Socket<undefined> | undefined
  private readonly queue: Uint8Array[] = []
  private readonly reader = new FrameReader((body) => void this.bodies.push(body.slice()), { maxFrameBytes: 64 * 1024 * 1024 })
  private wake: (() => void) | undefined

  private handlers() {
    return {
      binaryType: "uint8array" as const,
      open: (s: Socket<undefined>) => { this.socket = s },
      data: (_s: Socket<undefined>, chunk: Uint8Array) => this.take(chunk),
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
        data: (s, chunk) => peers.get(s)!.take(chunk),
        drain: (s) => peers.get(s)?.flush(),
        close: (s) => { const p = peers.get(s); if (p) { p.closed = true; p.wake?.() } },
        error: (s) => { const p = peers.get(s); if (p) { p.closed = true; p.wake?.() } },
      },
    })
    return { address: `127.0.0.1:${listener.port}`, stop: () => listener.stop(true) }
  }

  private take(chunk: Uint8Array): void {
    this.chunks.push(chunk.slice())
    this.reader.push(chunk)
    this.wake?.()
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

  /** The handshake's channel (src/net/handshake.ts) of a connection this peer made: its own end. */
  get ownEnd(): string {
    return tcpChannel(this.socket!.localAddress, this.socket!.localPort)
  }

  /** The same of a connection this peer accepted (RawPeer.listen): the other end. */
  get otherEnd(): string {
    return tcpChannel(this.socket!.remoteAddress, this.socket!.remotePort)
  }
}

/** A message as a frame. */
export const framed = (m: Message): Uint8Array => {
  const r = encodeMessage(m)
  if (r._tag === "Failure") throw new Error(r.failure.message)
  return frame(r.success)
}

export interface WorkerHandshake {
  /** The controller answered with a ControllerProof that holds for `token`. */
  readonly proven: boolean
  /** What the controller sent first, by tag ("nothing" when it sent nothing in time). */
  readonly answer: string
  readonly transcript: Transcript | undefined
}

/**
 * The worker's side of the handshake on a connection `peer` made: WorkerChallenge, then (once
 * a ControllerProof came) a WorkerHello proved with `token` over the connection's own end, or
 * over `channel` when given (a relay's). `hello: false` stops after the controller's proof.
 */
export const workerHandshake = async (peer: RawPeer, o: { readonly token: string; readonly rank: number; readonly world: number; readonly channel?: string; readonly hello?: boolean; readonly device?: string }): Promise<WorkerHandshake> => {
  const from = peer.bodies.length
  const workerNonce = newNonce()
  peer.write(framed({ _tag: "WorkerChallenge", rank: o.rank, world: o.world, nonce: workerNonce }))
  if (!(await peer.until(() => peer.bodies.length > from || peer.closed, 5000)) || peer.bodies.length === from) return { proven: false, answer: "nothing", transcript: undefined }
  const got = decodeWorkerMessage(peer.bodies[from]!)
  if (got._tag === "Failure" || got.success._tag !== "ControllerProof") return { proven: false, answer: got._tag === "Failure" ? "an invalid frame" : got.success._tag, transcript: undefined }
  const transcript: Transcript = { rank: o.rank, world: o.world, channel: o.channel ?? peer.ownEnd, workerNonce, controllerNonce: got.success.nonce }
  const proven = proves(got.success.proof, o.token, "controller", transcript)
  if (o.hello !== false) peer.write(framed({ _tag: "WorkerHello", rank: o.rank, world: o.world, pid: process.pid, proof: proof(o.token, "worker", transcript), device: o.device ?? "cpu" }))
  return { proven, answer: "ControllerProof", transcript }
}

/**
 * The controller's side on a connection `peer` accepted: takes its WorkerChallenge, answers
 * with a proof made with `token`, and resolves to the WorkerHello when its proof holds
 * (undefined otherwise, or when none came within `ms`).
 */
export const controllerHandshake = async (peer: RawPeer, token: string, ms = 10_000): Promise<WorkerHello | undefined> => {
  // The connection's first two frames, whether or not they came before this was called.
  if (!(await peer.until(() => peer.bodies.length > 0, ms))) return undefined
  const challenge = decodeControllerMessage(peer.bodies[0]!)
  if (challenge._tag === "Failure" || challenge.success._tag !== "WorkerChallenge") return undefined
  const transcript: Transcript = { rank: challenge.success.rank, world: challenge.success.world, channel: peer.otherEnd, workerNonce: challenge.success.nonce, controllerNonce: newNonce() }
  peer.write(framed({ _tag: "ControllerProof", nonce: transcript.controllerNonce, proof: proof(token, "controller", transcript) }))
  if (!(await peer.until(() => peer.bodies.length > 1, ms))) return undefined
  const hello = decodeControllerMessage(peer.bodies[1]!)
  if (hello._tag === "Failure" || hello.success._tag !== "WorkerHello" || !proves(hello.success.proof, token, "worker", transcript)) return undefined
  return hello.success
}
