// The controller's metadata rules on the op-call path (Mesh.resultMetas): a call on the same
// tensors and scalars as the op's last one reuses that outcome; any change of a tensor's
// metadata or a scalar runs the rule again, so its refusals still come at the call.
import { expect, test } from "bun:test"
import { Core } from "../../src/controller/core.ts"
import { ControllerError } from "../../src/controller/errors.ts"
import { RemoteStream } from "../../src/controller/handles.ts"
import { createMesh } from "../../src/controller/mesh.ts"
import { opsOn } from "../../src/controller/ops.ts"
import { NDSlice } from "../../src/protocol/ndslice.ts"

const meshOf = () => {
  const core = new Core({ world: 1, captureSites: false })
  return opsOn(createMesh(core, ["all"], NDSlice.contiguous([1]), new RemoteStream(core, core.newRef())))
}

test("a repeated call gives the rule's outcome; a changed scalar or tensor runs the rule again and is refused where it should be", () => {
  const on = meshOf()
  const i = on.ones([3], { dtype: "i64" }), f = on.ones([2, 3])
  for (let k = 0; k < 3; k++) i.add_(1)
  // The same op on the same tensor with another scalar: an f32 result does not fit in an i64 tensor.
  expect(() => i.add_(1.5)).toThrow(ControllerError)
  expect(() => i.add_(1.5)).toThrow(/can't be cast/)
  // Fresh results: each call's own, and a new shape when the tensor is another.
  const a = i.add(1), b = i.add(1), c = f.add(1), d = i.add(0.5)
  expect([a.dtype, a.shape, b.dtype, b.shape]).toEqual(["i64", [3], "i64", [3]])
  expect([c.dtype, c.shape]).toEqual(["f32", [2, 3]])
  expect([d.dtype, d.shape]).toEqual(["f32", [3]])
  // A broadcast that fails is refused even right after one that worked.
  const g = on.ones([3])
  g.add_(on.ones([3]))
  expect(() => g.add_(on.ones([2]))).toThrow(ControllerError)
})
