/**
 * Simulated workers: many ranks in one process, each on its own socket to a real controller,
 * speaking the real wire (framed msgpack through src/net/connection.ts and the protocol's codec)
 * and the real handshake (src/net/handshake.ts: WorkerChallenge, the controller's proof checked,
 * WorkerHello proved with the job token). They compute nothing: a command with an ident is
 * passed as soon as it arrives, a FetchValue is answered with a FetchResult of the rank's number,
 * RequestStatus and a once-a-second tick answer Status as a real worker does, Exit closes.
 * Everything else is taken and dropped. A connection closed before the handshake ended is
 * retried with the real worker's backoff (50 ms doubling to 1 s).
 *
 * Two user functions stand for faults, each naming the rank it happens to (the first argument):
 * `sim:stall` stops that rank where it is (it passes nothing more and answers nothing but Exit:
 * a rank stuck in a user function), `sim:close` closes that rank's socket on receipt (a lost
 * worker); `onClosed` is told when (performance.timeOrigin + performance.now(), comparable
 * across processes on one host).
 *
 *   bun bench/simWorkers.ts --address host:port --world W --ranks FIRST:END   (MONARCH_TOKEN set)
 *
 * runs ranks FIRST..END-1 in a process of their own, printing `admitted CUT` once every rank
 * was admitted (CUT: connections the controller closed before admitting them) and `closed RANK AT` for each `sim:close`; it exits when
 * every rank has been sent Exit or lost its link.
 */
import type { Socket } from "bun"
import { Connection, parseAddress } from "../src/net/connection.ts"
import { MAX_HELLO_BYTES, newNonce, proof, proves, tcpChannel, unixChannel, type Transcript } from "../src/net/handshake.ts"
import { decodeWorkerMessage } from "../src/protocol/codec.ts"
import { DEFAULT_MAX_FRAME_BYTES } from "../src/protocol/framing.ts"
import type { WorkerMessage } from "../src/protocol/messages.ts"

export interface SimulatedOptions {
  /** The controller's listener, "host:port" or "unix:/path". */
  readonly address: string
  readonly token: string
  readonly world: number
  /** The ranks this process runs. */
  readonly ranks: ReadonlyArray<number>
  /** A `sim:close` closed `rank`'s socket at `at` (epoch milliseconds, sub-millisecond). */
  readonly onClosed?: (rank: number, at: number) => void
}

/** Epoch milliseconds with sub-millisecond resolution, comparable between processes of one host. */
export const now = (): number => performance.timeOrigin + performance.now()

/** The transcript as a connection fills it in: the controller's nonce comes with its proof. */
type OpenTranscript = { -readonly [K in keyof Transcript]: Transcript[K] }

/** One simulated rank. */
class SimulatedRank {
  /** The first ident not passed, as a real worker's Status reports it. */
  private firstUncompleted = 0
  private lastSent = 0
  private stalled = false
  private proven = false
  /** A command came: the controller admitted this rank (until then a close is retried). */
  private admitted = false
  private conn: Connection<WorkerMessage> | undefined
  /** Idents each recording's call takes, from its DefineRecording. */
  private readonly recordings = new Map<number, number>()
  /** The link ended: Exit came, `sim:close` closed it, or the controller went away after admitting it. */
  private done = false
  /** Connections the controller closed before admitting this rank. */
  cut = 0
  private backoffMs = 50

  constructor(readonly rank: number, private readonly o: SimulatedOptions, private readonly onDone: () => void, private readonly onAdmitted: () => void) {}

  connect(): void {
    const target = parseAddress(this.o.address)
    const transcript = { rank: this.rank, world: this.o.world, workerNonce: newNonce(), controllerNonce: new Uint8Array(0), channel: "" } as OpenTranscript
    void Bun.connect<Connection<WorkerMessage> | undefined>({
      ...target,
      socket: {
        binaryType: "uint8array",
        open: (s: Socket<Connection<WorkerMessage> | undefined>) => {
          s.setNoDelay(true)
          transcript.channel = "unix" in target ? unixChannel(target.unix) : tcpChannel(s.localAddress, s.localPort)
          const conn: Connection<WorkerMessage> = new Connection<WorkerMessage>(s as Socket<unknown>, {
            decode: decodeWorkerMessage,
            onMessage: (m) => this.receive(m, transcript),
            onInvalid: (e) => void conn.send({ _tag: "ProtocolError", message: e.message }),
            onClose: () => {
              if (conn === this.conn) this.closed()
            },
          }, MAX_HELLO_BYTES)
          this.conn = conn
          s.data = conn
          conn.send({ _tag: "WorkerChallenge", rank: this.rank, world: this.o.world, nonce: transcript.workerNonce })
        },
        data: (s, chunk) => s.data?.receive(chunk),
        drain: (s) => s.data?.drain(),
        close: (s) => s.data?.closedByPeer(),
        error: (s) => s.data?.closedByPeer(),
      },
    } as Parameters<typeof Bun.connect<Connection<WorkerMessage> | undefined>>[0]).catch(() => this.retry())
  }

  private retry(): void {
    setTimeout(() => this.connect(), this.backoffMs)
    this.backoffMs = Math.min(this.backoffMs * 2, 1000)
  }

