/**
 * Handles used where they do not belong, as checks that return what they saw (handles.test.ts
 * asserts on it, reliability.ts turns it into rows): two controllers in one process, each with
 * its own workers, whose handles have the same ref ids; every use of one controller's tensor,
 * stream or mesh with the other (as an argument, nested in one, mutated, in fetch, reduce,
 * send, borrow, as the stream of a command) must be a ControllerError, and neither controller's
 * values change. And fetch coordinates a mesh does not have, or out of its range.
 */
import { Effect, ManagedRuntime, Result } from "effect"
import { Controller, type HostTensor } from "../../src/controller/index.ts"

const ROOT = new URL("../..", import.meta.url).pathname
const numbers = (v: unknown): number[] => [...(v as HostTensor).toArray()].map(Number)

export interface Refusal {
  readonly name: string
  /** The failure's tag and message, or "succeeded" when the use went through. */
  readonly tag: string
  readonly message: string
}

const outcome = async (name: string, run: () => Promise<Result.Result<unknown, { readonly _tag: string; readonly message: string }>>): Promise<Refusal> => {
  try {
    const r = await run()
    return Result.isSuccess(r) ? { name, tag: "succeeded", message: "" } : { name, tag: r.failure._tag, message: r.failure.message }
  } catch (e) {
    return { name, tag: "defect", message: String(e) }
  }
}

export interface ForeignResult {
  /** The two tensors' ref ids (equal: each controller numbers its own refs from 1). */
  readonly ids: readonly [number, number]
  readonly refusals: ReadonlyArray<Refusal>
  /** Each controller's own tensor afterwards (7s and 1000s). */
  readonly first: ReadonlyArray<number>
  readonly second: ReadonlyArray<number>
}

const local = () => ManagedRuntime.make(Controller.local({ world: 2, onProblem: () => {}, onWorkerLine: () => {} }))

/** Two controllers of 2 workers each; controller 1's tensor of 7s and controller 2's of 1000s, with the same ref id. */
export const checkForeignHandles = async (): Promise<ForeignResult> => {
  const rt1 = local(), rt2 = local()
  try {
    const [ctl1, ctl2] = await Promise.all([rt1.runPromise(Effect.service(Controller)), rt2.runPromise(Effect.service(Controller))])
    const mesh1 = await rt1.runPromise(ctl1.mesh({ x: 2 })), mesh2 = await rt2.runPromise(ctl2.mesh({ x: 2 }))
    const t1 = await rt1.runPromise(mesh1.call("ops.full", [[2], 7]))
    const t2 = await rt2.runPromise(mesh2.call("ops.full", [[2], 1000]))
    const s1 = await rt1.runPromise(ctl1.stream())
    const s2 = await rt2.runPromise(ctl2.stream())
    const on2 = <A, E extends { readonly _tag: string; readonly message: string }>(e: Effect.Effect<A, E, Controller>) => rt2.runPromise(Effect.result(e))
    const on1 = <A, E extends { readonly _tag: string; readonly message: string }>(e: Effect.Effect<A, E, Controller>) => rt1.runPromise(Effect.result(e))
    const refusals = [
      await outcome("controller 1's tensor as an argument of controller 2's call", () => on2(mesh2.call("ops.add", [t1, 1]))),
      await outcome("controller 1's tensor nested in an argument tree", () => on2(mesh2.call("ops.add", [t2, { x: [t1] }]))),
      await outcome("controller 1's tensor as a call's mutates", () => on2(mesh2.run("ops.add_", [t2, 1], {}, { mutates: [t1] }))),
      await outcome("controller 1's stream as the stream of controller 2's call", () => on2(mesh2.call("ops.add", [t2, 1], {}, { stream: s1 }))),
      await outcome("controller 2's fetch of controller 1's tensor", () => on2(mesh2.fetch(t1))),
      await outcome("controller 2's fetchAll of controller 1's tensor", () => on2(mesh2.fetchAll(t1))),
      await outcome("controller 2's fetch on controller 1's stream", () => on2(mesh2.fetch(t2, 0, { stream: s1 }))),
      await outcome("controller 2's reduce of controller 1's tensor", () => on2(mesh2.reduce(t1, "x", "sum"))),
      await outcome("controller 2's reduce on controller 1's stream", () => on2(mesh2.reduce(t2, "x", "sum", { stream: s1 }))),
      await outcome("controller 2's send of controller 1's tensor (ctl.send)", () => on2(ctl2.send(t1, mesh2))),
      await outcome("a send to controller 1's mesh (mesh.send)", () => on2(mesh2.send(t2, mesh1))),
      await outcome("a send from controller 1 to controller 2's mesh", () => on1(ctl1.send(t1, mesh2))),
      await outcome("controller 2's borrow of controller 1's tensor", () => on2(Effect.scoped(mesh2.borrow(t1, s2)))),
      await outcome("controller 2's borrow onto controller 1's stream", () => on2(Effect.scoped(mesh2.borrow(t2, s1)))),
    ]
    const first = numbers(await rt1.runPromise(mesh1.fetch(t1, 1)))
    const second = numbers(await rt2.runPromise(mesh2.fetch(t2, 1)))
    return { ids: [t1.ref.id, t2.ref.id], refusals, first, second }
  } finally {
    await Promise.all([rt1.dispose(), rt2.dispose()])
  }
}

