/**
 * The controller's engine, below the Mesh API: it numbers commands and refs, batches what is
 * issued in one tick (or each FLUSH_EVERY messages of a longer burst) into one CommandGroup per
 * worker, releases refs in command order, tracks every command in the
 * dependency graph, completes a fetch once every rank its value depends on has passed what it
 * depends on (and no others), fails one that outlasts its deadline, turns worker reports and
 * lost workers into failures of exactly the results that need them, and reports commands that
 * hang. Once a rank is lost, the survivors are told (PeerLost), and a collective or send whose
 * group holds it is withheld from them (Withheld): it fails here at once, and no survivor waits
 * out its comm timeout for the lost rank.
 */
import { Effect, Result } from "effect"
import { encodeMessageParts } from "../protocol/codec.ts"
import type { ControllerMessage, Value, WorkerMessage } from "../protocol/messages.ts"
import { DEFAULT_RECORDING_LIMITS, readRecordingLimits, type RecordingLimits } from "../protocol/recordingLimits.ts"
import { HostTensor, Ref, type Device, type DType, type ErrorPayload, type SharedTensor } from "../protocol/values.ts"
import type { ControllerUploads } from "../net/uploads.ts"
import type { ProcessExit } from "../launcher/index.ts"
import { ControllerError, DeadlineExceeded, RemoteError, WorkerLost, type Failure } from "./errors.ts"
import { Graph, type Exchange, type Node } from "./graph.ts"
import { RecordingBudget } from "./compile/budget.ts"
import type { WorkerLink } from "./listener.ts"
import { Scopes } from "./lifetime.ts"
import { CallSite } from "./sites.ts"
import type { Sink } from "./sink.ts"
import type { Storage } from "./storage.ts"
import type { TensorHandle } from "./handles.ts"

/** Where a rank is: the command it is executing, or waiting in (or queued at). */
export interface RankAt {
  readonly rank: number
  readonly ident: number
  readonly label: string
}

/**
 * A command outstanding longer than `hangAfterMs`, the ranks that have not passed it, and the
 * command each of them is in: the first it has not passed. Workers report passing a command
 * before one that may hold them long (a user function, a collective, a send), so that is the
 * command they are executing or waiting in, not one they finished while their thread was held.
 */
export interface HangReport {
  readonly ident: number
  readonly label: string
  readonly site: string | undefined
  readonly waitingMs: number
  readonly behind: ReadonlyArray<number>
  readonly at: ReadonlyArray<RankAt>
}

/** A report as one line, for the log. */
export const describeHang = (r: HangReport): string => {
  const at = r.at.map((a) => `rank ${a.rank} is in command ${a.ident} (${a.label})`).join(", ")
  return `command ${r.ident} (${r.label}) outstanding for ${Math.round(r.waitingMs)} ms; ranks [${r.behind}] have not passed it${at ? `; ${at}` : ""}${r.site ? `; issued at ${r.site}` : ""}`
}

export interface CoreOptions {
  readonly world: number
  /** Report a command outstanding this long (default 30 s). */
  readonly hangAfterMs?: number
  /** Record where in the program each command was issued, for errors (default true). */
  readonly captureSites?: boolean
  readonly onHang?: (report: HangReport) => void
  /** A worker's ProtocolError reply, or a refused connection. */
  readonly onProblem?: (problem: string) => void
  /** How long to wait for a disconnected worker's exit status before failing its results. */
  readonly exitGraceMs?: number
  /** Fail a fetch not answered this long after it was issued (DeadlineExceeded); default none. */
  readonly deadlineMs?: number
  /** Commands a mesh may have in flight (issued, not yet passed by all its ranks) before a step waits (default MAX_IN_FLIGHT). */
  readonly maxInFlight?: number
  /**
   * Whether a tensor handle the program drops without release() is deleted on its workers
   * after GC (default true). Off, the registry only reports it (onLeak): for tests that show
   * a program releases everything deterministically.
   */
  readonly gcRelease?: boolean
  /** A tensor handle was garbage collected without release() (counted in Core.leaks too). */
  readonly onLeak?: (handle: string) => void
  /** The workers' checkpoint root as this process sees it (absolute), where exportFile writes a relative path. */
  readonly checkpointRoot?: string
  /** What a worker keeps of recordings (default: MONARCH_MAX_RECORDINGS and MONARCH_MAX_RECORDED_COMMANDS, as the workers read them). */
  readonly recordingLimits?: RecordingLimits
}

/**
 * Messages queued (counted once for all their ranks) after which a batch goes out at once
 * instead of at the next tick: a long synchronous burst of op calls then reaches the workers
 * in frames of this many while the program is still issuing, so they start early.
 */
export const FLUSH_EVERY = 1024

/** Default bound on a mesh's commands in flight: about a second of tiny ops. */
export const MAX_IN_FLIGHT = 1 << 18

