// Stream and event ordering on the cuda backend. Stream A is held busy by the debug spin
// kernel, A writes a tensor, and stream B reads it. With B waiting on an event recorded after
// the write, B must see the new value; without the wait, B must see the old one: that control
// proves the spin really holds A while B runs, so a missing wait anywhere would show up as a
// stale read. The allocator gets the same treatment: memory freed while A still writes it must
// not be handed to B's next tensor. Skipped, saying why, when the cuda backend cannot load.
import { describe, expect, test } from "bun:test"
import { testUnless } from "../skip.ts"
import * as ops from "../../ffi/ops.ts"
import { loadNative, type Native } from "../../ffi/native.ts"
import { Event, Stream } from "../../ffi/stream.ts"
import { Tensor } from "../../ffi/tensor.ts"

let native: Native | undefined
try {
  native = loadNative("cuda")
} catch (e) {
  console.log(`tests/cuda/ordering: skipped, the cuda backend cannot load: ${(e as Error).message}`)
}

const cuda = testUnless(native === undefined ? "the cuda backend cannot load (tests/cuda/ordering said why above)" : undefined)
const N = 1 << 20 // 4 MiB of f32: a copy takes microseconds, far below the spin
const SPIN_US = 300_000

/** The distinct values of a tensor, read on `stream` (after that stream's earlier work). */
const distinct = (t: Tensor, stream?: Stream): number[] => [...new Set(new Float32Array(t.toHost(stream).data.slice().buffer))].sort()

/** A fresh f32 tensor of N elements holding `value`, written and finished on the default stream. */
const filled = (n: Native, value: number): Tensor => {
  const t = Tensor.empty(n, "f32", [N])
  ops.fill(t, value)
  Stream.default(n).synchronize()
  return t
}

/**
 * A writes 7 into x after a long spin; B copies x into y, waiting on A's event when `wait` is
 * set. Returns what B read, then lets A finish.
 */
const readAcross = (n: Native, a: Stream, b: Stream, wait: boolean): number[] => {
  using x = filled(n, 1)
  using y = filled(n, 0)
  a.debugSpin(SPIN_US)
  ops.fill(x, 7, a)
  using event = a.record()
  if (wait) b.wait(event)
  ops.cast(y, x, b) // same dtype: a device-to-device copy on b
  const seen = distinct(y, b)
  a.synchronize()
  expect(distinct(x)).toEqual([7])
  return seen
}

describe("cuda stream ordering", () => {
  cuda("the debug spin holds its stream for at least the time asked", () => {
    const n = native!
    using s = Stream.create(n)
    const start = performance.now()
    s.debugSpin(200_000)
    using event = s.record()
    expect(event.query()).toBe(false)
    event.synchronize()
    expect(event.query()).toBe(true)
    expect(performance.now() - start).toBeGreaterThanOrEqual(199)
  })

  cuda("a read on B after waiting for A's event sees A's write", () => {
    const n = native!
    using a = Stream.create(n)
    using b = Stream.create(n)
    expect(readAcross(n, a, b, true)).toEqual([7])
  })

  cuda("without the wait, B reads the value from before A's write (the control)", () => {
    const n = native!
    using a = Stream.create(n)
    using b = Stream.create(n)
    expect(readAcross(n, a, b, false)).toEqual([1])
  })

  cuda("the default stream orders with created streams only through events", () => {
    const n = native!
    const main = Stream.default(n)
    using b = Stream.create(n)
    expect(readAcross(n, main, b, true)).toEqual([7])
    expect(readAcross(n, main, b, false)).toEqual([1])
    expect(readAcross(n, b, main, true)).toEqual([7])
    expect(readAcross(n, b, main, false)).toEqual([1])
  })

  cuda("a borrow's round trip: B waits for A, writes, and A waits for B before reading", () => {
    const n = native!
    using a = Stream.create(n)
    using b = Stream.create(n)
    using x = filled(n, 1)
    using y = filled(n, 0)
    a.debugSpin(SPIN_US)
    ops.fill(x, 2, a)
    using created = a.record()
    b.wait(created)
    b.debugSpin(SPIN_US) // B is the slow one now: A must wait for it on the way back
    ops.binaryScalar("mul", x, x, 5, false, b)
    using dropped = b.record()
    a.wait(dropped)
    ops.cast(y, x, a)
    expect(distinct(y, a)).toEqual([10])
  })

  cuda("copy_out waits for the stream's earlier work", () => {
    const n = native!
    using a = Stream.create(n)
    using x = filled(n, 1)
    a.debugSpin(SPIN_US)
    ops.fill(x, 3, a)
    expect(distinct(x, a)).toEqual([3])
  })

  cuda("an event waited on before it is recorded does not block", () => {
    const n = native!
    using a = Stream.create(n)
    using never = Event.create(n)
    a.wait(never)
    using x = filled(n, 1)
    ops.fill(x, 4, a)
    expect(distinct(x, a)).toEqual([4])
  })

  cuda("memory freed while a stream still writes it is not reused under that write", () => {
    const n = native!
    using a = Stream.create(n)
    using b = Stream.create(n)
    const x = filled(n, 1)
    a.debugSpin(SPIN_US)
    ops.fill(x, 7, a) // still queued behind the spin when x is freed
    x.free()
    using z = Tensor.empty(n, "f32", [N]) // the same size class as x
    ops.fill(z, 5, b)
    b.synchronize()
    a.synchronize()
    expect(distinct(z, b)).toEqual([5])
  })

  cuda("streams and events fail cleanly on misuse", () => {
    const n = native!
    expect(() => Stream.default(n).debugSpin(-1)).toThrow(/negative duration -1/)
    expect(n.shim.shim_stream_destroy(null)).toBe(1)
    expect(String(n.shim.shim_last_error())).toMatch(/default stream/)
  })
})
