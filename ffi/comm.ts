/**
 * Comm: a communicator over a group of ranks (Gloo on cpu, NCCL on cuda), made in two
 * phases so the shim opens no rendezvous sockets: `create` gives the bytes this member
 * publishes, `connect` takes every member's bytes (src/comm/ moves them through the store).
 */
import { ptr, type Pointer } from "bun:ffi"
import type { Native } from "./native.ts"
import { CommOp, P2P, type CommOpName } from "./symbols.ts"
import type { Stream } from "./stream.ts"
import type { Tensor } from "./tensor.ts"

export interface P2POp {
  readonly kind: keyof typeof P2P
  /** The other member's rank within this communicator. */
  readonly peer: number
  readonly tensor: Tensor
}

const stream = (s: Stream | undefined) => s?.handle ?? null

/**
 * A started all-reduce (Comm.allReduceStart): done at some later point, when its tensors are
 * the caller's again. `wait` throws the collective's failure once it sees it done.
 */
export class Work {
  #handle: Pointer | null
  /** Once done: its failure, or null when it went through. */
  #failure: unknown = undefined
  /** Once done: when it ran (microseconds since the epoch; shim_work_times). */
  began = 0
  ended = 0

  constructor(private readonly comm: Comm, handle: Pointer) {
    this.#handle = handle
  }

  get done(): boolean {
    return this.#failure !== undefined
  }

  /**
   * Waits up to `microseconds` (0: only looks; negative: until done); true once done, and
   * throws the collective's failure (every time) when it failed.
   */
  wait(microseconds: number): boolean {
    const handle = this.#handle
    if (handle !== null) {
      const { native } = this.comm
      const status = native.shim.shim_work_wait(handle, microseconds, native.outsPtr)
      if ((native.outs[0]! & 0xffffffffn) === 0n) return false
      this.#handle = null
      this.comm.finished(this)
      const times = new BigInt64Array(2)
      native.shim.shim_work_times(handle, ptr(times), ptr(times, 8))
      this.began = Number(times[0])
      this.ended = Number(times[1])
      // The text of a failure is the shim's last error: read before the destroy.
      try {
        native.check(status, "shim_all_reduce")
        this.#failure = null
      } catch (e) {
        this.#failure = e
      } finally {
        native.shim.shim_work_destroy(handle)
      }
    }
    if (this.#failure !== null) throw this.#failure
    return true
  }
}

export class Comm implements Disposable {
  #destroyed = false
  /** Started all-reduces not yet seen done: destroy waits for them. */
  readonly #works = new Set<Work>()

  private constructor(
    readonly native: Native,
    readonly handle: Pointer,
    /** This member's rank within the communicator. */
    readonly rank: number,
    readonly size: number,
  ) {}

  /** Phase one: a communicator not yet connected. hostname: the address to bind (cpu). */
  static create(native: Native, rank: number, size: number, timeoutMs: number, hostname = ""): Comm {
    native.check(native.shim.shim_comm_create(rank, size, timeoutMs, hostname, native.outsPtr), "shim_comm_create")
    return new Comm(native, native.outPtr(), rank, size)
  }

  /** The bytes this member publishes for the others (may be empty). */
  address(): Uint8Array {
    const { native } = this
    native.check(native.shim.shim_comm_address(this.handle, null, 0, native.outsPtr), "shim_comm_address")
    const bytes = new Uint8Array(native.outInt())
    if (bytes.byteLength > 0)
      native.check(native.shim.shim_comm_address(this.handle, ptr(bytes), bytes.byteLength, native.outsPtr), "shim_comm_address")
    return bytes
  }

  /** Phase two: every member's address bytes, in rank order. */
  connect(addresses: ReadonlyArray<Uint8Array>): void {
    if (addresses.length !== this.size) throw new RangeError(`Comm.connect: ${addresses.length} addresses for ${this.size} members`)
    const lens = new BigInt64Array(addresses.map((a) => BigInt(a.byteLength)))
    const all = new Uint8Array(addresses.reduce((n, a) => n + a.byteLength, 0) || 1)
    let off = 0
    for (const a of addresses) { all.set(a, off); off += a.byteLength }
    this.native.check(this.native.shim.shim_comm_connect(this.handle, ptr(all), ptr(lens)), "shim_comm_connect")
  }

  /**
   * What carries this comm's data once connected: "tcp" (Gloo's TCP pairs), "shm+tcp" (all on
   * one host: all_reduce through shared memory), "self" (one member), "nccl" (cuda).
   */
  transport(): string {
    return String(this.native.shim.shim_comm_transport(this.handle))
  }

  allReduce(out: Tensor, input: Tensor, op: CommOpName, s?: Stream): void {
    this.native.check(this.native.shim.shim_all_reduce(this.handle, out.handle, input.handle, CommOp[op], stream(s)), "shim_all_reduce")
  }

  /**
   * Starts an all-reduce and returns at once (shim.h, shim_all_reduce_start): until the work
   * is done, out and input are its, and no other call may be made on this comm.
   */
  allReduceStart(out: Tensor, input: Tensor, op: CommOpName, s?: Stream): Work {
    this.native.check(this.native.shim.shim_all_reduce_start(this.handle, out.handle, input.handle, CommOp[op], stream(s), this.native.outsPtr), "shim_all_reduce_start")
    const work = new Work(this, this.native.outPtr())
    this.#works.add(work)
    return work
  }

  /** A work of this comm was seen done. */
  finished(work: Work): void {
    this.#works.delete(work)
  }

  allGather(out: Tensor, input: Tensor, s?: Stream): void {
    this.native.check(this.native.shim.shim_all_gather(this.handle, out.handle, input.handle, stream(s)), "shim_all_gather")
  }

  reduceScatter(out: Tensor, input: Tensor, op: CommOpName, s?: Stream): void {
    this.native.check(this.native.shim.shim_reduce_scatter(this.handle, out.handle, input.handle, CommOp[op], stream(s)), "shim_reduce_scatter")
  }

  allToAll(out: Tensor, input: Tensor, s?: Stream): void {
    this.native.check(this.native.shim.shim_all_to_all(this.handle, out.handle, input.handle, stream(s)), "shim_all_to_all")
  }

  broadcast(t: Tensor, root: number, s?: Stream): void {
    this.native.check(this.native.shim.shim_broadcast(this.handle, t.handle, root, stream(s)), "shim_broadcast")
  }

  barrier(s?: Stream): void {
    this.native.check(this.native.shim.shim_barrier(this.handle, stream(s)), "shim_barrier")
  }

  /** Sends and receives posted together and completed together. */
  p2p(ops: ReadonlyArray<P2POp>, s?: Stream): void {
    if (ops.length === 0) return
    const kinds = new Int32Array(ops.map((o) => P2P[o.kind]))
    const peers = new Int32Array(ops.map((o) => o.peer))
    const tensors = new BigUint64Array(ops.map((o) => BigInt(o.tensor.handle)))
    this.native.check(this.native.shim.shim_p2p(this.handle, ops.length, ptr(kinds), ptr(peers), ptr(tensors), stream(s)), "shim_p2p")
  }

  destroy(): void {
    if (this.#destroyed) return
    this.#destroyed = true
    // Its started all-reduces end first (each within the comm's timeout); their failures are their owners' to see.
    for (const w of [...this.#works]) {
      try {
        w.wait(-1)
      } catch {
        // Kept by the work for its owner's wait.
      }
    }
    this.native.check(this.native.shim.shim_comm_destroy(this.handle), "shim_comm_destroy")
  }

  [Symbol.dispose](): void {
    this.destroy()
  }
}
