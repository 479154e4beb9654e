/**
 * The autograd tape: what a forward pass records, and the backward pass that walks it. Pure and
 * generic over the tensor type (the controller binds it to its remote tensors in
 * src/controller/autograd.ts), so backward is nothing but ordinary op calls made through a
 * TapeOps; a remote failure inside it poisons what depends on it like any other command.
 *
 * - A node is one recorded call: its inputs (the edges backward follows), the tensors it holds
 *   (so that a program's release of one waits until backward has read it), the versions of the
 *   tensors its rule reads values of (torch's saved tensors: a backward through a node one of
 *   which was written in place since is refused, as torch refuses it), and its backward
 *   function. Registry ops make theirs from their declared rule; anything else (a
 *   collective, a custom gradient) puts one on the tape through `tapeCall`.
 * - Backward runs nodes in reverse order of recording once every consumer has given its
 *   gradient, sums gradients that meet, and yields each target's gradient as soon as nothing
 *   more can add to it (the gradient generator). Each node is consumed as it runs: its saved
 *   tensors are let go at once, and intermediate gradients and a rule's temporaries are released
 *   as soon as they are used (the tape owns those; it never releases what the program made).
 */
import type { TensorMeta } from "../ops/meta.ts"

/** What the tape needs of a tensor. */
export interface TapeTensor<Self extends TapeTensor<Self>> {
  readonly meta: TensorMeta | undefined
  /** How many times its memory was written in place (shared with its views). */
  readonly version: number
  /** Its place on the tape: set when it requires grad or was made from one that does. */
  autograd: Entry<Self> | undefined
  /** Keeps it alive past a release() until letGo(). */
  hold(): void
  letGo(): void
  release(): void
}

/** The ops the tape itself needs, and how it reports a refusal. */
export interface TapeOps<T> {
  /** The gradient of a root: ones of its shape and dtype. */
  ones(like: T): T
  zeros(like: T): T
  add(a: T, b: T): T
  /** g summed to `to`'s shape and cast to its dtype (broadcasting and promotion undone). */
  fit(g: T, to: TensorMeta): T
  copy(t: T): T
  /** Runs f, returning what it made: everything made is the tape's to release. */
  track<A>(f: () => A): { readonly value: A; readonly made: ReadonlyArray<T> }
  refuse(reason: "autograd" | "modified-inplace", message: string): Error
}

/** A recorded call's backward: the gradient of each input (undefined where `needs` is false or there is none). */
export type NodeBackward<T> = (grad: T, needs: ReadonlyArray<boolean>) => ReadonlyArray<T | undefined>

let sequence = 0

/** Where a call was made, formatted only when a message needs it. */
export interface Site {
  format(): string | undefined
}

export class TapeNode<T extends TapeTensor<T>> {
  readonly seq = sequence++
  consumed = false
  /** Its output's handle (until released) and the unconsumed nodes that read it. */
  users = 1
  /** The versions of `checked` when it was recorded. */
  private readonly versions: ReadonlyArray<number>

  constructor(
    /** What made it ("ops.mul", "reduce sum over tp", ...), for messages. */
    readonly name: string,
    readonly inputs: ReadonlyArray<T>,
    readonly backward: NodeBackward<T>,
    private saved: ReadonlyArray<T>,
    /** The tensors whose values its rule reads (torch's saved tensors), each checked against its version now. */
    private readonly checked: ReadonlyArray<T>,
    readonly site: Site | undefined,
  ) {
    this.versions = checked.map((t) => t.version)
    for (const t of saved) t.hold()
    for (const t of inputs) {
      const node = t.autograd?.node
      if (node) node.users++
    }
  }

  /** A tensor it reads that was written in place since it was recorded: the tensor and its versions then and now. */
  modified(): { readonly tensor: T; readonly then: number; readonly now: number } | undefined {
    for (let i = 0; i < this.checked.length; i++) {
      const t = this.checked[i]!
      if (t.version !== this.versions[i]) return { tensor: t, then: this.versions[i]!, now: t.version }
    }
    return undefined
  }

  /** Lets go of what it saved; a second backward through it is refused. */
  consume(): void {
    if (this.consumed) return
    this.consumed = true
    const saved = this.saved
    this.saved = []
    for (const t of saved) t.letGo()
  }

  /** One user fewer: with none left it can never run, so it is consumed, and so are the nodes only it reads. */
  unused(): void {
    for (const stack: TapeNode<T>[] = [this]; stack.length > 0;) {
      const n = stack.pop()!
      if (n.consumed || --n.users > 0) continue
      n.consume()
      for (const t of n.inputs) if (t.autograd?.node) stack.push(t.autograd.node)
    }
  }
}

