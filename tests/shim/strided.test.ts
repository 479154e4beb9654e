// Strided tensors (shim_tensor_as_strided): a view is storage + offset + shape + strides, as
// torch's. Its layout reads back; it may not reach outside its storage; copy_out gives its own
// elements and copy_in writes through. The kernels that read strides (elementwise, cast, fill,
// reductions, softmax, matmul) give on random layouts (permuted, stepped, offset, stride-0
// broadcast inputs, in place) bit for bit what their flat kernels give on contiguous copies of
// the same elements, and leave the storage's other elements alone; no op writes an expanded
// tensor; the other kernels refuse a non-contiguous operand, naming it.
import { afterEach, describe, expect, test } from "bun:test"
import { ptr } from "bun:ffi"
import * as ops from "../../ffi/ops.ts"
import { Tensor } from "../../ffi/tensor.ts"
import { bitsOf, empty, expectClose, expectShimError, freeAll, generator, native, product, sample, tensor, valuesOf, type DType } from "./helpers.ts"

afterEach(freeAll)

type Layout = { readonly shape: number[]; readonly strides: number[]; readonly offset: number; readonly storage: number }

/** A random layout of shape: dims laid out in a shuffled order, each stepped 1 or 2 apart and
 * padded, from a small offset; with `expand`, some dims of size > 1 get stride 0. */
const randomLayout = (next: () => number, shape: number[], expand = false): Layout => {
  const order = shape.map((_, d) => d).sort(() => next() - 0.5)
  const strides = shape.map(() => 0)
  let acc = 1
  for (let k = order.length - 1; k >= 0; k--) {
    const d = order[k]!
    const step = 1 + Math.floor(next() * 2)
    strides[d] = acc * step
    acc = acc * step * Math.max(shape[d]!, 1) + Math.floor(next() * 2)
  }
  if (expand) for (let d = 0; d < shape.length; d++) if (shape[d]! > 1 && next() < 0.35) strides[d] = 0
  const offset = Math.floor(next() * 4)
  const reach = shape.reduce((r, s, d) => r + (s - 1) * strides[d]!, 0)
  return { shape, strides, offset, storage: offset + (product(shape) > 0 ? reach + 1 : 0) + Math.floor(next() * 3) }
}

/** Storage positions of a layout's elements, in its logical row-major order. */
const positions = (l: Layout): number[] => {
  const out: number[] = []
  const n = product(l.shape)
  for (let i = 0; i < n; i++) {
    let rest = i, at = l.offset
    for (let d = l.shape.length - 1; d >= 0; d--) {
      at += (rest % l.shape[d]!) * l.strides[d]!
      rest = Math.floor(rest / l.shape[d]!)
    }
    out.push(at)
  }
  return out
}

const track: Tensor[] = []
afterEach(() => {
  for (const t of track.splice(0)) t.free()
})

/** A fresh storage of random values under layout l: [the storage, the view, the storage's values]. */
const stridedOf = (dtype: DType, l: Layout, seed: number, lo = -3, hi = 3): [Tensor, Tensor, number[]] => {
  const base = tensor(dtype, [l.storage], sample(dtype, l.storage, lo, hi, seed))
  const view = base.asStrided(l.shape, l.strides, l.offset)
  track.push(view)
  return [base, view, valuesOf(base)]
}

const gathered = (values: ReadonlyArray<number>, l: Layout): number[] => positions(l).map((p) => values[p]!)

/** The storage's elements outside l: what an op writing l must leave as they were. */
const outside = (values: ReadonlyArray<number>, l: Layout): number[] => {
  const inside = new Set(positions(l))
  return values.filter((_, i) => !inside.has(i))
}

const SHAPES = [[5], [3, 4], [2, 3, 4], [4, 1, 3], [2, 2, 3, 2], [3, 0, 2], []]

