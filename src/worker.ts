/**
 * The worker process: `bun run src/worker.ts`, started by our launcher or by
 * `torchrun --no_python`. Configuration comes from the environment (src/worker/config.ts).
 */
import { Effect, Layer } from "effect"
import { Backend } from "./backend.ts"
import { logLayer } from "./log.ts"
import { readConfig } from "./worker/config.ts"
import { EXIT_STATUS, runWorker, workerStore } from "./worker/startup.ts"

const main = Effect.suspend(() => {
  const config = readConfig()
  return runWorker(config).pipe(Effect.provide(Layer.mergeAll(Backend.layer(config.device), workerStore(config))))
}).pipe(
  Effect.scoped,
  Effect.tapCause((cause) => Effect.logError("worker failed", cause)),
  Effect.provide(logLayer(`worker ${process.env.RANK ?? "?"}`)),
)

Effect.runPromise(main).then(
  (end) => process.exit(end === "exit" ? EXIT_STATUS.exit : EXIT_STATUS.linkLost),
  () => process.exit(EXIT_STATUS.failed),
)