/** A step waiting for a mesh's commands in flight to come within the bound. */
interface CapacityWaiter {
  readonly ranks: ReadonlyArray<number>
  readonly resume: (e: Effect.Effect<void>) => void
}

interface PendingFetch {
  readonly node: Node
  readonly values: Map<number, Value>
  /** Per rank, the highest ident its value depends on there (Graph.needs), fixed at issue. */
  readonly needs: ReadonlyMap<number, number>
  /**
   * Ranks of `needs` not yet past what it needs of them: a Status or FetchResult looks at the
   * fetch as a whole only once this is 0, so each costs O(1) per fetch, not a scan of `needs`
   * (which made a fetch from every rank quadratic in the ranks). A lost rank is not behind:
   * it never passes, so `lose` takes it off the count (and answers the fetch itself).
   */
  behind: number
  readonly resume: (e: Effect.Effect<ReadonlyArray<Value>, Failure | ControllerError>) => void
  /** Failed early (a lost worker, the deadline); kept until complete so late results are dropped quietly. */
  answered: boolean
  /** Its results may come after its ranks passed it (a checkpoint file written in the background): wait for them. */
  readonly late: boolean
  deadline: ReturnType<typeof setTimeout> | undefined
}

const sameMessages = (a: ReadonlyArray<WorkerMessage>, b: ReadonlyArray<WorkerMessage>): boolean =>
  a.length === b.length && a.every((m, i) => m === b[i])

/** The idents of one recording call, and where the failures of its commands go. */
interface IdentRange {
  readonly first: number
  readonly count: number
  readonly ranks: ReadonlyArray<number>
  /** Command `offset` of the call failed on `rank` at its root. */
  readonly fail: (rank: number, offset: number, error: ErrorPayload) => void
}

/** One rank's worker process. */
export interface WorkerInfo {
  readonly rank: number
  readonly pid: number
  /** The address it connected from ("local" over a Unix socket). */
  readonly host: string
  readonly device: Device
}

/** Whether a host tensor of at least `min` bytes lies anywhere in `v` (lists and plain objects). */
const holdsLarge = (v: Value, min: number): boolean => {
  if (v instanceof HostTensor) return v.data.byteLength >= min
  if (Array.isArray(v)) {
    for (let i = 0; i < v.length; i++) if (holdsLarge(v[i] as Value, min)) return true
    return false
  }
  if (v !== null && typeof v === "object" && Object.getPrototypeOf(v) === Object.prototype)
    for (const key in v) if (holdsLarge((v as Record<string, Value>)[key]!, min)) return true
  return false
}

export class Core implements Sink {
  readonly graph = new Graph()
  readonly world: number
  private nextIdent = 0
  /** Set by abandon(). */
  private abandoned = false
  private nextRefId = 1
  private readonly links: Array<WorkerLink | undefined>
  private readonly outbox: WorkerMessage[][]
  /**
   * The DeleteRefs last queued, while it is the last message of each of its ranks' queues:
   * releases right after it join it, so a step scope's releases go as one message (shared by
   * its ranks, so their batches still encode once).
   */
  private openDelete: { readonly msg: { readonly _tag: "DeleteRefs"; readonly refs: number[] }; readonly ranks: ReadonlyArray<number> } | undefined
  private flushQueued = false
  /** Messages queued since the last flush (see FLUSH_EVERY). */
  private queued = 0
  /**
   * Which ranks the next batch asks for a Status: every one (a step waiting for capacity), or
   * those a pending fetch waits on: a fetch from one rank of many costs one Status, not one per rank.
   */
  private statusWanted: "all" | Set<number> | undefined = undefined
  private readonly fetches = new Map<number, PendingFetch>()
  private readonly exits = new Map<number, ProcessExit>()
  private readonly hangReported = new Set<number>()
  private readonly captureSites: boolean
  /**
   * Where the Mesh API's commands go: this core, or compile's recorder while it records a step
   * (compile swaps it in and back; the recorder passes on what it does not keep).
   */
  sink: Sink = this
  /** Ident ranges taken by recording calls, with who routes their failures, in issue order. */
  private readonly ranges: IdentRange[] = []
  /** Frames sent and commands in them, for tests and benchmarks of batching. */
  readonly sent = { frames: 0, commands: 0 }
  /** Tensor handles garbage collected without release() (see CoreOptions.gcRelease). */
  leaks = 0
  /** The open step scopes (lifetime.ts): every tensor handle made now joins the innermost. */
  readonly scopes = new Scopes()
  readonly maxInFlight: number
  /** Messages queued after which a batch goes out at once (Infinity: only at the next tick; benchmarks compare the two). */
  flushEvery = FLUSH_EVERY
  private readonly waiters: CapacityWaiter[] = []
  /** The recordings defined on the workers, kept within what a worker holds (compile evicts through it). */
  readonly recordings: RecordingBudget
  /** Waits on the workers in progress (fetches, capacity waits), and the timer that keeps the process running meanwhile. */
  private waitsOnWorkers = 0
  private keepAlive: ReturnType<typeof setInterval> | undefined

