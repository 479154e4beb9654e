/**
 * A controller program in a process of its own, so a fault test can kill it with SIGKILL:
 * attaches to the workers through the store (argv: host, port, world), all-reduces a tensor
 * of ones over them, prints `ready <sum>` and idles until it is killed. With argv[5] = "N,ms"
 * it first queues N commands that each hold every worker for ms, and prints `queued N`.
 */
import { Effect, Layer } from "effect"
import { Controller, type HostTensor } from "../../src/controller/index.ts"

const [host, port, world] = [process.argv[2]!, Number(process.argv[3]), Number(process.argv[4])]
const [backlog, holdMs] = (process.argv[5] ?? "0,0").split(",").map(Number) as [number, number]

const program = Effect.gen(function* () {
  const ctl = yield* Controller
  const mesh = yield* ctl.mesh({ all: world })
  const ones = yield* mesh.call("ops.ones", [[2]])
  const sum = yield* mesh.reduce(ones, "all", "sum")
  const value = (yield* mesh.fetch(sum, world - 1)) as HostTensor
  console.log(`ready ${[...value.toArray()].join(",")}`)
  if (backlog > 0) {
    for (let i = 0; i < backlog; i++) yield* mesh.run("tests/faults/fixtures:hold", [holdMs])
    yield* Effect.yieldNow
    console.log(`queued ${backlog}`)
  }
  return yield* Effect.never
})

Effect.runPromise(program.pipe(Effect.provide(Layer.fresh(Controller.attach({ world, store: { host, port }, startTimeoutMs: 20_000, onProblem: (p) => console.error(p) }))))).catch((e) => {
  console.error(`controller failed: ${e}`)
  process.exit(1)
})
