/**
 * A user function's group (FunctionContext.group): the communicator of the mesh group its
 * CallFunction declared, wrapped as the Group a function calls, and the start and end every
 * member of such a call makes around the function.
 *
 * The start is one all_reduce (min) of a one-element tensor over the group: each member gives
 * the ident of a failure it cannot run past (a poisoned input, an input that cannot be read,
 * a function that cannot be found), or none. Running the function with zeros for a poisoned
 * input, as Reduce does, is not possible: the worker does not know the input's shape or what
 * the function would do with it. So no member runs the function when any member cannot: the
 * others do not wait in their first collective for a member that never comes (the comm timeout,
 * and the communicator lost after it), and each defines its results as depending on the
 * earliest such failure, which is what the controller's graph says of them too (the call
 * depends on every member of the group).
 *
 * The end is another all_reduce (min) over the group, after the function: each member says how
 * its run went (through, a call of the group failed, or the function failed on its own). A
 * member whose function threw before some of its group's calls would otherwise be one call
 * behind its peers from then on; its end meets the peer's next call instead, which fails there
 * ("members disagree") and so ends the peer's function, and it tries its end again until the
 * peer's end comes. Every member then knows whether the call went through everywhere. The start
 * and end pass one and three f64s, so a function's own all_reduce is unlikely to agree with them.
 */
import type { Comm } from "../../ffi/comm.ts"
import * as k from "../../ffi/ops.ts"
import type { Stream } from "../../ffi/stream.ts"
import { Tensor } from "../../ffi/tensor.ts"
import { commError, inGlobalRanks } from "../comm/communicators.ts"
import { CommError } from "../comm/errors.ts"
import type { Group, GroupReduction } from "./function.ts"
import { throughDense } from "./dense.ts"
import { DependentOnError } from "./errors.ts"
import { EXPANDED_WRITE } from "./kernels/staging.ts"

/** The start's value of a member with nothing against running. */
const READY = Number.POSITIVE_INFINITY

/**
 * The start of a call over `comm`: undefined when every member runs the function, else the
 * earliest failure's ident any member gave (`blocked`: this member's own, or undefined).
 */
export const startTogether = (comm: Comm, blocked: number | undefined, stream: Stream): number | undefined => {
  const flag = Tensor.empty(comm.native, "f64", [1])
  try {
    k.fill(flag, blocked ?? READY, stream)
    comm.allReduce(flag, flag, "min", stream)
    const earliest = (flag.toHost(stream).toArray() as Float64Array)[0]!
    return earliest === READY ? undefined : earliest
  } finally {
    flag.free()
  }
}

/** How a member's run went, in the end's order: the least any member gives is the call's outcome. */
export const enum RunOutcome {
  /** The function failed on its own (the member reports it). */
  Failed = 0,
  /** A call of the group failed (a CommError, reported by the members it failed on). */
  GroupFailed = 1,
  Through = 2,
}

/** How many of its peers' calls a member's end may meet before theirs (a function catching each failure and going on). */
const END_TRIES = 64

/** The end of a call over `comm` (see the top): the least outcome any member gave. */
export const endTogether = (comm: Comm, mine: RunOutcome, stream: Stream): RunOutcome => {
  const flag = Tensor.empty(comm.native, "f64", [3])
  try {
    for (let tries = 1; ; tries++) {
      k.fill(flag, mine, stream)
      try {
        comm.allReduce(flag, flag, "min", stream)
        return (flag.toHost(stream).toArray() as Float64Array)[0]! as RunOutcome
      } catch (e) {
        // A peer still in the function's calls met this end: that call failed there; meet its next.
        const error = commError(e)
        if (error.reason !== "invalid" || tries >= END_TRIES) throw error
      }
    }
  } finally {
    flag.free()
  }
}

/** Why a member that could run does not: another member's failure at `ident`. */
export const blockedBy = (ident: number): DependentOnError => new DependentOnError({ ident })

/** The Group a function gets: its calls on `comm` and `stream`; `failure` is the first that failed. */
export class CallGroup implements Group {
  failure: CommError | undefined

  constructor(readonly comm: Comm, readonly members: ReadonlyArray<number>, private readonly stream: Stream) {}

  get rank(): number {
    return this.comm.rank
  }

  get size(): number {
    return this.comm.size
  }

  // A strided view goes to the library as a dense copy (dense.ts), written back when in place.
  allReduce(t: Tensor, reduction: GroupReduction = "sum", opts: { readonly inplace?: boolean } = {}): Tensor {
    const given = opts.inplace ? this.written(t, "allReduce") : this.tensor(t, "allReduce")
    return throughDense(given, this.stream, opts.inplace === true, (input) =>
      this.into(opts.inplace ? input : this.like(input, input.shape), input, (out) => this.comm.allReduce(out, input, this.reduction(reduction), this.stream)))
  }