  constructor(readonly options: CoreOptions) {
    this.world = options.world
    this.links = new Array(options.world).fill(undefined)
    this.outbox = Array.from({ length: options.world }, () => [])
    this.captureSites = options.captureSites ?? true
    this.maxInFlight = options.maxInFlight ?? MAX_IN_FLIGHT
    // A malformed environment stops the workers at start, naming it; here the defaults stand.
    const fromEnv = readRecordingLimits()
    this.recordings = new RecordingBudget(options.recordingLimits ?? ("limits" in fromEnv ? fromEnv.limits : DEFAULT_RECORDING_LIMITS))
  }

  // ---- links ------------------------------------------------------------------------------

  /** An admitted worker; false when its rank is out of range or already taken. */
  admit(link: WorkerLink): boolean {
    const { rank, world } = link.hello
    if (world !== this.world || rank < 0 || rank >= this.world || this.links[rank]) return false
    this.links[rank] = link
    return true
  }

  /** The workers' device, as their hellos said. */
  get device(): Device {
    return this.links.find((l) => l !== undefined)?.hello.device === "cuda" ? "cuda" : "cpu"
  }

  /** Each connected rank's worker, as its hello and its connection said. */
  get workers(): ReadonlyArray<WorkerInfo> {
    return this.links.flatMap((l) => (l === undefined ? [] : [{ rank: l.hello.rank, pid: l.hello.pid, host: l.host, device: l.hello.device === "cuda" ? "cuda" : "cpu" }]))
  }

  get connected(): number {
    return this.links.filter((l) => l !== undefined).length
  }

  onMessage(rank: number, msg: ControllerMessage): void {
    switch (msg._tag) {
      case "Status": {
        const before = this.graph.passed(rank)
        this.graph.advance(rank, msg.firstUncompletedIdent)
        const after = this.graph.passed(rank)
        // A lost rank's late Status counts for no fetch: lose took it off their counts.
        if (after > before && !this.graph.isLost(rank))
          for (const [ident, pending] of this.fetches) {
            const last = pending.needs.get(rank)
            if (last !== undefined && before <= last && last < after && --pending.behind === 0) this.tryFinish(ident)
          }
        this.wakeWaiters()
        return
      }
      case "FetchResult": {
        const pending = this.fetches.get(msg.ident)
        // A lost rank's last bytes can come after its exit was seen, and after that settled
        // the fetch (its process exit raced its socket): nothing waits for them any more. A
        // link admitted for the rank since (its slot taken again) is heard as any other.
        if (!pending) return this.graph.isLost(rank) && this.links[rank] === undefined ? undefined : this.options.onProblem?.(`rank ${rank} sent a FetchResult for unknown ident ${msg.ident}`)
        pending.values.set(rank, msg.value)
        // Once answered, only a late fetch still counts what comes (see tryFinish).
        if (pending.answered && !pending.late) return
        // Otherwise the fetch can finish once no rank it needs is behind (Status counts them
        // down); a late fetch already answered counts each result, to drop it when all came.
        if (pending.behind === 0 || pending.answered) this.tryFinish(msg.ident)
        return
      }
      case "RemoteFunctionFailed": {
        const span = this.ranges.find((s) => msg.ident >= s.first && msg.ident < s.first + s.count)
        if (span) return span.fail(rank, msg.ident - span.first, msg.error)
        const node = this.graph.node(msg.ident)
        if (!node || !node.ranks.includes(rank))
          return this.options.onProblem?.(`rank ${rank} reported a failure of ident ${msg.ident}, which is not live on it: ${msg.error.message}`)
        return this.graph.fail(node, new RemoteError({
          ident: msg.ident, rank, function: node.label, type: msg.error.type, reason: msg.error.message, kind: msg.error.reason, frames: msg.error.frames, site: node.site,
        }), rank)
      }
      case "ProtocolError":
        return this.options.onProblem?.(`rank ${rank} refused a command: ${msg.message}`)
      case "Restarted":
      case "WorkerHello":
      case "WorkerChallenge":
        return
    }
  }

  /** A process exit seen by the launcher (local meshes), for WorkerLost's status. */
  onExit(exit: ProcessExit): void {
    this.exits.set(exit.rank, exit)
    if (exit.status !== 0 || this.links[exit.rank] === undefined) this.lose(exit.rank)
  }

  /** A worker's link closed: its results fail (with its exit status when it comes soon). */
  onDisconnect(rank: number): void {
    this.links[rank] = undefined
    const grace = this.options.exitGraceMs ?? 0
    if (grace === 0 || this.exits.has(rank)) return this.lose(rank)
    setTimeout(() => this.lose(rank), grace).unref()
  }

