/**
 * Scenario 1: a worker killed with SIGKILL, five ways: blocked while its group waits for it
 * in an all_reduce, blocked while its group opens its communicator (rendezvous), inside an
 * all_reduce the group has not reached yet, with a fetch of its value in flight, and idle
 * between commands. Each try runs a fresh 2x2 mesh (Controller.local) with the comm timeout
 * at COMM_TIMEOUT_MS and kills rank 3; rank 2 shares its tp group.
 *
 * Which error the program sees: WorkerLost naming rank 3 (status 137, SIGKILL), in every
 * variant, as soon as the controller learns of the exit. In the collective variants rank 2
 * also fails, at once: in an all_reduce the transport sees rank 3 go; in a rendezvous, or on
 * joining an all_reduce after the loss, the controller's PeerLost tells it. It reports a
 * CommError and poisons its result; that report can race the loss to
 * the controller, which withdraws it in favour of the loss (Core.unblameCommErrors), so the
 * error names the rank that died rather than the one that noticed. Inside an all_reduce
 * that already holds rank 3's input (the shared-memory transport), rank 2 may complete it.
 */
import { Effect, ManagedRuntime } from "effect"
import { Controller, WorkerLost, type ControllerApi, type HostTensor } from "../../src/controller/index.ts"
import type { ProcessExit } from "../../src/launcher/index.ts"
import type { ControllerMessage } from "../../src/protocol/messages.ts"
import { ROOT } from "./procs.ts"
import { attempt, type Trial } from "./trial.ts"

export const COMM_TIMEOUT_MS = 3000
const VICTIM = 3, PEER = 2
const FIXTURES = "tests/faults/fixtures"
const f32x4 = [{ dtype: "f32" as const, shape: [4] }]

export type KillVariant = "blocked, group opened" | "blocked, group not yet opened" | "inside a collective" | "fetch in flight" | "idle"

/** The program's error comes from the loss itself: within this of the kill, whatever the comm timeout. */
const ERROR_LIMIT_MS = 2000
/** Rank 2 goes on at once (inside a collective, after its second's hold), never after its comm timeout. */
const peerLimitMs = (v: KillVariant) => ERROR_LIMIT_MS + (v === "inside a collective" ? 1000 : 0)

interface Report {
  readonly at: number
  readonly rank: number
  readonly type: string
  readonly message: string
}

/** Every RemoteFunctionFailed as it reaches the controller (observed, then passed on unchanged). */
const watchReports = (ctl: ControllerApi): Report[] => {
  const reports: Report[] = []
  const core = ctl.core
  const deliver = core.onMessage.bind(core)
  core.onMessage = (rank: number, msg: ControllerMessage) => {
    if (msg._tag === "RemoteFunctionFailed") reports.push({ at: performance.now(), rank, type: msg.error.type, message: msg.error.message })
    deliver(rank, msg)
  }
  return reports
}

/** When the controller learns of each worker's exit (observed, then passed on unchanged). */
const watchExits = (ctl: ControllerApi): Map<number, number> => {
  const exits = new Map<number, number>()
  const core = ctl.core
  const deliver = core.onExit.bind(core)
  core.onExit = (exit: ProcessExit) => {
    if (!exits.has(exit.rank)) exits.set(exit.rank, performance.now())
    deliver(exit)
  }
  return exits
}

/**
 * One try: a fresh mesh, rank 3 killed the `variant` way, then every condition of the scenario
 * checked. `tcp` turns the shared-memory transport off (MONARCH_COMM_SHM=0): collectives then
 * go over Gloo's TCP pairs only, and rank 2 can only fail a collective rank 3 died in.
 */
