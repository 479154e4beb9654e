/**
 * The controller's view of what is in flight: every command (by ident) with the ranks that
 * run it and the commands it depends on, and every ref with the command that last defined
 * it. A root failure reported by any rank poisons its command and, through the edges,
 * everything that depends on it on every rank. A command settles once every rank that runs
 * it has passed its ident and its dependencies have settled: it can no longer fail, and
 * leaves the graph.
 */

/** A failure reported by a worker, attached to every command it poisons. */
export interface RootFailure {
  readonly ident: number
  readonly rank: number
  readonly type: string
  readonly message: string
  readonly frames: ReadonlyArray<{ readonly file: string; readonly line: number; readonly function: string }>
  /** Where in the user's program the failing command was issued. */
  readonly site: string | undefined
}

export class Node {
  failure: RootFailure | undefined
  /** Ranks that have not yet reported passing this ident. */
  readonly waiting: Set<number>
  /** Unsettled dependencies. */
  pendingDeps = 0
  readonly dependents: Node[] = []
  settled = false
  /** Called once, when the node settles. */
  readonly onSettle: Array<(node: Node) => void> = []

  constructor(
    readonly ident: number,
    readonly ranks: ReadonlyArray<number>,
    readonly site: string | undefined,
    readonly issuedAt: number,
  ) {
    this.waiting = new Set(ranks)
  }
}

export class Graph {
  /** Unsettled commands by ident, in issue order. */
  readonly live = new Map<number, Node>()
  /** Per ref id, the command that last defined it (kept after it settles, for its failure). */
  private readonly refs = new Map<number, Node>()
  /** Per rank, the first ident it has not passed. */
  private readonly passed = new Map<number, number>()

  /**
   * Records a command: its ranks, the refs it reads and the refs it (re)defines. It fails
   * at once when an input is already known to be poisoned.
   */
  add(ident: number, ranks: ReadonlyArray<number>, inputs: ReadonlyArray<number>, defines: ReadonlyArray<number>, site?: string): Node {
    const node = new Node(ident, ranks, site, performance.now())
    for (const r of ranks) if ((this.passed.get(r) ?? 0) > ident) node.waiting.delete(r)
    for (const id of inputs) {
      const dep = this.refs.get(id)
      if (!dep) continue
      if (dep.failure) node.failure ??= dep.failure
      if (!dep.settled && dep !== node) {
        dep.dependents.push(node)
        node.pendingDeps++
      }
    }
    for (const id of defines) this.refs.set(id, node)
    this.live.set(ident, node)
    this.trySettle(node)
    return node
  }

  /** The failure a ref carries, if the command that defined it failed or depends on one that did. */
  failureOf(ref: number): RootFailure | undefined {
    return this.refs.get(ref)?.failure
  }

  /** The node that defined a ref. */
  definer(ref: number): Node | undefined {
    return this.refs.get(ref)
  }

  /** Forgets refs the controller deleted. */
  forget(refs: ReadonlyArray<number>): void {
    for (const id of refs) this.refs.delete(id)
  }

  /** A root failure of `ident`: poisons it and everything downstream. */
  fail(failure: RootFailure): void {
    const node = this.live.get(failure.ident)
    if (node) this.poison(node, failure)
  }

  private poison(node: Node, failure: RootFailure): void {
    const stack = [node]
    while (stack.length > 0) {
      const n = stack.pop()!
      if (n.failure) continue
      n.failure = failure
      stack.push(...n.dependents)
    }
  }

  /** Rank `rank` has passed every ident below `firstUncompleted`. */
  advance(rank: number, firstUncompleted: number): void {
    if (firstUncompleted <= (this.passed.get(rank) ?? 0)) return
    this.passed.set(rank, firstUncompleted)
    for (const node of this.live.values()) {
      if (node.ident >= firstUncompleted) break
      if (node.waiting.delete(rank)) this.trySettle(node)
    }
  }

  /** Rank `rank` is gone: every live command that needs it fails with `failure`, then settles. */
  lose(rank: number, failure: (node: Node) => RootFailure): void {
    for (const node of [...this.live.values()]) {
      if (!node.waiting.has(rank)) continue
      this.poison(node, failure(node))
      node.waiting.delete(rank)
      this.trySettle(node)
    }
    this.passed.set(rank, Number.MAX_SAFE_INTEGER)
  }

  /** The ranks that have not passed `ident` yet. */
  behind(node: Node): number[] {
    return [...node.waiting]
  }

  private trySettle(first: Node): void {
    const ready = [first]
    while (ready.length > 0) {
      const node = ready.pop()!
      if (node.settled || node.waiting.size > 0 || node.pendingDeps > 0) continue
      node.settled = true
      this.live.delete(node.ident)
      for (const d of node.dependents) {
        d.pendingDeps--
        ready.push(d)
      }
      node.dependents.length = 0
      for (const f of node.onSettle) f(node)
      node.onSettle.length = 0
    }
  }
}