  private lose(rank: number): void {
    if (this.graph.isLost(rank)) return
    this.links[rank] = undefined
    this.outbox[rank] = []
    const exit = this.exits.get(rank)
    this.graph.lose(rank, (node) => new WorkerLost({ rank, status: exit?.status, signal: exit?.signal ?? undefined, ident: node.ident }))
    // On its own frame, ahead of what is queued: a survivor acts on it even inside a command.
    for (const link of this.links) link?.send({ _tag: "PeerLost", rank })
    for (const pending of this.fetches.values()) {
      const last = pending.needs.get(rank)
      if (last !== undefined && this.graph.passed(rank) <= last) pending.behind--
    }
    for (const ident of [...this.fetches.keys()]) this.tryFinish(ident)
    this.wakeWaiters()
  }

  // ---- commands in flight -----------------------------------------------------------------

  /**
   * Commands issued that some rank of `ranks` has not passed yet, counted in idents (lost ranks
   * pass nothing more and are not waited for).
   */
  inFlight(ranks: ReadonlyArray<number>): number {
    let slowest = this.nextIdent
    for (const r of ranks) if (!this.graph.isLost(r)) slowest = Math.min(slowest, this.graph.passed(r))
    return this.nextIdent - slowest
  }

  /**
   * Succeeds once `ranks` have at most maxInFlight commands in flight: at once when they
   * have. NOTE: op calls are synchronous and cannot wait, so the bound is applied where a
   * program yields, between steps (lifetime.ts's inStep, Mesh.throttle); meanwhile every batch
   * asks for a Status (flush), so the wait ends as soon as the workers catch up, without
   * draining the pipeline.
   */
  whenCapacity(ranks: ReadonlyArray<number>): Effect.Effect<void> {
    return Effect.callback((resumed) => {
      if (this.inFlight(ranks) <= this.maxInFlight) return resumed(Effect.void)
      const { resume, release } = this.holdWhile(resumed)
      this.waiters.push({ ranks, resume })
      this.statusWanted = "all"
      this.scheduleFlush()
      return Effect.sync(release)
    })
  }

  /**
   * Keeps the process running until `resume` is called (or the wait is interrupted: `release`).
   * The workers' links and processes do not keep it running by themselves (holdsProcess), so a
   * program that ended without closing its controller's scope (a defect past its finalizers)
   * lets the process exit, taking its workers with it; a program waiting on them is held here.
   */
  private holdWhile<A, E>(resume: (e: Effect.Effect<A, E>) => void): { readonly resume: (e: Effect.Effect<A, E>) => void; readonly release: () => void } {
    if (this.waitsOnWorkers++ === 0) this.keepAlive = setInterval(() => {}, 1 << 30)
    let held = true
    const release = () => {
      if (!held) return
      held = false
      if (--this.waitsOnWorkers > 0) return
      clearInterval(this.keepAlive)
      this.keepAlive = undefined
    }
    return { resume: (e) => (release(), resume(e)), release }
  }

  private wakeWaiters(): void {
    for (let i = this.waiters.length - 1; i >= 0; i--) {
      const w = this.waiters[i]!
      if (this.inFlight(w.ranks) > this.maxInFlight) continue
      this.waiters.splice(i, 1)
      w.resume(Effect.void)
    }
  }

  /** A dropped handle was collected: deleted (gcRelease) or only reported (`handle` names it). */
  collected(ranks: ReadonlyArray<number>, id: number, handle: () => string): boolean {
    if (this.options.gcRelease ?? true) {
      this.sink.release(ranks, [id])
      return true
    }
    this.leaks++
    this.options.onLeak?.(handle())
    return false
  }

  // ---- issuing --------------------------------------------------------------------------

  /**
   * Where the program is issuing from. Called by an API method when the program calls it
   * (while the program's generator is on the stack), not when its Effect runs. `between`: the
   * library frames between that method and the user's (a typed op's wrapper, say); the stack
   * is captured that deep and no deeper (see CallSite.capture).
   */
  site(between = 0): CallSite | undefined {
    // Frames: CallSite.capture, this, the API method, `between` more, the user's (a tail call
    // that drops one of ours only leaves room for one more of the user's).
    return this.captureSites ? CallSite.capture(4 + between) : undefined
  }

  newRef(): Ref {
    return new Ref(this.nextRefId++)
  }

  /** Queues a message without an ident for `ranks`. */
  post(ranks: ReadonlyArray<number>, msg: WorkerMessage): void {
    if (msg._tag === "CallFunction") msg = this.shareHostTensors(ranks, msg)
    if (this.graph.anyLost) {
      for (const r of ranks) if (!this.graph.isLost(r)) this.outbox[r]!.push(msg)
    } else for (let i = 0; i < ranks.length; i++) this.outbox[ranks[i]!]!.push(msg)
    if (++this.queued >= this.flushEvery) this.flush()
    else this.scheduleFlush()
  }

