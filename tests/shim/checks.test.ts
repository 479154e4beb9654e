// The shim's argument checks (c/common/checks.c, layout_checks.c, nn_checks.c, optim_checks.c): each refusal
// branch that no other shim test reaches, called straight through the C entry point (the ffi/
// wrappers check some arguments first), asserting the status and the message. shim_copy_strided's bounds: one element past the end of dst or of
// src is refused, exactly at the end is accepted.
import { afterEach, describe, expect, test } from "bun:test"
import { ptr } from "bun:ffi"
import { ReduceOp, ScatterOp } from "../../ffi/abi.ts"
import * as ops from "../../ffi/ops.ts"
import type { ShimReason } from "../../ffi/native.ts"
import type { Tensor } from "../../ffi/tensor.ts"
import { empty, expectShimError, freeAll, native, tensor, valuesOf } from "./helpers.ts"

afterEach(freeAll)
const shim = native.shim
const iota = (n: number) => Array.from({ length: n }, (_, i) => i)
const f32 = (shape: number[]) => tensor("f32", shape, iota(shape.reduce((a, b) => a * b, 1)))
const i64 = (shape: number[], values: number[]) => tensor("i64", shape, values)
const call = (name: string, status: number) => native.check(status, name)

describe("shim_copy_strided's bounds", () => {
  const strided = (dst: Tensor, dstOffset: number, src: Tensor, srcOffset: number, n: number) =>
    ops.copyStrided(dst, { offset: dstOffset, strides: [1] }, src, { offset: srcOffset, strides: [1] }, [n])

  test("a copy ending exactly at the end of dst and of src is done", () => {
    const dst = tensor("f32", [6], [0, 0, 0, 0, 0, 0]), src = f32([5])
    strided(dst, 3, src, 2, 3)
    expect(valuesOf(dst)).toEqual([0, 0, 0, 2, 3, 4])
  })

  test("one element past the end of dst is refused, nothing written", () => {
    const dst = tensor("f32", [6], [0, 0, 0, 0, 0, 0]), src = f32([5])
    expectShimError(() => strided(dst, 4, src, 0, 3), "Invalid", /shim_copy_strided: the copy writes elements 4\.\.6 of f32\[6\]/)
    expect(valuesOf(dst)).toEqual([0, 0, 0, 0, 0, 0])
  })

  test("one element past the end of src is refused, nothing written", () => {
    const dst = tensor("f32", [6], [0, 0, 0, 0, 0, 0]), src = f32([5])
    expectShimError(() => strided(dst, 0, src, 3, 3), "Invalid", /shim_copy_strided: the copy reads elements 3\.\.5 of f32\[5\]/)
    expect(valuesOf(dst)).toEqual([0, 0, 0, 0, 0, 0])
  })

  test("a step that walks back before element 0 is refused", () => {
    const dst = f32([4]), src = f32([4])
    expectShimError(() => ops.copyStrided(dst, { offset: 1, strides: [-1] }, src, { offset: 0, strides: [1] }, [3]), "Invalid",
      /shim_copy_strided: the copy writes elements -1\.\.1 of f32\[4\]/)
  })

  test("dtypes that differ are refused", () => {
    expectShimError(() => strided(f32([3]), 0, i64([3], [1, 2, 3]), 0, 3), "Invalid", /shim_copy_strided: dtypes differ: dst is f32\[3\], src is i64\[3\]/)
  })
})

/** One refusal: the call, and the reason and message it must fail with. */
interface Refusal { readonly name: string; readonly reason: ShimReason; readonly message: RegExp; readonly run: () => void }
const r = (name: string, reason: ShimReason, message: RegExp, run: () => void): Refusal => ({ name, reason, message, run })

