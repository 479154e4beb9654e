/**
 * Hang reports name the running command: a real controller and two workers;
 * rank 1 blocks its whole process in a user function right after a quick ops.ones, and rank 0
 * waits for it in the all_reduce that follows. The reports must blame those two commands and
 * say which one each behind rank is in, never the ops.ones both ranks had finished.
 */
import { Effect, ManagedRuntime } from "effect"
import { Controller, type HangReport } from "../../src/controller/index.ts"

const ROOT = new URL("../..", import.meta.url).pathname
const BLOCK = "tests/controller/fixtures:blockOnRank"
/** How long rank 1 holds its thread: past the 1 s hang threshold and a check or two after it. */
export const BLOCK_MS = 4000
export const HANG_AFTER_MS = 1000

export interface HangOutcome {
  readonly reports: ReadonlyArray<HangReport>
  readonly ms: number
}

/** Runs the program once; throws, naming what did not hold. */
export const hangNamesRunningCommand = async (): Promise<HangOutcome> => {
  const reports: HangReport[] = []
  const rt = ManagedRuntime.make(Controller.local({
    world: 2, functionPath: [ROOT], hangAfterMs: HANG_AFTER_MS, onHang: (r) => void reports.push(r), onWorkerLine: () => {}, onProblem: () => {},
  }))
  const start = performance.now()
  try {
    await rt.runPromise(Effect.gen(function* () {
      const ctl = yield* Effect.service(Controller)
      const mesh = yield* ctl.mesh({ x: 2 })
      const t = yield* mesh.call("ops.ones", [[2]])
      const blocked = yield* mesh.call(BLOCK, [1, BLOCK_MS, t], {}, { results: [{ dtype: "f32", shape: [2] }] })
      const summed = yield* mesh.reduce(blocked, "x", "sum")
      const got = yield* mesh.fetch(summed, 0)
      const values = [...(got as { toArray(): Float32Array }).toArray()]
      if (values.join() !== "2,2") throw new Error(`the all_reduce after the block gave [${values}], expected [2,2]`)
    }))
  } finally {
    await rt.dispose()
  }
  const ms = performance.now() - start
  const say = () => JSON.stringify(reports.map(({ ident, label, behind, at }) => ({ ident, label, behind, at })))
  const stale = reports.filter((r) => r.label === "ops.ones")
  if (stale.length > 0) throw new Error(`a report blamed the finished ops.ones: ${say()}`)
  const block = reports.find((r) => r.label === BLOCK)
  const reduce = reports.find((r) => r.label.startsWith("reduce sum"))
  if (block === undefined || reduce === undefined) throw new Error(`expected reports of ${BLOCK} and of the reduce, got ${say()}`)
  const atOf = (r: HangReport, rank: number) => r.at?.find((a) => a.rank === rank)
  const expect = (what: string, ok: boolean) => { if (!ok) throw new Error(`${what}: ${say()}`) }
  expect("the block's report has rank 1 behind, in the block", block.behind.join() === "1" && atOf(block, 1)?.ident === block.ident)
  expect("the reduce's report has both ranks behind", reduce.behind.join() === "0,1")
  expect("rank 0 is in the reduce", atOf(reduce, 0)?.ident === reduce.ident && atOf(reduce, 0)?.label === reduce.label)
  expect("rank 1 is in the block", atOf(reduce, 1)?.ident === block.ident && atOf(reduce, 1)?.label === BLOCK)
  return { reports, ms }
}
