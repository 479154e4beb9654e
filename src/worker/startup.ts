/**
 * The worker's start-up, in the order docs/design.md gives: the store (hosted on its own thread by
 * rank 0 when torchrun did not start one), the world communicator and a sanity all_reduce of
 * a one-element tensor, the controller link, then the command loop. The backend and the
 * store are services (backend.ts, src/store/service.ts); src/worker.ts provides them.
 */
import { Duration, Effect, Layer, type Scope } from "effect"
import type { Comm } from "../../ffi/comm.ts"
import type { Native } from "../../ffi/native.ts"
import * as k from "../../ffi/ops.ts"
import { Tensor } from "../../ffi/tensor.ts"
import { Backend } from "./backend.ts"
import { commError, Communicators } from "../comm/communicators.ts"
import { CommError } from "../comm/errors.ts"
import { StoreError, type StoreTimeout } from "../store/errors.ts"
import { writeStoreFile } from "../store/addressFile.ts"
import { TraceWriter } from "../trace/writer.ts"
import { makeClient } from "../store/client.ts"
import { prefixStore } from "../store/prefix.ts"
import { serveOnThread } from "../store/serverThread.ts"
import { Store } from "../store/service.ts"
import type { WorkerConfig } from "./config.ts"
import { FunctionTable } from "./functions.ts"
import { DirectReads } from "./direct.ts"
import { connectController, type ControllerUnproven, LinkError } from "./link.ts"
import { runLoop, type LoopEnd } from "./loop.ts"
import { applyMemoryLimit } from "./memory.ts"

const decoder = new TextDecoder()

