/**
 * A controller program that ends badly (program_end.test.ts): it prints its workers' pids as
 * `pids [a,b]`, then ends the way argv[2] says:
 *   invalid   yields a non-Effect (`yield* ctl.workers()`): runPromise rejects "Not a valid
 *             effect", past the layer's finalizers; the rejection is caught, the program returns
 *   forgotten a ManagedRuntime never disposed: after a fetch that waits a second on the workers,
 *             the program's last line runs and nothing is left to do
 *   throws    an uncaught exception after the controller started
 *   busy      the same, with every worker inside a 30 s command (they are killed, not waited for)
 */
import { Effect, ManagedRuntime } from "effect"
import { Controller } from "../../src/controller/index.ts"
import { ROOT } from "./procs.ts"

const mode = process.argv[2]
const layer = Controller.local({ world: 2, functionPath: [ROOT], onWorkerLine: () => {} })
const pids = (ctl: { workers: () => ReadonlyArray<{ pid: number }> }) => console.log(`pids ${JSON.stringify(ctl.workers().map((w) => w.pid))}`)

// A plain async main, not awaited at the top level: nothing but the program's own waits may hold the process.
const main = async () => {
  if (mode === "invalid") {
    const program = Effect.gen(function* () {
      const ctl = yield* Controller
      pids(ctl)
      yield* (ctl.workers() as unknown as Effect.Effect<void>)
    })
    await Effect.runPromise(program.pipe(Effect.provide(layer))).catch((e) => console.log(`rejected: ${String(e).split("\n")[0]}`))
  } else {
    const rt = ManagedRuntime.make(layer)
    const ctl = await rt.runPromise(Effect.service(Controller))
    pids(ctl)
    const mesh = await rt.runPromise(ctl.mesh({ x: 2 }))
    // A fetch behind a second's command: only the wait on the workers holds the process meanwhile.
    await rt.runPromise(mesh.run("tests/faults/fixtures:hold", [1000]))
    console.log(`fetched ${await rt.runPromise(mesh.fetch(1, 1))}`)
    if (mode === "busy") {
      await rt.runPromise(mesh.run("tests/faults/fixtures:hold", [30_000]))
      await Bun.sleep(300)
    }
    if (mode === "throws" || mode === "busy") throw new Error("the program failed outside Effect")
  }
}
void main()
