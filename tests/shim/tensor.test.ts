// The cpu shim's tensors (alloc, copy in and out, views, free), devices, streams and events,
// and the fill and arange creation ops, against values computed here.
import { afterEach, describe, expect, test } from "bun:test"
import { ptr } from "bun:ffi"
import * as ops from "../../ffi/ops.ts"
import { Event, Stream } from "../../ffi/stream.ts"
import { Tensor } from "../../ffi/tensor.ts"
import { HostTensor, ITEM_SIZE } from "../../src/protocol/values.ts"
import {
  DTYPES, bigValuesOf, empty, encode, expectClose, expectShimError, freeAll, isFloat, native, product, roundTo, sample,
  tensor, valuesOf, viewOf,
} from "./helpers.ts"
import { testUnless } from "../skip.ts"

afterEach(freeAll)

describe("devices", () => {
  testUnless(native.device === "cpu" ? undefined : `the backend loaded is ${native.device}, not cpu`)("cpu probes fine and has one device, 0", () => {
    expect(native.shim.shim_probe()).toBe(0)
    const count = new Int32Array(1)
    native.check(native.shim.shim_device_count(ptr(count)), "shim_device_count")
    expect(count[0]).toBe(1)
    native.check(native.shim.shim_set_device(0), "shim_set_device")
    expectShimError(() => native.check(native.shim.shim_set_device(1), "shim_set_device"), "Invalid", /only device 0, not 1/)
  })
})

describe("tensors", () => {
  const shapes = [[], [0], [1], [7], [3, 5], [2, 0, 3], [2, 3, 1, 5]]
  for (const dtype of DTYPES)
    test(`${dtype}: copy in and out round-trips for shapes ${JSON.stringify(shapes)}`, () => {
      for (const shape of shapes) {
        const values = sample(dtype, product(shape), dtype === "u8" ? 0 : -100, 100, 7)
        const t = tensor(dtype, shape, values)
        expect(t.nbytes).toBe(product(shape) * ITEM_SIZE[dtype])
        expect(valuesOf(t)).toEqual(values)
      }
    })

  test("i64 keeps all 64 bits", () => {
    const big = [2n ** 63n - 1n, -(2n ** 63n), 2n ** 53n + 1n, -3n]
    expect(bigValuesOf(tensor("i64", [4], big))).toEqual(big)
  })

  test("a view shares memory with its source, both ways", () => {
    const a = tensor("f32", [2, 3], [0, 1, 2, 3, 4, 5])
    const v = viewOf(a, [3, 2])
    expect(v.shape).toEqual([3, 2])
    ops.fill(v, 9)
    expect(valuesOf(a)).toEqual([9, 9, 9, 9, 9, 9])
    a.native.check(a.native.shim.shim_tensor_copy_in(a.handle, ptr(encode("f32", [5, 4, 3, 2, 1, 0])), 24, null), "copy_in")
    expect(valuesOf(v)).toEqual([5, 4, 3, 2, 1, 0])
  })

  test("a view outlives the tensor it came from, and its own views", () => {
    const a = Tensor.fromHost(native, new HostTensor("i32", [4], encode("i32", [1, 2, 3, 4])))
    const v = a.view([2, 2])
    const w = v.view([4, 1])
    a.free()
    v.free()
    expect(valuesOf(w)).toEqual([1, 2, 3, 4])
    ops.unary("neg", w, w)
    expect(valuesOf(w)).toEqual([-1, -2, -3, -4])
    w.free()
  })

  test("0-d and 0-element tensors work with ops", () => {
    const scalar = tensor("f64", [], [2.5])
    expect(scalar.numel).toBe(1)
    const out = empty("f64", [])
    ops.binaryScalar("mul", out, scalar, 4, false)
    expect(valuesOf(out)).toEqual([10])
    const none = empty("f32", [4, 0])
    ops.fill(none, 1)
    ops.unary("exp", none, none)
    expect(valuesOf(none)).toEqual([])
  })

  test("using a freed tensor fails in the wrapper, before the shim", () => {
    const a = tensor("f32", [3], [1, 2, 3])
    const out = empty("f32", [3])
    a.free()
    expect(a.freed).toBe(true)
    expectShimError(() => a.handle, "Invalid", new RegExp(`use of a freed Tensor\\(f32\\[3\\] on ${native.device}\\)`))
    expectShimError(() => ops.unary("neg", out, a), "Invalid", /use of a freed Tensor/)
    expectShimError(() => a.toHost(), "Invalid", /use of a freed Tensor/)
    a.free() // a second free is a no-op
  })

  test("shape and size errors name the mismatch", () => {
    expectShimError(() => Tensor.empty(native, "f32", [2, -1]), "Invalid", /bad shape/)
    expectShimError(() => Tensor.empty(native, "f32", [1, 1, 1, 1, 1, 1, 1, 1, 1]), "Invalid", /9 dims, at most 8/)
    const a = tensor("f32", [2, 3], [0, 1, 2, 3, 4, 5])
    expectShimError(() => a.view([4]), "Invalid", /cannot view/)
    const shape = new BigInt64Array([7n])
    expectShimError(
      () => native.check(native.shim.shim_tensor_view(a.handle, 0, 1, ptr(shape), native.outsPtr), "shim_tensor_view"),
      "Invalid",
      /shim_tensor_view: 7 elements from element 0 do not fit in f32\[2, 3\]/,
    )
    const bytes = new Uint8Array(20)
    expectShimError(
      () => native.check(native.shim.shim_tensor_copy_in(a.handle, ptr(bytes), 20, null), "shim_tensor_copy_in"),
      "Invalid",
      /shim_tensor_copy_in: 20 bytes for f32\[2, 3\], which holds 24/,
    )
    expectShimError(
      () => native.check(native.shim.shim_tensor_copy_out(a.handle, ptr(bytes), 20, null), "shim_tensor_copy_out"),
      "Invalid",
      /shim_tensor_copy_out: 20 bytes for f32\[2, 3\], which holds 24/,
    )
    expectShimError(
      () => native.check(native.shim.shim_tensor_alloc(9, 1, ptr(shape), native.outsPtr), "shim_tensor_alloc"),
      "Invalid",
      /unknown dtype code 9/,
    )
    expectShimError(() => native.check(native.shim.shim_tensor_free(null), "shim_tensor_free"), "Invalid", /t is null/)
    expectShimError(
      () => native.check(native.shim.shim_unary(0, null, a.handle, null), "shim_unary"),
      "Invalid",
      /shim_unary: out is null/,
    )
  })
})

