/**
 * How a tensor handle prints (console.log, Bun.inspect): what torch shows of a DTensor without
 * its values, which are on the workers: its logical size, dtype, mesh and placement, the local
 * size on each rank when sharded, and whether it requires grad; fetch() it to see the values.
 *
 *   RemoteTensor(size=[8, 8], dtype=f32, mesh=Mesh(dp=2, tp=2), placement={dp: replicate, tp: shard(0)}, local_size=[4, 8], ref=5)
 */
import { blockOf, describePlacement } from "./placement.ts"
import type { RemoteTensor } from "./tensor.ts"

/** What RemoteTensor's inspect shows (tensor.ts). */
export const describe = (t: RemoteTensor): string => {
  const fields: string[] = []
  if (t.released) fields.push(t.retired === undefined ? "released" : "a handle of a recorded step's trace")
  else if (t.meta === undefined) fields.push("size=?, dtype=?", `mesh=${t.mesh}`, `placement={${describePlacement(t.placement)}}`)
  else {
    const local = t.meta.shape, p = t.placement
    const logical = Object.values(p).some((d) => d.kind === "partial") ? local : blockOf(p, t.mesh, t.mesh.ranks[0]!, local).shape
    fields.push(`size=[${logical.join(", ")}]`, `dtype=${t.meta.dtype}`, `mesh=${t.mesh}`, `placement={${describePlacement(p)}}`)
    if (logical.join(",") !== local.join(",")) fields.push(`local_size=[${local.join(", ")}]`)
    if (t.requiresGrad) fields.push("requires_grad=true")
  }
  return `RemoteTensor(${[...fields, `ref=${t.ref.id}`].join(", ")})`
}
