/**
 * A user's own controller program, run from a folder where monarch-bun was installed from its
 * tarball (tests/package): linear regression on a {dp: 2} mesh of local workers, gradients
 * averaged over dp. Prints one JSON line: the loss at each step and the learned weights.
 */
import { Effect } from "effect"
import { Controller, HostTensor } from "monarch-bun/controller"

const STEPS = 20, SAMPLES = 32, LR = 0.2

const numbers = (v: unknown): number[] => (v instanceof HostTensor ? [...v.toArray()].map(Number) : [])

const program = Effect.gen(function* () {
  const ctl = yield* Controller
  const mesh = yield* ctl.mesh({ dp: 2 })
  const x = yield* mesh.call("ops.randn", [[SAMPLES, 4]], { seed: 7 })
  const wTrue = yield* mesh.call("ops.reshape", [yield* mesh.call("ops.arange", [1, 5]), [4, 1]])
  const y = yield* mesh.call("ops.matmul", [x, yield* mesh.call("ops.mul", [wTrue, 0.25])])
  const w = yield* mesh.call("ops.zeros", [[4, 1]])
  const losses: number[] = []
  for (let step = 0; step < STEPS; step++) {
    const error = yield* mesh.call("ops.sub", [yield* mesh.call("ops.matmul", [x, w]), y])
    const gradient = yield* mesh.call("ops.mul", [yield* mesh.call("ops.matmul", [yield* mesh.call("ops.t", [x]), error]), 2 / SAMPLES])
    const averaged = yield* mesh.reduce(gradient, "dp", "avg")
    yield* mesh.run("ops.sub_", [w, yield* mesh.call("ops.mul", [averaged, LR])], {}, { mutates: [w] })
    losses.push(numbers(yield* mesh.fetch(yield* mesh.call("ops.mean", [yield* mesh.call("ops.mul", [error, error])])))[0]!)
  }
  return { losses, weights: numbers(yield* mesh.fetch(w, { dp: 1 })) }
})

const result = await Effect.runPromise(program.pipe(Effect.provide(Controller.local({ world: 2 }))))
console.log(JSON.stringify(result))
