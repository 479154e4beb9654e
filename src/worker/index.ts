/**
 * monarch-bun's worker, the entry for programs that run one in their own process (src/worker.ts
 * is the process itself): its configuration from the environment, the services it needs
 * (Backend, and the store through `workerStore`), and `runWorker`.
 */
export { Backend } from "./backend.ts"
export { ConfigError, readConfig, type WorkerConfig } from "./config.ts"
export { logLayer } from "./log.ts"
export { EXIT_STATUS, runWorker, workerStore, type WorkerEnd } from "./startup.ts"
