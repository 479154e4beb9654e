/**
 * monarch-bun's store: a TCPStore client and server speaking PyTorch's c10d protocol (torch
 * 1.13 and 2.x dialects), as functions and as the `Store` / `StoreServer` services.
 */
export type { StoreApi, StoreValue } from "./api.ts"
export { makeClient, type ClientOptions, type TcpStoreClient } from "./client.ts"
export { StoreError, StoreTimeout, type StoreErrorReason } from "./errors.ts"
export { prefixStore } from "./prefix.ts"
export { startServer, type RunningServer, type ServerOptions } from "./server.ts"
export { serve, Store, StoreServer, type ServerAddress } from "./service.ts"