describe("streams and events", () => {
  test("work on a created stream runs in order; events complete", () => {
    using stream = Stream.create(native)
    const a = tensor("f32", [4], [1, 2, 3, 4])
    // Created streams do not order with the default one, where `a` was copied in (cuda).
    Stream.default(native).synchronize()
    ops.binaryScalar("mul", a, a, 2, false, stream)
    const event = stream.record()
    event.synchronize()
    expect(event.query()).toBe(true)
    using other = Stream.create(native)
    other.wait(event)
    other.debugSpin(1000) // returns at once on cpu; holds `other` 1 ms on cuda
    ops.binaryScalar("add", a, a, 1, false, other)
    other.synchronize()
    expect(valuesOf(a)).toEqual([3, 5, 7, 9])
    event.destroy()
  })

  test("the default stream is a null handle and works everywhere a stream does", () => {
    const stream = Stream.default(native)
    expect(stream.isDefault).toBe(true)
    const a = tensor("i32", [2], [5, 6])
    ops.unary("neg", a, a, stream)
    using event = Event.create(native).record(stream)
    stream.wait(event)
    stream.synchronize()
    expect(event.query()).toBe(true)
    expect(valuesOf(a)).toEqual([-5, -6])
    stream.destroy() // nothing to destroy
    expectShimError(() => native.check(native.shim.shim_stream_destroy(null), "shim_stream_destroy"), "Invalid", /default stream/)
    expectShimError(() => native.check(native.shim.shim_event_record(null, null), "shim_event_record"), "Invalid", /e is null/)
  })

  test("destroying twice is a no-op and later use fails in the wrapper", () => {
    const stream = Stream.create(native)
    const event = stream.record()
    event.destroy()
    event.destroy()
    expectShimError(() => event.query(), "Invalid", /^Event: use of a destroyed event/)
    stream.destroy()
    stream.destroy()
    const a = tensor("f32", [1], [1])
    expectShimError(() => ops.unary("neg", a, a, stream), "Invalid", /^Stream: use of a destroyed stream/)
    expectShimError(() => Stream.default(native).debugSpin(-1), "Invalid", /negative duration -1/)
  })
})

describe("fill and arange", () => {
  const values = [0, 1, -1, 2.75, -3.5, 1e6, NaN]
  for (const dtype of DTYPES)
    test(`${dtype}: fill stores the value by the cast rules`, () => {
      for (const value of values) {
        const t = empty(dtype, [5])
        ops.fill(t, value)
        expectClose(dtype, valuesOf(t), Array(5).fill(roundTo(dtype, value)), `fill ${value}`)
      }
    })

  test("fill of a 0-d tensor and of an odd-length one", () => {
    const scalar = empty("bf16", [])
    ops.fill(scalar, 0.1)
    expect(valuesOf(scalar)).toEqual([roundTo("bf16", 0.1)])
    const odd = empty("u8", [1, 1027])
    ops.fill(odd, 300) // saturates
    expect(new Set(valuesOf(odd))).toEqual(new Set([255]))
  })

  for (const dtype of DTYPES)
    test(`${dtype}: arange is start + i * step, converted`, () => {
      for (const [start, step, n] of [[0, 1, 17], [-3, 0.5, 9], [10, -2.25, 2000], [1, 0, 1], [0, 1, 0]] as const) {
        const t = empty(dtype, [n])
        ops.arange(t, start, step)
        const expected = Array.from({ length: n }, (_, i) => roundTo(dtype, start + i * step))
        if (isFloat(dtype)) expectClose(dtype, valuesOf(t), expected, `arange(${start}, ${step})`)
        else expect(valuesOf(t)).toEqual(expected)
      }
    })
})

describe("host bytes in place", () => {
  testUnless(native.device === "cpu" ? undefined : `the backend loaded is ${native.device}, not cpu`)("hostBytes is the tensor's own memory on cpu: writes through it are the tensor's values, a view's start at its offset", () => {
    const t = empty("f32", [4, 3])
    const bytes = t.hostBytes()!
    expect(bytes.byteLength).toBe(48)
    new Float32Array(bytes.buffer, bytes.byteOffset, 12).set(Float32Array.from({ length: 12 }, (_, i) => i * 0.5 - 2))
    expect([...t.toHost().toArray()]).toEqual(Array.from({ length: 12 }, (_, i) => i * 0.5 - 2))
    const row = t.block(6, [3])
    try {
      const part = row.hostBytes()!
      part.fill(0)
      expect([...t.toHost().toArray()]).toEqual(Array.from({ length: 12 }, (_, i) => (i >= 6 && i < 9 ? 0 : i * 0.5 - 2)))
    } finally {
      row.free()
    }
    expect(empty("f32", [0]).hostBytes()!.byteLength).toBe(0)
  })
})
