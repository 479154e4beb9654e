/**
 * The shim backend as a service: the process's device library (cpu or cuda, as
 * MONARCH_DEVICE picks it; ffi/native.ts). Workers and user code take it from the context.
 */
import { Context, Effect, Layer } from "effect"
import { loadNative, shimError, ShimError, type Native } from "../../ffi/native.ts"
import { ShimStatus } from "../../ffi/symbols.ts"

export class Backend extends Context.Service<Backend, Native>()("monarch/Backend") {
  /** Loads the backend for `device` (cpu, cuda or auto); fails saying why it cannot. */
  static readonly layer = (device: string): Layer.Layer<Backend, ShimError> =>
    Layer.effect(Backend, Effect.try({
      try: () => loadNative(device),
      catch: (e) => (e instanceof ShimError ? e : shimError(ShimStatus.UNAVAILABLE, "load", e instanceof Error ? e.message : String(e))),
    }))
}
