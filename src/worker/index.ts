/**
 * monarch-bun's worker, to embed in a program of one's own: read the configuration from the
 * environment and run it with a backend and a store. `monarch-bun worker` (src/worker.ts) is
 * this with the defaults.
 */
export { Backend } from "./backend.ts"
export { ConfigError, readConfig, type WorkerConfig } from "./config.ts"
export { logLayer } from "./log.ts"
export { EXIT_STATUS, runWorker, workerStore, type WorkerEnd } from "./startup.ts"
