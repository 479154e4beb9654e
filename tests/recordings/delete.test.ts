// DeleteRecording with real workers (world 2): a compiled step's recordings are deleted on the
// workers when it is disposed, when a trace past maxRecordings replaces the least recently
// called one, and when the compiled step is collected; calls already made still run, a disposed
// step is refused by name, so is disposing it while it is traced, and the workers' memory stays
// flat over many compiled and disposed steps. A worker told to delete (or call) a recording it
// does not hold refuses it by name, and the mesh goes on.
import { afterAll, beforeAll, describe, expect, test } from "bun:test"
import { Effect, ManagedRuntime } from "effect"
import { compile, Controller, HostTensor, opsOn, param, type ControllerApi, type Mesh, type RemoteTensor } from "../../src/controller/index.ts"

const ROOT = new URL("../..", import.meta.url).pathname
let rt: ManagedRuntime.ManagedRuntime<Controller, unknown>
let ctl: ControllerApi
let mesh: Mesh
const problems: string[] = []

beforeAll(async () => {
  rt = ManagedRuntime.make(Controller.local({ world: 2, functionPath: [ROOT], onProblem: (p) => problems.push(p), onWorkerLine: () => {} }))
  ctl = await rt.runPromise(Effect.service(Controller))
  mesh = await rt.runPromise(ctl.mesh({ dp: 2 }))
}, 60_000)
afterAll(() => rt?.dispose())

const run = <A, E>(e: Effect.Effect<A, E, Controller>) => rt.runPromise(e)
const values = (t: RemoteTensor) => run(Effect.map(t.fetch(), (h) => Array.from(h.toArray() as Float32Array)))

/** The problems the workers report while `body` runs and a fetch after it settles (replies come in command order). */
const refusals = async (body: () => void): Promise<string[]> => {
  const from = problems.length
  body()
  await run(mesh.fetchAll(opsOn(mesh).ones([1])))
  return problems.slice(from).sort()
}

/** Tells both workers to delete `recording` again: they refuse one they no longer hold. */
const deleteAgain = (recording: number) => refusals(() => ctl.core.post([0, 1], { _tag: "DeleteRecording", recording }))

const unknown = (recording: number) => [0, 1].map((r) => `rank ${r} refused a command: DeleteRecording: unknown recording ${recording}`)

