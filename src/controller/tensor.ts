/**
 * RemoteTensor, the tensor handle a program holds, declared in one class: a TensorHandle
 * (handles.ts: its ref, metadata, memory and lifetime) with every op whose first parameter is
 * its input as a method (ops.ts's OP_METHODS, from the registry), its value (fetch), its
 * placement (placement.ts) and autograd (autograd.ts). The layers below it take TensorHandle;
 * what a tensor can do does not depend on which modules were loaded. Autograd reaches the op
 * layer through the surface this class hands it (ops.ts's `surface`), as grad and gradGenerator
 * here do.
 */
import type { Effect } from "effect"
import type { DType, HostTensor } from "../protocol/values.ts"
import { backward, detach, gradientsOf, requireGrad, setGrad, type GradOptions, type TensorGrad } from "./autograd.ts"
import { requiresGrad } from "../autograd/tape.ts"
import type { Failure } from "./errors.ts"
import { TensorHandle } from "./handles.ts"
import { OP_METHODS, surface, type TensorMethods } from "./ops.ts"
import { placementOf, setPlacement, type Placement, type PlacementSpec } from "./placement.ts"
import { describe } from "./printing.ts"

export interface RemoteTensor<D extends DType = DType> extends TensorMethods<D> {}

export class RemoteTensor<D extends DType = DType> extends TensorHandle<D> implements TensorGrad<D> {
  static {
    for (const [name, method] of OP_METHODS) {
      if (name in this.prototype) throw new Error(`ops.${name} would shadow RemoteTensor's own ${name}`)
      Object.defineProperty(this.prototype, name, { value: method })
    }
  }

  /** Its value on one rank of its mesh (by index or coordinates; default the first). */
  fetch(at: number | Readonly<Record<string, number>> = 0): Effect.Effect<HostTensor<D>, Failure> {
    return this.mesh.fetch(this, at) as Effect.Effect<HostTensor<D>, Failure>
  }

  /** How its local values make up one logical tensor, per mesh dim (replicated unless stated). */
  get placement(): Placement {
    return placementOf(this)
  }

  set placement(spec: PlacementSpec) {
    setPlacement(this, spec)
  }

  /** Sets its placement (dims not named are replicated) and returns it, for chaining. */
  place(spec: PlacementSpec): this {
    setPlacement(this, spec)
    return this
  }

  /** Whether gradients flow to (or through) it. */
  get requiresGrad(): boolean {
    return requiresGrad<RemoteTensor>(this)
  }

  /** Makes it a leaf that collects gradients (floating tensors only); returns it. */
  requiresGrad_(on = true): RemoteTensor<D> {
    requireGrad(this, on)
    return this
  }

  /** The gradient backward() accumulated into this leaf, if any. */
  get grad(): RemoteTensor<D> | undefined {
    return this.autograd?.grad as RemoteTensor<D> | undefined
  }

  set grad(g: RemoteTensor<D> | undefined) {
    setGrad(this, g)
  }

  /** Accumulates d(this)/d(leaf) into every leaf's .grad that requires grad (this a scalar, or given gradOutput). */
  backward(gradOutput?: RemoteTensor): void {
    backward(surface, this, gradOutput)
  }

  /** The same values, cut from the graph (a view; no copy). */
  detach(): RemoteTensor<D> {
    return detach(surface, this) as RemoteTensor<D>
  }

  /** How it prints (console.log, Bun.inspect): printing.ts. */
  [Symbol.for("nodejs.util.inspect.custom")](): string {
    return describe(this)
  }
}

/**
 * The gradients of `output` with respect to each of `inputs` as soon as each is final, in
 * backward order (Monarch's grad_generator): reduce each while the rest of backward goes on.
 * The gradients are the caller's; leaves' .grad is not touched.
 */
export function* gradGenerator(output: RemoteTensor, inputs: ReadonlyArray<RemoteTensor>, opts: GradOptions = {}): Generator<readonly [RemoteTensor, RemoteTensor]> {
  yield* gradientsOf(surface, output, inputs, opts)
}

/** The gradients of `output` with respect to `inputs`, in their order (zeros for an input it does not depend on). */
export const grad = (output: RemoteTensor, inputs: ReadonlyArray<RemoteTensor>, opts: GradOptions = {}): RemoteTensor[] => {
  const got = new Map(gradGenerator(output, inputs, opts))
  return inputs.map((t) => got.get(t)!)
}
