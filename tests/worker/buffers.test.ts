// A fetched tensor's host copy is recycled once the socket took it: the next fetch's copy goes
// into the same memory (no fresh pages), and only then (a reply not yet sent keeps its own);
// small copies are not pooled, a spare wasting more than half is not reused, and the cap holds.
import { afterEach, beforeEach, expect, test } from "bun:test"
import { Effect } from "effect"
import { BufferPool, POOLED_BYTES } from "../../src/net/buffers.ts"
import type { FetchResult, WorkerMessage } from "../../src/protocol/messages.ts"
import type { HostTensor } from "../../src/protocol/values.ts"
import { makeDispatch } from "../../src/worker/handlers/index.ts"
import { makeSession } from "../../src/worker/session.ts"
import { call, createStream, fetch, ref } from "./build.ts"
import { inProcessWorker, type InProcessWorker } from "./inProcess.ts"

let w: InProcessWorker
beforeEach(async () => {
  w = inProcessWorker()
  await w.dispatch(createStream)
})
afterEach(() => w.close())

const results = () => w.sent.filter((m): m is FetchResult => m._tag === "FetchResult").map((m) => m.value as HostTensor)

test("the second fetch's host copy reuses the first's memory once it was sent", async () => {
  const n = 1 << 18 // 1 MiB of f32
  await w.dispatch(call(0, [30], "ops.full", [[n], 2]))
  await w.dispatch(call(1, [31], "ops.full", [[n], 5]))
  await w.dispatch(fetch(2, ref(30)))
  await w.dispatch(fetch(3, ref(31)))
  const [first, second] = results()
  expect(second!.data.buffer).toBe(first!.data.buffer)
  expect(new Float32Array(second!.data.buffer, second!.data.byteOffset, 4)).toEqual(Float32Array.of(5, 5, 5, 5))
})

test("a reply the socket has not taken keeps its own memory", async () => {
  const waiting: Array<() => void> = []
  const sent: FetchResult[] = []
  const s = makeSession({ ...w.session, send: (m) => void (m._tag === "FetchResult" && sent.push(m)), whenSent: (fn) => void waiting.push(fn) })
  const dispatch = makeDispatch(s)
  const run = (m: WorkerMessage) => Effect.runPromise(dispatch(m))
  await run(createStream)
  await run(call(0, [30], "ops.full", [[1 << 18], 2]))
  await run(fetch(1, ref(30)))
  await run(fetch(2, ref(30)))
  expect(sent.length).toBe(2)
  expect((sent[1]!.value as HostTensor).data.buffer).not.toBe((sent[0]!.value as HostTensor).data.buffer)
  for (const fn of waiting.splice(0)) fn()
  await run(fetch(3, ref(30)))
  expect([sent[0], sent[1]].map((m) => (m!.value as HostTensor).data.buffer)).toContain((sent[2]!.value as HostTensor).data.buffer)
})

test("the pool: small copies are not pooled, a spare more than twice the size is not reused, the cap holds", () => {
  const P = POOLED_BYTES
  const pool = new BufferPool(3 * P)
  pool.give(pool.take(P - 1))
  expect(pool.bytes).toBe(0)
  const a = pool.take(2 * P + 2)
  pool.give(a)
  expect(pool.bytes).toBe(2 * P + 2)
  expect(pool.take(P).buffer).not.toBe(a.buffer) // would waste more than half
  const b = pool.take(P + 1)
  expect(b.buffer).toBe(a.buffer)
  expect(pool.bytes).toBe(0)
  pool.give(b)
  pool.give(new Uint8Array(2 * P)) // past the cap: dropped
  expect(pool.bytes).toBe(2 * P + 2)
  pool.clear()
  expect(pool.bytes).toBe(0)
})
