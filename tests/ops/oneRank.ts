/**
 * What the op suites against torch share: a one-rank mesh on a local worker (started before the
 * file's tests, stopped after), a seeded random source, and reading and comparing numbers.
 */
import { afterAll, beforeAll } from "bun:test"
import { Effect, ManagedRuntime } from "effect"
import { Controller, type ControllerApi, type Mesh } from "../../src/controller/index.ts"
import type { HostTensor } from "../../src/protocol/values.ts"

/** The mesh `{ g: 1 }` of one local worker, for the calling file's tests; `run` runs on its runtime. */
export const oneRankMesh = () => {
  let rt: ManagedRuntime.ManagedRuntime<Controller, unknown> | undefined
  let mesh: Mesh | undefined
  beforeAll(async () => {
    rt = ManagedRuntime.make(Controller.local({ world: 1, onWorkerLine: () => {} }))
    const ctl: ControllerApi = await rt.runPromise(Effect.service(Controller))
    mesh = await rt.runPromise(ctl.mesh({ g: 1 }))
  }, 60_000)
  afterAll(() => rt?.dispose())
  return {
    get mesh(): Mesh { return mesh! },
    run: <A, E>(e: Effect.Effect<A, E, Controller>): Promise<A> => rt!.runPromise(e),
  }
}

export const numel = (s: ReadonlyArray<number>) => s.reduce((a, b) => a * b, 1)
/** A seeded linear congruential source of numbers in [0, 1). */
export const lcg = (seed: number) => () => ((seed = (seed * 1103515245 + 12345) % 2 ** 31) / 2 ** 31)
export const numbers = (h: HostTensor) => [...h.toArray()].map(Number)
/** Element by element within 1e-9 relative (f64 against torch's f64). */
export const close = (a: number[], b: number[]) => a.length === b.length && a.every((x, i) => Math.abs(x - b[i]!) <= 1e-9 * (1 + Math.abs(b[i]!)))
