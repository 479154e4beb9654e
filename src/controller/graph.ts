/**
 * The controller's view of what is in flight: every command (by ident) with the ranks that
 * run it and the commands it depends on, and every ref with the command that last defined
 * it. Dependencies are per rank: a command's result on rank r depends on its inputs on r
 * (where r reads them) and on the same command on its peers (a collective's group, a send's
 * sender), and so on back. A root failure (reported by a rank, a rank lost, a command the
 * controller could not send) is recorded where it happened and poisons exactly the results
 * whose dependencies reach it; a result on a rank that never depends on it stays good.
 *
 * A command settles once every rank that runs it has passed its ident and its dependencies
 * have settled: it can no longer fail, its outcome per rank is fixed, and it leaves the graph
 * (refs keep pointing at it for that outcome).
 */
import { mayBePeerLoss } from "../comm/errors.ts"
import type { Failure } from "./errors.ts"
import type { CallSite } from "./sites.ts"

/**
 * How a command's result on one rank depends on the others': absent for a rank-local command
 * (each rank's result depends on its own inputs only).
 */
export interface Exchange {
  /** The ranks whose run of this same command rank r's result depends on (r need not be listed). */
  readonly peers: (rank: number) => ReadonlyArray<number>
  /** Whether rank r reads the inputs itself (a send's receivers do not: theirs come from the sender). */
  readonly reads: (rank: number) => boolean
}

/**
 * The members of each rank list, made once per list (a mesh's commands share its list), where
 * the invariant that a rank list holds no rank twice is checked: a node counts the ranks it
 * waits for instead of keeping a set of them per command.
 */
const memberSets = new WeakMap<ReadonlyArray<number>, ReadonlySet<number>>()
/** The last list looked up and its members: commands in a row are mostly on one mesh. */
let lastRanks: ReadonlyArray<number> | undefined, lastMembers: ReadonlySet<number> | undefined
const membersOf = (ranks: ReadonlyArray<number>): ReadonlySet<number> => {
  if (ranks === lastRanks) return lastMembers!
  let members = memberSets.get(ranks)
  if (members === undefined) {
    members = new Set(ranks)
    if (members.size !== ranks.length) throw new Error(`a command's rank list names a rank twice: [${ranks}]`)
    memberSets.set(ranks, members)
  }
  lastRanks = ranks
  lastMembers = members
  return members
}

/** Most commands depend on none and have no dependents: one frozen empty list for them all (a push into it throws). */
const NO_NODES: Node[] = Object.freeze([]) as unknown as Node[]

export class Node {
  /** How many of its ranks have not yet reported passing this ident (which: Graph.behind). */
  waiting: number
  readonly members: ReadonlySet<number>
  /** Root failures where they happened, by rank. */
  roots: Map<number, Failure> | undefined
  /** Whether some failure may be in its dependencies on some rank (false: nothing to look up). */
  tainted = false
  /** The commands that defined its inputs; dropped once it settles. */
  deps: Node[] = NO_NODES
  /** Unsettled dependencies. */
  pendingDeps = 0
  /** Whether it or an unsettled command it depends on (when it was added) is an exchange: only then can its result wait on another rank. */
  exchanged: boolean
  dependents: Node[] = NO_NODES
  settled = false
  /** Once settled: the failure of its result on each rank that has one. */
  outcome: Map<number, Failure> | undefined

  constructor(
    readonly ident: number,
    readonly ranks: ReadonlyArray<number>,
    readonly exchange: Exchange | undefined,
    /** What the command ran (a function name, or the message), for error reports. */
    readonly label: string,
    private readonly callSite: CallSite | undefined,
    readonly issuedAt: number,
  ) {
    this.members = membersOf(ranks)
    this.waiting = ranks.length
    this.exchanged = exchange !== undefined
  }

  /** Where in the controller program it was issued (formatted when first asked for). */
  get site(): string | undefined {
    return this.callSite?.format()
  }

  /** Records a root failure on `rank` (every rank when undefined); the first one per rank stays. */
  addRoot(failure: Failure, rank?: number): void {
    this.roots ??= new Map()
    for (const r of rank === undefined ? this.ranks : [rank]) if (!this.roots.has(r)) this.roots.set(r, failure)
  }
}

