// Block views (shim_tensor_view at an offset): a tensor over a contiguous run of another's
// elements shares its memory (writes seen both ways, offsets composing through views of views),
// keeps it alive after the source is freed, counts it once, and may not reach past it; ops see
// such views' elements, disjoint blocks of one memory are independent operands, and an op whose
// out shares only some elements with an input is refused (as torch refuses it).
import { afterEach, describe, expect, test } from "bun:test"
import { ptr } from "bun:ffi"
import * as ops from "../../ffi/ops.ts"
import { Tensor } from "../../ffi/tensor.ts"
import { HostTensor } from "../../src/protocol/values.ts"
import { empty, encode, expectShimError, freeAll, native, tensor, valuesOf } from "./helpers.ts"

afterEach(freeAll)
const iota = (n: number) => Array.from({ length: n }, (_, i) => i)

describe("block views", () => {
  test("a block from an offset reads and writes its source's elements there, both ways", () => {
    const a = tensor("f32", [4, 3], iota(12))
    const row = a.block(6, [3])
    expect(valuesOf(row)).toEqual([6, 7, 8])
    ops.fill(row, -1)
    expect(valuesOf(a)).toEqual([0, 1, 2, 3, 4, 5, -1, -1, -1, 9, 10, 11])
    ops.binaryScalar("mul", a, a, 2, false)
    expect(valuesOf(row)).toEqual([-2, -2, -2])
    row.free()
  })

  test("offsets compose through views of views, and of reshapes", () => {
    const a = tensor("i64", [24], iota(24))
    const rows = a.view([6, 4]).block(8, [3, 4]) // rows 2..4
    const inner = rows.block(4, [2, 2]) // elements 12..15 of a
    expect(valuesOf(inner)).toEqual([12, 13, 14, 15])
    expect(valuesOf(inner.view([4]).block(3, [1]))).toEqual([15])
  })

  test("a block outlives its source, its memory counted once and freed with the last holder", () => {
    const before = native.memoryUsage().inUse
    const a = Tensor.fromHost(native, new HostTensor("f64", [1000], encode("f64", iota(1000))))
    const tail = a.block(900, [100])
    expect(native.memoryUsage().inUse - before).toBe(8000)
    a.free()
    expect(native.memoryUsage().inUse - before).toBe(8000)
    expect(valuesOf(tail).slice(0, 3)).toEqual([900, 901, 902])
    ops.unary("neg", tail, tail)
    expect(valuesOf(tail).at(-1)).toBe(-999)
    tail.free()
    expect(native.memoryUsage().inUse).toBe(before)
  })

  test("a block may not reach past its source", () => {
    const a = tensor("f32", [2, 3], iota(6))
    expectShimError(() => a.block(4, [3]), "Invalid", /\[3\] from element 4 does not fit in Tensor\(f32\[2, 3\]/)
    const shape = new BigInt64Array([3n])
    expectShimError(
      () => native.check(native.shim.shim_tensor_view(a.handle, 4, 1, ptr(shape), native.outsPtr), "shim_tensor_view"),
      "Invalid",
      /shim_tensor_view: 3 elements from element 4 do not fit in f32\[2, 3\]/,
    )
    expectShimError(() => native.check(native.shim.shim_tensor_view(a.handle, -1, 1, ptr(shape), native.outsPtr), "shim_tensor_view"), "Invalid", /from element -1/)
    expect(valuesOf(a.block(6, [0]))).toEqual([])
  })
})

describe("ops over blocks of one memory", () => {
  test("disjoint blocks are independent operands: matmul, strided copy, a binary op", () => {
    const a = tensor("f32", [3, 2, 2], [1, 2, 3, 4, 5, 6, 7, 8, 0, 0, 0, 0])
    const x = a.block(0, [2, 2]), y = a.block(4, [2, 2]), out = a.block(8, [2, 2])
    ops.matmul(out, x, y)
    expect(valuesOf(out)).toEqual([19, 22, 43, 50])
    ops.copyStrided(out, { offset: 0, strides: [1, 2] }, x, { offset: 0, strides: [2, 1] }, [2, 2])
    expect(valuesOf(out)).toEqual([1, 3, 2, 4])
    ops.binary("add", x, x, y)
    expect(valuesOf(a).slice(0, 4)).toEqual([6, 8, 10, 12])
  })

  test("an out that shares only some elements with an input is refused before anything is written", () => {
    const a = tensor("f32", [8], iota(8))
    const lo = a.block(0, [6]), hi = a.block(2, [6])
    expectShimError(() => ops.binary("add", lo, lo, hi), "Invalid", /shim_binary: out f32\[6\] and b f32\[6\] share some of their memory but are not the same elements/)
    expectShimError(() => ops.unary("neg", lo, hi), "Invalid", /shim_unary: out f32\[6\] and a f32\[6\] share some/)
    expectShimError(() => ops.cast(hi, lo), "Invalid", /shim_cast: out f32\[6\] and a f32\[6\] share some/)
    expectShimError(() => ops.binaryScalar("mul", hi, lo, 2, false), "Invalid", /shim_binary_scalar: out f32\[6\] and a/)
    expectShimError(() => ops.ternary("lerp", lo, lo, lo, hi, 0), "Invalid", /shim_ternary: out f32\[6\] and c f32\[6\] share some/)
    expectShimError(() => ops.matmul(a.block(0, [2, 2]), a.block(2, [2, 2]), empty("f32", [2, 2])), "Invalid", /shim_matmul: out f32\[2, 2\] shares memory/)
    expect(valuesOf(a)).toEqual(iota(8))
    // The same elements (an in-place op through two handles) are fine.
    ops.binary("add", lo, a.block(0, [6]), lo)
    expect(valuesOf(a)).toEqual([0, 2, 4, 6, 8, 10, 6, 7])
  })
})