  /**
   * Queues a command with an ident for `ranks`, tracked in the graph: `inputs` are the ref
   * ids it reads, `defines` those it (re)defines, `exchange` how its ranks depend on each
   * other (none: each rank's result depends on its own inputs only).
   */
  command(ranks: ReadonlyArray<number>, label: string, inputs: ReadonlyArray<number>, defines: ReadonlyArray<number>, site: CallSite | undefined, make: (ident: number) => WorkerMessage, exchange?: Exchange): Node {
    const ident = this.nextIdent++
    const node = this.graph.add(ident, ranks, inputs, defines, label, site, exchange)
    if (exchange !== undefined && this.graph.anyLost) this.postExchange(ranks, exchange, defines, ident, make(ident))
    else this.post(ranks, make(ident))
    return node
  }

  /**
   * Queues a command whose ranks exchange data after a rank was lost: a rank whose peers in it
   * hold a lost one gets Withheld instead (the graph has failed its result already, with the
   * lost rank's WorkerLost), so it does not wait for that rank.
   */
  private postExchange(ranks: ReadonlyArray<number>, exchange: Exchange, defines: ReadonlyArray<number>, ident: number, msg: WorkerMessage): void {
    const withheld = ranks.filter((r) => !this.graph.isLost(r) && exchange.peers(r).some((p) => this.graph.isLost(p)))
    if (withheld.length === 0) return this.post(ranks, msg)
    const sent = ranks.filter((r) => !withheld.includes(r))
    if (sent.length > 0) this.post(sent, msg)
    this.post(withheld, { _tag: "Withheld", ident, refs: defines.map((id) => new Ref(id)) })
  }

  /**
   * A command like `command`'s whose message differs per rank (`make(ident, rank)`), each rank
   * sent only its own: a host batch split by rows, say. A recording replays one message for
   * every rank, so compile's recorder refuses this (a ControllerError).
   */
  commandEach(ranks: ReadonlyArray<number>, label: string, inputs: ReadonlyArray<number>, defines: ReadonlyArray<number>, site: CallSite | undefined, make: (ident: number, rank: number) => WorkerMessage): Node {
    const ident = this.nextIdent++
    const node = this.graph.add(ident, ranks, inputs, defines, label, site)
    for (const r of ranks) if (!this.graph.isLost(r)) {
      const m = make(ident, r)
      this.outbox[r]!.push(m._tag === "CallFunction" ? this.shareHostTensors([r], m) : m)
    }
    if (++this.queued >= this.flushEvery) this.flush()
    else this.scheduleFlush()
    return node
  }

  /**
   * A host tensor's place in the upload segment the links of `ranks` share (src/net/uploads.ts),
   * written by `fill`, held until each of them has copied it out; undefined when it goes in the
   * command instead (a rank of another host, shared memory off, too small, no room). Before a
   * new segment is offered, what is queued goes out, so no command names a retired one after.
   */
  share(ranks: ReadonlyArray<number>, dtype: DType, shape: ReadonlyArray<number>, fill: (into: Uint8Array) => void): SharedTensor | undefined {
    const uploads = this.uploadsOf(ranks)
    return uploads?.place(ranks, dtype, shape, fill, () => this.flush())
  }

  /** The upload segments every one of `ranks`' links shares, if they share one. */
  private uploadsOf(ranks: ReadonlyArray<number>): ControllerUploads | undefined {
    const first = ranks.length === 0 ? undefined : this.links[ranks[0]!]?.uploads
    if (first === undefined) return undefined
    for (const r of ranks) if (this.links[r]?.uploads !== first) return undefined
    return first
  }

  /** A CallFunction for `ranks` (those not lost) with its large host tensors moved into their upload segment (the same message when none moved). */
  private shareHostTensors(ranks: ReadonlyArray<number>, msg: Extract<WorkerMessage, { _tag: "CallFunction" }>): WorkerMessage {
    const uploads = this.links[ranks[0]!]?.uploads
    // The common command holds no large host tensor: found by a walk that allocates nothing.
    if (uploads === undefined || !(holdsLarge(msg.args, uploads.minBytes) || holdsLarge(msg.kwargs, uploads.minBytes))) return msg
    let moved = false, live: ReadonlyArray<number> | undefined
    const swap = (v: Value): Value => {
      if (v instanceof HostTensor) {
        if (v.data.byteLength < uploads.minBytes) return v
        live ??= ranks.filter((r) => !this.graph.isLost(r))
        if (this.uploadsOf(live) !== uploads) return v
        const at = uploads.place(live, v.dtype, v.shape, (into) => into.set(v.data), () => this.flush())
        if (at === undefined) return v
        moved = true
        return at
      }
      if (Array.isArray(v)) {
        let out: Value[] | undefined
        for (let i = 0; i < v.length; i++) {
          const x = v[i] as Value, y = swap(x)
          if (y !== x) (out ??= [...v])[i] = y
        }
        return out ?? v
      }
      if (v !== null && typeof v === "object" && Object.getPrototypeOf(v) === Object.prototype) {
        let out: Record<string, Value> | undefined
        for (const key in v) {
          const x = (v as Record<string, Value>)[key]!, y = swap(x)
          if (y !== x) (out ??= { ...(v as Record<string, Value>) })[key] = y
        }
        return out ?? v
      }
      return v
    }
    const args = swap(msg.args) as ReadonlyArray<Value>, kwargs = swap(msg.kwargs) as Readonly<Record<string, Value>>
    return moved ? { ...msg, args, kwargs } : msg
  }