/**
 * Which failure a result reports when its dependencies hold several: one a worker reported
 * for its own reasons (or the controller's refusal) first, then a lost rank, then a deadline,
 * and last a CommError that may only be a lost peer seen from the other side of a collective
 * (so the error names the rank that died rather than the one that noticed); among equals, the
 * earliest command's, the root cause.
 */
const precedence = (f: Failure): number => {
  switch (f._tag) {
    case "RemoteError": return mayBePeerLoss(f.type, f.kind) ? 3 : 0
    case "ControllerError": return 0
    case "WorkerLost": return 1
    case "DeadlineExceeded": return 2
  }
}

interface Found {
  readonly failure: Failure
  readonly ident: number
}

const better = (a: Found | undefined, b: Found | undefined): Found | undefined => {
  if (a === undefined || b === undefined) return a ?? b
  const pa = precedence(a.failure), pb = precedence(b.failure)
  return pb < pa || (pb === pa && b.ident < a.ident) ? b : a
}

/** A (command, rank) pair's dependencies, visited once per walk. */
type Visit = (node: Node, rank: number) => void

/**
 * Walks the pairs (node, rank) that (from, rank) depends on through unsettled commands, `from`
 * included; `exchangesOnly`: only through dependencies that reach an exchange (see needs).
 */
const walk = (from: Node, ranks: Iterable<number>, visit: Visit, exchangesOnly = false): void => {
  const seen = new Map<Node, Set<number>>()
  // The peer lists already pushed, per node: a collective's ranks share one list (Mesh's
  // groupExchange), so its group is pushed once, not once per member (quadratic in the group).
  const spread = new Map<Node, Set<ReadonlyArray<number>>>()
  const stack: Array<[Node, number]> = []
  const push = (node: Node, rank: number) => {
    let at = seen.get(node)
    if (at === undefined) seen.set(node, (at = new Set()))
    if (at.has(rank)) return
    at.add(rank)
    stack.push([node, rank])
  }
  for (const r of ranks) push(from, r)
  while (stack.length > 0) {
    const [node, rank] = stack.pop()!
    visit(node, rank)
    if (node.settled) continue
    if (node.exchange) {
      const peers = node.exchange.peers(rank)
      let done = spread.get(node)
      if (done === undefined) spread.set(node, (done = new Set()))
      if (!done.has(peers)) {
        done.add(peers)
        for (const p of peers) if (node.members.has(p)) push(node, p)
      }
    }
    if (node.exchange && !node.exchange.reads(rank)) continue
    for (const dep of node.deps) if ((!exchangesOnly || dep.exchanged) && dep.members.has(rank)) push(dep, rank)
  }
}

/**
 * The unsettled commands by ident, in issue order: an array from the first ident still live
 * (idents are handed out in increasing order; a recording call's leaves holes), so adding one,
 * settling one and walking them from an ident cost no hashing. NOTE: a Map here (an insert
 * and a delete per command, walked from its start at every Status) was a tenth of the
 * controller's time per op. A walk survives deletes and the compaction that follows them,
 * as it goes by ident.
 */
export class LiveNodes {
  private slots: Array<Node | undefined> = []
  /** The ident of slots[0]. */
  private base = 0
  /** slots[head] is the first that may hold a node. */
  private head = 0
  size = 0

  set(ident: number, node: Node): void {
    if (this.size === 0) (this.slots = []), (this.base = ident), (this.head = 0)
    else if (this.head >= 1024 && this.head * 2 >= this.slots.length) {
      // Most of the array is settled commands' empty slots: drop them (amortised O(1) a command).
      this.slots = this.slots.slice(this.head)
      this.base += this.head
      this.head = 0
    }
    if (ident < this.base) {
      this.slots = [...new Array<undefined>(this.base - ident), ...this.slots]
      this.base = ident
    }
    const i = ident - this.base
    while (this.slots.length <= i) this.slots.push(undefined)
    if (this.slots[i] === undefined) this.size++
    this.slots[i] = node
    if (i < this.head) this.head = i
  }

  get(ident: number): Node | undefined {
    const i = ident - this.base
    return i >= this.head && i < this.slots.length ? this.slots[i] : undefined
  }

  has(ident: number): boolean {
    return this.get(ident) !== undefined
  }

