/**
 * Gradient clipping by global norm across the mesh, as torch.nn.utils.clip_grad_norm_ over the
 * whole logical model: total = sqrt(sum of every logical gradient's squared elements), each
 * replica counted once. Each rank sums the squares of its local gradients, grouped by the mesh
 * dims along which they hold distinct values (their placement's shardedDims, e.g. tp for a
 * column-parallel weight); each group's sum is all-reduced over exactly those dims, so a
 * tp-sharded gradient is summed over tp and a replicated one (the dp-averaged grads, a
 * layer-norm's weight) is counted once. Then every gradient is scaled in place by torch's
 * coefficient min(max_norm / (total + 1e-6), 1). About 2 + 2 x (groups) commands, whatever
 * the number of gradients; nothing is fetched.
 */
import { Effect } from "effect"
import { refuse } from "../controller/errors.ts"
import type { ControllerError } from "../controller/errors.ts"
import type { RemoteTensor } from "../controller/tensor.ts"
import { opsOn } from "../controller/ops.ts"
import { describePlacement, shardedDims } from "../controller/placement.ts"

/**
 * Scales `grads` in place so their global 2-norm is at most maxNorm; returns the norm before
 * clipping, a 0-d tensor on every rank of the gradients' mesh (f32, or f64 with f64 grads).
 */
export const clipGradNorm = (grads: ReadonlyArray<RemoteTensor>, maxNorm: number): Effect.Effect<RemoteTensor, ControllerError> =>
  Effect.gen(function* () {
    if (grads.length === 0) return yield* Effect.fail(refuse("argument", "clipGradNorm: no gradients"))
    if (!(maxNorm >= 0)) return yield* Effect.fail(refuse("argument", `clipGradNorm: max_norm must be a non-negative number, got ${maxNorm}`))
    const mesh = grads[0]!.mesh
    const groups = new Map<string, { dims: string[]; grads: RemoteTensor[] }>()
    for (const g of grads) {
      if (g.mesh !== mesh) return yield* Effect.fail(refuse("mesh", `clipGradNorm: ${g} is on ${g.mesh}, not ${mesh} like the first gradient`))
      const p = g.placement
      if (Object.values(p).some((d) => d.kind === "partial"))
        return yield* Effect.fail(refuse("placement", `clipGradNorm: ${g} is partial (${describePlacement(p)}): reduce it before taking its norm`))
      const dims = shardedDims(p).sort(), key = dims.join(",")
      const group = groups.get(key) ?? { dims, grads: [] }
      groups.set(key, group)
      group.grads.push(g)
    }
    const ops = opsOn(mesh)
    let total: RemoteTensor | undefined
    for (const { dims, grads: gs } of groups.values()) {
      const local = ops._sum_of_squares(gs)
      const sum = dims.length === 0 ? local : yield* mesh.reduce(local, dims, "sum", { inplace: true })
      total = total === undefined ? sum : total.add(sum)
    }
    const norm = total!.sqrt()
    ops._clip_by_total_norm_(grads as RemoteTensor[], norm, maxNorm)
    return norm
  })
