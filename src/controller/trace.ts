/**
 * What compile records while a step runs: Core hands it every command (and borrow step) it
 * would have sent, numbered from 0, with what each reads and defines, and every handle made
 * meanwhile. Nothing reaches the workers or the dependency graph. A fetch is refused; a
 * borrow made outside the step cannot be used inside it (its first use would happen once).
 */
import type { WorkerMessage } from "../protocol/messages.ts"
import { ControllerError } from "./errors.ts"
import { Node, type Exchange } from "./graph.ts"
import type { RemoteTensor } from "./handles.ts"
import type { CallSite } from "./sites.ts"
import type { Storage } from "./storage.ts"

/** One recorded command. */
export interface Traced {
  readonly ranks: ReadonlyArray<number>
  readonly label: string
  readonly inputs: ReadonlyArray<number>
  readonly defines: ReadonlyArray<number>
  readonly site: CallSite | undefined
  readonly exchange: Exchange | undefined
  readonly message: WorkerMessage
}

const BORROW_STEPS = new Set(["BorrowFirstUse", "BorrowLastUse", "BorrowDrop"])

export class Trace {
  readonly commands: Traced[] = []
  /** Every handle made while tracing, in order. */
  readonly handles: RemoteTensor[] = []
  /** Refs defined by the recorded commands, in the order first defined. */
  readonly defined = new Set<number>()
  /** The handles of the tensors the commands read, by ref (a replay checks those it captured are still alive). */
  readonly read = new Map<number, RemoteTensor>()
  /** The memory the recorded commands write in place (a view's is its base's): a replay moves its version too. */
  readonly written = new Set<Storage>()
  private idents = 0

  constructor(
    /** What the refusals name: compile(<name>). */
    readonly name: string,
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

  /** Takes the messages a recording holds (true); the rest (meshes, streams) go out as usual. */
  post(ranks: ReadonlyArray<number>, msg: WorkerMessage): boolean {
    if (msg._tag === "BorrowCreate") {
      this.commands.push({ ranks, label: "borrow", inputs: [msg.tensor.id], defines: [msg.result.id], site: this.site() ?? this.called, exchange: undefined, message: msg })
      this.defined.add(msg.result.id)
      return true
    }
    if (!BORROW_STEPS.has(msg._tag)) return false
    const borrow = (msg as { readonly borrow: number }).borrow
    if (!this.defined.has(borrow)) {
      if (msg._tag === "BorrowFirstUse") throw new ControllerError({ message: `compile(${this.name}): a borrow made outside the step cannot be used inside it (its first use would be recorded once and replayed on every call); borrow inside the step` })
      return false
    }
    this.commands.push({ ranks, label: msg._tag, inputs: [], defines: [], site: undefined, exchange: undefined, message: msg })
    return true
  }

  /** The refs of a release that exist outside the trace (the trace's own die with each call anyway). */
  external(refs: ReadonlyArray<number>): ReadonlyArray<number> {
    return refs.filter((id) => !this.defined.has(id))
  }

  refuseFetch(label: string): ControllerError {
    return new ControllerError({ message: `compile(${this.name}): ${label === "fetch" ? "a fetch" : `a fetch (${label})`} inside a recorded step is refused: a replay sends no fetch; return the tensor from the step and fetch it after the call` })
  }
}
