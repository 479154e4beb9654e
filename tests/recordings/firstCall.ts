/**
 * A first call's cost, shared by numbers.test.ts and the recordings reliability row: a step of
 * 2,000 ops and 400 numbers (a captured tensor `w` multiplied in first, when given), timed on
 * its first compiled call against the same step run op by op twice, after one warm run.
 * `firstCallWithin` measures again (a fresh step each time) while the ratio is over the bound,
 * at most three times: one pause of a shared machine must not read as a slow first call, while
 * a first call that is slow every time still fails.
 */
import { Effect } from "effect"
import { compile, opsOn, type Controller, type Mesh, type RemoteTensor } from "../../src/controller/index.ts"

type Run = <A, E>(e: Effect.Effect<A, E, Controller>) => Promise<A>

export const firstCall = async (run: Run, mesh: Mesh, numbersFrom = 0, w?: RemoteTensor) => {
  const x = opsOn(mesh).ones([8])
  const numbers = Array.from({ length: 400 }, (_, j) => 1 + (numbersFrom + j) / 4096)
  const big = (x: RemoteTensor, ...ns: number[]) => {
    let h = w === undefined ? x : x.mul(w)
    for (let j = 0; j < 2000; j++) h = j % 2 === 0 ? h.mul(ns[j % ns.length]!) : h.sub(ns[(j * 7) % ns.length]! - 1)
    return h.sum()
  }
  const timed = async (body: () => Promise<unknown>) => {
    const t0 = performance.now()
    await body()
    return performance.now() - t0
  }
  // Warm: the ops' code paths compiled once before either is timed.
  await run(big(x, ...numbers).fetch())
  const eagerTwice = await timed(async () => {
    await run(big(x, ...numbers).fetch())
    await run(big(x, ...numbers).fetch())
  })
  const step = compile(big)
  const first = await timed(() => run(Effect.flatMap(step(x, ...numbers), (y) => y.fetch())))
  return { first, eagerTwice, step, again: () => run(Effect.flip(step(x, ...numbers))) }
}

export const firstCallWithin = async (run: Run, mesh: Mesh, bound: number, numbersFrom = 0, w?: RemoteTensor) => {
  const ratios: number[] = []
  for (;;) {
    const measured = await firstCall(run, mesh, numbersFrom, w)
    ratios.push(measured.first / measured.eagerTwice)
    if (measured.first < bound * measured.eagerTwice || ratios.length === 3) return { ...measured, ratios }
    measured.step.dispose()
  }
}
