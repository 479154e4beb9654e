// The collectives' argument checks (c/common/comm_checks.c) on a connected one-member
// communicator (no second process, no traffic): each refusal gives its status and message, and
// the communicator stays usable after it (a refused call sends nothing, so nothing is broken).
import { afterEach, describe, expect, test } from "bun:test"
import { ptr } from "bun:ffi"
import { Comm } from "../../ffi/comm.ts"
import type { ShimReason } from "../../ffi/native.ts"
import { empty, expectShimError, freeAll, native, tensor, valuesOf } from "./helpers.ts"

afterEach(freeAll)
const f32 = (n: number) => tensor("f32", [n], Array.from({ length: n }, (_, i) => i + 1))

const REFUSALS: ReadonlyArray<readonly [string, ShimReason, RegExp, (comm: Comm) => void]> = [
  ["all_reduce: dtypes that differ", "Invalid", /shim_all_reduce: dtypes differ \(out f64, in f32\)/, (comm) => comm.allReduce(empty("f64", [3]), f32(3), "sum")],
  ["all_reduce: out of another count", "Invalid", /shim_all_reduce: out has 2 elements, in 3/, (comm) => comm.allReduce(empty("f32", [2]), f32(3), "sum")],
  ["all_reduce: avg of bool", "Unsupported", /shim_all_reduce: avg is not defined for dtype bool/,
    (comm) => comm.allReduce(empty("bool", [2]), tensor("bool", [2], [1, 0]), "avg")],
  ["all_gather: out not size x in", "Invalid", /shim_all_gather: out has 2 elements, not 1 x 3/, (comm) => comm.allGather(empty("f32", [2]), f32(3))],
  ["reduce_scatter: in not size x out", "Invalid", /shim_reduce_scatter: in has 3 elements, not 1 x 2/, (comm) => comm.reduceScatter(empty("f32", [2]), f32(3), "sum")],
  ["all_to_all: out of another count", "Invalid", /shim_all_to_all: out has 2 elements, in 3/, (comm) => comm.allToAll(empty("f32", [2]), f32(3))],
  ["all_to_all: in and out sharing memory", "Invalid", /shim_all_to_all: in and out share memory/, (comm) => {
    const x = f32(3)
    comm.allToAll(x, x)
  }],
  ["p2p: an unknown kind", "Invalid", /shim_p2p: op 0 has kind 7/, (comm) => {
    const kinds = new Int32Array([7]), peers = new Int32Array([0]), tensors = new BigUint64Array([BigInt(f32(2).handle)])
    native.check(native.shim.shim_p2p(comm.handle, 1, ptr(kinds), ptr(peers), ptr(tensors), null), "shim_p2p")
  }],
]

describe("a one-member communicator refuses bad collective arguments", () => {
  for (const [name, reason, message, run] of REFUSALS)
    test(name, () => {
      using comm = Comm.create(native, 0, 1, 1000)
      comm.connect([new Uint8Array(0)])
      expectShimError(() => run(comm), reason, message)
      // still usable: a collective after the refusal runs
      const x = f32(3), out = empty("f32", [3])
      comm.allReduce(out, x, "sum")
      expect(valuesOf(out)).toEqual([1, 2, 3])
    })
})
