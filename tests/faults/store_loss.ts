/**
 * Scenarios 3 and 4: the store. Killed (SIGKILL, a store in its own process) after the
 * workers met through it, work over what already exists goes on, while opening a new
 * communicator fails within the store timeout with a CommError naming the rendezvous and
 * the store. A key never set: a worker with no CONTROLLER_ADDR and no `controller` key
 * fails start-up with StoreTimeout naming the key and exits non-zero; the client alone
 * gives StoreTimeout naming the key, and stays usable.
 */
import { Duration, Effect, ManagedRuntime } from "effect"
import { Controller, RemoteError } from "../../src/controller/index.ts"
import { makeClient } from "../../src/store/client.ts"
import { StoreTimeout } from "../../src/store/errors.ts"
import { startServer } from "../../src/store/server.ts"
import { FAULT_TOKEN, spawnStore, spawnWorkers, stopAll } from "./procs.ts"
import { attempt, type Trial } from "./trial.ts"

export const STORE_TIMEOUT_MS = 2000
/** Process scheduling on a loaded machine, on top of a timeout being measured. */
const SLACK_MS = 1500

/** Store killed after rendezvous: old communicators and values go on, a new communicator fails in time. */
export const storeKilled = (): Promise<Trial> =>
  attempt(async (t) => {
    const { proc: store, address } = await spawnStore()
    const workers = spawnWorkers(4, address, { MONARCH_COMM_TIMEOUT_MS: "3000", MONARCH_STORE_TIMEOUT_MS: String(STORE_TIMEOUT_MS) })
    const rt = ManagedRuntime.make(Controller.attach({ world: 4, store: address, token: FAULT_TOKEN, startTimeoutMs: 30_000, onProblem: (p) => t.problems.push(`controller: ${p}`) }))
    try {
      const ctl = await rt.runPromise(Effect.service(Controller))
      const run = <A, E>(e: Effect.Effect<A, E, Controller>) => rt.runPromise(e)
      const mesh = await run(ctl.mesh({ dp: 2, tp: 2 }))
      const threes = await run(mesh.call("ops.full", [[4], 3]))
      const before = await run(mesh.fetchAll(await run(mesh.reduce(threes, "tp", "sum"))))
      before.forEach((v, r) => t.checkValues(v, [6, 6, 6, 6], `the tp sum on rank ${r} before the store died`))

      const killedAt = store.kill()
      await store.ended
      // Existing work goes on: calls, a collective over the tp groups opened above, fetches.
      const fours = await run(mesh.call("ops.add", [threes, 1]))
      const sums = await run(mesh.fetchAll(await run(mesh.reduce(fours, "tp", "sum"))))
      sums.forEach((v, r) => t.checkValues(v, [8, 8, 8, 8], `the tp sum on rank ${r} after the store died`))

      // A new communicator (the dp groups) needs the store: a tagged error, in time, saying what failed.
      const issuedAt = performance.now()
      const failed = await Promise.race([
        rt.runPromise(Effect.flip(mesh.fetch(await run(mesh.reduce(threes, "dp", "sum")), 0))),
        Bun.sleep(STORE_TIMEOUT_MS * 4).then(() => "hung"),
      ])
      const took = t.figure("new communicator→error", performance.now() - issuedAt)
      if (t.check(failed instanceof RemoteError, `the dp reduce ended with ${failed}, not RemoteError`)) {
        const e = failed as RemoteError
        t.check(e.type === "CommError" && /rendezvous comm\/mesh\d+\/dp@/.test(e.reason) && e.reason.includes(`${address.host}:${address.port}`) && e.reason.includes("store"),
          `the error does not name the rendezvous and the store: ${e.message}`)
        t.check(e.message.startsWith(`rank ${e.rank}:`), `the error does not name its rank: ${e.message}`)
      }
      t.check(took < STORE_TIMEOUT_MS + SLACK_MS, `the error took ${Math.round(took)} ms (store timeout ${STORE_TIMEOUT_MS} ms)`)

      // Afterwards: the values fetched before are intact, and the old communicators still work.
      before.forEach((v, r) => t.checkValues(v, [6, 6, 6, 6], `the value fetched from rank ${r} before the store died`))
      const again = await run(mesh.fetchAll(await run(mesh.reduce(fours, "tp", "sum"))))
      again.forEach((v, r) => t.checkValues(v, [8, 8, 8, 8], `the tp sum on rank ${r} after the failed rendezvous`))
      t.check(workers.every((w) => w.running), `a worker exited:\n${workers.map((w) => w.tail(5)).join("\n")}`)
      t.figure("store killed→checks done", performance.now() - killedAt)
    } finally {
      await rt.dispose()
      await stopAll([...workers, store])
    }
  })

