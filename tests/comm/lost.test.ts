// A rank the controller reported lost, as Communicators sees it (no second process: the
// opening's wait in the store is an Effect that never ends, as it would for a member that died
// before publishing its address): collectives over it fail at once and openings stop waiting.
import { expect, test } from "bun:test"
import { Effect, Exit, Fiber } from "effect"
import { Comm } from "../../ffi/comm.ts"
import { loadNative } from "../../ffi/native.ts"
import { Communicators } from "../../src/comm/communicators.ts"
import { CommError } from "../../src/comm/errors.ts"

const native = loadNative("cpu")
const single = () => {
  const c = Comm.create(native, 0, 1, 1000)
  c.connect([new Uint8Array(0)])
  return c
}
const MEMBERS = [0, 1]

/** Communicators whose group openings wait forever (counted), or connect a one-member comm when `opens`. */
const comms = (opens = false) => {
  const openings = { started: 0 }
  const c = new Communicators(single(), () => Effect.suspend(() => {
    openings.started++
    return opens ? Effect.succeed(single()) : Effect.never
  }))
  return { c, openings }
}

const lostFailure = (exit: Exit.Exit<unknown, unknown>) => {
  if (Exit.isSuccess(exit)) return "succeeded"
  const e = exit.cause.reasons.find((r) => r._tag === "Fail")
  return e && e._tag === "Fail" && e.error instanceof CommError ? `${e.error.reason}: ${e.error.message}` : String(exit.cause)
}

test("an opening waiting for a member stops when that member is reported lost, failing peer-lost naming it", async () => {
  const { c } = comms()
  const done = c.collective(1, ["dp"], () => MEMBERS, 7, () => "ran")
  if (!Effect.isEffect(done)) throw new Error("a collective on a group not yet opened finished synchronously")
  const running = Effect.runPromiseExit(done)
  await Bun.sleep(50)
  const t0 = performance.now()
  c.peerLost(1)
  const exit = await Promise.race([running, Bun.sleep(2000).then(() => undefined)])
  expect(exit, "the opening kept waiting for the lost member").toBeDefined()
  expect(performance.now() - t0).toBeLessThan(500)
  expect(lostFailure(exit!)).toMatch(/^peer-lost: rendezvous .*needs rank 1, which the controller reported lost/)
})

test("after a loss, a collective whose group holds the lost rank fails at once: not opened, not run", () => {
  const { c, openings } = comms()
  c.peerLost(1)
  let ran = false
  const done = c.collective(1, ["dp"], () => MEMBERS, 7, () => (ran = true))
  expect(Effect.isEffect(done)).toBe(true)
  expect(lostFailure(Effect.runSyncExit(done as Effect.Effect<unknown, CommError>))).toMatch(/^peer-lost: the collective needs rank 1/)
  expect({ ran, opened: openings.started }).toEqual({ ran: false, opened: 0 })
  // A group without the lost rank is opened and runs as before.
  const other = c.collective(2, ["tp"], () => [0, 2], 8, () => "ran")
  expect(Effect.isEffect(other)).toBe(true)
  const opening = Effect.runFork(other as Effect.Effect<unknown, CommError>)
  expect(openings.started).toBe(1)
  Effect.runFork(Fiber.interrupt(opening))
})

test("an opened group's collective fails once a member is reported lost, without calling the transport", async () => {
  const { c } = comms(true)
  const first = c.collective(1, ["dp"], () => MEMBERS, 7, () => "ran")
  expect(await Effect.runPromise(first as Effect.Effect<string, CommError>)).toBe("ran")
  expect(c.collective(1, ["dp"], () => MEMBERS, 8, () => "ran")).toBe("ran")
  c.peerLost(1)
  let ran = false
  const after = c.collective(1, ["dp"], () => MEMBERS, 9, () => (ran = true))
  expect(lostFailure(Effect.runSyncExit(after as Effect.Effect<unknown, CommError>))).toMatch(/^peer-lost: the collective needs rank 1/)
  expect(ran).toBe(false)
  // The next controller starts with nobody lost.
  await Effect.runPromise(c.forget())
  expect(await Effect.runPromise(Effect.suspend(() => {
    const d = c.collective(1, ["dp"], () => MEMBERS, 0, () => "ran")
    return Effect.isEffect(d) ? d : Effect.succeed(d)
  }))).toBe("ran")
})

test("a send to or from a lost rank fails at once; one between live ranks does not", () => {
  const { c } = comms()
  c.peerLost(3)
  expect(c.lostAmong([1, 3], "SendTensor 4")?.message).toBe("SendTensor 4 needs rank 3, which the controller reported lost (group of ranks [1, 3])")
  expect(c.lostAmong([1, 2], "SendTensor 4")).toBeUndefined()
})