describe("as_strided and layouts", () => {
  test("a view reads back its strides and storage offset; contiguous is torch's rule (size-1 dims aside)", () => {
    const base = tensor("f32", [24], Array.from({ length: 24 }, (_, i) => i))
    const cases: Array<[number[], number[], number, boolean]> = [
      [[2, 3], [3, 1], 0, true],
      [[3, 2], [1, 3], 0, false],
      [[2, 1, 3], [3, 99, 1], 5, true],
      [[4], [2], 1, false],
      [[3, 3], [0, 1], 0, false],
      [[1], [7], 23, true],
      [[0, 3], [9, 9], 24, true],
    ]
    for (const [shape, strides, offset, contiguous] of cases) {
      const v = base.asStrided(shape, strides, offset)
      track.push(v)
      expect(v.layout()).toEqual({ strides, storageOffset: offset, contiguous })
    }
    expect(base.layout()).toEqual({ strides: [1], storageOffset: 0, contiguous: true })
    expect(base.block(4, [2, 5]).layout()).toEqual({ strides: [5, 1], storageOffset: 4, contiguous: true })
  })

  test("a view of a view takes an absolute storage offset; writes through either reach the other", () => {
    const base = tensor("i64", [12], Array.from({ length: 12 }, (_, i) => i))
    const t = base.asStrided([4, 3], [1, 4], 0) // base viewed [3, 4] and transposed
    track.push(t)
    expect(valuesOf(t)).toEqual([0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11])
    const col = t.asStrided([4], [1], 4) // the second row of [3, 4]: 4..7
    track.push(col)
    expect(valuesOf(col)).toEqual([4, 5, 6, 7])
    ops.fill(col, -1)
    expect(valuesOf(base)).toEqual([0, 1, 2, 3, -1, -1, -1, -1, 8, 9, 10, 11])
    ops.binaryScalar("mul", base, base, 2, false)
    expect(valuesOf(t)).toEqual([0, -2, 16, 2, -2, 18, 4, -2, 20, 6, -2, 22])
  })

  test("a view reaching outside its storage, or with a negative stride, is refused", () => {
    const base = tensor("f32", [10], Array.from({ length: 10 }, (_, i) => i))
    expectShimError(() => base.asStrided([2, 3], [5, 2], 1), "Invalid", /shim_tensor_as_strided: a f32 view from element 1 reaches element 10, outside its storage of 10 elements/)
    expectShimError(() => base.asStrided([4], [3], 1), "Invalid", /reaches element 10, outside its storage/)
    expectShimError(() => base.asStrided([2], [-1], 5), "Invalid", /stride -1 of dim 0 is negative/)
    expectShimError(() => base.asStrided([1], [1], -1), "Invalid", /from element -1/)
    expectShimError(() => base.asStrided([2], [2 ** 52], 0), "Invalid", /outside its storage/)
    // within: the last element; an empty view reaches no element, so it may start anywhere (as torch's)
    track.push(base.asStrided([2, 2], [9, 0], 0))
    track.push(base.asStrided([0], [1], 10))
    track.push(base.asStrided([3, 0], [4, 1], 13))
    // a block (shim_tensor_view) of a strided tensor has no flat meaning
    const t = base.asStrided([2, 5], [1, 2], 0)
    track.push(t)
    expectShimError(() => t.block(0, [2]), "Invalid", /shim_tensor_view: f32\[2, 5\] is not contiguous/)
    // Tensor.hostBytes gives no bytes for it (its elements are not one block), without asking the shim.
    expect(t.hostBytes()).toBeUndefined()
  })

  test("copy_out gives a view's elements in its row-major order, copy_in writes them through (random layouts)", () => {
    const next = generator(11)
    for (const dtype of ["f32", "f64", "f16", "i64", "u8", "bool"] as const)
      for (const shape of SHAPES) {
        const l = randomLayout(next, shape, true)
        const [base, view, values] = stridedOf(dtype, l, Math.floor(next() * 1e6), 0, 5)
        expect(valuesOf(view)).toEqual(gathered(values, l))
        if (l.strides.some((s, d) => s === 0 && l.shape[d]! > 1)) continue
        const fresh = sample(dtype, product(shape), 0, 5, 7)
        const host = tensor(dtype, shape, fresh).toHost()
        view.copyIn(host.data)
        expect(valuesOf(view)).toEqual(fresh)
        expect(outside(valuesOf(base), l)).toEqual(outside(values, l))
      }
  })
})

