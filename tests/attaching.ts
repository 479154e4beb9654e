/**
 * Controller.attach from a test, as a user's controller program does it: the job's token in
 * MONARCH_TOKEN (the workers get the same), a runtime whose disposal sends Exit to every worker.
 */
import { Effect, type Layer, ManagedRuntime } from "effect"
import { Controller, HostTensor, type StartError } from "../src/controller/index.ts"

/** The token of every job these tests attach to (the workers' MONARCH_TOKEN). */
export const ATTACH_TOKEN = `attach-test-${crypto.randomUUID()}`

/**
 * Builds the layer with MONARCH_TOKEN set here as it is for the workers (the job's shared
 * secret), then runs `use` on it; the runtime is disposed (Exit to every worker) afterwards.
 */
export const withController = async <A>(layer: Layer.Layer<Controller, StartError>, use: (rt: ManagedRuntime.ManagedRuntime<Controller, StartError>) => Promise<A>) => {
  const before = process.env.MONARCH_TOKEN
  process.env.MONARCH_TOKEN = ATTACH_TOKEN
  const rt = ManagedRuntime.make(layer)
  try {
    try {
      await rt.runPromise(Effect.service(Controller))
    } finally {
      if (before === undefined) delete process.env.MONARCH_TOKEN
      else process.env.MONARCH_TOKEN = before
    }
    return await use(rt)
  } finally {
    await rt.dispose()
  }
}

/** How a layer fails to start (it must). */
export const startFailure = async (layer: Layer.Layer<Controller, StartError>): Promise<string> => {
  try {
    await withController(layer, async () => undefined)
  } catch (e) {
    return String((e as Error).message ?? e)
  }
  throw new Error("the controller started, but should have failed")
}

/** Two workers all-reduce a tensor of fives over a {dp: 2} mesh; every rank's result is fetched. */
export const allReduce = (rt: ManagedRuntime.ManagedRuntime<Controller, StartError>) =>
  rt.runPromise(Effect.gen(function* () {
    const ctl = yield* Controller
    const mesh = yield* ctl.mesh({ dp: 2 })
    const ones = yield* mesh.call("ops.ones", [[3]])
    const summed = yield* mesh.reduce(yield* mesh.call("ops.mul", [ones, 5]), "dp", "sum")
    return (yield* mesh.fetchAll(summed)).map((v) => [...(v as HostTensor).toArray()])
  }))

