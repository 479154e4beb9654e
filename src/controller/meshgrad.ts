/**
 * How gradients cross the mesh: the backward rule of every collective and of send, recorded on
 * the autograd tape (recordBackward) when its input requires grad, and the synchronous forms model
 * code calls (`allReduce(x, "tp")` reads like torch.distributed's, with no `yield*`).
 *
 * A gradient held on a member is either whole (every member of the group holds the gradient of
 * the same value) or a part (the members' gradients add up to it). The rules, for a group of n
 * members over `dims` (Megatron-LM's f and g are copyTo and a sum-reduce):
 *
 *   all_reduce sum   y = sum_j x_j        dx = dy        y is used the same way on every member
 *                                                          (Megatron's g), so dy is whole already
 *   all_reduce avg   y = mean_j x_j       dx = dy / n
 *   copyTo           y = x (replicated)   dx = all_reduce_sum(dy)   each member uses its copy in its
 *                                                          own way (Megatron's f): the dy are parts
 *   all_gather       y = stack_j x_j      dx = reduce_scatter_sum(dy)   each member's dy is a part
 *   reduce_scatter   y_i = sum_j x_j[i]   dx = all_gather(dy)          (avg: divided by n)
 *   all_to_all       a permutation        dx = all_to_all(dy)          (it is its own inverse)
 *   send             y_to(i) = x_from(i)  dx = dy sent back, from `to` to the sender
 *
 * prod, min and max are not differentiable here; an in-place collective, or one run on a sub-mesh
 * of the tensor's mesh, is refused while its input requires grad (its gradient would have
 * nowhere to go). Backward's commands are ordinary ones: a failure in them poisons what depends
 * on them like anything else.
 */
import { isTaping, requiresGrad } from "../autograd/tape.ts"
import type { Reduction } from "../protocol/messages.ts"
import { refuse } from "./errors.ts"
import { noGrad, recordBackward } from "./autograd.ts"
import type { RemoteTensor } from "./tensor.ts"
import type { Mesh } from "./mesh.ts"

type Dims = string | ReadonlyArray<string>

const DIFFERENTIABLE: ReadonlySet<Reduction> = new Set(["sum", "avg", "stack"])

/** Refuses, before anything is sent, a collective whose gradient could not be taken. */
export const checkCollectiveGrad = (label: string, t: RemoteTensor, mesh: Mesh, reduction: Reduction, inplace: boolean): void => {
  if (!isTaping() || !requiresGrad(t)) return
  const why = inplace ? "it is in place" : !DIFFERENTIABLE.has(reduction) ? `${reduction} has no gradient here` : t.mesh !== mesh ? `it runs on ${mesh}, not on the tensor's ${t.mesh}` : undefined
  if (why !== undefined) throw refuse("autograd", `${label} of ${t}, which requires grad: ${why}; do it inside noGrad(), or on a detach()ed copy`)
}

/** f(t), then t released (after the command reading it is queued): a rule's own temporary. */
const temporary = (t: RemoteTensor, f: (t: RemoteTensor) => RemoteTensor): RemoteTensor => {
  const r = f(t)
  t.release()
  return r
}

/** @internal Records a collective's backward (the table above); mesh.ts calls it for every reduce. */
export const tapeCollectiveGrad = (label: string, out: RemoteTensor, t: RemoteTensor, dims: ReadonlyArray<string>, size: number, reduction: Reduction, scatter: boolean): void => {
  const mesh = out.mesh
  const reduce = (g: RemoteTensor, r: Reduction, s: boolean) => mesh.issueReduce(g, dims, r, { scatter: s }, mesh.core.site())
  const divided = (g: RemoteTensor) => g.mul(1 / size)
  const rule =
    reduction === "stack" && scatter ? (g: RemoteTensor) => reduce(g, "stack", true) // all_to_all: its own inverse
    : reduction === "stack" ? (g: RemoteTensor) => reduce(g, "sum", true) // all_gather: reduce_scatter of the parts
    : scatter ? (g: RemoteTensor) => (reduction === "avg" ? temporary(reduce(g, "stack", false), divided) : reduce(g, "stack", false)) // reduce_scatter: all_gather
    : reduction === "avg" ? divided // all_reduce avg: 1/n
    : (g: RemoteTensor) => g // all_reduce sum: the identity
  recordBackward(label, out, [t], (g) => [rule(g)], [])
}

/** @internal Records a send's backward: the gradient goes back from `to` to the sender. */
export const tapeSendGrad = (out: RemoteTensor, t: RemoteTensor, from: Mesh, to: Mesh): void =>
  recordBackward("send", out, [t], (g) => [to.issueSend(g, from, {}, to.core.site())], [])

/** all_reduce over `dims` (Megatron's g for a sum: the backward is the identity). */
export const allReduce = (x: RemoteTensor, dims: Dims, reduction: Reduction = "sum"): RemoteTensor =>
  x.mesh.issueReduce(x, dims, reduction, {}, x.mesh.core.site())

/** all_gather over `dims` into a new dim 0 (mesh order); backward: reduce_scatter. */
export const allGather = (x: RemoteTensor, dims: Dims): RemoteTensor => x.mesh.issueReduce(x, dims, "stack", {}, x.mesh.core.site())

/** reduce_scatter of dim 0 over `dims`; backward: all_gather. */
export const reduceScatter = (x: RemoteTensor, dims: Dims, reduction: "sum" | "avg" = "sum"): RemoteTensor =>
  x.mesh.issueReduce(x, dims, reduction, { scatter: true }, x.mesh.core.site())

/** all_to_all over `dims` (the flat elements in n chunks, chunk i to member i); backward: all_to_all. */
export const allToAll = (x: RemoteTensor, dims: Dims): RemoteTensor => x.mesh.issueReduce(x, dims, "stack", { scatter: true }, x.mesh.core.site())

/** Sends `x` to the same-sized mesh `to`, rank i to rank i; backward: the gradient is sent back. */
export const sendTo = (x: RemoteTensor, to: Mesh): RemoteTensor => x.mesh.issueSend(x, to, {}, x.mesh.core.site())

/**
 * Megatron's f: `x` (replicated over `dims`) entering a region where each member uses it its own
 * way, e.g. with its shard of a column-parallel weight. Forward: the same values (a view, no
 * command runs); backward: all_reduce sum of the members' parts of the gradient.
 */
export const copyTo = (x: RemoteTensor, dims: Dims): RemoteTensor => {
  const y = noGrad(() => x.view([...x.meta!.shape]))
  y.placement = x.placement
  recordBackward(`copy to ${typeof dims === "string" ? dims : dims.join("+")}`, y, [x], (g) => [allReduce(g, dims, "sum")], [])
  return y
}