/** Runs `op` writing a fresh strided out of layout `lo` from the strided inputs, and the same op on
 * contiguous copies; the out's elements must match bit for bit and its storage's others stay. */
const differential = (
  outDtype: DType,
  lo: Layout,
  inputs: ReadonlyArray<Tensor>,
  op: (out: Tensor, inputs: ReadonlyArray<Tensor>) => void,
  seed: number,
): void => {
  const [outBase, out, before] = stridedOf(outDtype, lo, seed)
  const flatIn = inputs.map((t) => tensor(t.dtype, t.shape, valuesOf(t)))
  const flatOut = empty(outDtype, lo.shape)
  op(flatOut, flatIn)
  op(out, inputs)
  expect(bitsOf(out)).toEqual(bitsOf(flatOut))
  expect(outside(valuesOf(outBase), lo)).toEqual(outside(before, lo))
}

describe("elementwise kernels read strides", () => {
  const next = generator(2024)
  const seed = () => Math.floor(next() * 1e9)

  test("unary and cast: strided in and out, every dtype they take", () => {
    for (const shape of SHAPES)
      for (const [op, dtype] of [["exp", "f32"], ["neg", "i32"], ["abs", "f16"], ["sigmoid", "f64"], ["isnan", "bf16"], ["logical_not", "u8"]] as const) {
        const [, a] = stridedOf(dtype, randomLayout(next, shape, true), seed())
        differential(op === "isnan" || op === "logical_not" ? "bool" : dtype, randomLayout(next, shape), [a], (o, [x]) => ops.unary(op, o, x!), seed())
      }
    for (const shape of SHAPES) {
      const [, a] = stridedOf("f64", randomLayout(next, shape, true), seed(), -300, 300)
      differential("f16", randomLayout(next, shape), [a], (o, [x]) => ops.cast(o, x!), seed())
      differential("i32", randomLayout(next, shape), [a], (o, [x]) => ops.cast(o, x!), seed())
    }
  })

  test("binary: both strided, a stride-0 (expanded) operand, one element, and a count that repeats", () => {
    for (const shape of SHAPES)
      for (const [op, dtype] of [["add", "f32"], ["mul", "bf16"], ["lt", "f64"], ["sub", "i64"], ["maximum", "u8"], ["pow", "f32"]] as const) {
        const [, a] = stridedOf(dtype, randomLayout(next, shape, true), seed())
        const [, b] = stridedOf(dtype, randomLayout(next, shape, true), seed())
        const outDtype = op === "lt" ? "bool" : dtype
        differential(outDtype, randomLayout(next, shape), [a, b], (o, [x, y]) => ops.binary(op, o, x!, y!), seed())
        const one = tensor(dtype, [], [2])
        differential(outDtype, randomLayout(next, shape), [a, one], (o, [x, y]) => ops.binary(op, o, x!, y!), seed())
        if (shape.length > 1 && product(shape) > 0) {
          const last = shape.at(-1)!
          const [, row] = stridedOf(dtype, randomLayout(next, [last], false), seed())
          differential(outDtype, randomLayout(next, shape), [row, a], (o, [x, y]) => ops.binary(op, o, x!, y!), seed())
        }
      }
  })

  test("binary_scalar, ternary and fill on strided tensors", () => {
    for (const shape of SHAPES) {
      const [, a] = stridedOf("f32", randomLayout(next, shape, true), seed())
      differential("f32", randomLayout(next, shape), [a], (o, [x]) => ops.binaryScalar("sub", o, x!, 1.5, true), seed())
      differential("bool", randomLayout(next, shape), [a], (o, [x]) => ops.binaryScalar("ge", o, x!, 0, false), seed())
      const [, cond] = stridedOf("bool", randomLayout(next, shape, true), seed())
      const [, b] = stridedOf("f32", randomLayout(next, shape, true), seed())
      differential("f32", randomLayout(next, shape), [cond, a, b], (o, [c, x, y]) => ops.ternary("where", o, c!, x!, y!, 0), seed())
      const [, h1] = stridedOf("f16", randomLayout(next, shape, true), seed())
      const [, h2] = stridedOf("f16", randomLayout(next, shape, true), seed())
      const [, h3] = stridedOf("f16", randomLayout(next, shape, true), seed(), 1, 3)
      differential("f16", randomLayout(next, shape), [h1, h2, h3], (o, [x, y, z]) => ops.ternary("addcdiv", o, x!, y!, z!, 0.5), seed())
      differential("i32", randomLayout(next, shape), [], (o) => ops.fill(o, -7), seed())
    }
  })

  test("in place on a view changes exactly the view's elements of its storage", () => {
    for (const shape of SHAPES.slice(0, 5)) {
      const l = randomLayout(next, shape)
      const [base, v, values] = stridedOf("f32", l, seed())
      ops.unary("neg", v, v)
      ops.binaryScalar("add", v, v, 1, false)
      const expected = values.slice()
      for (const p of positions(l)) expected[p] = Math.fround(-values[p]! + 1)
      expect(valuesOf(base)).toEqual(expected)
    }
  })

  test("an integer division by zero anywhere in a strided divisor fails before anything is written; a zero it does not reach does not", () => {
    const base = tensor("i32", [8], [1, 0, 2, 0, 3, 0, 4, 5])
    const odd = base.asStrided([2, 2], [2, 4], 0) // elements 0, 4, 2, 6: no zero
    const hit = base.asStrided([2, 2], [1, 4], 0) // elements 0, 4, 1, 5: two zeros
    track.push(odd, hit)
    const a = tensor("i32", [2, 2], [10, 20, 30, 40])
    const out = tensor("i32", [2, 2], [9, 9, 9, 9])
    ops.binary("div", out, a, odd)
    expect(valuesOf(out)).toEqual([10, 6, 15, 10])
    ops.fill(out, 9)
    expectShimError(() => ops.binary("floor_divide", out, a, hit), "Invalid", /integer division by zero \(b has a zero element\)/)
    expectShimError(() => ops.binaryScalar("remainder", out, hit, 3, true), "Invalid", /integer division by zero \(a has a zero element\)/)
    expect(valuesOf(out)).toEqual([9, 9, 9, 9])
  })
})

