// The streams room (src/worker/streams.ts): the seam blocking work goes through, and a
// borrow's events on the cpu backend, where a stream runs work as it is issued.
import { describe, expect, spyOn, test } from "bun:test"
import { Effect, Exit } from "effect"
import { loadNative } from "../../ffi/native.ts"
import { Event, Stream } from "../../ffi/stream.ts"
import { blocking, Borrow } from "../../src/worker/streams.ts"

const native = loadNative("cpu")

describe("blocking", () => {
  test("runs the work when the Effect runs, not before, and gives its result", () => {
    let ran = 0
    const work = blocking(() => ++ran)
    expect(ran).toBe(0)
    expect(Effect.runSync(work)).toBe(1)
  })

  test("work that returns an Effect (a communicator to open first) is run in turn", () => {
    let opened = 0
    expect(Effect.runSync(blocking(() => Effect.sync(() => ++opened).pipe(Effect.map((n) => n * 10))))).toBe(10)
    expect(opened).toBe(1)
    const failed = Effect.runSyncExit(blocking(() => Effect.fail("rendezvous")))
    expect(Exit.isFailure(failed) && (failed.cause.reasons[0] as { error?: unknown }).error).toBe("rendezvous")
  })

  test("a throw is the Effect's failure, with the thrown value itself", () => {
    const thrown = new RangeError("peer gone")
    const exit = Effect.runSyncExit(blocking(() => { throw thrown }))
    expect(Exit.isFailure(exit) && exit.cause.reasons[0]?._tag === "Fail" && (exit.cause.reasons[0] as { error: unknown }).error).toBe(thrown)
  })
})

describe("Borrow", () => {
  test("the first use waits once; last uses are marked only after it; the drop waits and frees every event", () => {
    const from = Stream.create(native), to = Stream.create(native)
    const fromWaits = spyOn(from, "wait"), toWaits = spyOn(to, "wait")
    const borrow = new Borrow(from, to)
    expect(borrow.created).toBeInstanceOf(Event)
    borrow.markLastUse()
    expect(borrow.lastUse).toBeNull()
    borrow.firstUse()
    borrow.firstUse()
    expect([borrow.used, borrow.created, toWaits.mock.calls.length]).toEqual([true, null, 1])
    borrow.markLastUse()
    const last = borrow.lastUse
    expect(last).toBeInstanceOf(Event)
    borrow.drop(native)
    expect([fromWaits.mock.calls.length, fromWaits.mock.calls[0]?.[0], toWaits.mock.calls.length]).toEqual([1, last!, 1])
    expect(borrow.lastUse).toBeNull()
    expect(() => last!.handle).toThrow("destroyed")
    from.destroy()
    to.destroy()
  })

  test("a borrow never used is dropped without a wait; destroy frees what it holds", () => {
    const from = Stream.create(native), to = Stream.create(native)
    const fromWaits = spyOn(from, "wait")
    const unused = new Borrow(from, to)
    const created = unused.created!
    unused.drop(native)
    expect(fromWaits.mock.calls.length).toBe(0)
    expect(() => created.handle).toThrow("destroyed")
    const forgotten = new Borrow(from, to)
    forgotten.firstUse()
    forgotten.markLastUse()
    const last = forgotten.lastUse!
    forgotten.destroy()
    expect(() => last.handle).toThrow("destroyed")
    from.destroy()
    to.destroy()
  })
})
