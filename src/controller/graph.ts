/**
 * The controller's view of what is in flight: every command (by ident) with the ranks that
 * run it and the commands it depends on, and every ref with the command that last defined
 * it. A root failure reported by any rank poisons its command and, through the edges,
 * everything that depends on it on every rank. A command settles once every rank that runs
 * it has passed its ident and its dependencies have settled: it can no longer fail, and
 * leaves the graph (refs keep pointing at it for its outcome).
 */
import type { Failure } from "./errors.ts"

export class Node {
  failure: Failure | undefined
  /** Ranks that have not yet reported passing this ident. */
  readonly waiting: Set<number>
  /** Unsettled dependencies. */
  pendingDeps = 0
  readonly dependents: Node[] = []
  settled = false
  /** Run once, when the node settles. */
  readonly onSettle: Array<(node: Node) => void> = []

  constructor(
    readonly ident: number,
    readonly ranks: ReadonlyArray<number>,
    /** What the command ran (a function name, or the message), for error reports. */
    readonly label: string,
    /** Where in the controller program it was issued. */
    readonly site: string | undefined,
    readonly issuedAt: number,
  ) {
    this.waiting = new Set(ranks)
  }
}

export class Graph {
  /** Unsettled commands by ident, in issue order. */
  readonly live = new Map<number, Node>()
  private readonly refs = new Map<number, Node>()
  /** Per rank, the first ident it has not passed. */
  private readonly passed = new Map<number, number>()
  /** Ranks that are gone, with the failure a command that needs one gets. */
  private readonly lost = new Map<number, (node: Node) => Failure>()

  /**
   * Records a command: its ranks, the refs it reads, and the refs it (re)defines. It fails at
   * once when an input is already poisoned or one of its ranks is gone.
   */
  add(ident: number, ranks: ReadonlyArray<number>, inputs: ReadonlyArray<number>, defines: ReadonlyArray<number>, label: string, site?: string): Node {
    const node = new Node(ident, ranks, label, site, performance.now())
    for (const r of ranks) {
      const gone = this.lost.get(r)
      if (gone) {
        node.failure ??= gone(node)
        node.waiting.delete(r)
      } else if ((this.passed.get(r) ?? 0) > ident) node.waiting.delete(r)
    }
    for (const id of inputs) {
      const dep = this.refs.get(id)
      if (!dep) continue
      if (dep.failure) node.failure ??= dep.failure
      if (!dep.settled) {
        dep.dependents.push(node)
        node.pendingDeps++
      }
    }
    for (const id of defines) this.refs.set(id, node)
    this.live.set(ident, node)
    this.trySettle(node)
    return node
  }

  /** A new ref that stands for the same value as `of` (a borrow's alias). */
  alias(ref: number, of: number): void {
    const node = this.refs.get(of)
    if (node) this.refs.set(ref, node)
  }

  /** The failure a ref carries, if its command failed or depends on one that did. */
  failureOf(ref: number): Failure | undefined {
    return this.refs.get(ref)?.failure
  }

  /** Forgets refs the controller deleted. */
  forget(refs: ReadonlyArray<number>): void {
    for (const id of refs) this.refs.delete(id)
  }

  node(ident: number): Node | undefined {
    return this.live.get(ident)
  }

  /** A root failure of a live command: poisons it and everything downstream. */
  fail(node: Node, failure: Failure): void {
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
    // Settling deletes from `live` while this walks it, which Map iteration allows.
    for (const node of this.live.values()) {
      if (node.ident >= firstUncompleted) break
      if (node.waiting.delete(rank)) this.trySettle(node)
    }
  }

  /** Rank `rank` is gone: every command that needs it, now or later, fails with `failure`. */
  lose(rank: number, failure: (node: Node) => Failure): void {
    this.lost.set(rank, failure)
    for (const node of [...this.live.values()]) {
      if (!node.waiting.delete(rank)) continue
      this.fail(node, failure(node))
      this.trySettle(node)
    }
  }

  isLost(rank: number): boolean {
    return this.lost.has(rank)
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
      for (const f of node.onSettle.splice(0)) f(node)
    }
  }
}