describe("reductions, softmax and matmul read strides", () => {
  const next = generator(77)
  const seed = () => Math.floor(next() * 1e9)

  test("reduce, argreduce and (log) softmax over strided inputs, into strided outs", () => {
    for (const shape of [[3, 4], [2, 3, 4], [4, 1, 3], [2, 2, 3, 2]]) {
      const [, a] = stridedOf("f32", randomLayout(next, shape, true), seed())
      for (let dim = 0; dim < shape.length; dim++) {
        const left = shape.filter((_, d) => d !== dim)
        for (const op of ["sum", "max", "prod", "norm2"] as const)
          differential("f32", randomLayout(next, left), [a], (o, [x]) => ops.reduce(op, o, x!, dim), seed())
        differential("i64", randomLayout(next, left), [a], (o, [x]) => ops.argreduce("min", o, x!, dim), seed())
        for (const log of [false, true]) differential("f32", randomLayout(next, shape), [a], (o, [x]) => ops.softmax(o, x!, dim, log), seed())
      }
      differential("f32", randomLayout(next, []), [a], (o, [x]) => ops.reduce("mean", o, x!, undefined), seed())
    }
  })

  test("matmul: transposed, sliced and batched views through BLAS's flags and leading dims, and the loop's dtypes", () => {
    for (const dtype of ["f32", "f64", "bf16", "i64"] as const)
      for (const [shapeA, shapeB] of [[[3, 4], [4, 5]], [[2, 3, 4], [2, 4, 2]], [[2, 3, 4], [4, 3]], [[1, 5], [5, 1]]] as const) {
        const la = randomLayout(next, [...shapeA]), lb = randomLayout(next, [...shapeB])
        const [, a] = stridedOf(dtype, la, seed())
        const [, b] = stridedOf(dtype, lb, seed())
        const outShape = [...shapeA.slice(0, -1), shapeB.at(-1)!]
        const out = empty(dtype, outShape), flat = empty(dtype, outShape)
        ops.matmul(out, a, b)
        ops.matmul(flat, tensor(dtype, a.shape, valuesOf(a)), tensor(dtype, b.shape, valuesOf(b)))
        expectClose(dtype, valuesOf(out), valuesOf(flat), `${dtype} ${la.strides} @ ${lb.strides}`)
      }
    // the layouts BLAS reads in place: a transposed a, a row stride past the row (a narrowed last
    // dim), both transposed, and batches of transposed matrices
    const cases: Array<[number[], number[], number[], number[]]> = [
      [[3, 4], [1, 3], [4, 2], [2, 1]],
      [[3, 4], [6, 1], [4, 5], [1, 4]],
      [[3, 4], [1, 3], [4, 5], [1, 4]],
      [[2, 3, 4], [12, 1, 3], [2, 4, 2], [8, 1, 4]],
      [[2, 3, 4], [1, 8, 2], [4, 3], [1, 4]],
    ]
    for (const dtype of ["f32", "f64"] as const)
      for (const [shapeA, stridesA, shapeB, stridesB] of cases) {
        const span = (shape: number[], strides: number[]) => shape.reduce((r, d, i) => r + (d - 1) * strides[i]!, 1)
        const la = { shape: shapeA, strides: stridesA, offset: 1, storage: 1 + span(shapeA, stridesA) }
        const lb = { shape: shapeB, strides: stridesB, offset: 0, storage: span(shapeB, stridesB) }
        const [, a] = stridedOf(dtype, la, seed())
        const [, b] = stridedOf(dtype, lb, seed())
        const outShape = [...shapeA.slice(0, -1), shapeB.at(-1)!]
        const out = empty(dtype, outShape), flat = empty(dtype, outShape)
        ops.matmul(out, a, b)
        ops.matmul(flat, tensor(dtype, a.shape, valuesOf(a)), tensor(dtype, b.shape, valuesOf(b)))
        expectClose(dtype, valuesOf(out), valuesOf(flat), `${dtype} ${stridesA} @ ${stridesB}`)
      }
    // w.t() as a view: x @ w^T with w [n, k] stored as it is
    const x = tensor("f32", [2, 3], [1, 2, 3, 4, 5, 6])
    const w = tensor("f32", [2, 3], [1, 0, -1, 2, 1, 0])
    const wt = w.asStrided([3, 2], [1, 3], 0)
    track.push(wt)
    const out = empty("f32", [2, 2])
    ops.matmul(out, x, wt)
    expect(valuesOf(out)).toEqual([-2, 4, -2, 13])
    expectShimError(() => ops.matmul(x.asStrided([2, 2], [3, 1], 0), x, wt), "Invalid", /shim_matmul: out f32\[2, 2\] is not contiguous/)
  })
})