describe("DeleteRecording", () => {
  test("dispose deletes the recordings after the calls already made, which still give their values; a later call is refused", async () => {
    const step = compile((x: RemoteTensor, k: number) => x.mul(k).add(1), { name: "scaled" })
    const x = opsOn(mesh).ones([2])
    const results = [await run(step(x, param(2))), await run(step(x, param(3))), await run(step(x, param(4)))]
    const [id] = step.recordings
    step.dispose()
    expect(step.recordings).toEqual([])
    // Nothing fetched before the dispose: the calls were still queued or running.
    expect(await Promise.all(results.map(values))).toEqual([[3, 3], [4, 4], [5, 5]])
    const failure = await run(Effect.flip(step(x, param(5))))
    expect(failure._tag).toBe("ControllerError")
    expect(failure.message).toBe("compile(scaled) was disposed: its recordings are deleted; compile the step again to call it")
    expect(await deleteAgain(id!)).toEqual(unknown(id!))
    step.dispose()
  }, 30_000)

  test("a trace past maxRecordings deletes the recording called least recently; its signature traces again", async () => {
    const retraces: string[] = []
    const step = compile((x: RemoteTensor) => x.sum(), { maxRecordings: 2, onRetrace: (w) => void retraces.push(w) })
    const on = opsOn(mesh)
    const xs = [on.ones([2]), on.ones([3]), on.ones([4])]
    expect(await values(await run(step(xs[0]!)))).toEqual([2])
    expect(await values(await run(step(xs[1]!)))).toEqual([3])
    const [first, second] = step.recordings
    // Calling the first again makes the second the one called least recently, though recorded later.
    expect(await values(await run(step(xs[0]!)))).toEqual([2])
    expect(await values(await run(step(xs[2]!)))).toEqual([4])
    expect(step.recordings).toHaveLength(2)
    expect(step.recordings, "the recording deleted was not the one called least recently").not.toContain(second)
    expect(step.recordings).toContain(first!)
    expect(await deleteAgain(second!)).toEqual(unknown(second!))
    expect(await values(await run(step(xs[1]!)))).toEqual([3])
    expect(step.traces).toBe(4)
    expect(retraces.at(-1)).toContain("argument 0: f32[4] on Mesh(dp=2), stream 1, now f32[3]")
    step.dispose()
  }, 30_000)

  test("a compiled step that is collected without dispose has its recordings deleted", async () => {
    const x = opsOn(mesh).ones([2])
    // Made and dropped in a function of its own, so no stack slot keeps it.
    const made = async () => {
      const step = compile((x: RemoteTensor) => x.add(7))
      expect(await values(await run(step(x)))).toEqual([8, 8])
      return step.recordings[0]!
    }
    const id = await made()
    // A call with no lists, refused either way without running anything: for its lengths while
    // the workers hold the recording, as unknown once the registry's delete went out before it.
    const probe = () => refusals(() => ctl.core.post([0, 1], { _tag: "CallRecording", ident: 0, recording: id, results: [], actuals: [], params: [] }))
    expect((await probe())[0]).toContain(`CallRecording 0: 0 actuals, 0 params and 0 results for recording ${id}'s 1, 0 and 1`)
    let refused: string[] = []
    for (let i = 0; i < 50 && !refused[0]?.includes("unknown"); i++) {
      Bun.gc(true)
      await Bun.sleep(20)
      refused = await probe()
    }
    expect(refused).toEqual([0, 1].map((r) => `rank ${r} refused a command: CallRecording 0: unknown recording ${id}`))
  }, 30_000)

  test("disposing a step while it is traced (its recording in use) is refused by name; the step goes on", async () => {
    let self: { dispose(): void } | undefined
    const step = compile((x: RemoteTensor) => {
      self?.dispose()
      return x.add(1)
    }, { name: "selfish" })
    self = step
    const x = opsOn(mesh).ones([2])
    const failure = await run(Effect.flip(step(x)))
    expect(failure.message).toBe("compile(selfish).dispose() was called while its step is being traced (a recording in use cannot be deleted); dispose it after the call")
    self = undefined
    expect(await values(await run(step(x)))).toEqual([2, 2])
    step.dispose()
  }, 30_000)

  test("a worker refuses to delete or call a recording it does not hold, naming it, and the mesh goes on", async () => {
    expect(await refusals(() => ctl.core.post([0, 1], { _tag: "DeleteRecording", recording: 987_654 }))).toEqual(unknown(987_654))
    const step = compile((x: RemoteTensor) => x.mul(2))
    const x = opsOn(mesh).ones([2])
    await values(await run(step(x)))
    const [id] = step.recordings
    step.dispose()
    const out = ctl.core.newRef()
    const got = await refusals(() => ctl.core.post([0], { _tag: "CallRecording", ident: 0, recording: id!, results: [out], actuals: [x.ref], params: [] }))
    expect(got).toEqual([`rank 0 refused a command: CallRecording 0: unknown recording ${id}`])
    expect(await values(x.add(1))).toEqual([2, 2])
  }, 30_000)

  test("compiling and disposing 40 steps, each holding a 1 MiB constant, leaves the workers' memory flat", async () => {
    const x = opsOn(mesh).ones([256, 1024])
    const constant = new HostTensor("f32", [256, 1024], new Uint8Array(1 << 20))
    const heap = () => run(mesh.fetchAll(x, { fn: "tests/recordings/fixtures:heapInUse" })) as Promise<ReadonlyArray<number>>
    const cycle = async () => {
      const step = compile((x: RemoteTensor) => mesh.call("ops.add", [x, constant], {}, { results: [x.meta!] }))
      await values(await run(step(x)))
      step.dispose()
    }
    for (let i = 0; i < 5; i++) await cycle()
    const before = await heap()
    for (let i = 0; i < 40; i++) await cycle()
    const after = await heap()
    // Kept, the definitions would hold 40 MiB on each worker.
    after.forEach((bytes, r) => expect(bytes - before[r]!).toBeLessThan(8 << 20))
  }, 60_000)
})