  private closed(): void {
    if (this.done) return
    // Closed before the controller admitted it (its listener keeps only so many half-open
    // connections): try again, as a real worker does; after, the controller is gone.
    if (!this.admitted) {
      this.cut++
      this.proven = false
      this.conn = undefined
      return this.retry()
    }
    this.finish()
  }

  private finish(): void {
    if (this.done) return
    this.done = true
    this.conn?.close()
    this.onDone()
  }

  private receive(m: WorkerMessage, transcript: OpenTranscript): void {
    if (!this.proven) {
      if (m._tag !== "ControllerProof") return this.conn?.close()
      transcript.controllerNonce = m.nonce
      if (!proves(m.proof, this.o.token, "controller", transcript)) return this.conn?.close()
      this.proven = true
      this.conn!.reader.maxFrameBytes = DEFAULT_MAX_FRAME_BYTES
      this.conn!.send({ _tag: "WorkerHello", rank: this.rank, world: this.o.world, pid: process.pid, device: "cpu", proof: proof(this.o.token, "worker", transcript) })
      return
    }
    if (!this.admitted) {
      this.admitted = true
      this.onAdmitted()
    }
    this.handle(m)
  }

  private handle(m: WorkerMessage): void {
    if (m._tag === "Exit") return this.finish()
    if (this.stalled || this.done) return
    switch (m._tag) {
      case "CommandGroup":
        for (const c of m.commands) this.handle(c)
        return
      case "RequestStatus":
        this.firstUncompleted = Math.max(this.firstUncompleted, m.ident + 1)
        return this.status()
      case "DefineRecording":
        this.recordings.set(m.recording, m.idents)
        return
      case "CallRecording":
        this.firstUncompleted = m.ident + (this.recordings.get(m.recording) ?? 1)
        return
      case "FetchValue":
        this.conn!.send({ _tag: "FetchResult", ident: m.ident, value: this.rank })
        this.firstUncompleted = m.ident + 1
        return
      case "CallFunction":
        if (m.function === "sim:stall" && m.args[0] === this.rank) {
          // Stuck before passing it: a Status up to it first, as a real worker sends before a user function.
          this.status()
          this.stalled = true
          return
        }
        if (m.function === "sim:close" && m.args[0] === this.rank) {
          const at = now()
          this.conn?.close()
          this.o.onClosed?.(this.rank, at)
          return this.finish()
        }
        this.firstUncompleted = m.ident + 1
        return
      default:
        if ("ident" in m && typeof m.ident === "number") this.firstUncompleted = m.ident + 1
    }
  }

  /** Closes the socket, without retrying. */
  stop(): void {
    this.done = true
    this.conn?.close()
  }

  /** Status, when this rank has passed more since the last one (as a real worker sends it). */
  status(): void {
    if (this.stalled || this.done || !this.proven || this.firstUncompleted <= this.lastSent) return
    this.lastSent = this.firstUncompleted
    this.conn?.send({ _tag: "Status", firstUncompletedIdent: this.firstUncompleted })
  }
}

export interface SimulatedWorkers {
  /** Resolves once every rank was admitted (sent its first command). */
  readonly admitted: Promise<void>
  /** Resolves once every rank's link ended (Exit, sim:close, or the controller gone). */
  readonly done: Promise<void>
  /** Connections the controller closed before admitting their rank (each then retried). */
  readonly cutOff: () => number
  /** Closes every socket now. */
  readonly stop: () => void
}

/** Starts `o.ranks` as simulated workers in this process, each connecting at once. */
export const startSimulatedWorkers = (o: SimulatedOptions): SimulatedWorkers => {
  const admitted = Promise.withResolvers<void>(), done = Promise.withResolvers<void>()
  let toAdmit = o.ranks.length, left = o.ranks.length
  const ranks = o.ranks.map((r) => new SimulatedRank(r, o, () => {
    if (--left === 0) done.resolve()
  }, () => {
    if (--toAdmit === 0) admitted.resolve()
  }))
  if (ranks.length === 0) (admitted.resolve(), done.resolve())
  // The real worker's once-a-second Status, one timer for all of them.
  const tick = setInterval(() => {
    for (const r of ranks) r.status()
  }, 1000)
  void done.promise.then(() => clearInterval(tick))
  for (const r of ranks) r.connect()
  return {
    admitted: admitted.promise,
    done: done.promise,
    cutOff: () => ranks.reduce((n, r) => n + r.cut, 0),
    stop: () => {
      clearInterval(tick)
      for (const r of ranks) r.stop()
    },
  }
}

if (import.meta.main) {
  const args = process.argv.slice(2)
  const flag = (name: string) => args[args.indexOf(name) + 1]!
  const [first, end] = flag("--ranks").split(":").map(Number) as [number, number]
  const token = process.env.MONARCH_TOKEN
  if (!token) throw new Error("MONARCH_TOKEN is not set")
  const sims = startSimulatedWorkers({
    address: flag("--address"),
    token,
    world: Number(flag("--world")),
    ranks: Array.from({ length: end - first }, (_, i) => first + i),
    onClosed: (rank, at) => console.log(`closed ${rank} ${at}`),
  })
  await sims.admitted
  console.log(`admitted ${sims.cutOff()}`)
  await sims.done
  process.exit(0)
}
