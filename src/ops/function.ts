/**
 * What a function named by CallFunction or FetchValue is: the built-in `ops.*` and user
 * modules (`module:export`) share one signature, a context then the looked-up arguments.
 */
import type { Native } from "../../ffi/native.ts"
import type { Stream } from "../../ffi/stream.ts"
import type { Device } from "../protocol/values.ts"
import type { Generator } from "./generator.ts"

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
}

/**
 * A remote function. Tensors in its result (at any depth of arrays and objects) become the
 * command's results, in order; it may return a Promise.
 */
export type RemoteFunction = (ctx: FunctionContext, ...args: any[]) => unknown

/** Gives a user module's export its type; returns it unchanged. */
export const defineFunction = <F extends RemoteFunction>(f: F): F => f
