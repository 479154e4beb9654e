/**
 * The launcher, torchrun-style: a store, then N processes with the environment torchrun
 * gives (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR/MASTER_PORT) plus the
 * original worker's STORE_HOSTNAME/STORE_PORT and the job token. Output lines get a rank
 * prefix; when one process fails the others are stopped, and the job's exit is that rank's.
 * src/launch.ts is its command line; the controller uses it to start a local mesh.
 */
import type { Subprocess } from "bun"
import { Context, Data, Deferred, Effect, Layer, type Scope } from "effect"
import { randomBytes } from "node:crypto"
import { mkdtempSync, rmSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { readToken } from "../net/token.ts"
import { startServer } from "../store/server.ts"

export class LaunchError extends Data.TaggedError("LaunchError")<{ readonly message: string }> {}

export interface LaunchOptions {
  readonly nproc: number
  /** The program and its arguments; a .ts or .js file runs under this Bun. */
  readonly command: ReadonlyArray<string>
  /** Extra environment for every process (on top of this process's). */
  readonly env?: Readonly<Record<string, string>>
  /** Address the store binds and processes are told (loopback by default). */
  readonly host?: string
  /** Store port; 0 (default) picks one. */
  readonly storePort?: number
  /** Where each output line goes; by default to this process's stdout/stderr with "[rank] ". */
  readonly onLine?: (rank: number, line: string, stream: "stdout" | "stderr") => void
  /** How long stopped processes get between SIGTERM and SIGKILL. */
  readonly graceMs?: number
  /**
   * When a process fails: stop the others (the default, as torchrun does), or keep them
   * running (a controller that supervises its workers and fails only what needed it).
   */
  readonly onFailure?: "stop-all" | "keep-going"
  /**
   * Whether the job alone keeps this process running (default true, as the command line
   * needs). False: its processes, their output and its store let this process exit once
   * nothing else holds it (Controller.local, whose program's own waits hold it), and they are
   * killed when it exits.
   */
  readonly holdsProcess?: boolean
}

/** How one process ended: its exit code, or 128 + signal number. */
export interface ProcessExit {
  readonly rank: number
  readonly status: number
  readonly signal: string | null
}

export interface Job {
  readonly store: { readonly host: string; readonly port: number }
  /** The token every process got as MONARCH_TOKEN. */
  readonly token: string
  readonly pids: ReadonlyArray<number>
  /** Completes when every process has exited: the first failure, or status 0 for all. */
  readonly done: Effect.Effect<ProcessExit>
  /** Calls back as each process exits (also for ones stopped by the launcher). */
  readonly onExit: (f: (exit: ProcessExit) => void) => void
  /** Sends a signal to every live process. */
  readonly signal: (signal: NodeJS.Signals) => void
}

const runnable = (command: ReadonlyArray<string>): string[] =>
  /\.(m?ts|m?js)$/.test(command[0] ?? "") ? [process.execPath, ...command] : [...command]

/** Splits a byte stream into lines for `line`, holding a partial last line until more comes. */
const pipeLines = async (stream: ReadableStream<Uint8Array>, line: (text: string) => void) => {
  const decoder = new TextDecoder()
  let pending = ""
  for await (const chunk of stream) {
    const lines = (pending + decoder.decode(chunk, { stream: true })).split("\n")
    pending = lines.pop()!
    for (const l of lines) line(l)
  }
  if (pending) line(pending)
}

const defaultOnLine = (rank: number, line: string, stream: "stdout" | "stderr") =>
  (stream === "stdout" ? process.stdout : process.stderr).write(`[${rank}] ${line}\n`)

/**
 * Starts the store and the processes for the scope's lifetime; closing the scope stops every
 * process still running (SIGTERM, then SIGKILL after the grace period) and the store.
 */
export const launch = (options: LaunchOptions): Effect.Effect<Job, LaunchError, Scope.Scope> =>
  Effect.gen(function* () {
    if (!Number.isSafeInteger(options.nproc) || options.nproc < 1) return yield* new LaunchError({ message: `--nproc must be at least 1, got ${options.nproc}` })
    if (options.command.length === 0) return yield* new LaunchError({ message: "no program to run" })
    const host = options.host ?? "127.0.0.1"
    const store = yield* Effect.acquireRelease(
      Effect.try({ try: () => startServer({ host, port: options.storePort ?? 0, holdsProcess: options.holdsProcess ?? true }), catch: (e) => new LaunchError({ message: `store: ${(e as Error).message}` }) }),
      (s) => Effect.sync(s.stop),
    )
    // The caller's token (MONARCH_TOKEN or MONARCH_TOKEN_FILE, in `env` or this process's), so that a controller given the same can attach.
    const given = readToken({ ...process.env, ...options.env })
    if ("problem" in given) return yield* new LaunchError({ message: given.problem })
    const token = given.token ?? randomBytes(16).toString("hex")
    const onLine = options.onLine ?? defaultOnLine
    const graceMs = options.graceMs ?? 5000
    const done = yield* Deferred.make<ProcessExit>()
    const listeners: Array<(e: ProcessExit) => void> = []
    const procs: Subprocess<"ignore", "pipe", "pipe">[] = []
    let remaining = options.nproc

    const stopAll = (signal: NodeJS.Signals) => {
      for (const p of procs) if (p.exitCode === null && p.signalCode === null) p.kill(signal)
    }
    const escalate = () => setTimeout(() => stopAll("SIGKILL"), graceMs).unref()

    const exited = (rank: number, p: Subprocess) => (status: number) => {
      const exit: ProcessExit = { rank, status, signal: p.signalCode === null ? null : String(p.signalCode) }
      for (const f of listeners) f(exit)
      remaining--
      if (status !== 0 && Deferred.doneUnsafe(done, Effect.succeed(exit)) && options.onFailure !== "keep-going") {
        stopAll("SIGTERM")
        escalate()
      }
      if (remaining === 0) Deferred.doneUnsafe(done, Effect.succeed({ rank, status: 0, signal: null }))
    }

    for (let rank = 0; rank < options.nproc; rank++) {
      const env = {
        ...process.env,
        ...options.env,
        RANK: String(rank),
        WORLD_SIZE: String(options.nproc),
        LOCAL_RANK: String(rank),
        LOCAL_WORLD_SIZE: String(options.nproc),
        STORE_HOSTNAME: host,
        STORE_PORT: String(store.port),
        MASTER_ADDR: host,
        MASTER_PORT: String(store.port),
        MONARCH_TOKEN: token,
      }
      const p = yield* Effect.try({
        try: () => Bun.spawn(runnable(options.command), { env, stdin: "ignore", stdout: "pipe", stderr: "pipe" }),
        catch: (e) => new LaunchError({ message: `starting rank ${rank} (${options.command[0]}): ${(e as Error).message}` }),
      })
      procs.push(p)
      if (options.holdsProcess === false) p.unref()
      void pipeLines(p.stdout, (l) => onLine(rank, l, "stdout"))
      void pipeLines(p.stderr, (l) => onLine(rank, l, "stderr"))
      void p.exited.then(exited(rank, p))
    }

    // A process that exits without closing the scope (a program that died past its finalizers) takes its job with it.
    const killOnExit = () => stopAll("SIGKILL")
    if (options.holdsProcess === false) process.on("exit", killOnExit)
    yield* Effect.addFinalizer(() => Effect.promise(async () => {
      process.off("exit", killOnExit)
      stopAll("SIGTERM")
      const kill = setTimeout(() => stopAll("SIGKILL"), graceMs)
      await Promise.all(procs.map((p) => p.exited))
      clearTimeout(kill)
    }))

    return {
      store: { host, port: store.port },
      token,
      pids: procs.map((p) => p.pid),
      done: Deferred.await(done),
      onExit: (f) => void listeners.push(f),
      signal: stopAll,
    } satisfies Job
  })

/** The token the caller gave, or a new one in a file of its own (MONARCH_TOKEN_FILE), removed with the scope. */
export const jobToken: Effect.Effect<{ readonly MONARCH_TOKEN_FILE?: string }, LaunchError, Scope.Scope> = Effect.gen(function* () {
  const given = readToken()
  if ("problem" in given) return yield* new LaunchError({ message: given.problem })
  if (given.token !== undefined) return {}
  const dir = yield* Effect.acquireRelease(
    Effect.sync(() => mkdtempSync(join(tmpdir(), "monarch-job-"))),
    (d) => Effect.sync(() => rmSync(d, { recursive: true, force: true })),
  )
  const file = join(dir, "token")
  writeFileSync(file, `${randomBytes(16).toString("hex")}\n`, { mode: 0o600 })
  return { MONARCH_TOKEN_FILE: file }
})

/**
 * Starting workers as a service, so a controller program can swap in its own way of
 * starting them (a cluster scheduler, containers) for `Controller.local`.
 */
export class Launcher extends Context.Service<Launcher, {
  readonly launch: (options: LaunchOptions) => Effect.Effect<Job, LaunchError, Scope.Scope>
}>()("monarch/Launcher") {
  /** Processes on this host, through `launch`. */
  static readonly layer = Layer.succeed(Launcher, { launch })
}
