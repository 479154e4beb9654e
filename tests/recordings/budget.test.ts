// The controller keeps its recordings, across all its compiled steps, within what a worker
// holds (MONARCH_MAX_RECORDINGS=3, MONARCH_MAX_RECORDED_COMMANDS=7 here, read by both sides): a
// new recording first deletes the ones called least recently, so no worker ever refuses a
// DefineRecording, every call gives its value, and an evicted step traces again when called. A
// step longer than a worker keeps is refused by compile, naming the bound.
import { afterAll, beforeAll, expect, test } from "bun:test"
import { Effect, ManagedRuntime } from "effect"
import { compile, Controller, opsOn, type ControllerApi, type Mesh, type RemoteTensor } from "../../src/controller/index.ts"

const ROOT = new URL("../..", import.meta.url).pathname
let rt: ManagedRuntime.ManagedRuntime<Controller, unknown>
let ctl: ControllerApi
let mesh: Mesh
const problems: string[] = []

beforeAll(async () => {
  const saved = { r: process.env.MONARCH_MAX_RECORDINGS, c: process.env.MONARCH_MAX_RECORDED_COMMANDS }
  process.env.MONARCH_MAX_RECORDINGS = "3"
  process.env.MONARCH_MAX_RECORDED_COMMANDS = "7"
  try {
    rt = ManagedRuntime.make(Controller.local({ world: 1, functionPath: [ROOT], onProblem: (p) => problems.push(p), onWorkerLine: () => {} }))
    ctl = await rt.runPromise(Effect.service(Controller))
    mesh = await rt.runPromise(ctl.mesh({ dp: 1 }))
  } finally {
    for (const [k, v] of [["MONARCH_MAX_RECORDINGS", saved.r], ["MONARCH_MAX_RECORDED_COMMANDS", saved.c]] as const) if (v === undefined) delete process.env[k]; else process.env[k] = v
  }
}, 60_000)
afterAll(() => rt?.dispose())

const run = <A, E>(e: Effect.Effect<A, E, Controller>) => rt.runPromise(e)
/** The value, or "no answer" when none comes within 15 s (a refused DefineRecording leaves its call unanswered). */
const value = (t: RemoteTensor) =>
  Promise.race([run(Effect.map(t.fetch(), (h) => Array.from(h.toArray() as Float32Array))), Bun.sleep(15_000).then(() => "no answer")])

/** A step of `n` additions of `k`. */
const adds = (n: number, k: number) => compile((x: RemoteTensor) => {
  let y = x
  for (let i = 0; i < n; i++) y = y.add(k)
  return y
}, { name: `adds${n}x${k}`, onRetrace: () => {} })

test("recordings of many compiled steps stay within the workers' bounds: the least recently called are deleted first", async () => {
  const x = opsOn(mesh).zeros([2])
  const steps = [adds(2, 1), adds(2, 2), adds(2, 3), adds(2, 4), adds(6, 5)]
  const live = () => steps.reduce((n, s) => n + s.recordings.length, 0)
  const got: unknown[] = [], most: number[] = []
  for (let round = 0; round < 2; round++)
    for (const s of steps) {
      got.push(await value(await run(s(x))))
      most.push(live())
    }
  // The first step, evicted long ago, traces again and still answers.
  got.push(await value(await run(steps[0]!(x))))
  expect(got).toEqual([[2, 2], [4, 4], [6, 6], [8, 8], [30, 30], [2, 2], [4, 4], [6, 6], [8, 8], [30, 30], [2, 2]])
  expect(Math.max(...most)).toBeLessThanOrEqual(3)
  expect(problems.filter((p) => p.includes("Recording"))).toEqual([])
  expect(steps[0]!.traces).toBeGreaterThan(1)
}, 60_000)

test("a recording called again is kept over one called before it", async () => {
  const x = opsOn(mesh).zeros([2])
  const [p, q, r, s] = [adds(1, 1), adds(1, 2), adds(1, 3), adds(1, 4)]
  for (const step of [p, q, r, p, s]) await value(await run(step(x)))
  expect({ p: p.recordings.length, q: q.recordings.length, r: r.recordings.length, s: s.recordings.length }).toEqual({ p: 1, q: 0, r: 1, s: 1 })
  expect(await value(await run(p(x)))).toEqual([1, 1])
  expect(p.traces).toBe(1)
  expect(problems.filter((m) => m.includes("Recording"))).toEqual([])
}, 30_000)

test("a step longer than a worker keeps is refused by compile, naming the bound", async () => {
  const long = adds(20, 1)
  const failure = await run(Effect.flip(long(opsOn(mesh).zeros([2]))))
  expect(failure.message).toContain("more than a worker keeps in its recordings (MONARCH_MAX_RECORDED_COMMANDS=7)")
  expect(problems.filter((p) => p.includes("Recording"))).toEqual([])
}, 30_000)