// Tensors are made inside each run (freeAll frees them after every test).
const REFUSALS: Refusal[] = [
  // reductions
  r("reduce: a norm of an integer dtype", "Unsupported", /shim_reduce\(norm1\): not defined on i64\[3\] \(cast to a floating dtype first\)/,
    () => call("shim_reduce", shim.shim_reduce(ReduceOp.norm1, empty("i64", []).handle, i64([3], [1, 2, 3]).handle, -1, null))),
  r("argreduce: dim out of range", "Invalid", /shim_argreduce: dim 2 is out of range for a f32\[2, 3\]/,
    () => call("shim_argreduce", shim.shim_argreduce(ReduceOp.max, empty("i64", [2]).handle, f32([2, 3]).handle, 2, null))),
  r("argreduce: indices of the wrong count", "Invalid", /shim_argreduce: indices is i64\[3\] but reducing f32\[2, 3\] leaves 2 elements/,
    () => call("shim_argreduce", shim.shim_argreduce(ReduceOp.max, empty("i64", [3]).handle, f32([2, 3]).handle, 1, null))),
  // gather
  r("gather: index not i64", "Invalid", /shim_gather: index is i32\[2, 1\], not i64/,
    () => call("shim_gather", shim.shim_gather(empty("f32", [2, 1]).handle, f32([2, 3]).handle, 1, tensor("i32", [2, 1], [0, 1]).handle, null))),
  r("gather: index of another rank", "Invalid", /shim_gather: index i64\[2\] and a f32\[2, 3\] have different ranks/,
    () => call("shim_gather", shim.shim_gather(empty("f32", [2]).handle, f32([2, 3]).handle, 1, i64([2], [0, 1]).handle, null))),
  r("gather: dim out of range", "Invalid", /shim_gather: dim 2 is out of range for f32\[2, 3\]/,
    () => call("shim_gather", shim.shim_gather(empty("f32", [2, 1]).handle, f32([2, 3]).handle, 2, i64([2, 1], [0, 1]).handle, null))),
  r("gather: index larger than a outside dim", "Invalid", /shim_gather: index i64\[3, 1\] is larger than a f32\[2, 3\] in dim 0/,
    () => call("shim_gather", shim.shim_gather(empty("f32", [3, 1]).handle, f32([2, 3]).handle, 1, i64([3, 1], [0, 1, 2]).handle, null))),
  r("gather: out of another dtype", "Invalid", /shim_gather: out is f64\[2, 1\] but must be f32 with index's shape i64\[2, 1\]/,
    () => call("shim_gather", shim.shim_gather(empty("f64", [2, 1]).handle, f32([2, 3]).handle, 1, i64([2, 1], [0, 1]).handle, null))),
  r("gather: out of another shape", "Invalid", /shim_gather: out is f32\[1, 2\] but must have index's shape i64\[2, 1\]/,
    () => call("shim_gather", shim.shim_gather(empty("f32", [1, 2]).handle, f32([2, 3]).handle, 1, i64([2, 1], [0, 1]).handle, null))),
  r("gather: a empty along dim", "Invalid", /shim_gather: a f32\[2, 0\] is empty along dim 1/,
    () => call("shim_gather", shim.shim_gather(empty("f32", [2, 1]).handle, empty("f32", [2, 0]).handle, 1, i64([2, 1], [0, 0]).handle, null))),
  // softmax, layer_norm, rms_norm, triangles
  r("softmax: out of another dtype", "Invalid", /shim_softmax: out is f64\[2, 3\] but a is f32\[2, 3\] \(same dtype and element count needed\)/,
    () => call("shim_softmax", shim.shim_softmax(empty("f64", [2, 3]).handle, f32([2, 3]).handle, 1, 0, null))),
  r("layer_norm: out of another count", "Invalid", /shim_layer_norm: out is f32\[5\] but a is f32\[2, 3\] \(same dtype and element count needed\)/,
    () => call("shim_layer_norm", shim.shim_layer_norm(empty("f32", [5]).handle, f32([2, 3]).handle, null, null, 3, 1e-5, null))),
  r("triangle: upper neither 0 nor 1", "Invalid", /shim_triangle\(triu\): upper must be 0 or 1, not 2/,
    () => call("shim_triangle", shim.shim_triangle(empty("f32", [2, 2]).handle, f32([2, 2]).handle, 0, 2, null))),
  r("triangle: a 1-D input", "Invalid", /shim_triangle\(tril\): a f32\[4\] needs at least 2 dims/,
    () => call("shim_triangle", shim.shim_triangle(empty("f32", [4]).handle, f32([4]).handle, 0, 0, null))),
  r("triangle: out of another dtype", "Invalid", /shim_triangle\(tril\): out is i64\[2, 2\] but a is f32\[2, 2\]/,
    () => call("shim_triangle", shim.shim_triangle(empty("i64", [2, 2]).handle, f32([2, 2]).handle, 0, 0, null))),
  r("rms_norm: an integer dtype", "Unsupported", /shim_rms_norm: not defined on i64\[2\] \(cast to a floating dtype first\)/,
    () => call("shim_rms_norm", shim.shim_rms_norm(empty("i64", [2]).handle, i64([2], [1, 2]).handle, null, 2, 1e-6, null))),
  r("rms_norm: out of another count", "Invalid", /shim_rms_norm: out is f32\[4\] but a is f32\[2, 3\]/,
    () => call("shim_rms_norm", shim.shim_rms_norm(empty("f32", [4]).handle, f32([2, 3]).handle, null, 3, 1e-6, null))),
  r("rms_norm: inner that does not divide", "Invalid", /shim_rms_norm: inner 4 does not divide f32\[2, 3\]/,
    () => call("shim_rms_norm", shim.shim_rms_norm(empty("f32", [2, 3]).handle, f32([2, 3]).handle, null, 4, 1e-6, null))),
  r("rms_norm: a weight of the wrong count", "Invalid", /shim_rms_norm: weight is f32\[2\] but must be 3 elements of f32/,
    () => call("shim_rms_norm", shim.shim_rms_norm(empty("f32", [2, 3]).handle, f32([2, 3]).handle, f32([2]).handle, 3, 1e-6, null))),
  // attention
  ...((): Refusal[] => {
    const att = (out: Tensor, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | null, causal: number) =>
      call("shim_attention", shim.shim_attention(out.handle, q.handle, k.handle, v.handle, mask?.handle ?? null, 1, causal, null))
    const qkv = (t: "f32" | "i64" = "f32") => (t === "f32" ? f32([1, 2, 3]) : i64([1, 2, 3], iota(6)))
    return [
      r("attention: causal neither 0 nor 1", "Invalid", /shim_attention: causal must be 0 or 1, not 3/, () => att(empty("f32", [1, 2, 3]), qkv(), qkv(), qkv(), null, 3)),
      r("attention: an integer q", "Unsupported", /shim_attention: q i64\[1, 2, 3\] is not floating/, () => att(empty("i64", [1, 2, 3]), qkv("i64"), qkv("i64"), qkv("i64"), null, 0)),
      r("attention: a 2-D operand", "Invalid", /shim_attention: q f32\[2, 3\], k f32\[1, 2, 3\], v f32\[1, 2, 3\] and out f32\[1, 2, 3\] must be 3-D/,
        () => att(empty("f32", [1, 2, 3]), f32([2, 3]), qkv(), qkv(), null, 0)),
      r("attention: dtypes that differ", "Invalid", /shim_attention: q f32\[1, 2, 3\], k f64\[1, 2, 3\], v f32\[1, 2, 3\] and out f32\[1, 2, 3\] need one dtype/,
        () => att(empty("f32", [1, 2, 3]), qkv(), empty("f64", [1, 2, 3]), qkv(), null, 0)),
      r("attention: k of another feature size", "Invalid", /shim_attention: q f32\[1, 2, 3\], k f32\[1, 2, 4\] and v f32\[1, 2, 3\] do not fit/,
        () => att(empty("f32", [1, 2, 3]), qkv(), f32([1, 2, 4]), qkv(), null, 0)),
      r("attention: out of the wrong shape", "Invalid", /shim_attention: out is f32\[1, 3, 3\] but must be \[1, 2, 3\]/,
        () => att(empty("f32", [1, 3, 3]), qkv(), qkv(), qkv(), null, 0)),
      r("attention: a mask of another floating dtype", "Invalid", /shim_attention: mask f64\[1, 2, 2\] must be bool or q's f32/,
        () => att(empty("f32", [1, 2, 3]), qkv(), qkv(), qkv(), tensor("f64", [1, 2, 2], [0, 0, 0, 0]), 0)),
      r("attention: a mask of the wrong shape", "Invalid", /shim_attention: mask bool\[1, 2, 3\] must be \[1 or 1, 2, 2\]/,
        () => att(empty("f32", [1, 2, 3]), qkv(), qkv(), qkv(), tensor("bool", [1, 2, 3], [1, 1, 1, 1, 1, 1]), 0)),
    ]
  })(),
  // dropout
  r("dropout: an integer dtype", "Unsupported", /shim_dropout: not defined on i64\[2\]/,
    () => call("shim_dropout", shim.shim_dropout(empty("i64", [2]).handle, empty("bool", [2]).handle, i64([2], [1, 2]).handle, 0.5, 1n, 0n, null))),
  r("dropout: p outside [0, 1]", "Invalid", /shim_dropout: p must be in \[0, 1\], not 1\.5/,
    () => call("shim_dropout", shim.shim_dropout(empty("f32", [2]).handle, empty("bool", [2]).handle, f32([2]).handle, 1.5, 1n, 0n, null))),
  r("dropout: p NaN", "Invalid", /shim_dropout: p must be in \[0, 1\], not -?nan/,
    () => call("shim_dropout", shim.shim_dropout(empty("f32", [2]).handle, empty("bool", [2]).handle, f32([2]).handle, NaN, 1n, 0n, null))),
  r("dropout: a mask not bool", "Invalid", /shim_dropout: out f32\[2\] and mask u8\[2\] must be f32 and bool with a's element count \(a is f32\[2\]\)/,
    () => call("shim_dropout", shim.shim_dropout(empty("f32", [2]).handle, empty("u8", [2]).handle, f32([2]).handle, 0.5, 1n, 0n, null))),
  // scatter
  ...((): Refusal[] => {
    const sc = (op: number, out: Tensor, dim: number, index: Tensor, src: Tensor) =>
      call("shim_scatter", shim.shim_scatter(op, out.handle, dim, index.handle, src.handle, null))
    const out = () => tensor("f32", [2, 3], [0, 0, 0, 0, 0, 0]), ix = () => i64([1, 3], [1, 0, 1])
    return [
      r("scatter: an unknown op", "Invalid", /shim_scatter: unknown op code 7/, () => sc(7, out(), 0, ix(), f32([1, 3]))),
      r("scatter: index not i64", "Invalid", /shim_scatter: index is i32\[1, 3\], not i64/, () => sc(ScatterOp.assign, out(), 0, tensor("i32", [1, 3], [1, 0, 1]), f32([1, 3]))),
      r("scatter: src of another dtype", "Invalid", /shim_scatter\(add\): src f64\[1, 3\] and out f32\[2, 3\] need one dtype/, () => sc(ScatterOp.add, out(), 0, ix(), empty("f64", [1, 3]))),
      r("scatter: index of another rank", "Invalid", /shim_scatter: index i64\[3\], src f32\[1, 3\] and out f32\[2, 3\] need one rank/, () => sc(ScatterOp.assign, out(), 0, i64([3], [1, 0, 1]), f32([1, 3]))),
      r("scatter: dim out of range", "Invalid", /shim_scatter: dim 2 is out of range for f32\[2, 3\]/, () => sc(ScatterOp.assign, out(), 2, ix(), f32([1, 3]))),
      r("scatter: index larger than src", "Invalid", /shim_scatter: index i64\[1, 3\] is larger than src f32\[1, 2\], or than out f32\[2, 3\] outside dim 0/, () => sc(ScatterOp.assign, out(), 0, ix(), f32([1, 2]))),
      r("scatter: out empty along dim", "Invalid", /shim_scatter: out f32\[0, 3\] is empty along dim 0/, () => sc(ScatterOp.assign, empty("f32", [0, 3]), 0, i64([1, 3], [0, 0, 0]), f32([1, 3]))),
      r("scatter: out sharing src's memory", "Invalid", /shim_scatter: out f32\[1, 3\] shares memory with src or index \(write into a clone\)/, () => {
        const a = f32([6])
        sc(ScatterOp.assign, a.block(0, [1, 3]), 0, i64([1, 3], [0, 0, 0]), a.block(2, [1, 3]))
      }),
    ]
  })(),
  // index_add
  ...((): Refusal[] => {
    const ia = (out: Tensor, dim: number, index: Tensor, src: Tensor) => call("shim_index_add", shim.shim_index_add(out.handle, dim, index.handle, src.handle, 1, null))
    const out = () => tensor("f32", [2, 3], [0, 0, 0, 0, 0, 0])
    return [
      r("index_add: a 2-D index", "Invalid", /shim_index_add: index is i64\[1, 1\], not 0-D or 1-D i64/, () => ia(out(), 0, i64([1, 1], [0]), f32([1, 3]))),
      r("index_add: src of another dtype", "Invalid", /shim_index_add: src f64\[1, 3\] and out f32\[2, 3\] need one dtype/, () => ia(out(), 0, i64([1], [0]), empty("f64", [1, 3]))),
      r("index_add: dim out of range", "Invalid", /shim_index_add: dim 2 is out of range for f32\[2, 3\]/, () => ia(out(), 2, i64([1], [0]), f32([1, 3]))),
      r("index_add: src of another rank", "Invalid", /shim_index_add: src f32\[3\] and out f32\[2, 3\] need one rank/, () => ia(out(), 0, i64([1], [0]), f32([3]))),
      r("index_add: src not out with index's count along dim", "Invalid", /shim_index_add: src f32\[2, 3\] must be out f32\[2, 3\] with index i64\[1\]'s count along dim 0/, () => ia(out(), 0, i64([1], [0]), f32([2, 3]))),
      r("index_add: out empty along dim", "Invalid", /shim_index_add: out f32\[0, 3\] is empty along dim 0/, () => ia(empty("f32", [0, 3]), 0, i64([1], [0]), f32([1, 3]))),
    ]
  })(),
  // the fused optimizer steps
  ...((): Refusal[] => {
    const sgd = (param: Tensor, grad: Tensor | null, buf: Tensor | null, momentum: number, flags: number) =>
      call("shim_sgd", shim.shim_sgd(param.handle, grad?.handle ?? null, buf?.handle ?? null, 0.1, momentum, 0, 0, flags, null))
    const adamw = (param: Tensor, grad: Tensor, m: Tensor, v: Tensor, vmax: Tensor | null, step: number, flags: number) =>
      call("shim_adamw", shim.shim_adamw(param.handle, grad.handle, m.handle, v.handle, vmax?.handle ?? null, 1e-3, 0.9, 0.999, 1e-8, 0, step, flags, null))
    const p = () => tensor("f32", [4], [1, 2, 3, 4])
    return [
      r("sgd: a null grad", "Invalid", /shim_sgd: grad is null/, () => sgd(p(), null, null, 0, 0)),
      r("sgd: a grad of another dtype", "Invalid", /shim_sgd: grad is f64\[4\] but param is f32\[4\] \(same dtype and element count needed\)/, () => sgd(p(), empty("f64", [4]), null, 0, 0)),
      r("sgd: a grad sharing param's memory", "Invalid", /shim_sgd: grad shares param's memory/, () => {
        const a = f32([8])
        sgd(a.block(0, [4]), a.block(2, [4]), null, 0, 0)
      }),
      r("sgd: an f16 param", "Unsupported", /shim_sgd: param is f16; the fused steps take f32 or f64 \(keep f32 master weights\)/, () => sgd(empty("f16", [4]), empty("f16", [4]), null, 0, 0)),
      r("sgd: an unknown flag", "Invalid", /shim_sgd: unknown flags 0x8/, () => sgd(p(), f32([4]), null, 0, 8)),
      r("sgd: grad and momentum_buf sharing memory", "Invalid", /shim_sgd: grad and momentum_buf share memory/, () => {
        const g = f32([4])
        sgd(p(), g, g, 0.9, 0)
      }),
      r("sgd: nesterov without momentum", "Invalid", /shim_sgd: nesterov needs a nonzero momentum/, () => sgd(p(), f32([4]), null, 0, 1)),
      r("adamw: exp_avg and exp_avg_sq sharing memory", "Invalid", /shim_adamw: exp_avg and exp_avg_sq share memory/, () => {
        const m = f32([4])
        adamw(p(), f32([4]), m, m, null, 1, 0)
      }),
      r("adamw: grad and max_exp_avg_sq sharing memory", "Invalid", /shim_adamw: grad and max_exp_avg_sq share memory/, () => {
        const g = f32([4])
        adamw(p(), g, f32([4]), f32([4]), g, 1, 8)
      }),
      r("adamw: step 0", "Invalid", /shim_adamw: step is 0; the first step is 1/, () => adamw(p(), f32([4]), f32([4]), f32([4]), null, 0, 0)),
    ]
  })(),
]

