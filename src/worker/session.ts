/**
 * One worker session: the state the Python worker kept on `self` (env, borrows, idents),
 * what the handlers need to act (backend, communicators, functions, the controller link),
 * and the two rules every handler shares: `lookup` and `tryDefine`. Exit in restartable
 * mode replaces the session with a fresh one.
 */
import { Cause, Effect } from "effect"
import type { Native } from "../../ffi/native.ts"
import type { Stream } from "../../ffi/stream.ts"
import type { Tensor } from "../../ffi/tensor.ts"
import type { Communicators } from "../comm/communicators.ts"
import { BufferPool, DEFAULT_SPARE_BYTES } from "../net/buffers.ts"
import type { WorkerSegments } from "../net/shm.ts"
import type { WorkerUploads } from "../net/uploads.ts"
import type { DirectReads } from "./direct.ts"
import { Generator } from "../ops/generator.ts"
import type { ControllerMessage, DefineRecording, WorkerMessage } from "../protocol/messages.ts"
import { DEFAULT_RECORDING_LIMITS, type RecordingLimits } from "../protocol/recordingLimits.ts"
import type { Ref } from "../protocol/values.ts"
import { DependentOnError, toErrorPayload } from "./errors.ts"
import type { FunctionTable } from "./functions.ts"
import { InFlight } from "./inflight.ts"
import { RefEnv, resolveTree } from "./refs.ts"
import { freeSpares, type Prepared } from "./prepared.ts"
import type { Borrow } from "./streams.ts"

export interface Session {
  readonly rank: number
  readonly world: number
  readonly native: Native
  readonly env: RefEnv
  /** The collectives started and not yet settled (inflight.ts). */
  readonly inflight: InFlight
  /** Whether an all-reduce may run on the communication thread while later commands run (MONARCH_COMM_OVERLAP, default on). */
  readonly overlap: boolean
  /** Borrow id -> its state, or null when its creation failed (its steps are then no-ops). */
  readonly borrows: Map<number, Borrow | null>
  /** Recordings defined by DefineRecording, by id. */
  readonly recordings: Map<number, Recording>
  /** How many recordings, and commands in them, this worker keeps at most. */
  readonly recordingLimits: RecordingLimits
  readonly comms: Communicators
  readonly functions: FunctionTable
  /** Where checkpoint commands may write and read (MONARCH_CHECKPOINT_DIR); none: they are refused. */
  readonly checkpointRoot?: string | undefined
  /** Checkpoint files being written in the background; Exit waits for them. */
  readonly writing: Set<Promise<unknown>>
  /** Sends a message to the controller (queued; never blocks). */
  readonly send: (msg: ControllerMessage) => void
  /** Calls `fn` once everything sent so far has left the process (the socket took it, or the link closed). */
  readonly whenSent: (fn: () => void) => void
  /** Whether the link to the controller is still open (see LinkState). */
  readonly linkState: () => LinkState
  /** Recycled memory for fetched tensors' host copies, given back once the socket took them. */
  readonly hostBuffers: BufferPool
  /** The link's shared-memory segments (src/net/shm.ts), when it has any: kept across restarts, as the link is. */
  readonly segments?: WorkerSegments | undefined
  /** The controller's upload segment as this link maps it (src/net/uploads.ts), when it has one. */
  readonly uploads?: WorkerUploads | undefined
  /** The tensors the link read its frames' host tensors into (direct.ts). */
  readonly direct?: DirectReads | undefined
  firstUncompletedIdent: number
  lastSentStatus: number
  /** Set by Exit: the loop stops after the current command. */
  exiting: boolean
  /** This rank's random generator (a fresh session starts it again from the default seed). */
  readonly generator: Generator
  /** Coordinates in the most recently created mesh, for function contexts. */
  coords: Readonly<Record<string, number>>
  /** When the event loop last had a turn between commands (ioTurn). */
  lastIoTurn: number
  /** The commands of the group or recording being run, and the index of the one running (a Reduce looks at the next: collectives.ts). */
  batch: ReadonlyArray<WorkerMessage> | undefined
  at: number
}