/** A worker whose controller address is nowhere: StoreTimeout naming the key, a non-zero exit. */
export const controllerKeyNeverSet = (): Promise<Trial> =>
  attempt(async (t) => {
    const server = startServer({ port: 0 })
    const [worker] = spawnWorkers(1, { host: "127.0.0.1", port: server.port }, { MONARCH_STORE_TIMEOUT_MS: String(STORE_TIMEOUT_MS), MONARCH_CONNECT_TIMEOUT_MS: String(STORE_TIMEOUT_MS) })
    try {
      // From here the worker waits for `monarch/controller` in the store.
      const waiting = await worker!.line(/world communicator ready/, 30_000)
      if (!t.check(waiting !== undefined, `the worker never got through rendezvous:\n${worker!.tail()}`)) return
      const end = await worker!.exit(STORE_TIMEOUT_MS + 10_000)
      if (!t.check(end !== undefined, `the worker was still running ${STORE_TIMEOUT_MS + 10_000} ms into its wait`)) return
      const took = t.figure("wait→exit", end!.at - waiting!.at)
      t.check(end!.status !== 0, `the worker exited with status ${end!.status}`)
      t.facts.push(`exit status ${end!.status}`)
      const log = worker!.lines.map((l) => l.text).join("\n")
      t.check(log.includes(`no controller admitted this worker within ${STORE_TIMEOUT_MS} ms`) && log.includes("no controller address in the store yet (monarch/controller)"), `its log does not name the connect timeout and the missing key:\n${worker!.tail()}`)
      t.check(took >= STORE_TIMEOUT_MS * 0.9 && took < STORE_TIMEOUT_MS + SLACK_MS, `it gave up ${Math.round(took)} ms into the wait (connect timeout ${STORE_TIMEOUT_MS} ms)`)
    } finally {
      await stopAll([worker])
      server.stop()
    }
  })

/** The store client alone: `get` of a key never set. */
export const missingKey = (): Promise<Trial> =>
  attempt(async (t) => {
    const server = startServer({ port: 0 })
    try {
      await Effect.runPromise(Effect.scoped(Effect.gen(function* () {
        const client = yield* makeClient({ port: server.port, timeout: "30 seconds" })
        const startedAt = performance.now()
        const error = yield* Effect.flip(client.get("jobs/7/never-set", Duration.millis(STORE_TIMEOUT_MS)))
        const took = t.figure("get→StoreTimeout", performance.now() - startedAt)
        if (t.check(error instanceof StoreTimeout, `get failed with ${error}`)) {
          const e = error as StoreTimeout
          t.check(e.keys.includes("jobs/7/never-set") && e.timeoutMs === STORE_TIMEOUT_MS && e.message.includes("jobs/7/never-set"), `StoreTimeout does not name the key: ${e.message}`)
        }
        t.check(took >= STORE_TIMEOUT_MS * 0.9 && took < STORE_TIMEOUT_MS + SLACK_MS, `get gave up after ${Math.round(took)} ms (timeout ${STORE_TIMEOUT_MS} ms)`)
        // The client is still usable afterwards.
        yield* client.set("jobs/7/later", "ok")
        const later = new TextDecoder().decode(yield* client.get("jobs/7/later"))
        t.check(later === "ok", `a get after the timeout read "${later}"`)
      })))
    } finally {
      server.stop()
    }
  })