describe("refusals", () => {
  test("no op writes an expanded (stride 0) tensor, as torch refuses it; nothing is written", () => {
    const base = tensor("f32", [3], [1, 2, 3])
    const wide = base.asStrided([2, 3], [0, 1], 0)
    track.push(wide)
    const a = tensor("f32", [2, 3], [1, 2, 3, 4, 5, 6])
    const message = /out f32\[2, 3\] is expanded \(stride 0 along dim 0\): more than one of its elements refers to a single memory location/
    expectShimError(() => ops.unary("neg", wide, a), "Invalid", new RegExp(`shim_unary: ${message.source}`))
    expectShimError(() => ops.binary("add", wide, a, a), "Invalid", new RegExp(`shim_binary: ${message.source}`))
    expectShimError(() => ops.binaryScalar("add", wide, a, 1, false), "Invalid", /shim_binary_scalar: out f32\[2, 3\] is expanded/)
    expectShimError(() => ops.ternary("lerp", wide, a, a, a, 0), "Invalid", /shim_ternary: out f32\[2, 3\] is expanded/)
    expectShimError(() => ops.cast(wide, a), "Invalid", /shim_cast: out f32\[2, 3\] is expanded/)
    expectShimError(() => ops.fill(wide, 0), "Invalid", /shim_fill: out f32\[2, 3\] is expanded/)
    expectShimError(() => ops.softmax(wide, a, 1, false), "Invalid", /shim_softmax: out f32\[2, 3\] is expanded/)
    expectShimError(() => wide.copyIn(a.toHost().data), "Invalid", /shim_tensor_copy_in: t f32\[2, 3\] is expanded/)
    const col = base.asStrided([3, 2], [1, 0], 0)
    track.push(col)
    expectShimError(() => ops.reduce("sum", col, tensor("f32", [3, 2, 2], Array(12).fill(1)), 2), "Invalid", /shim_reduce: out f32\[3, 2\] is expanded \(stride 0 along dim 1\)/)
    expect(valuesOf(base)).toEqual([1, 2, 3])
    // reading an expanded tensor is fine
    const out = empty("f32", [2, 3])
    ops.unary("neg", out, wide)
    expect(valuesOf(out)).toEqual([-1, -2, -3, -1, -2, -3])
  })

  test("the kernels that read flat refuse a non-contiguous operand, naming it", () => {
    const base = tensor("f32", [12], Array.from({ length: 12 }, (_, i) => i))
    const t = base.asStrided([4, 3], [1, 4], 0)
    track.push(t)
    const out = empty("f32", [4, 3])
    expectShimError(() => ops.layerNorm(out, t, null, null, 3, 1e-5), "Invalid", /shim_layer_norm: a f32\[4, 3\] is not contiguous \(this op reads it flat: make it contiguous first\)/)
    expectShimError(() => ops.layerNorm(t, out, null, null, 3, 1e-5), "Invalid", /shim_layer_norm: out f32\[4, 3\] is not contiguous/)
    expectShimError(() => ops.sort(out, empty("i64", [4, 3]), t, 1, false), "Invalid", /shim_sort: a f32\[4, 3\] is not contiguous/)
    expectShimError(() => ops.cat(empty("f32", [8, 3]), [out, t], 0), "Invalid", /shim_cat: part f32\[4, 3\] is not contiguous/)
    expectShimError(() => ops.cumsum(out, t, 0), "Invalid", /shim_cumsum: a f32\[4, 3\] is not contiguous/)
    expectShimError(() => ops.rmsNorm(out, t, null, 3, 1e-5), "Invalid", /shim_rms_norm: a f32\[4, 3\] is not contiguous/)
    expectShimError(() => ops.transpose(empty("f32", [3, 4]), t, 0, 1), "Invalid", /shim_transpose: a f32\[4, 3\] is not contiguous/)
    expectShimError(() => ops.arange(t, 0, 1), "Invalid", /shim_arange: out f32\[4, 3\] is not contiguous/)
    const shape = new BigInt64Array([12n])
    expect(native.shim.shim_tensor_view(t.handle, 0, 1, ptr(shape), native.outsPtr)).toBe(1)
  })
})
