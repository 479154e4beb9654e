// Two real workers: an all-reduce runs on the communication thread while the loop goes on.
// A command that reads or writes one of its tensors waits for it and sees the reduced values
// (random inputs against a float32 reference sum); one that does not runs before it ends
// (shown by order, with rank 1 held at a gate the test opens); Status stays at the collective
// until it is done; a failure on the thread poisons its result and what reads it, nothing else.
import { afterAll, beforeAll, describe, expect, test } from "bun:test"
import { mkdtempSync, rmSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import type { Reduce } from "../../src/protocol/messages.ts"
import { call, createStream, factory, fetch, host, mesh, numbers, reduce, ref } from "./build.ts"
import { startWorkers, type Harness } from "./harness.ts"

const MESH = 2
let h: Harness
let ident = 0
const next = () => ident++
let refs = 100
const fresh = () => refs++
const dir = mkdtempSync(join(tmpdir(), "monarch-overlap-"))
let gates = 0

beforeAll(async () => {
  h = await startWorkers({ world: 2 })
  h.send("all", createStream)
  h.send("all", mesh(MESH, ["dp"], [2]))
  // The group's first collective opens its communicator on the loop's thread; the rest start on the communication thread.
  const t = fresh(), out = fresh()
  h.send("all", call(next(), [t], "ops.ones", [[1]], { kwargs: { dtype: "f32" } }))
  h.send("all", reduce(next(), out, t, MESH, ["dp"], "sum", factory([1])))
  const f = next()
  h.send("all", fetch(f, ref(out)))
  for (const r of [0, 1]) expect(numbers((await h.next(r, "FetchResult")).value)).toEqual([2])
}, 60_000)
afterAll(async () => {
  await h?.close()
  rmSync(dir, { recursive: true, force: true })
})

/** Seeded random floats in [-8, 8), rounded to f32. */
const random = (seed: number, n: number): number[] => {
  let x = seed >>> 0 || 1
  return Array.from({ length: n }, () => {
    x ^= x << 13; x >>>= 0; x ^= x >>> 17; x ^= x << 5; x >>>= 0
    return Math.fround((x / 2 ** 32) * 16 - 8)
  })
}

/** Defines ref `t` on rank r as the values `of(r)`. */
const upload = (t: number, shape: number[], of: (r: number) => number[]) => {
  const i = next()
  for (const r of [0, 1]) h.send(r, call(i, [t], "ops.clone", [host("f32", shape, of(r))]))
}

const fetchBoth = async (r: number, because?: string): Promise<number[][]> => {
  const f = next()
  h.send("all", fetch(f, ref(r)))
  return Promise.all([0, 1].map(async (rank) => {
    const got = await h.next(rank, "FetchResult", 20_000, because)
    expect(got.ident).toBe(f)
    return numbers(got.value)
  }))
}

/** A gate rank 1 waits at (fns:gate) until `open()`; rank 0 never runs it. */
const gate = () => {
  const path = join(dir, `gate-${gates++}`)
  const i = next()
  h.send(1, call(i, [], "fns:gate", [path]))
  return { ident: i, open: () => writeFileSync(path, "") }
}

const sum = (a: number[], b: number[]) => a.map((x, i) => Math.fround(x + b[i]!))

describe("an all-reduce in flight", () => {
  for (const [n, inplace, reduction] of [[7, false, "sum"], [4096, true, "sum"], [300_000, false, "sum"], [1000, false, "avg"]] as const) {
    test(`a command reading its output waits and sees the reduced values (${n} elements, ${inplace ? "in place" : "a new output"}, ${reduction})`, async () => {
      const seed = n * 31 + (inplace ? 7 : 0)
      const x = fresh(), out = inplace ? x : fresh(), y = fresh()
      upload(x, [n], (r) => random(seed + r, n))
      h.send("all", reduce(next(), out, x, MESH, ["dp"], reduction as Reduce["reduction"], factory([n]), { inplace }))
      // Read at once, on the next command: a reader that did not wait would see the input or garbage.
      h.send("all", call(next(), [y], "ops.mul", [ref(out), 2]))
      const [a, b] = [random(seed, n), random(seed + 1, n)]
      const reduced = reduction === "avg" ? sum(a, b).map((v) => Math.fround(v / 2)) : sum(a, b)
      const got = await fetchBoth(y)
      for (const r of [0, 1]) expect(got[r]!).toEqual(reduced.map((v) => Math.fround(v * 2)))
    }, 30_000)
  }

  test("a reader on the rank that is first waits for the peer (held at a gate) and then sees the sum", async () => {
    const n = 64, x = fresh(), out = fresh(), y = fresh()
    upload(x, [n], (r) => random(900 + r, n))
    const g = gate()
    h.send("all", reduce(next(), out, x, MESH, ["dp"], "sum", factory([n])))
    h.send("all", call(next(), [y], "ops.mul", [ref(out), 2]))
    const f = next()
    h.send("all", fetch(f, ref(y)))
    // Rank 1 is at the gate (it announces the call before running it); rank 0's reader waits in the all-reduce.
    await h.passed(1, g.ident - 1)
    g.open()
    const expected = sum(random(900, n), random(901, n)).map((v) => Math.fround(v * 2))
    for (const r of [0, 1]) expect(numbers((await h.next(r, "FetchResult", 20_000, "the reader's fetch after the gate opened")).value)).toEqual(expected)
  }, 30_000)

  test("writing its input waits for it: the sum is of the values before the write", async () => {
    const n = 32, x = fresh(), out = fresh()
    upload(x, [n], (r) => random(700 + r, n))
    const g = gate()
    h.send("all", reduce(next(), out, x, MESH, ["dp"], "sum", factory([n])))
    h.send("all", call(next(), [], "ops.fill_", [ref(x), 1000], { mutates: [x] }))
    await h.passed(1, g.ident - 1)
    g.open()
    expect(await fetchBoth(out)).toEqual([0, 1].map(() => sum(random(700, n), random(701, n))))
    expect(await fetchBoth(x)).toEqual([0, 1].map(() => Array(n).fill(1000)))
  }, 30_000)

  test("its output let go while it runs is freed only after it: a new tensor does not take that memory", async () => {
    const n = 256, x = fresh(), out = fresh(), z = fresh()
    upload(x, [n], (r) => random(500 + r, n))
    const g = gate()
    h.send("all", reduce(next(), out, x, MESH, ["dp"], "sum", factory([n])))
    h.send("all", { _tag: "DeleteRefs", refs: [out] })
    // Same dtype and shape: a handle freed at the DeleteRefs would be handed out again here, and the sum written over it later.
    h.send("all", call(next(), [z], "ops.full", [[n], -123], { kwargs: { dtype: "f32" } }))
    // Rank 0 has made z (its fetch answers) while rank 1 is at the gate, so the all-reduce is still in flight there.
    const made = next()
    h.send(0, fetch(made, ref(z)))
    expect((await h.next(0, "FetchResult", 20_000, "rank 0's fetch of z while its all-reduce waits for rank 1")).ident).toBe(made)
    await h.passed(1, g.ident - 1)
    g.open()
    // After the all-reduce is done (a later one on the group has gone through), z is still what it was made as.
    const w = fresh(), after = fresh()
    h.send("all", call(next(), [w], "ops.full", [[1], 1], { kwargs: { dtype: "f32" } }))
    h.send("all", reduce(next(), after, w, MESH, ["dp"], "sum", factory([1])))
    expect(await fetchBoth(after)).toEqual([[2], [2]])
    expect(await fetchBoth(z)).toEqual([0, 1].map(() => Array(n).fill(-123)))
  }, 30_000)

  test("commands that do not read it run before it ends, and Status stays at it until then", async () => {
    const n = 16, x = fresh(), out = fresh(), y = fresh()
    upload(x, [n], (r) => random(300 + r, n))
    h.send("all", call(next(), [y], "ops.full", [[3], 5], { kwargs: { dtype: "f32" } }))
    const g = gate()
    const reduceIdent = next()
    h.send("all", reduce(reduceIdent, out, x, MESH, ["dp"], "sum", factory([n])))
    h.send("all", call(next(), [y], "ops.add", [ref(y), 1]))
    const unrelated = next()
    h.send(0, fetch(unrelated, ref(y)))
    // Rank 0 answers while rank 1 has not even reached the all-reduce (it waits at the gate):
    // the gate opens once the answer came, or after 3 s; the answer must have come first.
    const answer = h.next(0, "FetchResult", 20_000, "rank 0's fetch of a tensor the all-reduce does not touch")
    const first = await Promise.race([answer.then(() => "the answer" as const), Bun.sleep(3000).then(() => "the gate" as const)])
    // The commands after it ran, but the all-reduce is not done: no Status of rank 0 claims it is.
    if (first === "the answer") await Bun.sleep(1200)
    const statusWhileHeld = Math.max(0, ...h.seen(0, "Status").map((m) => m.firstUncompletedIdent))
    g.open()
    const early = await answer
    expect(early.ident).toBe(unrelated)
    expect(numbers(early.value)).toEqual([6, 6, 6])
    expect(`${first} came first`).toBe("the answer came first")
    expect(statusWhileHeld).toBeLessThanOrEqual(reduceIdent)
    await h.passed(0, reduceIdent, 10_000, "rank 0's Status passing the all-reduce once it is done")
    h.send(1, fetch(unrelated, ref(y)))
    expect(numbers((await h.next(1, "FetchResult")).value)).toEqual([6, 6, 6])
    expect(await fetchBoth(out)).toEqual([0, 1].map(() => sum(random(300, n), random(301, n))))
  }, 30_000)

  test("a failure on the communication thread poisons its result and its readers only, and the group goes on", async () => {
    const x = fresh(), out = fresh(), reader = fresh(), y = fresh()
    // The members disagree on the element count: the thread's agreement fails it on both.
    for (const r of [0, 1]) h.send(r, call(next() - r, [x], "ops.ones", [[4 + r]], { kwargs: { dtype: "f32" } }))
    next()
    const failing = next()
    for (const r of [0, 1]) h.send(r, reduce(failing, out, x, MESH, ["dp"], "sum", factory([4 + r])))
    const readIdent = next()
    h.send("all", call(readIdent, [reader], "ops.mul", [ref(out), 2]))
    h.send("all", call(next(), [y], "ops.full", [[2], 7], { kwargs: { dtype: "f32" } }))
    const poisoned = next()
    h.send("all", fetch(poisoned, ref(reader)))
    const good = next()
    h.send("all", fetch(good, ref(y)))
    for (const r of [0, 1]) {
      const answer = await h.next(r, "FetchResult", 20_000, "the fetch of a tensor the failed all-reduce does not touch")
      expect(answer.ident).toBe(good)
      expect(numbers(answer.value)).toEqual([7, 7])
      const failures = h.seen(r, "RemoteFunctionFailed").filter((m) => m.ident >= failing)
      expect(failures.map((m) => m.ident)).toEqual([failing])
      expect(failures[0]!.error.message).toMatch(/disagree/)
    }
    // Its input is whole, and the next all-reduce on the group works.
    expect(await fetchBoth(x)).toEqual([[1, 1, 1, 1], [1, 1, 1, 1, 1]])
    const w = fresh(), sumOut = fresh()
    h.send("all", call(next(), [w], "ops.full", [[3], 2], { kwargs: { dtype: "f32" } }))
    h.send("all", reduce(next(), sumOut, w, MESH, ["dp"], "sum", factory([3])))
    expect(await fetchBoth(sumOut)).toEqual([[4, 4, 4], [4, 4, 4]])
  }, 30_000)
})