  /**
   * Fetches a value from `ranks`: completes once every rank that the value on `ranks` depends
   * on has passed what it depends on there (ranks outside those answer nothing and are not
   * waited for), with the value from each rank in order, or the failure it depends on (a lost
   * worker's at once). `deadlineMs` (default the core's) bounds the wait: then it fails with
   * DeadlineExceeded naming the ranks behind. With `late`, a rank's result may come after it
   * passed the command (work it finishes in the background); a rank lost before sending it
   * fails the fetch with WorkerLost.
   */
  fetch(ranks: ReadonlyArray<number>, inputs: ReadonlyArray<number>, label: string, site: CallSite | undefined, make: (ident: number) => WorkerMessage, deadlineMs = this.options.deadlineMs, late = false): Effect.Effect<ReadonlyArray<Value>, Failure | ControllerError> {
    return Effect.callback((resumed) => {
      // The command first: should it throw (a defect), no hold is left keeping the process.
      const node = this.command(ranks, label, inputs, [], site, make)
      const { resume, release } = this.holdWhile(resumed)
      const needs = this.graph.needs(node, ranks)
      let behind = 0
      for (const [rank, last] of needs) if (this.graph.passed(rank) <= last && !this.graph.isLost(rank)) behind++
      const pending: PendingFetch = { node, values: new Map(), needs, behind, resume, answered: false, deadline: undefined, late }
      this.fetches.set(node.ident, pending)
      // The ranks it waits on report their status after this batch, so the fetch settles
      // without waiting for the once-a-second Status.
      if (this.statusWanted !== "all") {
        const wanted = this.statusWanted ?? new Set<number>()
        for (const rank of needs.keys()) wanted.add(rank)
        this.statusWanted = wanted
      }
      this.tryFinish(node.ident)
      if (deadlineMs !== undefined && this.fetches.has(node.ident) && !pending.answered) {
        pending.deadline = setTimeout(() => this.expire(pending, deadlineMs), deadlineMs)
        pending.deadline.unref?.()
      }
      return Effect.sync(release)
    })
  }

  private tryFinish(ident: number): void {
    const pending = this.fetches.get(ident)
    if (!pending) return
    const { node, values, resume } = pending
    let complete = true, lostEarly = false
    for (const [rank, last] of pending.needs) {
      if (this.graph.passed(rank) > last) continue
      if (this.graph.isLost(rank)) lostEarly = true
      else complete = false
    }
    if (!complete) {
      // A lost worker's failure is final (nothing replaces a WorkerLost), so it is answered
      // now, not once the other ranks pass the fetch: one of them may be waiting out its comm
      // timeout in a rendezvous or collective with the dead rank. That holds for a rank lost
      // before the fetch was issued too (it is in no rank's needs then, only in the failure).
      if (pending.answered || !node.tainted) return
      const failure = this.graph.failureAt(node, node.ranks)
      if (failure === undefined || (!lostEarly && failure._tag !== "WorkerLost")) return
      pending.answered = true
      clearTimeout(pending.deadline)
      return resume(Effect.fail(failure))
    }
    if (pending.late) {
      // Results that come after the ranks passed it: kept until every live rank has sent its
      // own, even once failed, so a survivor's result (its file finished) is dropped quietly.
      const owed = node.ranks.filter((r) => !values.has(r) && !this.graph.isLost(r))
      if (pending.answered) {
        if (owed.length === 0) this.fetches.delete(ident)
        return
      }
      if (this.graph.failureAt(node, node.ranks) === undefined) {
        const lost = node.ranks.find((r) => !values.has(r) && this.graph.isLost(r))
        if (lost === undefined && owed.length > 0) return
        if (lost !== undefined) {
          const exit = this.exits.get(lost)
          pending.answered = true
          clearTimeout(pending.deadline)
          if (owed.length === 0) this.fetches.delete(ident)
          return resume(Effect.fail(new WorkerLost({ rank: lost, status: exit?.status, signal: exit?.signal ?? undefined, ident })))
        }
      }
    }
    this.fetches.delete(ident)
    clearTimeout(pending.deadline)
    if (pending.answered) return
    const failure = this.graph.failureAt(node, node.ranks)
    if (failure) return resume(Effect.fail(failure))
    const missing = node.ranks.filter((r) => !values.has(r))
    if (missing.length > 0) return resume(Effect.fail(new ControllerError({ reason: "no-result", message: `ranks [${missing}] passed fetch ${ident} without a result` })))
    resume(Effect.succeed(node.ranks.map((r) => values.get(r)!)))
  }

