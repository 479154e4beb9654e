/**
 * monarch-bun's TCPStore, the entry for programs: the `Store` service (a client, or a prefix
 * of one) and `StoreServer` (a server here, or on its own thread), their errors, and the
 * plain client and server they are built on.
 */
export type { StoreApi, StoreValue } from "./api.ts"
export { makeClient, type ClientOptions, type TcpStoreClient } from "./client.ts"
export { StoreError, StoreTimeout, type StoreErrorReason } from "./errors.ts"
export { prefixStore } from "./prefix.ts"
export { startServer, type RunningServer, type ServerOptions } from "./server.ts"
export { serve, Store, StoreServer, type ServerAddress } from "./service.ts"
