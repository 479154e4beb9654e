// The cpu reuse pool for small tensors' handles (ffi/tensor.ts): the next tensor of a freed one's
// dtype and shape takes its handle instead of a new shim allocation; never while a view shares
// its memory; and kept handles are given back when an allocation needs their memory.
import { afterEach, describe, expect, test } from "bun:test"
import { fill } from "../../ffi/ops.ts"
import { pooledHandles, Tensor } from "../../ffi/tensor.ts"
import { testUnless } from "../skip.ts"
import { native } from "./helpers.ts"

const values = (t: Tensor) => [...new Float32Array(t.toHost().data.slice().buffer)]
const cpuOnly = testUnless(native.device === "cpu" ? undefined : `the backend loaded is ${native.device}; the pool is cpu's`)

afterEach(() => native.setMemoryLimit(0))

describe("the tensor handle pool", () => {
  cpuOnly("a freed small tensor's handle goes to the next tensor of its dtype and shape, not to another shape", () => {
    const a = Tensor.empty(native, "f32", [3, 7, 11])
    const handle = a.handle
    a.free()
    const kept = pooledHandles(native)
    expect(Tensor.empty(native, "f32", [11, 7, 3]).handle).not.toBe(handle)
    expect(Tensor.empty(native, "i32", [3, 7, 11]).handle).not.toBe(handle)
    const b = Tensor.empty(native, "f32", [3, 7, 11])
    expect(b.handle).toBe(handle)
    expect(pooledHandles(native)).toBe(kept - 1)
    fill(b, 7)
    expect(values(b)).toEqual(Array(231).fill(7))
    b.free()
  })

  cpuOnly("a tensor a live view shares memory with is not pooled: the view keeps its values", () => {
    const a = Tensor.empty(native, "f32", [4])
    fill(a, 1)
    const v = a.view([2, 2])
    a.free()
    const next = Tensor.empty(native, "f32", [4])
    fill(next, 9)
    expect(values(v)).toEqual([1, 1, 1, 1])
    v.free()
    next.free()
  })

  cpuOnly("large tensors are not pooled", () => {
    const a = Tensor.empty(native, "f32", [1 << 16])
    const kept = pooledHandles(native)
    a.free()
    expect(pooledHandles(native)).toBe(kept)
  })

  cpuOnly("an allocation that fits only without the pooled tensors frees them and succeeds", () => {
    const small = Array.from({ length: 16 }, () => Tensor.empty(native, "u8", [4096]))
    for (const t of small) t.free()
    expect(pooledHandles(native)).toBeGreaterThanOrEqual(16)
    const { inUse } = native.memoryUsage()
    // 48 KiB free under the limit, 64 KiB wanted: there is room only once the 16 pooled 4 KiB go.
    native.setMemoryLimit(inUse + 48 * 1024)
    const big = Tensor.empty(native, "u8", [64 * 1024])
    expect(pooledHandles(native)).toBe(0)
    big.free()
  })
})

// The cpu shim's cache of freed blocks of 64 KiB and more (c/cpu/tensor.c), beneath the handle pool.
describe("the host block cache", () => {
  cpuOnly("a freed large block goes to one new tensor at a time: two taken after it never share memory", () => {
    const n = 1 << 15 // 128 KiB of f32: cached by the shim, not pooled here
    const freed = Array.from({ length: 3 }, () => Tensor.empty(native, "f32", [n]))
    for (const t of freed) t.free()
    const [b, c, d] = [0, 1, 2].map(() => Tensor.empty(native, "f32", [n]))
    fill(b!, 2), fill(c!, 3), fill(d!, 4)
    expect([b!, c!, d!].map((t) => new Set(values(t))), "the block cache handed a block still in use to a second tensor").toEqual([new Set([2]), new Set([3]), new Set([4])])
    for (const t of [b!, c!, d!]) t.free()
  })
})