/** The worker's store, seen under the job's prefix (and hosted here by rank 0 when it must be). */
export const workerStore = (config: WorkerConfig) =>
  Layer.effect(Store, Effect.gen(function* () {
    const { host, port, prefix, hostedByRank0 } = config.store
    if (hostedByRank0 && config.rank === 0) {
      yield* serveOnThread({ host, port })
      yield* Effect.logInfo(`hosting the store at ${host}:${port} (${config.slurmJob === undefined ? "torchrun" : "srun"} started none)`)
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
 * How a worker process ends (README, docs/protocol.md): 0 after an Exit, 1 when it failed (at
 * start-up, or a defect), LINK_LOST when its controller went away without an Exit and it is not
 * restartable, or when, restartable, it could reach neither a controller nor the store for
 * MONARCH_ORPHAN_TIMEOUT_MS.
 */
export const EXIT_STATUS = { exit: 0, failed: 1, linkLost: 3 } as const

/** How the worker ended: an Exit, or its controller gone for good. */
export type WorkerEnd = "exit" | "link lost"

/**
 * A failure to reach the controller or to read its address, or a peer there that did not prove
 * it holds the token: each is waited out, the address read again each time.
 */
type Unreachable = LinkError | ControllerUnproven | StoreError | StoreTimeout

/**
 * Runs the worker until Exit, or until the controller leaves when it is not restartable; a
 * restartable worker then waits for the next controller, reading its address again each time,
 * for as long as the store answers (or a controller does within orphanTimeoutMs).
 */
export const runWorker = (config: WorkerConfig): Effect.Effect<WorkerEnd, unknown, Backend | Store | Scope.Scope> =>
  Effect.gen(function* () {
    const native = yield* Backend
    const direct = new DirectReads(native)
    if (native.device === "cuda") native.check(native.shim.shim_set_device(config.deviceOrdinal), "shim_set_device")
    yield* Effect.logInfo(`rank ${config.rank}/${config.world} on ${native.device} (${native.reason}), pid ${process.pid}${config.slurmJob === undefined ? "" : `, SLURM job ${config.slurmJob}`}`)
    yield* Effect.logInfo(applyMemoryLimit(native, config))
    native.setThreads(config.cpuThreads)
    native.setBlockCache(config.blockCache[native.device])
    native.setCommShm(config.commShm)

    const store = yield* Store
    const hostname = yield* glooHostname(config)
    const comms = yield* Communicators.open({ native, store, rank: config.rank, world: config.world, timeoutMs: config.commTimeoutMs, hostname })
    yield* sanityCheck(native, comms.world)
    yield* Effect.logInfo(`world communicator ready (${config.world} ranks, Gloo on ${hostname})`)

    const functions = new FunctionTable(config.functionRoots)
    const trace = config.traceDir === undefined ? undefined : new TraceWriter(config.rank, config.traceDir)
    if (trace) yield* Effect.addFinalizer(() => Effect.sync(() => trace.write()).pipe(Effect.catchDefect((e) => Effect.logWarning(`could not write the trace: ${String(e)}`))))
    const log = Effect.runSyncWith(yield* Effect.context<never>())
    /** Whether "waiting for a new one" was said since the last controller was seen. */
    let waiting = false
    /** When a controller or the store last answered (restartable: the orphan timeout runs from it). */
    let lastAnswer = performance.now()
    /**
     * Not restartable: until a controller admits this worker (sends it a command), one not
     * listening yet, not in the store yet, or one that refused this worker or failed to start
     * is retried with backoff until connectTimeoutMs.
     */
    const connectDeadline = performance.now() + config.connectTimeoutMs
    let backoffMs = 50
    let said = ""
    const readAddress = (waitMs?: number) => Effect.gen(function* () {
      const wait = waitMs === undefined ? undefined : Duration.millis(waitMs)
      return config.controllerAddress ?? decoder.decode(yield* store.get("controller", wait))
    })
    // Restartable: a dead store makes each read retry its connection for the store timeout.
    const readBounded = !config.restartable
      ? Effect.suspend(() => readAddress(Math.max(1, Math.min(1000, connectDeadline - performance.now()))))
      : readAddress().pipe(Effect.timeoutOrElse({
        duration: config.orphanTimeoutMs,
        orElse: () => Effect.fail(new StoreError({ reason: "Connect", detail: `no controller address within ${config.orphanTimeoutMs} ms` })),
      }))
    while (true) {
      let address = config.controllerAddress ?? "the controller"
      let admitted = false
      const end: LoopEnd | Unreachable = yield* Effect.scoped(Effect.gen(function* () {
        address = yield* readBounded
        const link = yield* connectController({
          address,
          token: config.token,
          hello: { rank: config.rank, world: config.world, pid: process.pid, device: native.device },
          onInvalid: (message) => log(Effect.logWarning(`refused a frame: ${message}`)),
          direct,
          onPeerLost: (rank) => {
            log(Effect.logInfo(`the controller reported rank ${rank} lost: collectives and sends with it fail at once`))
            comms.peerLost(rank)
          },
        })
        waiting = false
        yield* Effect.logInfo(`connected to the controller at ${address}`)
        const ended = yield* runLoop(link, { rank: config.rank, world: config.world, native, comms, functions, checkpointRoot: config.checkpointRoot, recordingLimits: config.recordingLimits, overlap: config.commOverlap }, { restartable: config.restartable, ...(trace ? { trace } : {}) })
        admitted = link.commandsSeen()
        return ended
      })).pipe(
        // A controller not listening (yet) is waited for, its address read again each time,
        // since the next one may publish a new address or re-bind the same one.
        Effect.catchTags({
          LinkError: (e) => Effect.succeed(e),
          ControllerUnproven: (e) => Effect.succeed(e),
          StoreError: (e) => (config.restartable ? Effect.succeed(e) : Effect.fail(e)),
          StoreTimeout: (e) => Effect.succeed(e),
        }),
      )
      // An impostor is said on stderr each time, whatever the log level says of waiting.
      if (typeof end === "object" && end._tag === "ControllerUnproven") yield* Effect.logWarning(`${end.message}; reading the controller's address again`)
      if (end === "exit") {
        yield* Effect.logInfo("exit")
        return "exit"
      }
      if (!config.restartable) {
        if (end === "disconnected" && admitted) {
          yield* Effect.logInfo("the controller went away; exiting")
          return "link lost"
        }
        const why = end === "disconnected" ? `${address} closed the link before any command`
          : end._tag === "StoreTimeout" ? `no controller address in the store yet (${end.keys.join(", ")})` : end.message
        if (performance.now() >= connectDeadline)
          return yield* new LinkError({ message: `no controller admitted this worker within ${config.connectTimeoutMs} ms (MONARCH_CONNECT_TIMEOUT_MS); last: ${why}` })
        if (why !== said) yield* Effect.logInfo(`waiting for a controller: ${why}`)
        said = why
        yield* Effect.sleep(Duration.millis(backoffMs))
        backoffMs = Math.min(backoffMs * 2, 1000)
        continue
      }
      // The controller answered until it went away; a store that answers means the job lives.
      if (end === "disconnected") lastAnswer = performance.now()
      // The next controller's groups take the same store keys: none of this one's may be left.
      yield* comms.forget()
      const probe = Math.max(1, Math.min(2000, config.orphanTimeoutMs - (performance.now() - lastAnswer)))
      if (yield* store.check(["controller"]).pipe(Effect.timeout(probe), Effect.as(true), Effect.orElseSucceed(() => false))) lastAnswer = performance.now()
      else if (performance.now() - lastAnswer >= config.orphanTimeoutMs) {
        yield* Effect.logWarning(`neither a controller nor the store answered for ${config.orphanTimeoutMs} ms; exiting`)
        return "link lost"
      }
      if (!waiting) yield* Effect.logInfo(end === "disconnected" ? "the controller went away; waiting for a new one" : `waiting for a controller: ${end.message}`)
      waiting = true
      yield* Effect.sleep("500 millis")
    }
  })
