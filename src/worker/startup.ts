/**
 * The worker's start-up, in the order DESIGN.md gives: the store (hosted on its own thread by
 * rank 0 when torchrun did not start one), the world communicator and a sanity all_reduce of
 * a one-element tensor, the controller link, then the command loop. The backend and the
 * store are services (src/backend.ts, src/store/service.ts); src/worker.ts provides them.
 */
import { Duration, Effect, Layer } from "effect"
import type { Comm } from "../../ffi/comm.ts"
import type { Native } from "../../ffi/native.ts"
import * as k from "../../ffi/ops.ts"
import { Tensor } from "../../ffi/tensor.ts"
import { Backend } from "../backend.ts"
import { commError, Communicators } from "../comm/communicators.ts"
import { CommError } from "../comm/errors.ts"
import type { StoreApi } from "../store/api.ts"
import { makeClient } from "../store/client.ts"
import { prefixStore } from "../store/prefix.ts"
import { writeStoreFile } from "../store/addressFile.ts"
import { serveOnThread } from "../store/serverThread.ts"
import { Store } from "../store/service.ts"
import type { WorkerConfig } from "./config.ts"
import { FunctionTable } from "./functions.ts"
import { connectController, LinkError, type ControllerLink } from "./link.ts"
import { runLoop } from "./loop.ts"

const decoder = new TextDecoder()

/** The worker's store, seen under the job's prefix (and hosted here by rank 0 when it must be). */
export const workerStore = (config: WorkerConfig) =>
  Layer.effect(Store, Effect.gen(function* () {
    const { host, port, prefix, hostedByRank0 } = config.store
    if (hostedByRank0 && config.rank === 0) {
      yield* serveOnThread({ host, port })
      yield* Effect.logInfo(`hosting the store at ${host}:${port} (torchrun started none)`)
    }
    const timeout = Duration.millis(config.storeTimeoutMs)
    const client = yield* makeClient({ host, port, timeout, connectTimeout: timeout })
    yield* Effect.logInfo(`store ${host}:${port} (torch ${client.dialect} dialect), prefix ${prefix}`)
    if (config.storeFile !== undefined && config.rank === 0) {
      yield* writeStoreFile(config.storeFile, { host, port, prefix })
      yield* Effect.logInfo(`wrote the store's address to ${config.storeFile}`)
    }
    return prefixStore(prefix, client)
  }))

/**
 * The address Gloo binds when MONARCH_HOSTNAME is not set: the one the kernel routes to the
 * store from (a connected UDP socket sends nothing). On one host that is 127.0.0.1 as before;
 * across hosts (torchrun --nnodes sets no MONARCH_HOSTNAME) it is the interface the other
 * hosts reach too, where loopback would refuse every peer on another host.
 */
const glooHostname = (config: WorkerConfig) =>
  config.hostname !== undefined
    ? Effect.succeed(config.hostname)
    : Effect.tryPromise({
      try: async () => {
        const socket = await Bun.udpSocket({ connect: { hostname: config.store.host, port: config.store.port } })
        const { address } = socket.address
        socket.close()
        return address
      },
      catch: (e) => new CommError({ reason: "rendezvous", message: `no local address routes to the store at ${config.store.host}; set MONARCH_HOSTNAME: ${(e as Error).message}`, cause: e }),
    })

/** All-reduces a one-element 1 over the world: proves every rank is connected. */
const sanityCheck = (native: Native, world: Comm) =>
  Effect.try({
    try: () => {
      using t = Tensor.empty(native, "f32", [1])
      k.fill(t, 1)
      world.allReduce(t, t, "sum")
      const got = new Float32Array(t.toHost().data.buffer)[0]
      if (got !== world.size) throw new Error(`sanity all_reduce gave ${got}, expected ${world.size}`)
    },
    catch: (e) => {
      const cause = commError(e)
      return new CommError({ reason: cause.reason, message: `start-up all_reduce failed: ${cause.message}`, cause: e })
    },
  })

