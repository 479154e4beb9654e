/**
 * The Controller service: what a program composes into its own Effect pipeline. Two layers
 * provide it: `Controller.local` starts workers here through the launcher (CPU or CUDA), and
 * `Controller.attach` waits for workers started elsewhere (torchrun), meeting them through the
 * store. Either way the workers connect to this process's listener with the job's token, which
 * attach takes from the environment on both sides (the store would give it to anyone).
 */
import { Context, Duration, Effect, Layer, type Scope } from "effect"
import { randomBytes } from "node:crypto"
import { mkdtempSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { existsSync } from "node:fs"
import { dirname, isAbsolute, join, resolve } from "node:path"
import { Launcher } from "../launcher/index.ts"
import { NDSlice } from "../protocol/ndslice.ts"
import type { Device } from "../protocol/values.ts"
import { parseAddress } from "../net/connection.ts"
import { readToken, tokenProblem } from "../net/token.ts"
import type { StoreApi } from "../store/api.ts"
import { readStoreFile } from "../store/addressFile.ts"
import { prefixStore } from "../store/prefix.ts"
import { mergeTraces, writeTrace } from "../trace/merge.ts"
import { Store } from "../store/service.ts"
import { Core, describeHang, type HangReport, type WorkerInfo } from "./core.ts"
import { ControllerError, StartError, type Failure } from "./errors.ts"
import type { CheckpointError } from "./checkpoint.ts"
import { MAX_PENDING_CONNECTIONS, Transport } from "./listener.ts"
import { foreignHandle, RemoteStream } from "./handles.ts"
import type { RemoteTensor } from "./tensor.ts"
import { createMesh, type Mesh } from "./mesh.ts"
import { recoverable, runOnce, type Workers, type RecoverOptions, type Start } from "./recovery.ts"

const WORKER = new URL("../worker.ts", import.meta.url).pathname

/**
 * The default function root of Controller.local: the folder of the program's entry file, where
 * its own modules sit. Not the working directory, which holds whatever the program was started
 * from (a repository's scripts, benchmarks, tools); none when the entry is not a file.
 */
const programFolder = (): ReadonlyArray<string> => (isAbsolute(Bun.main) && existsSync(Bun.main) ? [dirname(Bun.main)] : [])

export interface ControllerApi {
  readonly world: number
  /** The workers' device (cpu or cuda), as they said when they connected. */
  readonly device: Device
  /** Each rank's worker, in rank order: process id, the address it connected from, device. */
  readonly workers: () => ReadonlyArray<WorkerInfo>
  /**
   * The engine below the Mesh API (core.ts): what compile's calls record and replay through
   * (its sink), and whose counters tests and benchmarks read.
   */
  readonly core: Core
  /** A mesh over every rank, dims row-major in the order given, e.g. `{ dp: 2, tp: 2 }`. */
  readonly mesh: (dims: Readonly<Record<string, number>>) => Effect.Effect<Mesh, ControllerError>
  /** A new stream on every rank. */
  readonly stream: () => Effect.Effect<RemoteStream>
  /**
   * Sends a tensor from its mesh's ranks to another mesh's, rank i to rank i (the meshes
   * must be the same size); a rank sending to itself copies.
   */
  readonly send: (t: RemoteTensor, to: Mesh, opts?: { readonly stream?: RemoteStream }) => Effect.Effect<RemoteTensor, ControllerError>
  /** Reports, once each, commands outstanding longer than hangAfterMs (also sent to onHang). */
  readonly checkHangs: () => HangReport[]
  /**
   * Runs a training program that can be restarted: with Controller.local's `recover`, when a
   * worker is lost the workers are replaced by a fresh set of the same shape, the last
   * checkpoint in `recover.from` is loaded onto a mesh of the shape it was saved from, and
   * `body` runs again with it (`start.resumed`); otherwise `body` runs once.
   */
  readonly supervise: <A, E>(body: (start: Start) => Effect.Effect<A, E>) => Effect.Effect<A, E | RecoveryFailure>
}

/** What supervise can fail with besides the body's own errors: a recovery that could not start or load. */
export type RecoveryFailure = StartError | CheckpointError | Failure

export interface CommonOptions {
  /** Report a command outstanding this long (default 30 s). */
  readonly hangAfterMs?: number
  readonly onHang?: (report: HangReport) => void
  /** A worker's ProtocolError reply or a refused connection; default: printed on stderr. */
  readonly onProblem?: (problem: string) => void
  /**
   * While the workers are awaited, every PROGRESS_MS: what is awaited and what has been seen
   * (connected ranks, refusals, what the store holds); default: printed on stderr.
   */
  readonly onProgress?: (line: string) => void
  /** Record where each command was issued, for RemoteError.site (default true). */
  readonly captureSites?: boolean
  /** How long to wait for every worker to connect (default 60 s). */
  readonly startTimeoutMs?: number
  /** The listener's address; loopback by default. */
  readonly host?: string
  /**
   * Fail a fetch whose value is not final this long after it was issued with DeadlineExceeded,
   * naming the ranks behind (default none; FetchOptions.deadlineMs per fetch).
   */
  readonly deadlineMs?: number
  /** Commands a mesh may have in flight before inStep / Mesh.throttle wait (default MAX_IN_FLIGHT, core.ts). */
  readonly maxInFlight?: number
  /** Delete dropped tensor handles after GC (default true); off, they are only reported (onLeak, Core.leaks). */
  readonly gcRelease?: boolean
  readonly onLeak?: (handle: string) => void
}

export interface LocalOptions extends CommonOptions {
  readonly world: number
  /**
   * Record a timeline: every command's span on each rank and stream, merged when the layer
   * ends into this Chrome trace / Perfetto JSON file, with a viewer next to it (.html).
   * Default: MONARCH_TRACE; unset, nothing is recorded.
   */
  readonly trace?: string
  /** cpu (default), cuda or auto: MONARCH_DEVICE for the workers. */
  readonly device?: string
  /**
   * Roots user functions load from (the workers' MONARCH_FUNCTION_PATH); default the folder of
   * the program's entry file (`programFolder`).
   */
  readonly functionPath?: ReadonlyArray<string>
  /** More environment for the workers. */
  readonly env?: Readonly<Record<string, string>>
  /**
   * The workers' checkpoint root (their MONARCH_CHECKPOINT_DIR): checkpoint paths are relative
   * to it and no checkpoint command writes or reads outside it. Default: MONARCH_CHECKPOINT_DIR
   * here, else none (checkpoint commands are refused).
   */
  readonly checkpoints?: string
  /** Replace lost workers and resume from the last checkpoint (see ControllerApi.supervise). */
  readonly recover?: RecoverOptions
  /** Each line a worker prints; default: stderr with a rank prefix. */
  readonly onWorkerLine?: (rank: number, line: string) => void
}

export interface AttachOptions extends CommonOptions {
  readonly world: number
  /**
   * Merge the timeline the workers record into `dir` (their MONARCH_TRACE_DIR, a folder this
   * process sees too) into the Chrome trace `path`, with its viewer, when the layer ends.
   */
  readonly trace?: { readonly path: string; readonly dir: string }
  /**
   * Listen on this fixed address ("host:port", "unix:/path"), the workers' CONTROLLER_ADDR.
   * Default: an ephemeral port on `host`, published in the store for the workers to read.
   */
  readonly listen?: string
  /**
   * The store the workers use, where this controller publishes its address: `{ host, port }`
   * (torchrun's MASTER_ADDR / MASTER_PORT), or `{ file }`, the MONARCH_STORE_FILE that worker
   * rank 0 writes the store's address and prefix to (torchrun's c10d and --standalone, where
   * rank 0 hosts the store on a port torchrun picked). Omitted: no store; `listen` is needed.
   */
  readonly store?: { readonly host: string; readonly port: number } | { readonly file: string }
  /**
   * Key prefix the workers read (their MONARCH_STORE_PREFIX, under torchrun's agent prefix if
   * any): default "monarch", or the one in the store file.
   */
  readonly prefix?: string
  /**
   * Meet the workers torchrun restarts after a lost one, and resume from the last checkpoint
   * (see ControllerApi.supervise); needs `checkpoints`.
   */
  readonly recover?: RecoverOptions
  /** The workers' checkpoint root (their MONARCH_CHECKPOINT_DIR) as this process sees it (a shared folder); default MONARCH_CHECKPOINT_DIR. */
  readonly checkpoints?: string
  /**
   * The job token the workers were given, at least MIN_ATTACH_TOKEN_LENGTH characters; default
   * MONARCH_TOKEN or the file MONARCH_TOKEN_FILE names, as the workers read it. Never published in
   * the store: its protocol has no authentication.
   */
  readonly token?: string
}

/** Where the workers keep checkpoints, as this process sees it: `checkpoints`, else MONARCH_CHECKPOINT_DIR, as an absolute path. */
const checkpointRoot = (o: { readonly checkpoints?: string | undefined }): string | undefined => {
  const root = o.checkpoints ?? (process.env.MONARCH_CHECKPOINT_DIR || undefined)
  return root === undefined ? undefined : resolve(root)
}

/** An attach token is chosen by people, so a short (guessable) one is refused. */
export const MIN_ATTACH_TOKEN_LENGTH = 16

/** Where attachToken took the token from, for an error that blames it. */
const tokenSource = (o: Pick<AttachOptions, "token">): string =>
  o.token !== undefined ? "attach's `token`" : process.env.MONARCH_TOKEN ? "MONARCH_TOKEN" : `MONARCH_TOKEN_FILE=${process.env.MONARCH_TOKEN_FILE}`

/** The attach token from the options or the environment, or why there is none to use. */
const attachToken = (o: Pick<AttachOptions, "token">): Effect.Effect<string, StartError> => {
  const problem = o.token === undefined ? undefined : tokenProblem(o.token)
  const given = o.token === undefined ? readToken() : problem === undefined ? { token: o.token } : { problem }
  if ("problem" in given) return Effect.fail(new StartError({ message: given.problem }))
  if (given.token === undefined)
    return Effect.fail(new StartError({ message: "Controller.attach needs the job token: set MONARCH_TOKEN (or MONARCH_TOKEN_FILE) here and for the workers, or give `token`; it never goes through the store, which anyone who reaches it can read" }))
  if (given.token.length < MIN_ATTACH_TOKEN_LENGTH)
    return Effect.fail(new StartError({ message: `the job token has ${given.token.length} characters; use at least ${MIN_ATTACH_TOKEN_LENGTH} (e.g. openssl rand -hex 16)` }))
  return Effect.succeed(given.token)
}

const makeCore = (world: number, o: CommonOptions & { readonly checkpoints?: string }, exitGraceMs: number) =>
  new Core({
    world,
    ...(checkpointRoot(o) === undefined ? {} : { checkpointRoot: checkpointRoot(o) }),
    ...(o.hangAfterMs === undefined ? {} : { hangAfterMs: o.hangAfterMs }),
    ...(o.captureSites === undefined ? {} : { captureSites: o.captureSites }),
    ...(o.deadlineMs === undefined ? {} : { deadlineMs: o.deadlineMs }),
    ...(o.maxInFlight === undefined ? {} : { maxInFlight: o.maxInFlight }),
    ...(o.gcRelease === undefined ? {} : { gcRelease: o.gcRelease }),
    ...(o.onLeak === undefined ? {} : { onLeak: o.onLeak }),
    onHang: o.onHang ?? ((r) => console.error(`monarch: ${describeHang(r)}`)),
    onProblem: o.onProblem ?? ((p) => console.error(`monarch: ${p}`)),
    exitGraceMs,
  })

/** What the listener refused while the workers were awaited. */
interface Refusals {
  /** Workers of another world size (a start-up that cannot succeed). */
  readonly world: string[]
  /** Hellos without the job's token, by the rank they claimed: the first's pid and address, and how many came. */
  readonly token: Map<number, { readonly pid: number | undefined; readonly host: string; count: number }>
}

const noRefusals = (): Refusals => ({ world: [], token: new Map() })

/**
 * The listener the workers connect to (through the Transport), feeding the core. A worker of
 * another world size is refused and named in `refusals.world`; a handshake with another job token
 * is counted in `refusals.token` by the rank it claims, when that rank is in the world. It keeps
 * a whole world's connections while they do the handshake: every worker connects at once, and a
 * smaller bound would cut most of them off (to retry) in a world of hundreds.
 */
const listenFor = (core: Core, token: string, o: CommonOptions & { readonly listen?: string }, refusals: Refusals = noRefusals()) =>
  Effect.flatMap(Effect.service(Transport), (transport) => transport.listen({
    token,
    ...listenAt(o),
    // The program's waits on the workers hold the process (Core), not the links.
    holdsProcess: false,
    onWrongToken: (peer, host) => {
      // Anyone who reaches the listener can claim any rank before the proofs: only the world's
      // ranks are counted (a rank the wait may miss), so the map holds at most world entries.
      if (peer.rank >= core.world) return
      const seen = refusals.token.get(peer.rank)
      if (seen === undefined) refusals.token.set(peer.rank, { pid: peer.pid, host, count: 1 })
      else seen.count++
    },
    maxPendingConnections: Math.max(MAX_PENDING_CONNECTIONS, core.world),
    onWorker: (link) => {
      if (core.admit(link)) return
      const { rank, world } = link.hello
      const why = world !== core.world
        ? `worker rank ${rank} has WORLD_SIZE=${world}, but this controller was started for world ${core.world}`
        : `refused a second or out-of-range worker claiming rank ${rank} of ${world}`
      if (world !== core.world) refusals.world.push(why)
      core.options.onProblem?.(why)
      link.close()
    },
    onMessage: (rank, msg) => core.onMessage(rank, msg),
    onDisconnect: (rank) => core.onDisconnect(rank),
    onProblem: (p) => core.options.onProblem?.(p),
  })).pipe(Effect.mapError((e) => new StartError({ message: e.message })))

/** Where the listener binds: `listen` ("host:port" or "unix:/path"), else an ephemeral port on `host`. */
const listenAt = (o: CommonOptions & { readonly listen?: string }): { host?: string; port?: number; unix?: string } => {
  if (o.listen === undefined) return o.host === undefined ? {} : { host: o.host }
  const at = parseAddress(o.listen)
  return "unix" in at ? { unix: at.unix } : { host: at.hostname, port: at.port }
}

/** How often a wait for the workers says where it is. */
export const PROGRESS_MS = 5000

/** How long every worker still missing must have been refused for its token before the wait fails on it. */
const WRONG_TOKEN_GRACE_MS = 1000

/** How long a look at the store may take (a store that is gone must not hold the wait past its timeout). */
const STORE_LOOK_MS = 1500

/** The ranks not connected yet. */
const missingRanks = (core: Core): number[] => {
  const connected = new Set(core.workers.map((w) => w.rank))
  return Array.from({ length: core.world }, (_, r) => r).filter((r) => !connected.has(r))
}

/**
 * Waits until every rank has connected, saying every PROGRESS_MS what it waits for and what it
 * has seen (`seen`: what the store shows, bounded in time). `failed` ends the wait early with a
 * reason; so does every missing rank having said hello with another job token (`refusals`),
 * which `tokenSource` names this controller's source of. A wait that times out says what
 * `seen` shows then.
 */
const awaitWorkers = (core: Core, o: CommonOptions, waitingAt: string, failed: () => string | undefined, refusals?: Refusals, tokenSource?: string, seen: Effect.Effect<string> = Effect.succeed("")) =>
  Effect.gen(function* () {
    const timeoutMs = o.startTimeoutMs ?? 60_000
    const started = Date.now(), deadline = started + timeoutMs
    let nextProgress = started + PROGRESS_MS
    let allRefusedSince: number | undefined
    const progress = o.onProgress ?? ((line: string) => console.error(`monarch: ${line}`))
    const connected = () => `${core.connected} of ${core.world} workers connected${core.connected > 0 ? ` (ranks [${core.workers.map((w) => w.rank)}])` : ""}`
    while (core.connected < core.world) {
      const why = failed()
      if (why) return yield* new StartError({ message: why })
      const missing = missingRanks(core)
      if (refusals !== undefined && missing.every((r) => refusals.token.has(r))) {
        allRefusedSince ??= Date.now()
        if (Date.now() - allRefusedSince >= WRONG_TOKEN_GRACE_MS) {
          const who = missing.map((r) => {
            const { pid, host } = refusals.token.get(r)!
            return `rank ${r} (${pid === undefined ? "" : `pid ${pid}, `}${host})`
          }).join(", ")
          return yield* new StartError({ message: `wrong job token: worker ${who} holds a token other than this controller's (from ${tokenSource}); give the controller and every worker the same MONARCH_TOKEN or MONARCH_TOKEN_FILE` })
        }
      } else allRefusedSince = undefined
      if (Date.now() > deadline) return yield* new StartError({ message: `${connected()} within ${timeoutMs} ms${yield* seen}` })
      if (Date.now() >= nextProgress) {
        nextProgress += PROGRESS_MS
        const refused = refusals === undefined || refusals.token.size === 0 ? ""
          : `; refused handshakes with another job token from ranks [${[...refusals.token.keys()]}] (${[...refusals.token.values()].reduce((n, r) => n + r.count, 0)} in all)`
        progress(`waiting ${Math.round((Date.now() - started) / 1000)} s of ${Math.round(timeoutMs / 1000)} s for ranks [${missing}] at ${waitingAt}: ${connected()}${refused}${yield* seen}`)
      }
      yield* Effect.sleep("10 millis")
    }
  })

/** The API over a core whose workers are all connected, with the hang check running. */
const makeApi = (core: Core): Effect.Effect<ControllerApi, never, Scope.Scope> =>
  Effect.gen(function* () {
    const defaultStream = new RemoteStream(core, core.newRef())
    const all = Array.from({ length: core.world }, (_, r) => r)
    // One mesh per shape asked for: meshes are never deleted on the workers (Mesh.derive).
    const meshes = new Map<string, Mesh>()
    core.sink.post(all, { _tag: "CreateStream", result: defaultStream.ref, default: true })
    // A timer that does not keep the process running (see Core's holdWhile).
    const hangCheck = setInterval(() => core.checkHangs(), 1000)
    hangCheck.unref()
    yield* Effect.addFinalizer(() => Effect.sync(() => clearInterval(hangCheck)))
    return {
      world: core.world,
      device: core.device,
      workers: () => core.workers,
      core,
      mesh: (dims) => Effect.try({
        try: () => {
          const sizes = Object.values(dims)
          if (sizes.reduce((a, b) => a * b, 1) !== core.world) throw new ControllerError({ reason: "mesh", message: `mesh ${JSON.stringify(dims)} does not cover the ${core.world} ranks` })
          const key = JSON.stringify(Object.entries(dims))
          let mesh = meshes.get(key)
          if (mesh === undefined) meshes.set(key, (mesh = createMesh(core, Object.keys(dims), NDSlice.contiguous(sizes), defaultStream)))
          return mesh
        },
        catch: (e) => (e instanceof ControllerError ? e : new ControllerError({ reason: "thrown", message: String(e) })),
      }),
      stream: () => Effect.sync(() => {
        const s = new RemoteStream(core, core.newRef())
        core.sink.post(all, { _tag: "CreateStream", result: s.ref, default: false })
        return s
      }),
      // The tensor's own mesh sends it, once it is known to be this controller's.
      send: (t, to, opts) => (t.core === core ? t.mesh.send(t, to, opts) : Effect.fail(foreignHandle(t))),
      checkHangs: () => core.checkHangs(),
      supervise: runOnce,
    } satisfies ControllerApi
  })

export class Controller extends Context.Service<Controller, ControllerApi>()("monarch/Controller") {
  /**
   * Starts `world` workers through the Launcher for the layer's lifetime, and meets them
   * through the Transport. `Controller.local` provides both; use this to provide your own.
   */
  static readonly layerLocal = (o: LocalOptions): Layer.Layer<Controller, StartError, Launcher | Transport> =>
    Layer.effect(Controller, Effect.gen(function* () {
      if (o.recover === undefined) return (yield* startLocal(o)).api
      const services = yield* Effect.context<Launcher | Transport>()
      return yield* recoverable(o, o.recover, checkpointRoot(o), startLocal(o).pipe(Effect.provideContext(services)))
    }))

  /** Starts `world` workers on this host (our launcher, with its store) for the layer's lifetime. */
  static readonly local = (o: LocalOptions): Layer.Layer<Controller, StartError> =>
    Controller.layerLocal(o).pipe(Layer.provide(Layer.mergeAll(Launcher.layer, Transport.layer)))

  /**
   * Meets `world` workers started elsewhere (e.g. `torchrun --no_python bun src/worker.ts`):
   * publishes this controller's address in the Store (under `prefix`), unless the workers were
   * given it (`listen`), then waits for them through the Transport. The token comes from
   * `token` or the environment on both sides, never from the store. `Controller.attach`
   * provides both services.
   */
  static readonly layerAttach = (o: Omit<AttachOptions, "store">): Layer.Layer<Controller, StartError, Store | Transport> =>
    Layer.effect(Controller, Effect.flatMap(Effect.service(Store), (store) => attachRecoverable(o, store)))

  /**
   * `layerAttach` with a TCP store client (the store's address given, or read from the file
   * worker rank 0 writes) and the TCP transport; without `store`, only the listener.
   */
  static readonly attach = (o: AttachOptions): Layer.Layer<Controller, StartError> => {
    const timeoutMs = o.startTimeoutMs ?? 60_000
    if (o.store === undefined) {
      if (o.listen === undefined) return Layer.effect(Controller, Effect.fail(new StartError({ message: "Controller.attach needs `store` (where to publish its address) or `listen` (the workers' CONTROLLER_ADDR)" })))
      return Layer.effect(Controller, attachRecoverable(o, undefined)).pipe(Layer.provide(Transport.layer))
    }
    const given = o.store
    const located: Effect.Effect<{ host: string; port: number; prefix?: string }, StartError> = "file" in given
      ? readStoreFile(given.file, timeoutMs).pipe(Effect.mapError((e) => new StartError({ message: e.message })))
      : Effect.succeed({ host: given.host, port: given.port })
    return Layer.unwrap(Effect.map(located, (at) => {
      const timeout = Duration.millis(timeoutMs)
      const store = Store.layerClient({ host: at.host, port: at.port, timeout, connectTimeout: timeout }).pipe(
        Layer.catchTag("StoreError", (e) => Layer.effect(Store, Effect.fail(new StartError({ message: `store ${at.host}:${at.port}: ${e.message}` })))),
      )
      const prefix = o.prefix ?? at.prefix
      return Controller.layerAttach({ ...o, ...(prefix === undefined ? {} : { prefix }) }).pipe(Layer.provide(Layer.mergeAll(store, Transport.layer)))
    }))
  }
}

/**
 * One set of workers for Controller.local: the listener, the processes, their start-up, and the
 * API over them, for the scope's lifetime; `kill` ends every process at once (a recovery
 * replaces them).
 */
const startLocal = (o: LocalOptions): Effect.Effect<Workers, StartError, Launcher | Transport | Scope.Scope> =>
  Effect.gen(function* () {
    const launcher = yield* Launcher
    const core = makeCore(o.world, o, 1000)
    const token = randomBytes(16).toString("hex")
    const listener = yield* listenFor(core, token, o)
    const lines: string[][] = Array.from({ length: o.world }, () => [])
    const tracePath = o.trace ?? (process.env.MONARCH_TRACE || undefined)
    const traceDir = tracePath === undefined ? undefined : mkdtempSync(join(tmpdir(), "monarch-trace-"))
    const job = yield* launcher.launch({
      nproc: o.world,
      command: [WORKER],
      env: {
        MONARCH_LOG: process.env.MONARCH_LOG ?? "warn",
        ...o.env,
        CONTROLLER_ADDR: listener.address,
        MONARCH_TOKEN: token,
        MONARCH_DEVICE: o.device ?? process.env.MONARCH_DEVICE ?? "cpu",
        MONARCH_FUNCTION_PATH: (o.functionPath ?? programFolder()).join(":"),
        ...(checkpointRoot(o) === undefined ? {} : { MONARCH_CHECKPOINT_DIR: checkpointRoot(o) }),
        ...(traceDir === undefined ? {} : { MONARCH_TRACE_DIR: traceDir }),
      },
      onLine: (rank, line) => {
        lines[rank]!.push(line)
        if (lines[rank]!.length > 20) lines[rank]!.shift()
        ;(o.onWorkerLine ?? ((r, l) => process.stderr.write(`[worker ${r}] ${l}\n`)))(rank, line)
      },
      graceMs: 2000,
      onFailure: "keep-going",
      holdsProcess: false,
    }).pipe(Effect.mapError((e) => new StartError({ message: e.message })))
    let firstExit: string | undefined
    job.onExit((e) => {
      firstExit ??= `worker ${e.rank} exited with status ${e.status} during start-up:\n${lines[e.rank]!.join("\n")}`
      core.onExit(e)
    })
    yield* awaitWorkers(core, o, listener.address, () => firstExit)
    yield* Effect.addFinalizer(() => Effect.gen(function* () {
      core.exit()
      yield* job.done.pipe(Effect.timeout("5 seconds"), Effect.ignore)
      if (tracePath !== undefined && traceDir !== undefined) {
        yield* writeTimeline(tracePath, traceDir, o.world, 0)
        rmSync(traceDir, { recursive: true, force: true })
      }
    }))
    return { api: yield* makeApi(core), kill: () => job.signal("SIGKILL") }
  })

/**
 * attachWith, or with `recover` a controller that meets a new set of workers after a loss:
 * torchrun (`--max_restarts`) restarts the job's workers, which find this controller again at
 * the same address (`listen`, their CONTROLLER_ADDR) or through the store.
 */
const attachRecoverable = (o: Omit<AttachOptions, "store">, base: StoreApi | undefined) =>
  Effect.gen(function* () {
    if (o.recover === undefined) return yield* attachWith(o, base)
    const transport = yield* Effect.service(Transport)
    const root = o.checkpoints ?? (process.env.MONARCH_CHECKPOINT_DIR || undefined)
    // The workers are torchrun's to stop and restart: a recovery abandons them (no Exit, so every
    // node's agent sees its workers fail and restarts them) and waits for the new ones.
    const start = attachWith(o, base).pipe(Effect.map((api) => ({ api, kill: () => api.core.abandon() })), Effect.provideService(Transport, transport))
    return yield* recoverable(o, o.recover, root === undefined ? undefined : resolve(root), start)
  })

/** Attach over a store (publishing the address there) or none (the workers were given `listen`). */
const attachWith = (o: Omit<AttachOptions, "store">, base: StoreApi | undefined) =>
  Effect.gen(function* () {
    const core = makeCore(o.world, o, 0)
    const token = yield* attachToken(o)
    const refusals = noRefusals()
    const listener = yield* listenFor(core, token, o, refusals)
    const prefix = o.prefix ?? "monarch"
    const store = base === undefined ? undefined : prefixStore(prefix, base)
    if (store !== undefined) yield* store.set("controller", listener.address).pipe(Effect.mapError((e) => new StartError({ message: e.message })))
    const waitingAt = store === undefined ? listener.address : `${listener.address} (published as ${prefix}/controller in the store)`
    yield* awaitWorkers(core, o, waitingAt, () => refusals.world[0], refusals, tokenSource(o), base === undefined ? Effect.succeed("") : whereWorkersAre(base, prefix, o.world))
    yield* Effect.addFinalizer(() => Effect.gen(function* () {
      core.exit()
      if (o.trace !== undefined) yield* writeTimeline(o.trace.path, o.trace.dir, o.world, 10_000)
    }))
    return yield* makeApi(core)
  })

/**
 * Merges the ranks' timelines in `dir` into `path` (and its viewer), waiting up to `waitMs` for
 * every rank to have written its file (workers write it as they exit), and says where it is.
 */
const writeTimeline = (path: string, dir: string, world: number, waitMs: number) =>
  Effect.gen(function* () {
    const deadline = Date.now() + waitMs
    while (Date.now() < deadline && mergeTraces(dir, world).missing.length > 0) yield* Effect.sleep("50 millis")
    yield* Effect.sync(() => {
      const { trace, missing } = mergeTraces(dir, world)
      const viewer = writeTrace(path, trace)
      process.stderr.write(`monarch: wrote the timeline to ${path} (view: ${viewer})${missing.length ? `; ranks [${missing}] wrote none` : ""}\n`)
    })
  }).pipe(Effect.catchDefect((e) => Effect.sync(() => process.stderr.write(`monarch: could not write the timeline to ${path}: ${String(e)}\n`))))

/**
 * What the store shows of the workers, for a wait's progress and its timeout: whether the
 * workers' keys (each rank's world communicator address, `<prefix>/comm/world/<rank>`) are under
 * `prefix`, and if not, which of the usual prefixes holds them (TCPStore cannot list keys, so
 * the usual ones are probed); or that the store does not answer. At most STORE_LOOK_MS.
 */
const whereWorkersAre = (store: StoreApi, prefix: string, world: number): Effect.Effect<string> =>
  Effect.gen(function* () {
    const alive = yield* Effect.result(store.check([`${prefix}/controller`]))
    if (alive._tag === "Failure") return `; the store does not answer (${String((alive.failure as { message?: unknown }).message ?? alive.failure)})`
    const ours = prefix.split("/").at(-1) ?? "monarch"
    const candidates = [...new Set([prefix, "monarch", ours, ...[0, 1, 2, 3].flatMap((n) => [`/worker/attempt_${n}/${ours}`, `/worker/attempt_${n}/monarch`])])]
    const found: string[] = []
    for (const p of candidates) {
      const ranks: number[] = []
      for (let r = 0; r < Math.max(world, 8) && (yield* store.check([`${p}/comm/world/${r}`]).pipe(Effect.orElseSucceed(() => false))); r++) ranks.push(r)
      if (ranks.length > 0) found.push(`${p}/comm/world/{${ranks.join(",")}}`)
    }
    if (found.length === 0) return `; the store has no worker keys under "${prefix}" nor under the usual prefixes (${candidates.join(", ")}): have the workers reached this store?`
    const under = found.find((f) => f.startsWith(`${prefix}/comm/world/{`))
    if (under !== undefined) return `; the store has ${under}`
    return `; the store has no worker keys under "${prefix}" (prefix), it has: ${found.join(", ")}`
  }).pipe(Effect.timeoutOrElse({ duration: STORE_LOOK_MS, orElse: () => Effect.succeed(`; the store did not answer within ${STORE_LOOK_MS} ms`) }))
