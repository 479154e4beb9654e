// Communicator checks that need no second process: argument checks at creation and connect,
// and a one-member communicator, which connects with no peers at all.
import { describe, expect, test } from "bun:test"
import { Comm } from "../../ffi/comm.ts"
import { loadNative, ShimError } from "../../ffi/native.ts"
import { Tensor } from "../../ffi/tensor.ts"
import { HostTensor } from "../../src/protocol/values.ts"

const native = loadNative("cpu")

const reasonOf = (f: () => unknown): string => {
  try {
    f()
    return "none"
  } catch (e) {
    return e instanceof ShimError ? e.reason : String(e)
  }
}

describe("creation", () => {
  test("refuses a rank outside the group, an empty group and a non-positive timeout", () => {
    expect(reasonOf(() => Comm.create(native, 2, 2, 1000))).toBe("Invalid")
    expect(reasonOf(() => Comm.create(native, -1, 2, 1000))).toBe("Invalid")
    expect(reasonOf(() => Comm.create(native, 0, 0, 1000))).toBe("Invalid")
    expect(reasonOf(() => Comm.create(native, 0, 2, 0))).toBe("Invalid")
  })

  test("publishes one equal-length address per peer", () => {
    using three = Comm.create(native, 1, 3, 1000)
    using two = Comm.create(native, 0, 2, 1000)
    expect(three.address().length).toBeGreaterThan(0)
    expect(three.address().length).toBe(2 * two.address().length)
  })

  test("an unknown hostname fails as a Comm error naming the call", () => {
    const e = (() => {
      try {
        Comm.create(native, 0, 2, 1000, "no-such-host.invalid")
      } catch (e) {
        return e
      }
    })()
    expect(e).toBeInstanceOf(ShimError)
    expect((e as ShimError).reason).toBe("Comm")
    expect((e as ShimError).message).toContain("shim_comm_create")
  })
})

describe("connect", () => {
  test("collectives before connect are refused", () => {
    using comm = Comm.create(native, 0, 2, 1000)
    expect(reasonOf(() => comm.barrier())).toBe("Invalid")
  })

  test("bytes of the wrong length, or not this member's own at its rank, are refused", () => {
    using comm = Comm.create(native, 0, 2, 1000)
    const mine = comm.address()
    expect(reasonOf(() => comm.connect([mine, mine.subarray(1)]))).toBe("Invalid")
    expect(reasonOf(() => comm.connect([new Uint8Array(mine.length), mine]))).toBe("Invalid")
    // Refused before any traffic: the communicator is not marked broken.
    expect(reasonOf(() => comm.barrier())).toBe("Invalid")
  })
})

describe("a one-member communicator", () => {
  test("connects with no address bytes and runs every collective", () => {
    using comm = Comm.create(native, 0, 1, 1000)
    expect(comm.address().length).toBe(0)
    comm.connect([new Uint8Array(0)])
    const values = Float32Array.from([1.5, -2, 3])
    using x = Tensor.fromHost(native, new HostTensor("f32", [3], new Uint8Array(values.buffer)))
    using out = Tensor.empty(native, "f32", [1, 3])
    comm.allReduce(x, x, "avg")
    comm.allGather(out, x)
    comm.broadcast(x, 0)
    comm.barrier()
    expect([...new Float32Array(out.toHost().data.slice().buffer)]).toEqual([1.5, -2, 3])
    expect(reasonOf(() => comm.p2p([{ kind: "send", peer: 0, tensor: x }]))).toBe("Invalid")
  })
})
