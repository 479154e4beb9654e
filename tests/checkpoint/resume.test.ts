// Resume is exact: N steps, save, stop; a new controller loads and trains M more: the losses of
// steps N+1..N+M are bitwise those of one uninterrupted N+M run (CPU).
import { afterAll, expect, test } from "bun:test"
import { Effect } from "effect"
import { mkdtempSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join, resolve } from "node:path"
import { Controller, load, save, type Mesh } from "../../src/controller/index.ts"
import { initState, lossValue, restored, saved, train } from "./train.ts"

const ROOT = mkdtempSync(join(tmpdir(), "monarch-resume-"))
afterAll(() => rmSync(ROOT, { recursive: true, force: true }))
const N = 4, M = 4

const onMesh = <A>(body: (mesh: Mesh) => Effect.Effect<A, unknown, Controller>) =>
  Effect.runPromise(Effect.gen(function* () {
    return yield* body(yield* (yield* Controller).mesh({ dp: 2, tp: 2 }))
  }).pipe(Effect.provide(Controller.local({ world: 4, checkpoints: ROOT, functionPath: [resolve(import.meta.dir, "../..")] }))) as Effect.Effect<A>)

test(`train ${N}, save, stop; load, train ${M}: the losses equal an uninterrupted ${N + M}-step run bit for bit`, async () => {
  const whole = await onMesh((mesh) => Effect.flatMap(initState(mesh), (s) => train(mesh, s, N + M)))
  await onMesh((mesh) => Effect.gen(function* () {
    const s = yield* initState(mesh)
    yield* train(mesh, s, N)
    yield* Effect.flatMap(save(mesh, saved(s), "run"), (p) => p.durable)
  }))
  const resumed = await onMesh((mesh) => Effect.gen(function* () {
    const loaded = yield* load(mesh, "run")
    const s = restored(loaded.state)
    expect(s.step).toBe(N)
    return yield* train(mesh, s, M)
  }))
  // A loss that fell is a sign the model trains (else equality would be cheap).
  expect(lossValue(whole.at(-1)!)).toBeLessThan(lossValue(whole[0]!))
  expect(resumed.map(lossValue)).toEqual(whole.slice(N).map(lossValue))
  expect(resumed).toEqual(whole.slice(N))
}, 90_000)
