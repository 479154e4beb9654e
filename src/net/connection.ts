/**
 * A framed message connection over a Bun socket (TCP or Unix), used by both ends of the
 * controller link: frames in, decoded through the protocol's one validating path; messages
 * out, encoded and written with backpressure. Bad frames are reported to `onInvalid`; a fatal
 * one (an oversized length) also closes the socket, since the stream cannot be split again.
 */
import type { Socket } from "bun"
import { Result } from "effect"
import { encodeMessageParts } from "../protocol/codec.ts"
import type { WireError } from "../protocol/errors.ts"
import { FrameReader, FrameWriter, type FrameOwnership, type FrameReaderOptions } from "../protocol/framing.ts"
import type { Message } from "../protocol/messages.ts"

export interface ConnectionHandlers<In> {
  readonly decode: (body: Uint8Array, ownership: FrameOwnership) => Result.Result<In, WireError>
  readonly onMessage: (msg: In) => void
  readonly onInvalid: (error: WireError) => void
  readonly onClose: () => void
}

/** The state kept in socket.data: one per connection. */
export class Connection<In> {
  readonly reader: FrameReader
  readonly writer: FrameWriter
  closed = false
  /** Called once the writer's queue is empty (or the connection closed): whenFlushed's callbacks. */
  private flushed: Array<() => void> = []

  constructor(
    readonly socket: Socket<unknown>,
    private readonly handlers: ConnectionHandlers<In>,
    maxFrameBytes?: number,
    direct?: FrameReaderOptions["direct"],
  ) {
    this.writer = new FrameWriter(socket)
    this.reader = new FrameReader((body, ownership) => {
      const decoded = handlers.decode(body, ownership)
      if (Result.isSuccess(decoded)) handlers.onMessage(decoded.success)
      else handlers.onInvalid(decoded.failure)
    }, { ...(maxFrameBytes === undefined ? {} : { maxFrameBytes }), ...(direct === undefined ? {} : { direct }) })
  }

  /** Socket `data` handler. Once this side has closed, nothing more is read. */
  receive(chunk: Uint8Array): void {
    if (this.closed) return
    const fatal = this.reader.push(chunk)
    if (fatal === undefined) return
    this.handlers.onInvalid(fatal)
    this.close()
  }

  /** Encodes and writes a message; false (and nothing sent) when it cannot be encoded. */
  send(msg: Message): Result.Result<void, WireError> {
    if (this.closed) return Result.succeed(undefined)
    return Result.map(encodeMessageParts(msg), (parts) => void this.writer.write(parts))
  }

  /** Socket `drain` handler. */
  drain(): void {
    if (this.writer.drain()) this.runFlushed()
  }

  /** Calls `fn` once every byte written so far has gone to the socket (now, when none waits) or the connection closed. */
  whenFlushed(fn: () => void): void {
    if (this.closed || this.writer.pendingBytes === 0) fn()
    else this.flushed.push(fn)
  }

  private runFlushed(): void {
    for (const fn of this.flushed.splice(0)) fn()
  }

  close(): void {
    if (this.closed) return
    this.closed = true
    this.socket.end()
    this.runFlushed()
  }

  /** Socket `close` handler. */
  closedByPeer(): void {
    if (!this.closed) this.closed = true
    this.runFlushed()
    this.handlers.onClose()
  }
}

/** "host:port" or "unix:/path" as Bun.connect / Bun.listen options. */
export const parseAddress = (address: string): { hostname: string; port: number } | { unix: string } => {
  if (address.startsWith("unix:")) return { unix: address.slice(5) }
  const colon = address.lastIndexOf(":")
  const port = Number(address.slice(colon + 1))
  if (colon <= 0 || !Number.isInteger(port) || port <= 0 || port > 65535) throw new RangeError(`bad address "${address}": expected host:port or unix:/path`)
  return { hostname: address.slice(0, colon).replace(/^\[(.*)\]$/, "$1"), port }
}
