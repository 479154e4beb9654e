/**
 * The worker process: `bun run src/worker.ts`, started by our launcher or by
 * `torchrun --no_python`. Configuration comes from the environment (src/worker/config.ts).
 */
import { Effect, Layer } from "effect"
import { Backend, EXIT_STATUS, logLayer, readConfig, runWorker, workerStore } from "./worker/index.ts"

const main = Effect.suspend(() => {
  const config = readConfig()
  return runWorker(config).pipe(Effect.provide(Layer.mergeAll(Backend.layer(config.device), workerStore(config))))
}).pipe(
  Effect.scoped,
  Effect.tapCause((cause) => Effect.logError("worker failed", cause)),
  Effect.provide(logLayer(`worker ${process.env.RANK ?? process.env.SLURM_PROCID ?? "?"}`)),
)

Effect.runPromise(main).then(
  (end) => process.exit(end === "exit" ? EXIT_STATUS.exit : EXIT_STATUS.linkLost),
  () => process.exit(EXIT_STATUS.failed),
)
