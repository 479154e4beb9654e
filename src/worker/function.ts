/**
 * What a function named by CallFunction or FetchValue is: the built-in `ops.*` and user
 * modules (`module:export`) share one signature, a context then the looked-up arguments.
 */
import type { Native } from "../../ffi/native.ts"
import type { Stream } from "../../ffi/stream.ts"
import type { Tensor } from "../../ffi/tensor.ts"
import type { Device } from "../protocol/values.ts"
import type { Generator } from "../ops/generator.ts"

/** What a function knows about where it runs. */
export interface FunctionContext {
  readonly native: Native
  readonly rank: number
  readonly world: number
  readonly device: Device
  /** The stream the command runs on; issue tensor work to it. */
  readonly stream: Stream
  /** This rank's coordinate in each dim of the most recently created mesh, by dim name. */
  readonly coords: Readonly<Record<string, number>>
  /** This rank's random generator (the session's): random ops without a seed draw from it. */
  readonly generator: Generator
  /** The command's keyword arguments, looked up. */
  readonly kwargs: Readonly<Record<string, unknown>>
  /**
   * A communicator of the group the call declared (CallOptions.dims): the ranks of its mesh
   * that differ from this one only in those dims. No `dims`, or all of them in the declared
   * order: that group; one declared dim: the group along it alone. Throws CommError for any
   * other dims, or a call that declared none.
   */
  readonly group: (dims?: string | ReadonlyArray<string>) => Group
}

/** A reduction a group's all_reduce and reduce_scatter apply. */
export type GroupReduction = "sum" | "avg" | "max" | "min" | "prod"

/**
 * A group's collectives and transfers, on the command's stream, in the order the function
 * issues them. Every member must make the same calls in the same order: members passing
 * different dtypes, element counts, reductions or roots all fail the call at once with
 * CommError ("members disagree"). A failure fails the whole command on every member, even if
 * the function catches it. Ranks are positions in the group (0 .. size - 1).
 */
export interface Group {
  /** This rank's position in the group, and the group's size. */
  readonly rank: number
  readonly size: number
  /** The global ranks of the members, in group order. */
  readonly members: ReadonlyArray<number>
  /** `t` reduced over the members, as a new tensor (inplace: into `t`, which it returns). */
  allReduce(t: Tensor, reduction?: GroupReduction, opts?: { readonly inplace?: boolean }): Tensor
  /** Every member's `t`, stacked: `[size, ...t.shape]`. */
  allGather(t: Tensor): Tensor
  /** `t` (dim 0 of size `size`) reduced over the members; this member keeps row `rank`: `t.shape.slice(1)`. */
  reduceScatter(t: Tensor, reduction?: GroupReduction): Tensor
  /** Member `root`'s `t` on every member, as a new tensor (inplace: into `t`). */
  broadcast(t: Tensor, root: number, opts?: { readonly inplace?: boolean }): Tensor
  /** Sends `t` to member `to`, which must recv a tensor of the same dtype and element count. */
  send(t: Tensor, to: number): void
  /** Receives into `into` (returned) from member `from`. */
  recv(into: Tensor, from: number): Tensor
  /** Sends and receives posted together (a ring's step): each member's pairs must match its peers'. */
  exchange(ops: ReadonlyArray<{ readonly send: Tensor; readonly to: number } | { readonly recv: Tensor; readonly from: number }>): void
}

/**
 * A remote function. Tensors in its result (at any depth of arrays and objects) become the
 * command's results, in order; it may return a Promise. A tensor argument is what the ref
 * holds, a strided view included, as a torch function is given one (`Tensor.contiguous`,
 * `Tensor.strides`): the built-ins (`op`) and the group's calls take it as it is, `toHost` and
 * `copyOut` give its elements in row-major order, `hostBytes` gives undefined for it. A
 * returned tensor that shares memory is defined as a copy (handlers/calls.ts, ownResults).
 */
export type RemoteFunction = (ctx: FunctionContext, ...args: any[]) => unknown

/** Gives a user module's export its type; returns it unchanged. */
export const defineFunction = <F extends RemoteFunction>(f: F): F => f
