/**
 * Deterministic release (docs/design.md, the tensor surface): remote memory is invisible to the JS GC, so a step scope
 * owns every tensor handle its controller makes while the scope is open, and when it closes
 * releases each that was not returned or kept: all in one batch, one DeleteRefs per rank in
 * the next frame. Plain code opens one with `using` (StepScope); an Effect program with
 * `stepScope` (its release is the Effect Scope's finalizer) or `inStep`, which also applies the
 * bound on commands in flight before the step starts (Core.whenCapacity).
 *
 *   for (let i = 0; i < steps; i++) yield* inStep(mesh, Effect.sync(() => {
 *     const loss = model(x).sub(y).pow(2).mean()
 *     loss.backward()                     // w.grad escapes: a leaf's gradient outlives the step
 *     noGrad(() => w.sub_(w.grad!.mul(lr)))
 *     zeroGrad([w])
 *     return loss                         // kept; every other tensor of the step is released
 *   }))
 *
 * Scopes nest: what an inner scope returns or keeps joins the scope around it. A scope adopts
 * every handle made on its controller while open, whatever the mesh, in program order: the
 * program's fibers should not make tensors for another step meanwhile.
 */
import { Effect, type Scope } from "effect"
import { TensorHandle } from "./handles.ts"
import type { Mesh } from "./mesh.ts"

/** Handles no step scope releases (a leaf's .grad): marked by escape(). */
const escaped = new WeakSet<TensorHandle>()

/** Takes `t` out of every step scope: it lives until released (a leaf's gradient, say). */
export const escape = (t: TensorHandle): void => void escaped.add(t)

/** One controller's open step scopes (Core.scopes): the innermost adopts each handle made. */
export class Scopes {
  /** @internal The innermost open scope; StepScope links itself in and out. */
  innermost: StepScope | undefined = undefined

  /** A handle made now joins the innermost open scope, if any. */
  adopt(t: TensorHandle): void {
    this.innermost?.adopt(t)
  }
}

export class StepScope implements Disposable {
  private readonly scopes: Scopes
  private parent: StepScope | undefined
  private made: TensorHandle[] = []
  private readonly kept = new Set<TensorHandle>()
  private closed = false

  /** Opens a scope on `mesh`'s controller, inside the one open now (if any). */
  constructor(mesh: Mesh) {
    this.scopes = mesh.core.scopes
    this.parent = this.scopes.innermost
    this.scopes.innermost = this
  }

  /** @internal A handle made while this scope is the innermost one. */
  adopt(t: TensorHandle): void {
    this.made.push(t)
  }

  /** Keeps the tensors in `value` (a tensor, or arrays and objects holding them) past this scope; returns `value`. */
  keep<A>(value: A): A {
    const visit = (v: unknown): void => {
      if (v instanceof TensorHandle) this.kept.add(v)
      else if (Array.isArray(v)) v.forEach(visit)
      else if (typeof v === "object" && v !== null && Object.getPrototypeOf(v) === Object.prototype) Object.values(v).forEach(visit)
    }
    visit(value)
    return value
  }

  /** Tensors adopted and not yet released (for tests and counters). */
  get size(): number {
    return this.made.filter((t) => !t.released).length
  }

  /** Releases what the scope made and did not keep; what it kept joins the scope around it. */
  close(): void {
    if (this.closed) return
    this.closed = true
    // Closed out of order (a scope left open inside): unlink it wherever it sits.
    if (this.scopes.innermost === this) this.scopes.innermost = this.parent
    else for (let s = this.scopes.innermost; s !== undefined; s = s.parent) if (s.parent === this) s.parent = this.parent
    const made = this.made
    this.made = []
    for (const t of made) {
      if (t.released || escaped.has(t)) continue
      if (this.kept.has(t)) this.parent?.adopt(t)
      else t.release()
    }
  }

  [Symbol.dispose](): void {
    this.close()
  }
}

/** A step scope that closes with the enclosing Effect Scope (Effect.scoped). */
export const stepScope = (mesh: Mesh): Effect.Effect<StepScope, never, Scope.Scope> =>
  Effect.acquireRelease(Effect.sync(() => new StepScope(mesh)), (s) => Effect.sync(() => s.close()))

/**
 * Runs `step` in its own step scope: once `mesh` has at most its bound of commands in flight
 * (waiting for the workers first when it has more), then releasing every tensor the step made
 * but the ones in its result, also when it fails.
 */
export const inStep = <A, E, R>(mesh: Mesh, step: Effect.Effect<A, E, R>): Effect.Effect<A, E, Exclude<R, Scope.Scope>> =>
  Effect.scoped(Effect.gen(function* () {
    yield* mesh.throttle()
    const scope = yield* stepScope(mesh)
    return scope.keep(yield* step)
  }))

/** Runs plain code `f` in a step scope: what it returns is kept, every other tensor it made is released. */
export const scoped = <A>(mesh: Mesh, f: () => A): A => {
  using scope = new StepScope(mesh)
  return scope.keep(f())
}
