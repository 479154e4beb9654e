// The Controller is built from services: swapping the Launcher and the Transport for
// others (here a launcher that records what it starts, and a Unix-socket transport) works
// with no change to the program.
import { expect, test } from "bun:test"
import { Effect, Layer } from "effect"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { Controller, HostTensor } from "../../src/controller/index.ts"
import { listen, Transport } from "../../src/controller/listener.ts"
import { launch, Launcher, type LaunchOptions } from "../../src/launcher/index.ts"

test("a recording launcher and a Unix-socket transport, provided by the program", async () => {
  const launched: LaunchOptions[] = []
  const recording = Layer.succeed(Launcher, { launch: (o: LaunchOptions) => Effect.sync(() => launched.push(o)).pipe(Effect.andThen(launch(o))) })
  const socket = join(tmpdir(), `monarch-test-${process.pid}.sock`)
  const unix = Layer.succeed(Transport, { listen: (o: Parameters<typeof listen>[0]) => listen({ ...o, unix: socket }) })

  const got = await Effect.runPromise(Effect.gen(function* () {
    const ctl = yield* Controller
    const mesh = yield* ctl.mesh({ x: 2 })
    const t = yield* mesh.call("ops.arange", [3], { dtype: "f32" })
    return yield* mesh.fetch(yield* mesh.reduce(t, "x", "sum"), 1)
  }).pipe(Effect.provide(Controller.layerLocal({ world: 2, onWorkerLine: () => {} }).pipe(Layer.provide(Layer.mergeAll(recording, unix))))))

  expect([...(got as HostTensor).toArray()]).toEqual([0, 2, 4])
  expect(launched.length).toBe(1)
  expect(launched[0]!.env?.CONTROLLER_ADDR).toBe(`unix:${socket}`)
}, 30_000)