  /** A fetch's deadline passed before its value was final: it fails, naming the ranks behind and where each is. */
  private expire(pending: PendingFetch, deadlineMs: number): void {
    if (pending.answered || !this.fetches.has(pending.node.ident)) return
    const behind = [...pending.needs].filter(([rank, last]) => this.graph.passed(rank) <= last && !this.graph.isLost(rank)).map(([rank]) => rank).sort((a, b) => a - b)
    const at = behind.map((rank) => {
      const ident = this.graph.passed(rank)
      const node = this.graph.node(ident)
      return { rank, ident, label: node?.label }
    })
    pending.answered = true
    pending.resume(Effect.fail(new DeadlineExceeded({ ident: pending.node.ident, label: pending.node.label, deadlineMs, behind: at, site: pending.node.site })))
  }

  /**
   * Takes `count` consecutive idents for one call of a recording, whose failures (by offset
   * into the range) go to `fail`.
   */
  takeIdents(ranks: ReadonlyArray<number>, count: number, fail: IdentRange["fail"]): number {
    const first = this.nextIdent
    this.nextIdent += count
    // Ranges every rank has passed can get no more failures.
    while (this.ranges.length > 0 && this.ranges[0]!.ranks.every((r) => this.graph.passed(r) >= this.ranges[0]!.first + this.ranges[0]!.count || this.graph.isLost(r))) this.ranges.shift()
    this.ranges.push({ first, count, ranks, fail })
    return first
  }

  /**
   * Deletes refs on `ranks`, in command order: after the commands issued so far and before any
   * issued later, so the workers free the memory before the next commands allocate theirs (in
   * the same batch).
   */
  release(ranks: ReadonlyArray<number>, refs: ReadonlyArray<number>): void {
    if (refs.length === 0) return
    this.graph.forget(refs)
    const open = this.openDelete
    if (open !== undefined && open.ranks === ranks && this.lastQueuedEverywhere(ranks, open.msg)) {
      // Plain loops: a dropped handle's release comes here, one per handle.
      for (let i = 0; i < refs.length; i++) open.msg.refs.push(refs[i]!)
      return
    }
    const msg = { _tag: "DeleteRefs" as const, refs: [...refs] }
    this.openDelete = { msg, ranks }
    this.post(ranks, msg)
  }

  /** Whether `msg` is the last message queued for each of `ranks` that is not lost. */
  private lastQueuedEverywhere(ranks: ReadonlyArray<number>, msg: WorkerMessage): boolean {
    for (let i = 0; i < ranks.length; i++) {
      const queue = this.outbox[ranks[i]!]!
      if (queue[queue.length - 1] !== msg && !this.graph.isLost(ranks[i]!)) return false
    }
    return true
  }

  /** The live core keeps no note of handles made, tensors read or memory written (compile's recorder does). */
  made(_t: TensorHandle): void {}
  read(_t: TensorHandle): void {}
  wrote(_storage: Storage): void {}

  private scheduleFlush(): void {
    if (this.flushQueued) return
    this.flushQueued = true
    queueMicrotask(() => this.flush())
  }

  /**
   * Sends each worker what was queued for it, as one message or one CommandGroup: at the next
   * tick, or at once when flushEvery (FLUSH_EVERY) messages are queued.
   */
  flush(): void {
    this.flushQueued = false
    this.queued = 0
    this.openDelete = undefined
    const last = this.nextIdent - 1
    // Past half the bound, every batch asks where the workers are, so a step waiting for
    // capacity sees them catch up batch by batch.
    if (this.statusWanted !== "all" && this.nextIdent - this.slowestPassed() > this.maxInFlight / 2) this.statusWanted = "all"
    const wanted = this.statusWanted
    const status: WorkerMessage | undefined = wanted !== undefined && last >= 0 ? { _tag: "RequestStatus", ident: last } : undefined
    // Ranks of a mesh usually get the very same commands: encode such a batch once.
    let previous: { readonly queue: WorkerMessage[]; readonly parts: ReadonlyArray<Uint8Array> } | undefined
    for (let rank = 0; rank < this.world; rank++) {
      const link = this.links[rank]
      const queue = this.outbox[rank]!
      if (status && link && (wanted === "all" || wanted!.has(rank))) queue.push(status)
      this.outbox[rank] = []
      if (queue.length === 0 || !link) continue
      if (!previous || !sameMessages(queue, previous.queue)) {
        const parts = this.encodeBatch(rank, queue, last)
        if (parts === undefined) continue
        previous = { queue, parts }
      }
      link.sendEncoded(previous.parts)
      this.sent.frames++
      this.sent.commands += queue.length
    }
    this.statusWanted = undefined
  }

