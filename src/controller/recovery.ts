/**
 * Recovery from a lost worker (Controller.local's or Controller.attach's `recover`): the
 * program hands its training to `ctl.supervise(body)`; when `body` fails because a worker was
 * lost, every worker of that set is killed (local) or torchrun restarts them (attach), a fresh
 * set of the same world starts (or attaches), the newest checkpoint of `recover.from`
 * is loaded onto a mesh of the shape it was saved from, the recovery is reported (which rank was
 * lost, the version and step resumed from), and `body` runs again with that state. The
 * Controller service stays the same object: its methods act on the current set of workers.
 */
import { Cause, Effect, Exit, Scope } from "effect"
import { existsSync, readFileSync } from "node:fs"
import { join } from "node:path"
import { LATEST, latestVersion, MANIFEST, parseManifest } from "../checkpoint/format.ts"
import { CheckpointError, load, type Loaded } from "./checkpoint.ts"
import type { ControllerApi, RecoveryFailure } from "./controller.ts"
import { StartError, type WorkerLost } from "./errors.ts"
import type { Mesh } from "./mesh.ts"

export interface RecoverOptions {
  /** The checkpoint directory the program saves into (relative to `checkpoints`): a recovery resumes from its LATEST. */
  readonly from: string
  /** How many times the workers may be replaced before the failure is the program's (default 3). */
  readonly maxRestarts?: number
  /** Told of each recovery; default: a line on stderr. */
  readonly onRecover?: (report: RecoveryReport) => void
}

/** A recovery: the rank whose loss caused it and where training resumed. */
export interface RecoveryReport {
  /** This recovery's number (1 for the first). */
  readonly restarts: number
  readonly lost: { readonly rank: number; readonly status: number | undefined; readonly signal: string | undefined }
  /** The version loaded and its state's `step` (when it has one); none when the directory had no checkpoint yet. */
  readonly version: string | undefined
  readonly step: number | undefined
  /** From noticing the loss to the checkpoint loaded on the new workers. */
  readonly ms: number
}

/** What `body` starts from: how many recoveries came before, and the checkpoint loaded (its state on `mesh`), if any. */
export interface Start {
  readonly restarts: number
  readonly resumed: (Loaded & { readonly mesh: Mesh }) | undefined
}

/** One set of workers and the API over them; `kill` ends them (Controller.local's), or nothing (torchrun's, which it restarts). */
export interface Workers {
  readonly api: ControllerApi
  readonly kill: () => void
}

/** supervise without recovery: the body runs once, from nothing. */
export const runOnce = <A, E>(body: (start: Start) => Effect.Effect<A, E>): Effect.Effect<A, E> => body({ restarts: 0, resumed: undefined })

/** The WorkerLost a failure carries, if the failure is (or is caused by) a lost worker. */
const lostIn = <E>(cause: Cause.Cause<E>): WorkerLost | undefined => {
  const e = Cause.findErrorOption(cause)
  return e._tag === "Some" && (e.value as { _tag?: unknown })._tag === "WorkerLost" ? (e.value as unknown as WorkerLost) : undefined
}

/**
 * The Controller of `recover`: starts the first set of workers (`start`, each in a scope of its
 * own), and a `supervise` that replaces them and resumes after a lost worker.
 */
export const recoverable = (
  o: { readonly world: number },
  recover: RecoverOptions,
  root: string | undefined,
  start: Effect.Effect<Workers, StartError, Scope.Scope>,
): Effect.Effect<ControllerApi, StartError, Scope.Scope> =>
  Effect.gen(function* () {
    if (root === undefined) return yield* new StartError({ message: "`recover` needs `checkpoints` (or MONARCH_CHECKPOINT_DIR): recovery loads the last checkpoint from there" })
    const launch = Effect.gen(function* () {
      const scope = yield* Scope.make()
      const workers = yield* start.pipe(Scope.provide(scope), Effect.onError(() => Scope.close(scope, Exit.void)))
      return { scope, workers }
    })
    let current = yield* launch
    yield* Effect.addFinalizer(() => Scope.close(current.scope, Exit.void))
    const api = () => current.workers.api

    /** The newest checkpoint of `recover.from`, loaded onto a mesh of the shape it was saved from. */
    const resume = Effect.gen(function* () {
      const dir = join(root, recover.from)
      if (!existsSync(join(dir, LATEST))) return undefined
      const version = latestVersion(join(dir, LATEST), readFileSync(join(dir, LATEST), "utf8"))
      const manifest = parseManifest(join(dir, version, MANIFEST), readFileSync(join(dir, version, MANIFEST), "utf8"))
      const mesh = yield* api().mesh(Object.fromEntries(manifest.mesh.names.map((n, i) => [n, manifest.mesh.sizes[i]!])))
      return { ...(yield* load(mesh, recover.from)), mesh }
    }).pipe(Effect.catchDefect((e) => Effect.fail(new CheckpointError({ message: `reading the last checkpoint of ${recover.from}: ${e instanceof Error ? e.message : String(e)}` }))))

    const report = recover.onRecover ?? ((r: RecoveryReport) => process.stderr.write(
      `monarch: rank ${r.lost.rank} was lost (${r.lost.signal ?? `status ${r.lost.status}`}); met ${o.world} new workers and resumed from ${r.version === undefined ? "the start (no checkpoint yet)" : `${recover.from}/${r.version}${r.step === undefined ? "" : ` (step ${r.step})`}`} in ${Math.round(r.ms)} ms (recovery ${r.restarts})\n`))

    const supervise = <A, E>(body: (start: Start) => Effect.Effect<A, E>): Effect.Effect<A, E | RecoveryFailure> =>
      Effect.gen(function* () {
        let restarts = 0
        let resumed: Start["resumed"] = yield* resume
        for (;;) {
          const exit = yield* Effect.exit(body({ restarts, resumed }))
          if (Exit.isSuccess(exit)) return exit.value
          const lost = lostIn(exit.cause)
          if (lost === undefined || restarts >= (recover.maxRestarts ?? 3)) return yield* Effect.failCause(exit.cause)
          const noticed = performance.now()
          restarts++
          current.workers.kill()
          yield* Scope.close(current.scope, Exit.void)
          current = yield* launch
          resumed = yield* resume
          const step = (resumed?.state as { step?: unknown } | undefined)?.step
          report({
            restarts, lost: { rank: lost.rank, status: lost.status, signal: lost.signal }, version: resumed?.version,
            step: typeof step === "number" ? step : undefined, ms: performance.now() - noticed,
          })
        }
      })

    return {
      get world() { return api().world },
      get device() { return api().device },
      get core() { return api().core },
      workers: () => api().workers(),
      mesh: (dims) => Effect.suspend(() => api().mesh(dims)),
      stream: () => Effect.suspend(() => api().stream()),
      send: (t, to, opts) => Effect.suspend(() => api().send(t, to, opts)),
      checkHangs: () => api().checkHangs(),
      supervise,
    } satisfies ControllerApi
  })
