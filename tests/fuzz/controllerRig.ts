/**
 * A real controller (Controller.local: listener, launcher, core, real worker processes) seen
 * from outside, as an intruder or a faulty worker would see it: the address its listener
 * is on and the job token, read from a worker's environment (CONTROLLER_ADDR,
 * MONARCH_TOKEN), plus every problem the controller reported.
 */
import { Effect, ManagedRuntime } from "effect"
import { Controller, type ControllerApi } from "../../src/controller/index.ts"
import { environOf } from "./proc.ts"

const ROOT = new URL("../..", import.meta.url).pathname

export interface ControllerRig {
  readonly ctl: ControllerApi
  readonly run: <A, E>(e: Effect.Effect<A, E, Controller>) => Promise<A>
  /** Everything passed to onProblem, in order. */
  readonly problems: string[]
  /** Worker pids by rank. */
  readonly pids: ReadonlyArray<number>
  /** The controller listener's address and the job token, as the workers were told. */
  readonly address: string
  readonly token: string
  /** The launcher store's port, as the workers were told. */
  readonly storePort: number
  readonly close: () => Promise<void>
}

/**
 * Starts `world` workers under Controller.local. Function roots: `functionPath` first, then
 * the repository (for the pid fixture the rig uses).
 */
export const startController = async (world: number, functionPath: ReadonlyArray<string> = []): Promise<ControllerRig> => {
  const problems: string[] = []
  const rt = ManagedRuntime.make(Controller.local({ world, functionPath: [...functionPath, ROOT], onProblem: (p) => problems.push(p), onWorkerLine: () => {} }))
  const run = <A, E>(e: Effect.Effect<A, E, Controller>) => rt.runPromise(e)
  try {
    const ctl = await rt.runPromise(Effect.service(Controller))
    const flat = await run(ctl.mesh({ all: world }))
    const pids = (await run(flat.fetchAll(null, { fn: "tests/controller/fixtures:pid" }))).map(Number)
    const env = environOf(pids[0]!)
    return {
      ctl, run, problems, pids,
      address: env.CONTROLLER_ADDR!,
      token: env.MONARCH_TOKEN!,
      storePort: Number(env.STORE_PORT),
      close: () => rt.dispose(),
    }
  } catch (e) {
    await rt.dispose()
    throw e
  }
}

/** Polls `cond` every 5 ms; false after `ms`. */
export const eventually = async (cond: () => boolean, ms: number): Promise<boolean> => {
  const deadline = performance.now() + ms
  while (!cond()) {
    if (performance.now() > deadline) return false
    await Bun.sleep(5)
  }
  return true
}