describe("refusal branches of the argument checks", () => {
  for (const refusal of REFUSALS)
    test(refusal.name, () => {
      expectShimError(refusal.run, refusal.reason, refusal.message)
    })
})

/**
 * Each entry point's null checks: for every pointer argument in turn, the call with that one
 * null and the others good fails naming it ("<fn>: <what> is null"). `call` gets the handles by
 * name (null for the one under test) and returns the status.
 */
interface NullChecks { readonly fn: string; readonly names: ReadonlyArray<string>; readonly make: () => Record<string, unknown>; readonly call: (h: Record<string, any>) => number }
const strides = new BigInt64Array([1n, 1n, 2n]) // dst strides, src strides, shape: one dim of 2
const hostBytes = new Uint8Array(8)
const NULL_CHECKS: NullChecks[] = [
  { fn: "shim_tensor_copy_in", names: ["t", "src"], make: () => ({ t: f32([2]).handle, src: ptr(hostBytes) }), call: (h) => shim.shim_tensor_copy_in(h.t, h.src, 8, null) },
  { fn: "shim_tensor_copy_out", names: ["t", "dst"], make: () => ({ t: f32([2]).handle, dst: ptr(hostBytes) }), call: (h) => shim.shim_tensor_copy_out(h.t, h.dst, 8, null) },
  { fn: "shim_rand", names: ["out"], make: () => ({ out: f32([2]).handle }), call: (h) => shim.shim_rand(h.out, 1n, 0n, 0, null) },
  { fn: "shim_unary", names: ["out", "a"], make: () => ({ out: f32([2]).handle, a: f32([2]).handle }), call: (h) => shim.shim_unary(0, h.out, h.a, null) },
  { fn: "shim_binary", names: ["out", "a", "b"], make: () => ({ out: f32([2]).handle, a: f32([2]).handle, b: f32([2]).handle }), call: (h) => shim.shim_binary(0, h.out, h.a, h.b, null) },
  { fn: "shim_binary_scalar", names: ["out", "a"], make: () => ({ out: f32([2]).handle, a: f32([2]).handle }), call: (h) => shim.shim_binary_scalar(0, h.out, h.a, 1, 0, null) },
  { fn: "shim_ternary", names: ["out", "a", "b", "c"], make: () => ({ out: f32([2]).handle, a: f32([2]).handle, b: f32([2]).handle, c: f32([2]).handle }), call: (h) => shim.shim_ternary(1, h.out, h.a, h.b, h.c, 0, null) },
  { fn: "shim_reduce", names: ["out", "a"], make: () => ({ out: empty("f32", []).handle, a: f32([2]).handle }), call: (h) => shim.shim_reduce(ReduceOp.sum, h.out, h.a, -1, null) },
  { fn: "shim_argreduce", names: ["indices", "a"], make: () => ({ indices: empty("i64", []).handle, a: f32([2]).handle }), call: (h) => shim.shim_argreduce(ReduceOp.max, h.indices, h.a, -1, null) },
  { fn: "shim_cumsum", names: ["out", "a"], make: () => ({ out: f32([2]).handle, a: f32([2]).handle }), call: (h) => shim.shim_cumsum(h.out, h.a, 0, null) },
  { fn: "shim_matmul", names: ["out", "a", "b"], make: () => ({ out: f32([2, 2]).handle, a: f32([2, 2]).handle, b: f32([2, 2]).handle }), call: (h) => shim.shim_matmul(h.out, h.a, h.b, 0, null) },
  { fn: "shim_cast", names: ["out", "a"], make: () => ({ out: f32([2]).handle, a: f32([2]).handle }), call: (h) => shim.shim_cast(h.out, h.a, null) },
  { fn: "shim_transpose", names: ["out", "a"], make: () => ({ out: f32([2, 2]).handle, a: f32([2, 2]).handle }), call: (h) => shim.shim_transpose(h.out, h.a, 0, 1, null) },
  {
    fn: "shim_copy_strided", names: ["dst", "src", "shape", "dst_strides", "src_strides"],
    make: () => ({ dst: f32([2]).handle, src: f32([2]).handle, shape: ptr(strides, 16), dst_strides: ptr(strides), src_strides: ptr(strides, 8) }),
    call: (h) => shim.shim_copy_strided(h.dst, 0, h.dst_strides, h.src, 0, h.src_strides, 1, h.shape, null),
  },
  { fn: "shim_gather", names: ["out", "a", "index"], make: () => ({ out: f32([1]).handle, a: f32([2]).handle, index: i64([1], [0]).handle }), call: (h) => shim.shim_gather(h.out, h.a, 0, h.index, null) },
  { fn: "shim_softmax", names: ["out", "a"], make: () => ({ out: f32([2]).handle, a: f32([2]).handle }), call: (h) => shim.shim_softmax(h.out, h.a, 0, 0, null) },
  { fn: "shim_layer_norm", names: ["out", "a"], make: () => ({ out: f32([2]).handle, a: f32([2]).handle }), call: (h) => shim.shim_layer_norm(h.out, h.a, null, null, 2, 1e-5, null) },
  { fn: "shim_index_select", names: ["out", "a", "index"], make: () => ({ out: f32([1]).handle, a: f32([2]).handle, index: i64([1], [0]).handle }), call: (h) => shim.shim_index_select(h.out, h.a, 0, h.index, null) },
  { fn: "shim_triangle(tril)", names: ["out", "a"], make: () => ({ out: f32([2, 2]).handle, a: f32([2, 2]).handle }), call: (h) => shim.shim_triangle(h.out, h.a, 0, 0, null) },
  {
    fn: "shim_attention", names: ["out", "q", "k", "v"],
    make: () => ({ out: f32([1, 2, 2]).handle, q: f32([1, 2, 2]).handle, k: f32([1, 2, 2]).handle, v: f32([1, 2, 2]).handle }),
    call: (h) => shim.shim_attention(h.out, h.q, h.k, h.v, null, 1, 0, null),
  },
  { fn: "shim_rms_norm", names: ["out", "a"], make: () => ({ out: f32([2]).handle, a: f32([2]).handle }), call: (h) => shim.shim_rms_norm(h.out, h.a, null, 2, 1e-6, null) },
  { fn: "shim_dropout", names: ["out", "mask", "a"], make: () => ({ out: f32([2]).handle, mask: empty("bool", [2]).handle, a: f32([2]).handle }), call: (h) => shim.shim_dropout(h.out, h.mask, h.a, 0.5, 1n, 0n, null) },
  { fn: "shim_scatter", names: ["out", "index", "src"], make: () => ({ out: f32([2]).handle, index: i64([1], [0]).handle, src: f32([1]).handle }), call: (h) => shim.shim_scatter(ScatterOp.assign, h.out, 0, h.index, h.src, null) },
  {
    fn: "shim_nll_loss", names: ["out", "input", "target"],
    make: () => ({ out: empty("f32", []).handle, input: f32([1, 2]).handle, target: i64([1], [0]).handle }),
    call: (h) => shim.shim_nll_loss(h.out, h.input, h.target, null, -100, 1, null),
  },
  { fn: "shim_mse_loss", names: ["out", "a", "b"], make: () => ({ out: empty("f32", []).handle, a: f32([2]).handle, b: f32([2]).handle }), call: (h) => shim.shim_mse_loss(h.out, h.a, h.b, 1, null) },
  {
    fn: "shim_cat", names: ["out", "parts"],
    make: () => ({ out: f32([2]).handle, parts: ptr(new BigUint64Array([BigInt(f32([2]).handle)])) }),
    call: (h) => shim.shim_cat(h.out, 1, h.parts, 0, null),
  },
  { fn: "shim_index_add", names: ["out", "index", "src"], make: () => ({ out: f32([2]).handle, index: i64([1], [0]).handle, src: f32([1]).handle }), call: (h) => shim.shim_index_add(h.out, 0, h.index, h.src, 1, null) },
  { fn: "shim_sgd", names: ["param"], make: () => ({ param: f32([2]).handle, grad: f32([2]).handle }), call: (h) => shim.shim_sgd(h.param, h.grad, null, 0.1, 0, 0, 0, 0, null) },
  {
    fn: "shim_adamw", names: ["param"], make: () => ({ param: f32([2]).handle, grad: f32([2]).handle, m: f32([2]).handle, v: f32([2]).handle }),
    call: (h) => shim.shim_adamw(h.param, h.grad, h.m, h.v, null, 1e-3, 0.9, 0.999, 1e-8, 0, 1, 0, null),
  },
]

describe("null pointer arguments are refused, naming the argument", () => {
  for (const entry of NULL_CHECKS)
    for (const name of entry.names)
      test(`${entry.fn}: ${name}`, () => {
        const handles = entry.make()
        const good = entry.call(handles)
        expect(good).toBe(0) // the call with every argument good succeeds, so the refusal below is the null's
        const escaped = `${entry.fn}: ${name} is null`.replace(/[()[\]]/g, "\\$&")
        expectShimError(() => call(entry.fn, entry.call({ ...handles, [name]: null })), "Invalid", new RegExp(escaped))
      })
})