/** A defined recording: its message, and the refs a call binds or defines, all forgotten when it ends. */
export interface Recording {
  readonly define: DefineRecording
  readonly scratch: ReadonlyArray<number>
  /** Per command: prepared for replays (prepared.ts) once a call has run it, null where it cannot be. */
  readonly prepared: Array<Prepared | null | undefined>
}

/**
 * The controller link as the loop sees it: open; lost (closed with no Exit received: the
 * controller died or dropped the worker); or ended (closed after an Exit came, the usual end
 * of an attached job). Once it is not open, queued commands are dropped: no one will read
 * their results.
 */
export type LinkState = "open" | "lost" | "ended"

/** Recycled host memory kept outside the memory limit: a quarter of the limit, at most DEFAULT_SPARE_BYTES. */
const spareBytesFor = (native: Native): number => {
  const limit = native.memoryUsage().limit
  return limit === 0 ? DEFAULT_SPARE_BYTES : Math.min(DEFAULT_SPARE_BYTES, Math.floor(limit / 4))
}

export const makeSession = (deps: Pick<Session, "rank" | "world" | "native" | "comms" | "functions" | "send" | "checkpointRoot"> & { readonly linkState?: () => LinkState; readonly recordingLimits?: RecordingLimits; readonly whenSent?: Session["whenSent"]; readonly overlap?: boolean; readonly segments?: WorkerSegments | undefined; readonly uploads?: WorkerUploads | undefined; readonly direct?: DirectReads | undefined }): Session => {
  const inflight = new InFlight()
  return {
  linkState: () => "open",
  recordingLimits: DEFAULT_RECORDING_LIMITS,
  whenSent: (fn) => fn(),
  overlap: true,
  ...deps,
  inflight,
  env: new RefEnv(inflight),
  hostBuffers: new BufferPool(spareBytesFor(deps.native)),
  borrows: new Map(),
  recordings: new Map(),
  writing: new Set(),
  firstUncompletedIdent: 0,
  lastSentStatus: 0,
  exiting: false,
  generator: new Generator(deps.rank),
  coords: {},
  lastIoTurn: performance.now(),
  batch: undefined,
  at: 0,
  }
}

/** How long commands may run back to back before the event loop gets a turn. */
const IO_TURN_MS = 50

/**
 * A turn of the event loop (a timer turn passes the socket poll) once commands have held it
 * IO_TURN_MS, so a closed link is seen between long commands, not after the whole backlog;
 * undefined, costing nothing, otherwise.
 */
export const ioTurn = (s: Session): Effect.Effect<void> | undefined => {
  const now = performance.now()
  if (now - s.lastIoTurn < IO_TURN_MS) return undefined
  return Effect.promise(() => new Promise<void>((resume) => setTimeout(resume, 0))).pipe(
    Effect.andThen(Effect.sync(() => void (s.lastIoTurn = performance.now()))),
  )
}

/** Whether the loop should take no more commands: Exit was run, or the link is closed. */
export const stopped = (s: Session): boolean => s.exiting || s.linkState() !== "open"

/** Ends a session: every ref released, every borrow event destroyed. */
export const closeSession = (s: Session): void => {
  s.inflight.drainNow()
  for (const b of s.borrows.values()) b?.destroy()
  s.borrows.clear()
  for (const r of s.recordings.values()) freeSpares(r.prepared)
  s.recordings.clear()
  s.env.clear()
  s.hostBuffers.clear()
}

/**
 * Sends Status when the first uncompleted ident moved since the last one sent. A collective in
 * flight is not complete: Status stays at the earliest one's ident until it is settled.
 */
export const sendStatus = (s: Session): void => {
  const first = Math.min(s.firstUncompletedIdent, s.inflight.earliest)
  if (first > s.lastSentStatus) {
    s.send({ _tag: "Status", firstUncompletedIdent: first })
    s.lastSentStatus = first
  }
}

