/**
 * The recorder: what compile records while a step runs, and running the step with it. A Recorder is
 * the sink (sink.ts) compile puts in Core's place for a trace: it keeps every command (and
 * borrow step) the step issues, numbered from 0, with what each reads and defines, and every
 * handle made meanwhile; nothing reaches the workers or the dependency graph. The other
 * messages (meshes, streams) it passes on to the sink below. A fetch, and a command whose
 * message differs per rank, are refused; a borrow made outside the step cannot be used inside it
 * (its first use would happen once). A release of a tensor that exists outside the step is held
 * (Held) until the call's CallRecording, which may read it. `recordStep` swaps the sink in for the
 * step and back after.
 */
import { Effect } from "effect"
import type { Value, WorkerMessage } from "../../protocol/messages.ts"
import type { Core } from "../core.ts"
import { ControllerError, type Failure } from "../errors.ts"
import { type Exchange, Node } from "../graph.ts"
import type { TensorHandle } from "../handles.ts"
import type { Sink } from "../sink.ts"
import { CallSite } from "../sites.ts"
import type { Storage } from "../storage.ts"
import { RemoteTensor } from "../tensor.ts"
import { type ObjectRead, Reader, stepArgs } from "./reader.ts"

/** One recorded command. */
export interface RecordedCommand {
  readonly ranks: ReadonlyArray<number>
  readonly label: string
  readonly inputs: ReadonlyArray<number>
  readonly defines: ReadonlyArray<number>
  readonly site: CallSite | undefined
  readonly exchange: Exchange | undefined
  readonly message: WorkerMessage
}

const BORROW_STEPS = new Set(["BorrowFirstUse", "BorrowLastUse", "BorrowDrop"])

/** The releases of tensors outside the step that its traces made: sent once the call's CallRecording is queued. */
export class Held {
  private releases: Array<{ readonly ranks: ReadonlyArray<number>; readonly refs: ReadonlyArray<number> }> = []

  constructor(private readonly below: Sink) {}

  hold(ranks: ReadonlyArray<number>, refs: ReadonlyArray<number>): void {
    this.releases.push({ ranks, refs })
  }

  /** Queues the releases held: the recording's call has been queued. */
  release(): void {
    const held = this.releases
    this.releases = []
    for (const { ranks, refs } of held) this.below.release(ranks, refs)
  }
}

export class Recorder implements Sink {
  readonly commands: RecordedCommand[] = []
  /** Every handle made while tracing, in order. */
  readonly handles: RemoteTensor[] = []
  /** Refs defined by the recorded commands, in the order first defined. */
  readonly defined = new Set<number>()
  /** The handles of the tensors the commands read, by ref (a replay checks those it captured are still alive). */
  readonly tensorsRead = new Map<number, RemoteTensor>()
  /** The memory the recorded commands write in place (a view's is its base's): a replay moves its version too. */
  readonly written = new Set<Storage>()
  private idents = 0

  constructor(
    /** What the refusals name: compile(<name>). */
    readonly name: string,
    /** Where what the trace does not keep goes (the live core). */
    readonly below: Sink,
    /** Where releases of tensors outside the step wait. */
    private readonly held: Held,
    /** Where the program is now (for borrow steps, issued without one). */
    private readonly site: () => CallSite | undefined,
    /**
     * Where the step was called: the site of a command whose own frame is gone (a tail call
     * such as `(x) => x.add(1)`, which the engine runs without a frame of its own).
     */
    private readonly called: CallSite | undefined,
  ) {}

  command(ranks: ReadonlyArray<number>, label: string, inputs: ReadonlyArray<number>, defines: ReadonlyArray<number>, site: CallSite | undefined, make: (ident: number) => WorkerMessage, exchange?: Exchange): Node {
    const ident = this.idents++
    this.commands.push({ ranks, label, inputs: [...inputs], defines: [...defines], site: site?.format() === undefined ? this.called : site, exchange, message: make(ident) })
    for (const id of defines) this.defined.add(id)
    // Stands in for the graph's node: nothing ever waits on it.
    return new Node(ident, ranks, exchange, label, site, 0)
  }