export const killWorker = (variant: KillVariant, tcp = false): Promise<Trial> =>
  attempt(async (t) => {
    const rt = ManagedRuntime.make(Controller.local({
      world: 4, functionPath: [ROOT], env: { MONARCH_COMM_TIMEOUT_MS: String(COMM_TIMEOUT_MS), ...(tcp ? { MONARCH_COMM_SHM: "0" } : {}) },
      onWorkerLine: () => {}, onProblem: () => {},
    }))
    try {
      const run = <A, E>(e: Effect.Effect<A, E, Controller>) => rt.runPromise(e)
      const ctl = await rt.runPromise(Effect.service(Controller))
      const reports = watchReports(ctl), exits = watchExits(ctl)
      const mesh = await run(ctl.mesh({ dp: 2, tp: 2 }))
      const top = await run(mesh.slice({ dp: 0 })), bottom = await run(mesh.slice({ dp: 1 }))
      const flat = await run(mesh.flatten("all"))
      const victimPid = Number(await run(flat.fetch(null, VICTIM, { fn: `${FIXTURES}:pid` })))

      // Before the fault: a value on every rank, each row's tp communicator opened, and
      // values fetched from the victim and from a survivor.
      const sevens = await run(mesh.call("ops.full", [[4], 7]))
      const rowSums = await run(mesh.reduce(sevens, "tp", "sum"))
      const fromVictim = await run(flat.fetch(sevens, VICTIM))
      const fromSurvivor = await run(flat.fetch(rowSums, 0))
      t.checkValues(fromVictim, [7, 7, 7, 7], "before the fault, sevens from rank 3")
      t.checkValues(fromSurvivor, [14, 14, 14, 14], "before the fault, the tp sum on rank 0")

      // The fault, with the command that will need the victim in flight.
      let pending: Promise<unknown>
      if (variant === "idle") pending = Promise.resolve()
      else if (variant === "fetch in flight") {
        const held = await run(bottom.call(`${FIXTURES}:blockOnRank`, [VICTIM, 10_000, sevens], {}, { results: f32x4 }))
        pending = rt.runPromise(Effect.flip(bottom.fetch(held, 1)))
      } else {
        // Rank 3 holds its process while rank 2 waits in the collective, or (inside) rank 2
        // is held for a second while rank 3 waits in it. The whole mesh's tp groups were
        // opened above; the bottom row as a mesh of its own has not opened its group yet, so
        // rank 2 is still in the rendezvous, waiting in the store for rank 3's address.
        const on = variant === "blocked, group not yet opened" ? bottom : mesh
        const inside = variant === "inside a collective"
        const held = await run(on.call(`${FIXTURES}:blockOnRank`, [inside ? PEER : VICTIM, inside ? 1000 : 10_000, sevens], {}, { results: f32x4 }))
        const sum = await run(on.reduce(held, "tp", "sum"))
        pending = rt.runPromise(Effect.flip(on.fetch(sum, on === bottom ? 0 : PEER)))
      }
      // Work that does not need the victim, issued before the fault, completes after it.
      const fives = await run(top.call("ops.full", [[2], 5]))
      const unaffected = rt.runPromise(top.fetch(fives, 1))
      // Time for rank 3 to get where the variant wants it: held, waiting in the collective, or idle.
      await Bun.sleep(300)

      const killedAt = performance.now()
      process.kill(victimPid, "SIGKILL")
      if (variant === "idle") pending = rt.runPromise(Effect.flip(flat.fetch(sevens, VICTIM)))
      const error = await Promise.race([pending, Bun.sleep(COMM_TIMEOUT_MS * 3).then(() => "hung")])
      const took = t.figure("kill→error", performance.now() - killedAt)
      if (t.check(error instanceof WorkerLost, `the fetch that needed rank 3 ended with ${error instanceof Error ? `${error.constructor.name}: ${error.message}` : String(error)}, not WorkerLost`)) {
        const lost = error as WorkerLost
        t.check(lost.rank === VICTIM && lost.status === 137 && lost.signal === "SIGKILL", `WorkerLost names rank ${lost.rank}, status ${lost.status}, ${lost.signal}`)
        t.check(lost.message.includes(`rank ${VICTIM} exited with status 137`), `WorkerLost message: ${lost.message}`)
      }
      t.check(took < ERROR_LIMIT_MS, `the error took ${Math.round(took)} ms`)

      // Rank 2 goes on: it answers its next fetch once past the collective, having reported
      // a CommError (rank 3's input never came) or, inside an all_reduce whose transport
      // already held rank 3's input (shared memory on one host), having completed it.
      const next = await Promise.race([run(flat.fetch(sevens, PEER)), Bun.sleep(peerLimitMs(variant) + 3000).then(() => "hung")])
      const wentOn = t.figure("kill→rank 2 went on", performance.now() - killedAt)
      t.checkValues(next, [7, 7, 7, 7], "sevens on rank 2 after the fault")
      t.check(wentOn < peerLimitMs(variant), `rank 2 went on ${Math.round(wentOn)} ms after the kill (comm timeout ${COMM_TIMEOUT_MS} ms)`)
      if (variant !== "idle" && variant !== "fetch in flight") {
        const report = reports.find((r) => r.rank === PEER && r.at >= killedAt)
        if (report) {
          t.figure("kill→rank 2 CommError", report.at - killedAt)
          // Joining after the controller's PeerLost came, rank 2 fails the all_reduce before it starts.
          const expected = variant === "blocked, group not yet opened" ? ["rendezvous"] : variant === "inside a collective" ? ["shim_all_reduce", "the controller reported lost"] : ["shim_all_reduce"]
          t.check(report.type === "CommError" && expected.some((e) => report.message.includes(e)), `rank 2 reported ${report.type}: ${report.message}`)
          t.facts.push(report.at < (exits.get(VICTIM) ?? Infinity) ? "rank 2's CommError reached the controller before rank 3's exit" : "rank 3's exit reached the controller first")
        } else t.check(variant === "inside a collective" && !tcp, `rank 2 went on without reporting a failure of the collective rank 3 ${variant === "inside a collective" ? "died in" : "never joined"}`)
        t.facts.push(report ? "rank 2 reported a CommError" : "rank 2 completed the all_reduce (rank 3's input was in)")
      }

      // Nothing already fetched is lost, and what did not need rank 3 goes on.
      t.checkValues(await unaffected, [5, 5], "work on the top row issued before the fault")
      t.checkValues(fromVictim, [7, 7, 7, 7], "the value fetched from rank 3 before it died")
      t.checkValues(fromSurvivor, [14, 14, 14, 14], "the value fetched from rank 0 before the fault")
      const reused = await run(top.call("ops.add", [fromVictim as HostTensor, 1]))
      t.checkValues(await run(top.fetch(reused, 1)), [8, 8, 8, 8], "the fetched value sent back to the top row")
      t.checkValues(await run(top.fetch(await run(top.reduce(sevens, "tp", "sum")), 1)), [14, 14, 14, 14], "a tp collective on the top row (no rank 3) after the fault")
      const later = await run(Effect.flip(mesh.fetch(await run(mesh.call("ops.ones", [[1]])), VICTIM)))
      t.check(later instanceof WorkerLost && later.rank === VICTIM, `new work on rank 3 failed with ${later}`)
    } finally {
      await rt.dispose()
    }
  })

const waitFor = async <A>(found: () => A | undefined, timeoutMs: number): Promise<A | undefined> => {
  const deadline = performance.now() + timeoutMs
  for (;;) {
    const v = found()
    if (v !== undefined || performance.now() > deadline) return v
    await Bun.sleep(5)
  }
}