/**
 * Meets the controller: reads its address (and token) from the environment or the store,
 * connects and says hello, retrying with backoff while no controller admits this worker: the
 * address is not in the store yet, the connection is refused, or the link closes before any
 * command (a controller that refused this worker or failed to start). A worker that is not
 * restartable gives up after connectTimeoutMs; a restartable one keeps waiting.
 */
const makeAttach = (config: WorkerConfig, store: StoreApi, device: string, log: (e: Effect.Effect<void>) => void) => {
  /** One try: a link that carried at least one command, or why not. */
  const attempt = <A>(use: (link: ControllerLink) => Effect.Effect<A>, waitMs: number) =>
    Effect.scoped(Effect.gen(function* () {
      const address = config.controllerAddress ?? decoder.decode(yield* store.get("controller", Duration.millis(waitMs)))
      const token = config.token ?? decoder.decode(yield* store.get("token", Duration.millis(waitMs)))
      const link = yield* connectController({
        address,
        hello: { rank: config.rank, world: config.world, pid: process.pid, token, device },
        onInvalid: (message) => log(Effect.logWarning(`refused a frame: ${message}`)),
      })
      yield* Effect.logInfo(`connected to the controller at ${address}`)
      const end = yield* use(link)
      // A restartable worker serves whoever comes next, so any link that ends is a session.
      return link.commandsSeen() || config.restartable ? { end } : { refused: `${address} closed the link before any command` }
    })).pipe(
      Effect.catchTag("LinkError", (e) => Effect.succeed({ refused: e.message })),
      Effect.catchTag("StoreTimeout", (e) => Effect.succeed({ refused: `no controller address in the store yet (${e.keys.join(", ")})` })),
    )

  return {
    /** Runs `use` on the first link a controller admits; returns how it ended. */
    session: <A>(use: (link: ControllerLink) => Effect.Effect<A>) =>
      Effect.gen(function* () {
        const deadline = Date.now() + config.connectTimeoutMs
        let backoffMs = 50
        let said = ""
        while (true) {
          const left = config.restartable ? 1000 : Math.max(1, deadline - Date.now())
          const tried = yield* attempt(use, Math.min(left, 1000))
          if ("end" in tried) return tried.end
          if (!config.restartable && Date.now() >= deadline)
            return yield* new LinkError({ message: `no controller admitted this worker within ${config.connectTimeoutMs} ms (MONARCH_CONNECT_TIMEOUT_MS); last: ${tried.refused}` })
          if (tried.refused !== said) yield* Effect.logInfo(`waiting for a controller: ${tried.refused}`)
          said = tried.refused
          yield* Effect.sleep(Duration.millis(backoffMs))
          backoffMs = Math.min(backoffMs * 2, 1000)
        }
      }),
  }
}

/**
 * Runs the worker until Exit, or until the controller leaves when it is not restartable; a
 * restartable worker then waits for the next controller, reading its address again each time.
 */
export const runWorker = (config: WorkerConfig) =>
  Effect.gen(function* () {
    const native = yield* Backend
    if (native.device === "cuda") native.check(native.shim.shim_set_device(config.localRank), "shim_set_device")
    yield* Effect.logInfo(`rank ${config.rank}/${config.world} on ${native.device} (${native.reason}), pid ${process.pid}`)

    const store = yield* Store
    const hostname = yield* glooHostname(config)
    const comms = yield* Communicators.open({ native, store, rank: config.rank, world: config.world, timeoutMs: config.commTimeoutMs, hostname })
    yield* sanityCheck(native, comms.world)
    yield* Effect.logInfo(`world communicator ready (${config.world} ranks, Gloo on ${hostname})`)

    const functions = new FunctionTable(config.functionRoots)
    const log = Effect.runSyncWith(yield* Effect.context<never>())
    const deps = { rank: config.rank, world: config.world, native, comms, functions }
    const attach = makeAttach(config, store, native.device, log)
    while (true) {
      const end = yield* attach.session((link) => runLoop(link, deps, { restartable: config.restartable }))
      if (end === "exit" || !config.restartable) {
        yield* Effect.logInfo(end === "exit" ? "exit" : "the controller went away; exiting")
        return
      }
      yield* Effect.logInfo("the controller went away; waiting for a new one")
    }
  })
