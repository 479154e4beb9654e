// Two real traced workers: an all-reduce whose result the next command of its group or recording
// names (past releases) runs on the loop, not the communication thread (no span of it on the
// thread's track); one whose next command does not read it still starts on the thread. Both
// give the reduced values (random inputs against a float32 reference sum).
import { afterAll, beforeAll, describe, expect, test } from "bun:test"
import { existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import type { WorkerMessage } from "../../src/protocol/messages.ts"
import { COMM_TRACK, type RankTrace } from "../../src/trace/writer.ts"
import { call, createStream, factory, fetch, host, mesh, numbers, reduce, ref } from "./build.ts"
import { startWorkers, type Harness } from "./harness.ts"

const MESH = 2
const dir = mkdtempSync(join(tmpdir(), "monarch-inline-"))
let h: Harness
let ident = 0
const next = () => ident++
let refs = 100
const fresh = () => refs++

/** Seeded random floats in [-8, 8), rounded to f32. */
const random = (seed: number, n: number): number[] => {
  let x = seed >>> 0 || 1
  return Array.from({ length: n }, () => {
    x ^= x << 13; x >>>= 0; x ^= x >>> 17; x ^= x << 5; x >>>= 0
    return Math.fround((x / 2 ** 32) * 16 - 8)
  })
}
const sum = (a: number[], b: number[]) => a.map((v, i) => Math.fround(v + b[i]!))
const group = (commands: WorkerMessage[]): WorkerMessage => ({ _tag: "CommandGroup", commands })

const fetchBoth = async (r: number): Promise<number[][]> => {
  const f = next()
  h.send("all", fetch(f, ref(r)))
  return Promise.all([0, 1].map(async (rank) => numbers((await h.next(rank, "FetchResult", 20_000)).value)))
}

/** The idents of the collectives each rank's communication thread ran, from its timeline. */
const onThread = (): number[][] => [0, 1].map((rank) => {
  const trace = JSON.parse(readFileSync(join(dir, `rank-${rank}.json`), "utf8")) as RankTrace
  return trace.spans.filter((s) => s.tid === COMM_TRACK).map((s) => s.args!.ident as number).sort((a, b) => a - b)
})

beforeAll(async () => {
  h = await startWorkers({ world: 2, env: { MONARCH_TRACE_DIR: dir } })
  h.send("all", createStream)
  h.send("all", mesh(MESH, ["dp"], [2]))
  // The group's first collective opens its communicator on the loop's thread.
  const t = fresh(), out = fresh()
  h.send("all", call(next(), [t], "ops.ones", [[1]], { kwargs: { dtype: "f32" } }))
  h.send("all", reduce(next(), out, t, MESH, ["dp"], "sum", factory([1])))
  expect(await fetchBoth(out)).toEqual([[2], [2]])
}, 60_000)
afterAll(() => rmSync(dir, { recursive: true, force: true }))

describe("an all-reduce read by the next command", () => {
  const n = 513
  const inputs = (seed: number) => {
    const x = fresh(), i = next()
    for (const r of [0, 1]) h.send(r, call(i, [x], "ops.clone", [host("f32", [n], random(seed + r, n))]))
    return { x, reduced: sum(random(seed, n), random(seed + 1, n)) }
  }
  const threaded: number[] = [], inline: number[] = []

  test("in a group, read next (past a release): runs on the loop and the reader sees the sum", async () => {
    const { x, reduced } = inputs(11)
    const out = fresh(), y = fresh(), at = next()
    inline.push(at)
    h.send("all", group([reduce(at, out, x, MESH, ["dp"], "sum", factory([n])), { _tag: "DeleteRefs", refs: [x] }, call(next(), [y], "ops.mul", [ref(out), 2])]))
    for (const r of await fetchBoth(y)) expect(r).toEqual(reduced.map((v) => Math.fround(v * 2)))
  }, 30_000)

  test("in a group, the next command does not read it: it starts on the thread, and a later reader sees the sum", async () => {
    const { x, reduced } = inputs(23)
    const out = fresh(), z = fresh(), y = fresh(), at = next()
    threaded.push(at)
    h.send("all", group([reduce(at, out, x, MESH, ["dp"], "sum", factory([n])), call(next(), [z], "ops.full", [[2], 3], { kwargs: { dtype: "f32" } }), call(next(), [y], "ops.add", [ref(out), 1])]))
    for (const r of await fetchBoth(y)) expect(r).toEqual(reduced.map((v) => Math.fround(v + 1)))
  }, 30_000)

  test("its result let go by the release after it: nothing reads it, so it starts on the thread", async () => {
    const { x } = inputs(37)
    const out = fresh(), z = fresh(), at = next()
    threaded.push(at)
    h.send("all", group([reduce(at, out, x, MESH, ["dp"], "sum", factory([n])), { _tag: "DeleteRefs", refs: [out] }, call(next(), [z], "ops.full", [[2], 4], { kwargs: { dtype: "f32" } })]))
    expect(await fetchBoth(z)).toEqual([[4, 4], [4, 4]])
  }, 30_000)

  test("in a recording, read next: runs on the loop, each call", async () => {
    const { x, reduced } = inputs(41)
    // Formal 1 is the input; 2 the Reduce's result, 3 the reader's (the recording's result).
    h.send("all", { _tag: "DefineRecording", recording: 7, formals: [1_000_001], params: [], results: [1_000_003], idents: 2, commands: [
      reduce(0, 1_000_002, 1_000_001, MESH, ["dp"], "sum", factory([n])),
      call(1, [1_000_003], "ops.mul", [ref(1_000_002), 3]),
    ] })
    for (let c = 0; c < 2; c++) {
      const y = fresh(), at = ident
      ident += 2
      inline.push(at)
      h.send("all", { _tag: "CallRecording", ident: at, recording: 7, actuals: [ref(x)], params: [], results: [ref(y)] })
      for (const r of await fetchBoth(y)) expect(r).toEqual(reduced.map((v) => Math.fround(v * 3)))
    }
  }, 30_000)

  test("the timelines: the ones read next never ran on the communication thread, the others did", async () => {
    // A worker writes its timeline as it ends.
    h.send("all", { _tag: "Exit" })
    await h.until(() => [0, 1].every((rank) => existsSync(join(dir, `rank-${rank}.json`))) || undefined, 20_000, "both timelines written at Exit")
    await h.close()
    for (const idents of onThread()) {
      for (const i of inline) expect(idents).not.toContain(i)
      for (const i of threaded) expect(idents).toContain(i)
    }
  }, 30_000)
})
