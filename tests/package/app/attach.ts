/**
 * A user's controller program for workers started by `monarch-bun launch --nproc 2
 * --store-port <port> -- worker` (same MONARCH_TOKEN): attaches through the launcher's store,
 * all-reduces over both ranks and prints what each rank holds as one JSON line.
 */
import { Effect } from "effect"
import { Controller, HostTensor } from "monarch-bun/controller"

const port = Number(process.argv[2])
const program = Effect.gen(function* () {
  const ctl = yield* Controller
  const mesh = yield* ctl.mesh({ all: 2 })
  const threes = yield* mesh.call("ops.full", [[2], 3])
  const sums = yield* mesh.fetchAll(yield* mesh.reduce(threes, "all", "sum"))
  return sums.map((v) => (v instanceof HostTensor ? [...v.toArray()].map(Number) : null))
})
const sums = await Effect.runPromise(program.pipe(Effect.provide(Controller.attach({ world: 2, store: { host: "127.0.0.1", port }, startTimeoutMs: 30_000 }))))
console.log(JSON.stringify(sums))