  /** Keeps the messages a recording holds (borrow steps); the rest (meshes, streams) go out as usual. */
  post(ranks: ReadonlyArray<number>, msg: WorkerMessage): void {
    if (msg._tag === "BorrowCreate") {
      this.commands.push({ ranks, label: "borrow", inputs: [msg.tensor.id], defines: [msg.result.id], site: this.site() ?? this.called, exchange: undefined, message: msg })
      this.defined.add(msg.result.id)
      return
    }
    if (!BORROW_STEPS.has(msg._tag)) return this.below.post(ranks, msg)
    const borrow = (msg as { readonly borrow: number }).borrow
    if (!this.defined.has(borrow)) {
      if (msg._tag === "BorrowFirstUse") throw new ControllerError({ reason: "not-recordable", message: `compile(${this.name}): a borrow made outside the step cannot be used inside it (its first use would be recorded once and replayed on every call); borrow inside the step` })
      return this.below.post(ranks, msg)
    }
    this.commands.push({ ranks, label: msg._tag, inputs: [], defines: [], site: undefined, exchange: undefined, message: msg })
  }

  /** A recording's commands are sent again on every call: its host values travel in them. */
  share(): undefined {
    return undefined
  }

  commandEach(...args: Parameters<Sink["commandEach"]>): Node {
    throw new ControllerError({ reason: "not-recordable", message: `${args[1]} with per-rank arguments cannot be recorded: a recording sends every rank the same commands` })
  }

  fetch(_ranks: ReadonlyArray<number>, _inputs: ReadonlyArray<number>, label: string): Effect.Effect<ReadonlyArray<Value>, Failure | ControllerError> {
    return Effect.fail(new ControllerError({ reason: "not-recordable", message: `compile(${this.name}): ${label === "fetch" ? "a fetch" : `a fetch (${label})`} inside a recorded step is refused: a replay sends no fetch; return the tensor from the step and fetch it after the call` }))
  }

  /** Holds the release of the refs that exist outside the trace (the trace's own die with each call anyway). */
  release(ranks: ReadonlyArray<number>, refs: ReadonlyArray<number>): void {
    const outside = refs.filter((id) => !this.defined.has(id))
    if (outside.length > 0) this.held.hold(ranks, outside)
  }

  made(t: TensorHandle): void {
    this.handles.push(t as RemoteTensor)
  }

  read(t: TensorHandle): void {
    this.tensorsRead.set(t.ref.id, t as RemoteTensor)
  }

  wrote(storage: Storage): void {
    this.written.add(storage)
  }
}

export interface Recorded<R> {
  readonly trace: Recorder
  readonly value: R
  /** What the step read of the objects it was given by identity. */
  readonly reads: ReadonlyArray<ObjectRead>
}

/** What a trace's retired handles say when used again (and how a second trace's use of one is told apart). */
export const madeInside = (name: string) => `was made inside compile(${name})'s step and not returned from it`

export const messageOf = (e: unknown): string => (e as { message?: string }).message ?? String(e)

/**
 * Runs the step with Core recording instead of sending, its replay parameters at `values`;
 * the trace's handles are retired after.
 */
export const recordStep = <A extends ReadonlyArray<unknown>, R, E, Rq>(core: Core, held: Held, name: string, step: (...args: A) => unknown, args: ReadonlyArray<unknown>, values: ReadonlyArray<number>, called: CallSite | undefined): Effect.Effect<Recorded<R>, E | ControllerError, Rq> =>
  Effect.suspend(() => {
    const trace = new Recorder(name, core.sink, held, () => core.site(3), called) // between a borrow's method and here: its post, Recorder.post, this
    const reader = new Reader()
    core.sink = trace
    const end = Effect.sync(() => {
      reader.done = true
      if (core.sink === trace) core.sink = trace.below
      for (const t of trace.handles) t.retire(`${t} ${madeInside(name)}: it lived only during that call`)
    })
    let body: Effect.Effect<R, E | ControllerError, Rq>
    try {
      const out = step(...(stepArgs(args, values, reader) as unknown as A))
      body = (Effect.isEffect(out) ? out : Effect.succeed(out)) as Effect.Effect<R, E, Rq>
    } catch (e) {
      body = e instanceof ControllerError ? Effect.fail(e) : Effect.die(e)
    }
    // Retired once the value is read: the calls return this call's handles in their place.
    return body.pipe(Effect.map((value) => ({ trace, value: reader.unwrap(value) as R, reads: reader.reads })), Effect.ensuring(end))
  })