  /** The first ident the slowest connected rank has not passed. */
  private slowestPassed(): number {
    let slowest = this.nextIdent
    for (let r = 0; r < this.world; r++) if (this.links[r] !== undefined) slowest = Math.min(slowest, this.graph.passed(r))
    return slowest
  }

  /**
   * A batch as the parts of one frame. When it does not encode (a value the wire cannot carry
   * got past the Mesh's checks), only the commands that do not encode are left out, failing
   * with a ControllerError; the rest still go, with a RequestStatus so that the failed ones
   * settle. Dropping the whole batch would lose unrelated commands and hang their fetches.
   */
  private encodeBatch(rank: number, queue: ReadonlyArray<WorkerMessage>, last: number): ReadonlyArray<Uint8Array> | undefined {
    const batch = (ms: ReadonlyArray<WorkerMessage>): WorkerMessage => (ms.length === 1 ? ms[0]! : { _tag: "CommandGroup", commands: ms })
    const whole = encodeMessageParts(batch(queue))
    if (Result.isSuccess(whole)) return whole.success
    const sendable = queue.filter((m) => {
      const one = encodeMessageParts(m)
      if (Result.isSuccess(one)) return true
      this.refuseUnsendable(rank, m, one.failure.message)
      return false
    })
    if (last >= 0 && !sendable.some((m) => m._tag === "RequestStatus")) sendable.push({ _tag: "RequestStatus", ident: last })
    const rest = sendable.length === 0 ? undefined : encodeMessageParts(batch(sendable))
    if (rest === undefined || Result.isSuccess(rest)) return rest?.success
    this.options.onProblem?.(`a batch for rank ${rank} could not be encoded: ${rest.failure.message}`)
    return undefined
  }

  private refuseUnsendable(rank: number, m: WorkerMessage, why: string): void {
    const ident = m._tag !== "RequestStatus" && "ident" in m ? m.ident : undefined
    this.options.onProblem?.(`${m._tag}${ident === undefined ? "" : ` ${ident}`} for rank ${rank} could not be encoded: ${why}`)
    const node = ident === undefined ? undefined : this.graph.node(ident)
    if (node) this.graph.fail(node, new ControllerError({ reason: "unsendable", message: `command ${ident} (${node.label}) could not be sent: ${why}` }))
  }

  // ---- hangs ----------------------------------------------------------------------------

  /** Reports, once each, live commands older than hangAfterMs that some rank has not passed. */
  checkHangs(now = performance.now()): HangReport[] {
    const after = this.options.hangAfterMs ?? 30_000
    const hung: Array<{ readonly node: Node; readonly waitingMs: number; readonly behind: number[] }> = []
    for (const node of this.graph.live.values()) {
      const waitingMs = now - node.issuedAt
      if (waitingMs < after) break
      if (node.waiting === 0 || this.hangReported.has(node.ident)) continue
      this.hangReported.add(node.ident)
      hung.push({ node, waitingMs, behind: this.graph.behind(node) })
    }
    const behindAny = new Set<number>()
    for (const h of hung) for (const r of h.behind) behindAny.add(r)
    const at = this.ranksAt(behindAny)
    const reports = hung.map(({ node, waitingMs, behind }): HangReport => ({
      ident: node.ident, label: node.label, site: node.site, waitingMs, behind, at: behind.flatMap((r) => at.get(r) ?? []),
    }))
    for (const r of reports) this.options.onHang?.(r)
    return reports
  }

  /**
   * For each of `ranks`, the first live command it has not passed (none when it has passed
   * them all), in one walk of the live commands for all of them: many commands hung behind
   * the same ranks cost one walk, not one per command and rank.
   */
  private ranksAt(ranks: Set<number>): Map<number, RankAt> {
    const at = new Map<number, RankAt>()
    for (const node of this.graph.live.values()) {
      if (ranks.size === 0) break
      for (const rank of ranks)
        if (this.graph.waitsOn(node, rank)) {
          at.set(rank, { rank, ident: node.ident, label: node.label })
          ranks.delete(rank)
        }
    }
    return at
  }

  /**
   * A recovery gives these workers up (torchrun's, which it restarts): closing the controller then
   * sends them no Exit, so each ends failing as its link closes, and every node's agent, not
   * only the lost worker's, restarts its workers.
   */
  abandon(): void {
    this.abandoned = true
  }

  /** Sends Exit to every connected worker now, unless they were abandoned. */
  exit(): void {
    if (this.abandoned) return
    this.post(this.links.flatMap((l, r) => (l ? [r] : [])), { _tag: "Exit" })
    this.flush()
  }
}