/** A tensor's place on the tape. */
export class Entry<T extends TapeTensor<T>> {
  /** The gradient backward() accumulated (a leaf's .grad). */
  grad: T | undefined = undefined

  constructor(
    /** A leaf the program asked gradients for (requiresGrad_). */
    readonly leaf: boolean,
    /** The call that made it (for a non-leaf). */
    readonly node: TapeNode<T> | undefined,
  ) {}

  /** Its handle was released: the node that made it loses a user. */
  released(): void {
    this.node?.unused()
  }
}

let enabled = true

/** Whether ops go on the tape now (not inside noGrad or a backward pass). */
export const isTaping = (): boolean => enabled

/** Runs f off the tape (torch.no_grad()); synchronous code only, like every op call. */
export const noGrad = <A>(f: () => A): A => {
  const before = enabled
  enabled = false
  try {
    return f()
  } finally {
    enabled = before
  }
}

/** Whether t takes part in autograd: a leaf that requires grad, or made from one by a node not yet consumed. */
export const requiresGrad = <T extends TapeTensor<T>>(t: T): boolean => {
  const e = t.autograd
  return e !== undefined && (e.leaf || e.node !== undefined)
}

/**
 * Records that `output` was made from `inputs` by a call whose backward is `backward`; `saved` is
 * held until it runs, and backward is refused if one of `checked` (default: all of `saved`) was
 * written in place since.
 */
export const tapeCall = <T extends TapeTensor<T>>(name: string, output: T, inputs: ReadonlyArray<T>, saved: ReadonlyArray<T>, backward: NodeBackward<T>, checked: ReadonlyArray<T> = saved, site?: Site): void => {
  output.autograd = new Entry<T>(false, new TapeNode(name, inputs, backward, saved, checked, site))
}

type Key<T extends TapeTensor<T>> = TapeNode<T> | T

/**
 * Backward from `root` (seeded with `seed`, else ones), yielding [target, gradient] for each
 * target as soon as its gradient is final, in backward order; a target nothing reaches gets
 * zeros at the end. `targets` undefined: every leaf that requires grad. The gradients yielded
 * are the caller's (the tape no longer releases them).
 */