export interface CoordinatesResult {
  readonly refusals: ReadonlyArray<Refusal>
  /** Fetches at good coordinates afterwards: the first value of each (rank + 1). */
  readonly good: ReadonlyArray<ReadonlyArray<number>>
}

/** The coordinates given to the good fetches, and the rank each names on a row-major { dp: 2, tp: 2 } mesh. */
export const GOOD_COORDINATES: ReadonlyArray<readonly [number | Readonly<Record<string, number>>, number]> = [
  [{ dp: 0, tp: 0 }, 0], [{ dp: 0, tp: 1 }, 1], [{ dp: 1, tp: 0 }, 2], [{ dp: 1, tp: 1 }, 3], [{ tp: 1 }, 1], [{}, 0], [3, 3],
]

/** On a { dp: 2, tp: 2 } mesh whose rank r holds r + 1: fetches at coordinates it does not have, and at good ones. */
export const checkFetchCoordinates = async (): Promise<CoordinatesResult> => {
  const rt = ManagedRuntime.make(Controller.local({ world: 4, functionPath: [ROOT], onProblem: () => {}, onWorkerLine: () => {} }))
  try {
    const ctl = await rt.runPromise(Effect.service(Controller))
    const mesh = await rt.runPromise(ctl.mesh({ dp: 2, tp: 2 }))
    const t = await rt.runPromise(mesh.call("tests/controller/fixtures:rankValue", [], {}, { results: [{ dtype: "f32", shape: [2, 2] }] }))
    const bad: Array<[string, unknown]> = [
      ["a dim the mesh does not have ({ pp: 1 })", { pp: 1 }],
      ["a known dim and an unknown one ({ dp: 1, pp: 0 })", { dp: 1, pp: 0 }],
      ["a coordinate past its dim ({ dp: 2 })", { dp: 2 }],
      ["a negative coordinate ({ tp: -1 })", { tp: -1 }],
      ["a fractional coordinate ({ dp: 0.5 })", { dp: 0.5 }],
      ["an index past the mesh (4)", 4],
      ["a string (\"1\")", "1"],
      ["an array ([1, 0])", [1, 0]],
    ]
    const refusals: Refusal[] = []
    for (const [name, at] of bad) refusals.push(await outcome(name, () => rt.runPromise(Effect.result(mesh.fetch(t, at as number)))))
    const good: number[][] = []
    for (const [at] of GOOD_COORDINATES) good.push(numbers(await rt.runPromise(mesh.fetch(t, at))))
    return { refusals, good }
  } finally {
    await rt.dispose()
  }
}
