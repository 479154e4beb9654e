/**
 * The store as Effect services: `Store` (any StoreApi: the TCP client, or a prefix view of one)
 * and `StoreServer` (a running server's address), each with layers that own the resource.
 */
import { Context, Effect, Layer, type Scope } from "effect"
import type { StoreApi } from "./api.ts"
import { type ClientOptions, makeClient } from "./client.ts"
import { StoreError } from "./errors.ts"
import { prefixStore } from "./prefix.ts"
import { type ServerOptions, startServer } from "./server.ts"
import { serveOnThread } from "./serverThread.ts"

export class Store extends Context.Service<Store, StoreApi>()("monarch/Store") {
  /** A TCP client connected for the layer's lifetime (connect retries until its timeout). */
  static readonly layerClient = (options: ClientOptions): Layer.Layer<Store, StoreError> =>
    Layer.effect(Store, makeClient(options))

  /** The Store below, seen through PrefixStore(prefix). */
  static readonly layerPrefix = (prefix: string): Layer.Layer<Store, never, Store> =>
    Layer.effect(Store, Effect.map(Effect.service(Store), (store) => prefixStore(prefix, store)))

  /** Runs `self` with the current Store seen through PrefixStore(prefix). */
  static readonly withPrefix =
    (prefix: string) =>
    <A, E, R>(self: Effect.Effect<A, E, R>): Effect.Effect<A, E, R | Store> =>
      Effect.flatMap(Effect.service(Store), (store) => Effect.provideService(self, Store, prefixStore(prefix, store)))
}

export interface ServerAddress {
  readonly host: string
  readonly port: number
}

/** Runs a store server on this thread until the scope closes. */
export const serve = (options: ServerOptions = {}): Effect.Effect<ServerAddress, StoreError, Scope.Scope> =>
  Effect.acquireRelease(
    Effect.try({
      try: () => startServer(options),
      catch: (e) =>
        new StoreError({
          reason: "Listen",
          detail: `${options.host ?? "127.0.0.1"}:${options.port ?? 0}: ${e instanceof Error ? e.message : String(e)}`,
        }),
    }),
    (server) => Effect.sync(server.stop),
  )

export class StoreServer extends Context.Service<StoreServer, ServerAddress>()("monarch/StoreServer") {
  /** A server on this thread for the layer's lifetime. */
  static readonly layer = (options: ServerOptions = {}): Layer.Layer<StoreServer, StoreError> =>
    Layer.effect(StoreServer, serve(options))

  /** A server on its own thread (serverThread.ts) for the layer's lifetime. */
  static readonly layerThread = (options: ServerOptions = {}): Layer.Layer<StoreServer, StoreError> =>
    Layer.effect(StoreServer, serveOnThread(options))
}