/**
 * Before a command that may hold the thread for long (a user function, a collective, a send),
 * tells the controller that every command before `ident` is done: while the thread is held no
 * Status can go out, and a hang report would blame a command this rank finished long ago
 * instead of the one it is in. One Status when the last one sent is behind; nothing otherwise.
 */
export const announce = (s: Session, ident: number): void => {
  if (ident <= s.lastSentStatus) return
  s.firstUncompletedIdent = Math.max(s.firstUncompletedIdent, ident)
  sendStatus(s)
}

/**
 * Looks up every Ref in a tree (HostTensors and SharedTensors become device tensors, recorded in
 * `uploads`); throws the stored DependentOnError, or UnknownRef.
 */
export const lookup = (s: Session, tree: unknown, stream: Stream, uploads: Tensor[] = []): unknown =>
  resolveTree(s.env, tree, s.native, stream, uploads, s) // the session holds the link's HostSources

/**
 * What a handler body returns: nothing when it finished synchronously (the common case), or
 * the Effect that finishes it (a first import, a promise, a communicator to open).
 */
export type Body = () => Effect.Effect<void, unknown> | void

/**
 * Runs a handler body that defines `refs` for command `ident`. If the body fails because
 * an input was poisoned, `refs` get that same poison and nothing is sent (the controller
 * already knows the root). On any other failure, `refs` are poisoned with this ident and
 * RemoteFunctionFailed goes out: the one place that reports root failures. Either way the
 * command is then complete.
 *
 * NOTE: the body is plain code with a try/catch, not an Effect.gen of Effect.try steps:
 * measured, that cost 1.4 us per command against 0.15 us for this, and the command path
 * has about 3 us in all (bench/dispatch.ts).
 */
export const tryDefine = (s: Session, ident: number, refs: ReadonlyArray<Ref>, body: Body): Effect.Effect<void> =>
  Effect.suspend(() => tryDefineNow(s, ident, refs, body) ?? Effect.void)

/**
 * tryDefine run now: undefined when the command finished here (the common case), else the
 * Effect that finishes it (a poisoning that logs, or the body's own rest). For callers that
 * run many commands in a row (a recording's call) without an Effect per command.
 */
export const tryDefineNow = (s: Session, ident: number, refs: ReadonlyArray<Ref>, body: Body): Effect.Effect<void> | undefined => {
  const complete = () => {
    s.firstUncompletedIdent = ident + 1
  }
  let rest: Effect.Effect<void, unknown> | void = undefined
  try {
    rest = body()
  } catch (e) {
    complete()
    return poison(s, ident, refs, e)
  }
  if (rest === undefined) {
    complete()
    return undefined
  }
  return rest.pipe(
    Effect.catchCause((cause) =>
      Cause.hasInterruptsOnly(cause) ? Effect.failCause(cause as Cause.Cause<never>) : poison(s, ident, refs, Cause.squash(cause)),
    ),
    Effect.andThen(Effect.sync(complete)),
  )
}

/** Defines `refs` as poisoned; a root failure is also reported, and logged at info. */
export const poison = (s: Session, ident: number, refs: ReadonlyArray<Ref>, error: unknown): Effect.Effect<void> => {
  if (error instanceof DependentOnError) {
    for (const r of refs) s.env.define(r, error)
    return Effect.void
  }
  const root = new DependentOnError({ ident })
  for (const r of refs) s.env.define(r, root)
  const payload = toErrorPayload(error)
  s.send({ _tag: "RemoteFunctionFailed", ident, error: payload })
  return Effect.logInfo(`command ${ident} failed: ${payload.type}: ${payload.message}`)
}

/** Tells the controller a command without an ident could not be carried out. */
export const reject = (s: Session, message: string): void => s.send({ _tag: "ProtocolError", message })