  delete(ident: number): boolean {
    const i = ident - this.base
    if (i < this.head || i >= this.slots.length || this.slots[i] === undefined) return false
    this.slots[i] = undefined
    this.size--
    if (i === this.head) while (this.head < this.slots.length && this.slots[this.head] === undefined) this.head++
    return true
  }

  /** The first live ident at or after `from`, or undefined. */
  private nextFrom(from: number): number | undefined {
    for (let i = Math.max(from - this.base, this.head); i < this.slots.length; i++) if (this.slots[i] !== undefined) return this.base + i
    return undefined
  }

  /** Calls `f` on each node with an ident in [from, to), in order; `f` may settle (delete) nodes. */
  each(from: number, to: number, f: (node: Node) => void): void {
    for (let ident = this.nextFrom(from); ident !== undefined && ident < to; ident = this.nextFrom(ident + 1)) f(this.get(ident)!)
  }

  *values(): IterableIterator<Node> {
    for (let ident = this.nextFrom(this.base); ident !== undefined; ident = this.nextFrom(ident + 1)) yield this.get(ident)!
  }

  *keys(): IterableIterator<number> {
    for (const node of this.values()) yield node.ident
  }
}

export class Graph {
  /** Unsettled commands by ident, in issue order. */
  readonly live = new LiveNodes()
  private readonly refs = new Map<number, Node>()
  /** Per rank, the first ident it has not passed. */
  private readonly passedBelow: number[] = []
  /** The highest of passedBelow: a command with an ident at least this no rank has passed yet. */
  private passedMost = 0
  /** Ranks that are gone, with the failure a command that needs one gets. */
  private readonly lost = new Map<number, (node: Node) => Failure>()