export function* backwardFrom<T extends TapeTensor<T>>(backend: TapeOps<T>, root: T, seed: T | undefined, targets: ReadonlyArray<T> | undefined): Generator<readonly [T, T]> {
  const keyOf = (t: T): Key<T> | undefined => (t.autograd?.node ?? (t.autograd?.leaf ? t : undefined))
  const rootKey = keyOf(root)
  if (rootKey === undefined) throw backend.refuse("autograd", `backward: ${root} does not require grad (no input of the calls that made it requires grad)`)
  const wanted = new Set<T>(targets ?? [])
  for (const t of wanted) if (!requiresGrad(t)) throw backend.refuse("autograd", `grad: ${t} does not require grad`)
  const isTarget = (k: Key<T>, output?: T): boolean =>
    k instanceof TapeNode ? output !== undefined && wanted.has(output) : targets === undefined || wanted.has(k)

  // The nodes reachable from the root, how many edges reach each key, and each node's output.
  const pending = new Map<Key<T>, number>()
  const outputs = new Map<TapeNode<T>, T>()
  const nodes: TapeNode<T>[] = []
  const visited = new Set<TapeNode<T>>()
  if (rootKey instanceof TapeNode) outputs.set(rootKey, root)
  // Iterative, as every walk here: a graph may be deeper than the stack.
  for (const stack: Key<T>[] = [rootKey]; stack.length > 0;) {
    const k = stack.pop()!
    if (!(k instanceof TapeNode) || visited.has(k)) continue
    visited.add(k)
    if (k.consumed) throw backend.refuse("autograd", `backward through ${k.name} a second time: an earlier backward consumed it (its saved tensors are released)`)
    nodes.push(k)
    for (const t of k.inputs) {
      const ik = keyOf(t)
      if (ik === undefined) continue
      pending.set(ik, (pending.get(ik) ?? 0) + 1)
      if (ik instanceof TapeNode && !outputs.has(ik)) outputs.set(ik, t)
      stack.push(ik)
    }
  }

  // Which keys lead to a target (only their gradients are computed): a node's inputs were
  // recorded before it, so in recording order each node's inputs are settled before it.
  const leads = new Map<Key<T>, boolean>()
  const leadsTo = (k: Key<T>): boolean => (k instanceof TapeNode ? leads.get(k)! : isTarget(k))
  for (const n of [...nodes].sort((x, y) => x.seq - y.seq))
    leads.set(n, isTarget(n, outputs.get(n)) || n.inputs.some((t) => { const ik = keyOf(t); return ik !== undefined && leadsTo(ik) }))

  // Every node that will run reads what it saved as it was (torch's version check), checked before any runs: a refusal changes nothing.
  for (const n of nodes) {
    const m = leads.get(n) ? n.modified() : undefined
    if (m === undefined) continue
    const at = n.site?.format()
    throw backend.refuse("modified-inplace", `one of the variables needed for gradient computation has been modified by an inplace operation: ${m.tensor}, saved by ${n.name}${at ? ` (called at ${at})` : ""}, is at version ${m.now}; expected version ${m.then} instead`)
  }

  // Gradients the tape owns, with how many places hold each; what it does not own it never releases.
  const uses = new Map<T, number>()
  const keep = (t: T) => { const n = uses.get(t); if (n !== undefined) uses.set(t, n + 1) }
  const drop = (t: T) => {
    const n = uses.get(t)
    if (n === undefined) return
    if (n > 1) return void uses.set(t, n - 1)
    uses.delete(t)
    t.release()
  }
  const tracked = <A>(f: () => A): A => {
    const { value, made } = backend.track(() => noGrad(f))
    for (const t of made) if (!uses.has(t)) uses.set(t, 0)
    return value
  }
  /** Releases what a step made that nothing holds. */
  const sweep = () => { for (const [t, n] of uses) if (n === 0) (uses.delete(t), t.release()) }
  /** The caller's copy of g: g itself when the tape held it once, else a copy. */
  const take = (g: T): T => {
    if (uses.get(g) === 1) return (uses.delete(g), g)
    const copy = noGrad(() => backend.copy(g))
    drop(g)
    return copy
  }

  const acc = new Map<Key<T>, T>()
  const contribute = (k: Key<T>, g: T) => {
    keep(g)
    const prev = acc.get(k)
    if (prev === undefined) return void acc.set(k, g)
    const sum = tracked(() => backend.add(prev, g))
    keep(sum)
    drop(prev)
    drop(g)
    acc.set(k, sum)
  }

  const ready: TapeNode<T>[] = []
  const emitted = new Set<T>()
  try {
    contribute(rootKey, seed ?? tracked(() => backend.ones(root)))
    if (!(rootKey instanceof TapeNode)) {
      emitted.add(root)
      yield [root, take(acc.get(rootKey)!)] as const
    } else ready.push(rootKey)
    while (ready.length > 0) {
      // The latest recorded first (torch's order: a gradient is final as early as it can be).
      let at = 0
      for (let i = 1; i < ready.length; i++) if (ready[i]!.seq > ready[at]!.seq) at = i
      const node = ready.splice(at, 1)[0]!
      const output = outputs.get(node)!
      const grad = acc.get(node)
      acc.delete(node)
      if (grad !== undefined && wanted.has(output)) {
        // A non-leaf target: the caller gets this gradient, so the tape stops owning it.
        uses.delete(grad)
        emitted.add(output)
        yield [output, grad] as const
      }
      const needs = node.inputs.map((t) => { const k = keyOf(t); return k !== undefined && leadsTo(k) })
      if (grad !== undefined && needs.some(Boolean)) {
        const grads = tracked(() => node.backward(grad, needs).map((g, i) => (g === undefined || !needs[i] ? undefined : backend.fit(g, node.inputs[i]!.meta!))))
        grads.forEach((g, i) => { if (g !== undefined) contribute(keyOf(node.inputs[i]!)!, g) })
      }
      if (grad !== undefined) drop(grad)
      node.consume()
      sweep()
      for (const t of node.inputs) {
        const k = keyOf(t)
        if (k === undefined) continue
        const left = pending.get(k)! - 1
        pending.set(k, left)
        if (left > 0) continue
        if (k instanceof TapeNode) ready.push(k)
        else if (isTarget(k) && !emitted.has(t)) {
          const g = acc.get(k)
          acc.delete(k)
          if (g === undefined) continue
          emitted.add(t)
          yield [t, take(g)] as const
        }
      }
    }
    for (const t of wanted) if (!emitted.has(t)) yield [t, noGrad(() => backend.zeros(t))] as const
  } finally {
    // Stopped early (or failed): the rest of the graph is consumed too, and what the tape held released.
    for (const n of nodes) n.consume()
    for (const t of uses.keys()) t.release()
  }
}
