// Handles carry their owner: with two controllers in one process, whose tensors
// have the same ref ids, every use of controller 1's tensor, stream or mesh with controller 2
// (and the reverse for a send) is a ControllerError naming it, and both controllers' values are
// intact afterwards (before, controller 2 silently used its own ref: a fetch gave 1000, not 7).
// Fetch coordinates: a dim the mesh does not have, coordinates out of range and
// values that are no coordinates are ControllerErrors naming the mesh's dims.
import { expect, test } from "bun:test"
import { checkFetchCoordinates, checkForeignHandles, GOOD_COORDINATES } from "./handles.ts"

test("another controller's handles are refused in every use; both controllers' values are intact", async () => {
  const r = await checkForeignHandles()
  expect(r.ids[0]).toBe(r.ids[1])
  expect(r.refusals.length).toBe(14)
  for (const f of r.refusals) {
    expect({ name: f.name, tag: f.tag }).toEqual({ name: f.name, tag: "ControllerError" })
    expect(f.message).toContain("belongs to another controller")
  }
  expect(r.first).toEqual([7, 7])
  expect(r.second).toEqual([1000, 1000])
}, 60_000)

test("fetch at coordinates a mesh does not have, or outside it, is refused naming its dims", async () => {
  const r = await checkFetchCoordinates()
  expect(r.refusals.length).toBe(8)
  for (const f of r.refusals) {
    expect({ name: f.name, tag: f.tag }).toEqual({ name: f.name, tag: "ControllerError" })
    expect(f.message).toMatch(/dp, tp|dp=2, tp=2/)
  }
  expect(r.refusals[0]!.message).toContain("has no dim pp (its dims: dp, tp)")
  expect(r.good.map((v) => v[0])).toEqual(GOOD_COORDINATES.map(([, rank]) => rank + 1))
}, 60_000)