  allGather(t: Tensor): Tensor {
    return throughDense(this.tensor(t, "allGather"), this.stream, false, (input) =>
      this.into(this.like(input, [this.size, ...input.shape]), input, (out) => this.comm.allGather(out, input, this.stream)))
  }

  reduceScatter(t: Tensor, reduction: GroupReduction = "sum"): Tensor {
    // A dim 0 other than the group's size gives an output the shim refuses, telling the others.
    return throughDense(this.tensor(t, "reduceScatter"), this.stream, false, (input) =>
      this.into(this.like(input, input.shape.slice(1)), input, (out) => this.comm.reduceScatter(out, input, this.reduction(reduction), this.stream)))
  }

  broadcast(t: Tensor, root: number, opts: { readonly inplace?: boolean } = {}): Tensor {
    if (opts.inplace) return throughDense(this.written(t, "broadcast"), this.stream, true, (input) => this.into(input, input, (o) => this.comm.broadcast(o, root, this.stream)))
    const input = this.tensor(t, "broadcast"), out = this.like(input, input.shape)
    k.cast(out, input, this.stream)
    return this.into(out, input, (o) => this.comm.broadcast(o, root, this.stream))
  }

  send(t: Tensor, to: number): void {
    this.exchange([{ send: t, to }])
  }

  recv(into: Tensor, from: number): Tensor {
    this.exchange([{ recv: into, from }])
    return into
  }

  exchange(ops: ReadonlyArray<{ readonly send: Tensor; readonly to: number } | { readonly recv: Tensor; readonly from: number }>): void {
    const p2p = ops.map((o) => ("send" in o
      ? { kind: "send" as const, peer: this.peer(o.to), tensor: this.tensor(o.send, "send") }
      : { kind: "recv" as const, peer: this.peer(o.from), tensor: this.written(o.recv, "recv") }))
    // Each strided one through a dense copy (a receive's written back), nested: all posted together.
    const post = (i: number, dense: typeof p2p): void => {
      if (i === p2p.length) return this.run(() => this.comm.p2p(dense, this.stream))
      const o = p2p[i]!
      throughDense(o.tensor, this.stream, o.kind === "recv", (tensor) => post(i + 1, [...dense, { ...o, tensor }]))
    }
    post(0, [])
  }

  /** Runs a call on the comm; its failure, in global ranks, is the group's and is thrown. */
  private run(call: () => void): void {
    try {
      call()
    } catch (e) {
      const error = inGlobalRanks(commError(e), this.members)
      this.failure ??= error
      throw error
    }
  }

  /** `call(out)`, then out; out is freed when the call fails and it was made here. */
  private into(out: Tensor, input: Tensor, call: (out: Tensor) => void): Tensor {
    try {
      this.run(() => call(out))
    } catch (e) {
      if (out !== input) out.free()
      throw e
    }
    return out
  }

  private like(t: Tensor, shape: ReadonlyArray<number>): Tensor {
    return Tensor.empty(this.comm.native, t.dtype, shape)
  }

  /** The reduction, refused here (before any member waits) when it is none of the five. */
  private reduction(r: GroupReduction): GroupReduction {
    if (!["sum", "avg", "max", "min", "prod"].includes(r)) this.refuse(`unknown reduction "${String(r)}" (sum, avg, max, min or prod)`)
    return r
  }

  private tensor(t: unknown, what: string): Tensor {
    if (!(t instanceof Tensor)) this.refuse(`${what}: expected a tensor, got ${t === null ? "null" : typeof t}`)
    return t as Tensor
  }

  /** A tensor the call writes: not an expanded view (torch refuses writing one). */
  private written(t: unknown, what: string): Tensor {
    const tensor = this.tensor(t, what)
    if (tensor.expanded) this.refuse(`${what}: ${EXPANDED_WRITE}`)
    return tensor
  }

  /** A member's position, refused when it is not one. */
  private peer(p: number): number {
    if (!Number.isInteger(p) || p < 0 || p >= this.size || p === this.rank) this.refuse(`member ${p} is not another member of a group of ${this.size} (this one is ${this.rank})`)
    return p
  }

  private refuse(message: string): never {
    const error = new CommError({ reason: "invalid", message: `${message} (group of ranks [${this.members.join(", ")}])` })
    this.failure ??= error
    throw error
  }
}