  /**
   * Records a command: its ranks, how its ranks depend on each other (`exchange`), the refs it
   * reads, and the refs it (re)defines. On a rank already gone it fails at once.
   */
  add(ident: number, ranks: ReadonlyArray<number>, inputs: ReadonlyArray<number>, defines: ReadonlyArray<number>, label: string, site?: CallSite, exchange?: Exchange): Node {
    const node = new Node(ident, ranks, exchange, label, site, performance.now())
    // The usual case (no rank lost, a new ident) needs no look at each rank: O(1), not O(ranks), per command.
    if (this.lost.size > 0 || ident < this.passedMost) for (const r of ranks) {
      const gone = this.lost.size > 0 ? this.lost.get(r) : undefined
      if (gone) {
        node.addRoot(gone(node), r)
        node.tainted = true
        node.waiting--
      } else if (this.passed(r) > ident) node.waiting--
    }
    for (const id of inputs) {
      const dep = this.refs.get(id)
      if (!dep || node.deps.includes(dep)) continue
      if (dep.tainted) node.tainted = true
      if (!dep.settled) {
        if (dep.exchanged) node.exchanged = true
        if (node.deps === NO_NODES) node.deps = []
        node.deps.push(dep)
        if (dep.dependents === NO_NODES) dep.dependents = []
        dep.dependents.push(node)
        node.pendingDeps++
      } else if (dep.outcome) {
        if (node.deps === NO_NODES) node.deps = []
        node.deps.push(dep)
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

  /** Refs (re)defined by `node` after it was added (a recording call's results, once every part has read its inputs). */
  define(refs: ReadonlyArray<number>, node: Node): void {
    for (const id of refs) this.refs.set(id, node)
  }

  /** Forgets refs the controller deleted. */
  forget(refs: ReadonlyArray<number>): void {
    for (const id of refs) this.refs.delete(id)
  }

  node(ident: number): Node | undefined {
    return this.live.get(ident)
  }

  /** The first ident `rank` has not passed. */
  passed(rank: number): number {
    return this.passedBelow[rank] ?? 0
  }

  /** Whether `node` still waits for `rank` to pass it (as Node.waiting counts). */
  waitsOn(node: Node, rank: number): boolean {
    return !node.settled && node.members.has(rank) && node.ident >= this.passed(rank) && !this.lost.has(rank)
  }

  /** The ranks `node` still waits for, ascending. */
  behind(node: Node): number[] {
    return node.ranks.filter((r) => this.waitsOn(node, r)).sort((a, b) => a - b)
  }

  /** A root failure of a live command on `rank` (every rank when undefined). */
  fail(node: Node, failure: Failure, rank?: number): void {
    node.addRoot(failure, rank)
    this.taint(node)
  }

  /** Marks a node and its unsettled dependents as possibly failed. */
  private taint(node: Node): void {
    const stack = [node]
    while (stack.length > 0) {
      const n = stack.pop()!
      if (n.tainted && n !== node) continue
      n.tainted = true
      stack.push(...n.dependents)
    }
  }

  /** The failure the result of `node` on `rank` carries, if any (of those known so far). */
  failureAt(node: Node, ranks: Iterable<number>): Failure | undefined {
    if (!node.tainted) return undefined
    let found: Found | undefined
    walk(node, ranks, (n, r) => {
      const failure = n.settled ? n.outcome?.get(r) : n.roots?.get(r)
      if (failure) found = better(found, { failure, ident: "ident" in failure ? failure.ident : n.ident })
    })
    return found?.failure
  }

  /**
   * The ranks a result on `ranks` still waits for: for each, the highest ident of a command
   * in its dependencies that the rank has not passed. The result is final once each has.
   */
  needs(node: Node, ranks: Iterable<number>): Map<number, number> {
    const needs = new Map<number, number>()
    // Only exchanges bring in other ranks. A dependency on the same rank through none has a
    // lower ident than its dependent there, which the rank passes after it (idents pass in
    // order): it cannot raise that rank's need, so a chain of rank-local commands is not walked.
    walk(node, ranks, (n, r) => {
      if (this.waitsOn(n, r) && (needs.get(r) ?? -1) < n.ident) needs.set(r, n.ident)
    }, true)
    return needs
  }

  /** Rank `rank` has passed every ident below `firstUncompleted`. */
  advance(rank: number, firstUncompleted: number): void {
    const before = this.passed(rank)
    if (firstUncompleted <= before) return
    this.passedBelow[rank] = firstUncompleted
    if (firstUncompleted > this.passedMost) this.passedMost = firstUncompleted
    // A lost rank's commands stopped waiting for it when it was lost.
    if (this.lost.has(rank)) return
    // Settling deletes from `live` while this walks it. Those below `before` had stopped
    // waiting for this rank already.
    this.live.each(before, firstUncompleted, (node) => {
      if (node.members.has(rank)) {
        node.waiting--
        this.trySettle(node)
      }
    })
  }

  /** Rank `rank` is gone: every command it has not passed, now or later, fails there with `failure`. */
  lose(rank: number, failure: (node: Node) => Failure): void {
    const waited = [...this.live.values()].filter((node) => this.waitsOn(node, rank))
    this.lost.set(rank, failure)
    for (const node of waited) {
      node.waiting--
      this.fail(node, failure(node), rank)
      this.trySettle(node)
    }
  }

  isLost(rank: number): boolean {
    return this.lost.has(rank)
  }

  /** Whether any rank is lost. */
  get anyLost(): boolean {
    return this.lost.size > 0
  }

  private trySettle(first: Node): void {
    // Most calls (every command issued and every one passed) find it still waiting.
    if (first.settled || first.waiting > 0 || first.pendingDeps > 0) return
    // Most that settle (a Status settles a batch of them) are clean with no dependent left: no walk.
    if (!first.tainted && first.dependents.length === 0) {
      first.settled = true
      first.deps = NO_NODES
      this.live.delete(first.ident)
      return
    }
    const ready = [first]
    while (ready.length > 0) {
      const node = ready.pop()!
      if (node.settled || node.waiting > 0 || node.pendingDeps > 0) continue
      // Its dependencies have settled: each rank's outcome is final, and they can go.
      if (node.tainted) {
        const outcome = new Map<number, Failure>()
        for (const r of node.ranks) {
          const f = this.failureAt(node, [r])
          if (f) outcome.set(r, f)
        }
        node.outcome = outcome.size > 0 ? outcome : undefined
        node.tainted = node.outcome !== undefined
      }
      node.settled = true
      node.deps = NO_NODES
      this.live.delete(node.ident)
      for (const d of node.dependents) {
        d.pendingDeps--
        ready.push(d)
      }
      node.dependents = NO_NODES
    }
  }
}
