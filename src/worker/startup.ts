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
import { openComm } from "../comm/rendezvous.ts"
import type { StoreApi } from "../store/api.ts"
import { makeClient } from "../store/client.ts"
import { prefixStore } from "../store/prefix.ts"
import { serveOnThread } from "../store/serverThread.ts"
import { Store } from "../store/service.ts"
import type { WorkerConfig } from "./config.ts"
import { CommError } from "./errors.ts"
import { FunctionTable } from "./functions.ts"
import { connectController } from "./link.ts"
import { runLoop } from "./loop.ts"
import type { Comms } from "./session.ts"

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
      catch: (e) => new CommError({ message: `no local address routes to the store at ${config.store.host}; set MONARCH_HOSTNAME: ${(e as Error).message}`, cause: e }),
    })

/** Communicators through the store; the nth opening of a group key is the same on every member. */
const makeComms = (config: WorkerConfig, hostname: string, native: Native, store: StoreApi, world: Comm): Comms => {
  const opened = new Map<string, number>()
  return {
    world,
    open: (key, members) => {
      const n = opened.get(key) ?? 0
      opened.set(key, n + 1)
      return openComm({ native, store, key: `comm/${key}/${n}`, members, rank: config.rank, timeoutMs: config.commTimeoutMs, hostname })
    },
  }
}

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
    catch: (e) => new CommError({ message: `start-up all_reduce failed: ${(e as Error).message}`, cause: e }),
  })

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
    const world = yield* openComm({
      native, store, key: "comm/world", members: Array.from({ length: config.world }, (_, r) => r),
      rank: config.rank, timeoutMs: config.commTimeoutMs, hostname,
    })
    yield* sanityCheck(native, world)
    yield* Effect.logInfo(`world communicator ready (${config.world} ranks, Gloo on ${hostname})`)

    const comms = makeComms(config, hostname, native, store, world)
    const functions = new FunctionTable(config.functionRoots)
    const log = Effect.runSyncWith(yield* Effect.context<never>())
    /** Whether "waiting for a new one" was said since the last controller was seen. */
    let waiting = false
    while (true) {
      const address = config.controllerAddress ?? decoder.decode(yield* store.get("controller"))
      const end = yield* Effect.scoped(Effect.gen(function* () {
        const link = yield* connectController({
          address,
          hello: { rank: config.rank, world: config.world, pid: process.pid, token: config.token, device: native.device },
          onInvalid: (message) => log(Effect.logWarning(`refused a frame: ${message}`)),
        })
        waiting = false
        yield* Effect.logInfo(`connected to the controller at ${address}`)
        return yield* runLoop(link, { rank: config.rank, world: config.world, native, comms, functions }, { restartable: config.restartable })
      })).pipe(
        // Restartable: a controller not listening (yet) is waited for, its address read again
        // each time, since the next one may publish a new address or re-bind the same one.
        Effect.catchTag("LinkError", (e) => (config.restartable ? Effect.succeed(e) : Effect.fail(e))),
      )
      if (end === "exit" || (end === "disconnected" && !config.restartable)) {
        yield* Effect.logInfo(end === "exit" ? "exit" : "the controller went away; exiting")
        return
      }
      if (!waiting) yield* Effect.logInfo(end === "disconnected" ? "the controller went away; waiting for a new one" : `waiting for a controller: ${end.message}`)
      waiting = true
      yield* Effect.sleep("500 millis")
    }
  })
