// The cuda backend against the cpu backend, op by op, on the same inputs (special values and
// seeded random ones) in one process: integer, bool, layout and conversion results must be
// equal bit for bit; floating results too, except where CUDA's libm (exp, log, tanh, pow) or
// the order of a sum may differ in the last bits, which get a few units in the last place.
// Every failing call must fail alike on both: the same status and the same message. Skipped,
// saying why, when the cuda backend cannot load.
import { describe, expect, test } from "bun:test"
import { testUnless } from "../skip.ts"
import { loadNative, type Native } from "../../ffi/native.ts"
import { alike } from "./alike.ts"
import * as ops from "../../ffi/ops.ts"
import { BinaryOp, ReduceOp, TernaryOp, type BinaryOpName, type ReduceOpName, type TernaryOpName, type UnaryOpName } from "../../ffi/symbols.ts"
import { Tensor } from "../../ffi/tensor.ts"
import { DTYPES, HostTensor, ITEM_SIZE, type DType } from "../../src/protocol/values.ts"

let cuda: Native | undefined
try {
  cuda = loadNative("cuda")
} catch (e) {
  console.log(`tests/cuda/parity: skipped, the cuda backend cannot load: ${(e as Error).message}`)
}
const cpu = loadNative("cpu")
const parity = testUnless(cuda === undefined ? "the cuda backend cannot load (tests/cuda/parity said why above)" : undefined)

const FLOATS: ReadonlyArray<DType> = ["f32", "f64", "f16", "bf16"]
const isFloat = (d: DType) => FLOATS.includes(d)

// ---- inputs ---------------------------------------------------------------------------------

/** mulberry32: seeded, so a failure reproduces. */
const generator = (seed: number) => {
  let s = seed >>> 0
  return () => {
    s = (s + 0x6d2b79f5) >>> 0
    let t = Math.imul(s ^ (s >>> 15), s | 1)
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61)
    return ((t ^ (t >>> 14)) >>> 0) / 2 ** 32
  }
}

const SPECIAL_FLOATS = [0, -0, 1, -1, 0.5, -2.5, 3.75, 1e-3, 1e-6, -1e-40, 6e-8, 65504, 65520, -70000, 1e30, -3e38, 1e300, Infinity, -Infinity, NaN, 2 ** 31, -(2 ** 63), 300, -129.5]
const SPECIAL_INTS = [0, 1, -1, 2, -2, 7, -7, 127, 128, 255, 256, -128, 2 ** 31 - 1, -(2 ** 31), 2 ** 53, -(2 ** 62)]

interface Draw {
  readonly lo?: number
  readonly hi?: number
  /** Start with the special values (default true). */
  readonly specials?: boolean
  /** Whole numbers only, so float sums and products are exact in any order. */
  readonly integral?: boolean
}

/** n little-endian elements of dtype: the special values first, then random ones in [lo, hi]. */
const bytesOf = (dtype: DType, n: number, seed: number, { lo = -100, hi = 100, specials = true, integral = false }: Draw = {}): Uint8Array => {
  const next = generator(seed)
  const out = new Uint8Array(n * ITEM_SIZE[dtype])
  const view = new DataView(out.buffer)
  const pool = isFloat(dtype) ? SPECIAL_FLOATS : SPECIAL_INTS
  for (let i = 0; i < n; i++) {
    const drawn = lo + (hi - lo) * next()
    const x = specials && i < pool.length ? pool[i]! : integral ? Math.round(drawn) : drawn
    const at = i * ITEM_SIZE[dtype]
    switch (dtype) {
      case "f32": view.setFloat32(at, x, true); break
      case "f64": view.setFloat64(at, x, true); break
      case "f16": view.setFloat16(at, x, true); break
      case "bf16": view.setUint16(at, new Uint32Array(new Float32Array([x]).buffer)[0]! >>> 16, true); break // truncated: any bits do
      case "i32": view.setInt32(at, Math.trunc(x) | 0, true); break
      case "i64": view.setBigInt64(at, BigInt.asIntN(64, BigInt(Math.trunc(Number.isFinite(x) ? x : 0))), true); break
      case "u8": view.setUint8(at, Math.trunc(x) & 255); break
      case "bool": view.setUint8(at, Math.trunc(x) & 1 ? 1 : i % 3 === 0 ? 2 : 0); break // 2: a nonzero byte that is not 1
    }
  }
  return out
}

/** The same host bytes as a tensor on each backend. */
const pair = (dtype: DType, shape: ReadonlyArray<number>, bytes: Uint8Array): [Tensor, Tensor] => [
  Tensor.fromHost(cpu, new HostTensor(dtype, shape, bytes)),
  Tensor.fromHost(cuda!, new HostTensor(dtype, shape, bytes)),
]
const emptyPair = (dtype: DType, shape: ReadonlyArray<number>): [Tensor, Tensor] => [Tensor.empty(cpu, dtype, shape), Tensor.empty(cuda!, dtype, shape)]
const freeAll = (...ts: Tensor[]) => ts.forEach((t) => t.free())

// ---- comparison -----------------------------------------------------------------------------

/** Element bits as an ordered integer (so adjacent floats differ by 1), and whether it is NaN. */
const elements = (dtype: DType, bytes: Uint8Array): Array<{ key: bigint; nan: boolean }> => {
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength)
  const size = ITEM_SIZE[dtype]
  const ordered = (bits: bigint, width: bigint) => {
    const sign = 1n << (width - 1n)
    return bits & sign ? -(bits & (sign - 1n)) : bits
  }
  return Array.from({ length: bytes.byteLength / size }, (_, i) => {
    const at = i * size
    switch (dtype) {
      case "f32": { const b = BigInt(view.getUint32(at, true)); return { key: ordered(b, 32n), nan: Number.isNaN(view.getFloat32(at, true)) } }
      case "f64": { const b = view.getBigUint64(at, true); return { key: ordered(b, 64n), nan: Number.isNaN(view.getFloat64(at, true)) } }
      case "f16": { const b = view.getUint16(at, true); return { key: ordered(BigInt(b), 16n), nan: (b & 0x7c00) === 0x7c00 && (b & 0x3ff) !== 0 } }
      case "bf16": { const b = view.getUint16(at, true); return { key: ordered(BigInt(b), 16n), nan: (b & 0x7f80) === 0x7f80 && (b & 0x7f) !== 0 } }
      case "i32": return { key: BigInt(view.getInt32(at, true)), nan: false }
      case "i64": return { key: view.getBigInt64(at, true), nan: false }
      default: return { key: BigInt(view.getUint8(at)), nan: false }
    }
  })
}

/** Lists the elements where the backends differ by more than `ulps` (NaN matches any NaN). */
const differences = (what: string, x: Tensor, y: Tensor, ulps = 0): string[] => {
  const a = elements(x.dtype, x.toHost().data), b = elements(y.dtype, y.toHost().data)
  const bad: string[] = []
  for (let i = 0; i < a.length; i++) {
    const p = a[i]!, q = b[i]!
    if (p.nan || q.nan ? p.nan !== q.nan : (p.key > q.key ? p.key - q.key : q.key - p.key) > BigInt(ulps))
      bad.push(`${what}[${i}]: cpu ${p.key}, cuda ${q.key}`)
  }
  return bad.slice(0, 20)
}

const N = 61 // odd, over every vector width, past the special values

describe("cuda matches cpu", () => {
  parity("cast: every pair of dtypes, bit for bit", () => {
    const bad: string[] = []
    for (const from of DTYPES) {
      const [a, b] = pair(from, [N], bytesOf(from, N, 1))
      for (const to of DTYPES) {
        const [x, y] = emptyPair(to, [N])
        if (alike(`cast ${from}->${to}`, (w) => ops.cast(w ? y : x, w ? b : a))) bad.push(...differences(`${from}->${to}`, x, y))
        freeAll(x, y)
      }
      freeAll(a, b)
    }
    expect(bad).toEqual([])
  })

  parity("fill, arange and rand", () => {
    const bad: string[] = []
    for (const dtype of DTYPES) {
      const [x, y] = emptyPair(dtype, [2, N])
      for (const value of [0, -0.5, 1e6, 300, NaN, -Infinity, 0.1]) {
        ops.fill(x, value), ops.fill(y, value)
        bad.push(...differences(`fill ${dtype} ${value}`, x, y))
      }
      for (const [start, step] of [[0, 1], [-3, 0.1], [1e9, -7.25]]) {
        ops.arange(x, start!, step!), ops.arange(y, start!, step!)
        bad.push(...differences(`arange ${dtype} ${start} ${step}`, x, y))
      }
      for (const normal of [false, true])
        if (alike(`rand ${dtype}`, (w) => ops.rand(w ? y : x, 1234, 2 ** 33 - 5, normal))) {
          // uniforms are exact integer arithmetic; normals use log and cos, which may differ in an ulp
          bad.push(...differences(`rand ${dtype} normal=${normal}`, x, y, normal ? 4 : 0))
        }
      freeAll(x, y)
    }
    expect(bad).toEqual([])
  })

  parity("unary ops over every dtype", () => {
    const bad: string[] = []
    const ulps: Record<UnaryOpName, number> = {
      neg: 0, abs: 0, relu: 0, sqrt: 0, exp: 3, log: 2, tanh: 3, sigmoid: 4, erf: 2, log1p: 2, expm1: 3, rsqrt: 2, reciprocal: 0,
      sin: 2, cos: 2, silu: 4, softplus: 4, gelu: 4, gelu_tanh: 6, floor: 0, ceil: 0, round: 0, trunc: 0, sign: 0, isnan: 0, isinf: 0, logical_not: 0,
    }
    const predicates: ReadonlySet<UnaryOpName> = new Set(["isnan", "isinf", "logical_not"])
    for (const dtype of DTYPES) {
      const [a, b] = pair(dtype, [N], bytesOf(dtype, N, 2, { lo: -20, hi: 20 }))
      for (const op of Object.keys(ulps) as UnaryOpName[]) {
        const [x, y] = emptyPair(predicates.has(op) ? "bool" : dtype, [N])
        if (alike(`${op} ${dtype}`, (w) => ops.unary(op, w ? y : x, w ? b : a))) bad.push(...differences(`${op} ${dtype}`, x, y, ulps[op]))
        freeAll(x, y)
      }
      freeAll(a, b)
    }
    expect(bad).toEqual([])
  })

  parity("binary ops, tensor with tensor, with a broadcast one, and with a scalar", () => {
    const bad: string[] = []
    const OPS = Object.keys(BinaryOp) as BinaryOpName[]
    for (const dtype of DTYPES) {
      // divisors and exponents without zeros or negatives, so integer div and pow run
      const [a, b] = pair(dtype, [N], bytesOf(dtype, N, 3, { lo: -50, hi: 50 }))
      const [p, q] = pair(dtype, [N], bytesOf(dtype, N, 4, { lo: 1, hi: 6, specials: false }))
      const [s, t] = pair(dtype, [], bytesOf(dtype, 1, 5, { lo: 2, hi: 3, specials: false }))
      for (const op of OPS) {
        const outDtype = ops.isComparison(op) ? "bool" : dtype
        const ulps = op === "pow" && isFloat(dtype) ? 8 : 0
        const [x, y] = emptyPair(outDtype, [N])
        if (alike(`${op} ${dtype}`, (w) => ops.binary(op, w ? y : x, w ? b : a, w ? q : p)))
          bad.push(...differences(`${op} ${dtype}`, x, y, ulps))
        if (alike(`${op} ${dtype} broadcast`, (w) => ops.binary(op, w ? y : x, w ? t : s, w ? b : a)))
          bad.push(...differences(`${op} ${dtype} broadcast`, x, y, ulps))
        for (const [scalar, first] of [[2.5, false], [-3, true], [0.1, false]] as const)
          if (alike(`${op} ${dtype} scalar ${scalar}`, (w) => ops.binaryScalar(op, w ? y : x, w ? b : a, scalar, first)))
            bad.push(...differences(`${op} ${dtype} scalar ${scalar} first=${first}`, x, y, ulps))
        freeAll(x, y)
      }
      freeAll(a, b, p, q, s, t)
    }
    expect(bad).toEqual([])
  })

  parity("ternary ops over every dtype, with full and one-element operands", () => {
    const bad: string[] = []
    for (const dtype of DTYPES) {
      const [a, b] = pair(dtype, [N], bytesOf(dtype, N, 9, { lo: -50, hi: 50 }))
      const [p, q] = pair(dtype, [N], bytesOf(dtype, N, 10, { lo: 1, hi: 6, specials: false }))
      const [s, t] = pair(dtype, [], bytesOf(dtype, 1, 11, { lo: 0, hi: 1, specials: false }))
      const [m, n] = pair("bool", [N], bytesOf("bool", N, 12))
      for (const op of Object.keys(TernaryOp) as TernaryOpName[]) {
        const [x, y] = emptyPair(dtype, [N])
        const [c0, c1] = op === "where" ? [m, n] : [a, b]
        if (alike(`${op} ${dtype}`, (w) => ops.ternary(op, w ? y : x, w ? c1 : c0, w ? b : a, w ? q : p, 0.5)))
          bad.push(...differences(`${op} ${dtype}`, x, y, isFloat(dtype) ? 2 : 0))
        if (alike(`${op} ${dtype} broadcast`, (w) => ops.ternary(op, w ? y : x, w ? c1 : c0, w ? t : s, w ? b : a, -2)))
          bad.push(...differences(`${op} ${dtype} broadcast`, x, y, isFloat(dtype) ? 2 : 0))
        freeAll(x, y)
      }
      freeAll(a, b, p, q, s, t, m, n)
    }
    expect(bad).toEqual([])
  })

  parity("argmax, argmin and cumsum over each dim and over all", () => {
    const bad: string[] = []
    const shape = [5, 7, 9]
    for (const dtype of DTYPES) {
      const [a, b] = pair(dtype, shape, bytesOf(dtype, 315, 13, { lo: -4, hi: 4, integral: true }))
      for (const dim of [0, 1, 2, undefined]) {
        const outShape = dim === undefined ? [] : shape.filter((_, i) => i !== dim)
        for (const op of ["max", "min"] as const) {
          const [x, y] = emptyPair("i64", outShape)
          if (alike(`arg${op} ${dtype} dim ${dim}`, (w) => ops.argreduce(op, w ? y : x, w ? b : a, dim))) bad.push(...differences(`arg${op} ${dtype} dim ${dim}`, x, y))
          freeAll(x, y)
        }
        if (dim === undefined) continue
        const [x, y] = emptyPair(isFloat(dtype) ? dtype : "i64", shape)
        if (alike(`cumsum ${dtype} dim ${dim}`, (w) => ops.cumsum(w ? y : x, w ? b : a, dim))) bad.push(...differences(`cumsum ${dtype} dim ${dim}`, x, y))
        freeAll(x, y)
      }
      freeAll(a, b)
    }
    expect(bad).toEqual([])
  })

  parity("integer division by zero and negative powers fail alike, before writing", () => {
    for (const dtype of ["i32", "i64", "u8"] as const) {
      const [a, b] = pair(dtype, [N], bytesOf(dtype, N, 6, { lo: 1, hi: 9, specials: false }))
      const [z, zz] = pair(dtype, [N], bytesOf(dtype, N, 7, { lo: -3, hi: 3 }))
      const [x, y] = pair(dtype, [N], bytesOf(dtype, N, 8, { lo: 0, hi: 0, specials: false }))
      for (const op of ["div", "floor_divide", "remainder"] as const) alike(`${op} ${dtype}`, (w) => ops.binary(op, w ? y : x, w ? b : a, w ? zz : z))
      alike(`pow ${dtype}`, (w) => ops.binary("pow", w ? y : x, w ? b : a, w ? zz : z))
      alike(`div ${dtype} by scalar 0`, (w) => ops.binaryScalar("div", w ? y : x, w ? b : a, 0, false))
      alike(`scalar div ${dtype}`, (w) => ops.binaryScalar("div", w ? y : x, w ? zz : z, 5, true))
      expect(differences(`${dtype} untouched`, x, y)).toEqual([])
      freeAll(a, b, z, zz, x, y)
    }
  })

  parity("reductions over each dim and over all, into their own dtype and into f64", () => {
    // whole numbers, so sums and products are exact in any order; NaN and infinities placed in
    // some slices, so propagation is compared too
    const bad: string[] = []
    const shape = [5, 7, 9]
    for (const dtype of DTYPES)
      for (const op of Object.keys(ReduceOp) as ReduceOpName[]) {
        const [lo, hi] = op === "prod" ? [-2, 2] : [-50, 50]
        const bytes = bytesOf(dtype, 315, 9, { lo, hi, specials: false, integral: true })
        if (isFloat(dtype)) {
          const view = new DataView(bytes.buffer)
          const put = (i: number, x: number) => {
            const at = i * ITEM_SIZE[dtype]
            if (dtype === "f32") view.setFloat32(at, x, true)
            else if (dtype === "f64") view.setFloat64(at, x, true)
            else if (dtype === "f16") view.setFloat16(at, x, true)
            else view.setUint16(at, new Uint32Array(new Float32Array([x]).buffer)[0]! >>> 16, true)
          }
          put(3, NaN), put(100, Infinity), put(200, -Infinity), put(201, Infinity)
        }
        const [a, b] = pair(dtype, shape, bytes)
        for (const dim of [0, 1, 2, undefined]) {
          const outShape = dim === undefined ? [] : shape.filter((_, i) => i !== dim)
          for (const outDtype of [dtype, "f64"] as DType[]) {
            const [x, y] = emptyPair(outDtype, outShape)
            if (alike(`${op} ${dtype} dim ${dim}`, (w) => ops.reduce(op, w ? y : x, w ? b : a, dim)))
              bad.push(...differences(`${op} ${dtype}->${outDtype} dim ${dim}`, x, y))
            freeAll(x, y)
          }
        }
        freeAll(a, b)
      }
    expect(bad).toEqual([])
  })

  parity("matmul: exact on whole numbers, batched and with a shared b", () => {
    const bad: string[] = []
    for (const dtype of DTYPES)
      for (const [sa, sb] of [[[7, 5], [5, 3]], [[2, 3, 4], [2, 4, 6]], [[3, 2, 4], [4, 5]], [[1, 17], [17, 33]]]) {
        const draw = { lo: -3, hi: 3, specials: false, integral: true }
        const [a, b] = pair(dtype, sa!, bytesOf(dtype, sa!.reduce((m, d) => m * d), 10, draw))
        const [c, d] = pair(dtype, sb!, bytesOf(dtype, sb!.reduce((m, e) => m * e), 11, draw))
        const outShape = [...sa!.slice(0, -1), sb!.at(-1)!]
        const [x, y] = emptyPair(dtype, outShape)
        // whole numbers: every sum is exact in f32; cuBLAS may round f16/bf16 partial sums
        const ulps = dtype === "f16" || dtype === "bf16" ? 1 : 0
        if (alike(`matmul ${dtype}`, (w) => ops.matmul(w ? y : x, w ? b : a, w ? d : c)))
          bad.push(...differences(`matmul ${dtype} [${sa}]@[${sb}]`, x, y, ulps))
        freeAll(a, b, c, d, x, y)
      }
    expect(bad).toEqual([])
  })

  parity("transpose of every pair of dims, bit for bit", () => {
    const bad: string[] = []
    const shape = [3, 33, 2, 35]
    for (const dtype of DTYPES) {
      const [a, b] = pair(dtype, shape, bytesOf(dtype, 3 * 33 * 2 * 35, 12))
      for (let d0 = 0; d0 < 4; d0++)
        for (let d1 = 0; d1 < 4; d1++) {
          const outShape = shape.map((s, i) => (i === d0 ? shape[d1]! : i === d1 ? shape[d0]! : s))
          const [x, y] = emptyPair(dtype, outShape)
          if (alike(`transpose ${dtype} ${d0} ${d1}`, (w) => ops.transpose(w ? y : x, w ? b : a, d0, d1)))
            bad.push(...differences(`transpose ${dtype} (${d0}, ${d1})`, x, y))
          freeAll(x, y)
        }
      freeAll(a, b)
    }
    expect(bad).toEqual([])
  })

  parity("fused sgd and adamw steps, each flag, three steps: the same bits", () => {
    const bad: string[] = []
    const copy = (t: Tensor, native: Native) => Tensor.fromHost(native, t.toHost())
    for (const dtype of ["f32", "f64"] as const) {
      const start = pair(dtype, [N], bytesOf(dtype, N, 16, { lo: -2, hi: 2, specials: false }))
      const grads = [17, 18, 19].map((seed) => pair(dtype, [N], bytesOf(dtype, N, seed, { lo: -3, hi: 3, specials: seed === 17 })))
      const sgd = [{ momentum: 0, dampening: 0, nesterov: false, maximize: false }, { momentum: 0.9, dampening: 0.1, nesterov: false, maximize: true }, { momentum: 0.8, dampening: 0, nesterov: true, maximize: false }]
      for (const o of sgd) {
        const [p, q] = [copy(start[0], cpu), copy(start[1], cuda!)], [m, n] = emptyPair(dtype, [N])
        grads.forEach(([g, h], k) => {
          const a = { lr: 0.05, weightDecay: 0.01, ...o, first: k === 0 }
          alike(`sgd ${dtype} ${JSON.stringify(o)}`, (w) => ops.sgd(w ? q : p, w ? h : g, o.momentum ? (w ? n : m) : undefined, a))
        })
        bad.push(...differences(`sgd ${dtype} ${JSON.stringify(o)}`, p, q, 4))
        freeAll(p, q, m, n)
      }
      for (const o of [{ amsgrad: false, maximize: false }, { amsgrad: true, maximize: true }]) {
        const [p, q] = [copy(start[0], cpu), copy(start[1], cuda!)]
        const [m0, m1] = pair(dtype, [N], new Uint8Array(N * ITEM_SIZE[dtype])), [v0, v1] = pair(dtype, [N], new Uint8Array(N * ITEM_SIZE[dtype]))
        const [x0, x1] = pair(dtype, [N], new Uint8Array(N * ITEM_SIZE[dtype]))
        grads.forEach(([g, h], k) => {
          const a = { lr: 0.01, beta1: 0.9, beta2: 0.99, eps: 1e-8, weightDecay: 0.1, step: k + 1, ...o }
          alike(`adamw ${dtype} ${JSON.stringify(o)}`, (w) => ops.adamw(w ? q : p, w ? h : g, w ? m1 : m0, w ? v1 : v0, o.amsgrad ? (w ? x1 : x0) : undefined, a))
        })
        for (const [what, c, d] of [["param", p, q], ["exp_avg", m0, m1], ["exp_avg_sq", v0, v1]] as const) bad.push(...differences(`adamw ${dtype} ${what} ${JSON.stringify(o)}`, c, d, 4))
        freeAll(p, q, m0, m1, v0, v1, x0, x1)
      }
      freeAll(...start, ...grads.flat())
    }
    expect(bad).toEqual([])
  })

  parity("bad calls fail alike", () => {
    const [a, b] = pair("f32", [2, 3], bytesOf("f32", 6, 13))
    const [i, j] = pair("i32", [3], bytesOf("i32", 3, 14))
    const [x, y] = emptyPair("f32", [3, 2])
    const [bx, by] = emptyPair("bool", [2, 3])
    const [sq, sr] = pair("f32", [3, 3], bytesOf("f32", 9, 15))
    const call = (w: 0 | 1, name: string, ...args: unknown[]) => {
      const native = w ? cuda! : cpu
      const handles = args.map((v) => (v instanceof Tensor ? v.handle : v))
      const fn = native.shim[name as keyof typeof native.shim] as (...a: unknown[]) => number
      native.check(fn(...handles), name)
    }
    alike("unary on bool", (w) => call(w, "shim_unary", 0, w ? by : bx, w ? by : bx, null))
    alike("unary exp on i32", (w) => call(w, "shim_unary", 2, w ? j : i, w ? j : i, null))
    alike("unknown binary op", (w) => call(w, "shim_binary", Object.keys(BinaryOp).length, w ? y : x, w ? b : a, w ? b : a, null))
    alike("binary out dtype", (w) => call(w, "shim_binary", BinaryOp.lt, w ? y : x, w ? b : a, w ? b : a, null))
    alike("ternary operand count", (w) => call(w, "shim_ternary", TernaryOp.lerp, w ? y : x, w ? b : a, w ? b : a, w ? y : x, 0, null))
    alike("reduce bad dim", (w) => call(w, "shim_reduce", 0, w ? y : x, w ? b : a, 5, null))
    alike("reduce out size", (w) => call(w, "shim_reduce", 0, w ? y : x, w ? b : a, -1, null))
    alike("matmul inner dims", (w) => call(w, "shim_matmul", w ? y : x, w ? b : a, w ? b : a, null))
    alike("matmul aliasing", (w) => call(w, "shim_matmul", w ? sr : sq, w ? sr : sq, w ? sr : sq, null))
    alike("transpose shape", (w) => call(w, "shim_transpose", w ? b : a, w ? b : a, 0, 1, null))
    alike("cast count", (w) => call(w, "shim_cast", w ? j : i, w ? b : a, null))
    alike("rand on i32", (w) => call(w, "shim_rand", w ? j : i, 1, 0, 0, null))
    alike("spin negative", (w) => call(w, "shim_debug_stream_spin", null, -5))
    alike("sgd on i32", (w) => call(w, "shim_sgd", w ? j : i, w ? j : i, null, 0.1, 0, 0, 0, 0, null))
    alike("sgd grad shape", (w) => call(w, "shim_sgd", w ? b : a, w ? y : x, null, 0.1, 0, 0, 0, 0, null))
    alike("adamw step 0", (w) => call(w, "shim_adamw", w ? b : a, w ? sr : sq, w ? y : x, w ? y : x, null, 0.1, 0.9, 0.99, 1e-8, 0, 0, 0, null))
    freeAll(a, b, i, j, x, y, bx, by, sq, sr)
  })

  parity("the later kernels: triangle, scatter, index_add and dropout bit for bit; attention and rms_norm within a few ulps", () => {
    const bad: string[] = []
    for (const dtype of DTYPES) {
      const [a, b] = pair(dtype, [3, 5, 7], bytesOf(dtype, 105, 16))
      const [x, y] = emptyPair(dtype, [3, 5, 7])
      for (const [diagonal, upper] of [[0, false], [2, true], [-3, false], [-1, true]] as const)
        if (alike(`triangle ${dtype} ${diagonal} ${upper}`, (w) => ops.triangle(w ? y : x, w ? b : a, diagonal, upper)))
          bad.push(...differences(`triangle ${dtype} ${diagonal} ${upper}`, x, y))
      // scatter into a copy of a: each line along dim 1 gets the same target twice, so add sums in order
      const index = Array.from({ length: 3 * 4 * 7 }, (_, e) => (e * 7) % 5)
      const [ia, ib] = pair("i64", [3, 4, 7], new Uint8Array(BigInt64Array.from(index.map(BigInt)).buffer))
      const [sa, sb] = pair(dtype, [3, 4, 7], bytesOf(dtype, 84, 17, { lo: -4, hi: 4, specials: false, integral: true }))
      for (const op of ["assign", "add"] as const) {
        ops.cast(x, a), ops.cast(y, b)
        if (alike(`scatter ${op} ${dtype}`, (w) => ops.scatter(op, w ? y : x, 1, w ? ib : ia, w ? sb : sa)))
          bad.push(...differences(`scatter ${op} ${dtype}`, x, y))
      }
      // index_add into a copy of a along dim 1, repeated entries summed in index order (integral values: exact with or without fma)
      const [ja, jb] = pair("i64", [4], new Uint8Array(BigInt64Array.from([4n, 0n, 4n, 2n]).buffer))
      ops.cast(x, a), ops.cast(y, b)
      if (alike(`index_add ${dtype}`, (w) => ops.indexAdd(w ? y : x, 1, w ? jb : ja, w ? sb : sa, dtype === "bool" ? 1 : 2)))
        bad.push(...differences(`index_add ${dtype}`, x, y))
      freeAll(ja, jb)
      if (isFloat(dtype)) {
        const [ma, mb] = emptyPair("bool", [3, 5, 7])
        for (const p of [0.1, 0.5, 1])
          if (alike(`dropout ${dtype} ${p}`, (w) => ops.dropout(w ? y : x, w ? mb : ma, w ? b : a, p, 99n, 2n ** 40n)))
            bad.push(...differences(`dropout ${dtype} ${p}`, x, y), ...differences(`dropout mask ${dtype} ${p}`, ma, mb))
        const [q, r] = pair(dtype, [3, 5, 7], bytesOf(dtype, 105, 18, { lo: -2, hi: 2, specials: false }))
        const [wa, wb] = pair(dtype, [7], bytesOf(dtype, 7, 19, { lo: 0.5, hi: 2, specials: false }))
        if (alike(`rms_norm ${dtype}`, (w) => ops.rmsNorm(w ? y : x, w ? r : q, w ? wb : wa, 7, 1e-5)))
          bad.push(...differences(`rms_norm ${dtype}`, x, y, 4))
        const [k1, k2] = pair(dtype, [3, 6, 7], bytesOf(dtype, 126, 20, { lo: -2, hi: 2, specials: false }))
        const [v1, v2] = pair(dtype, [3, 6, 4], bytesOf(dtype, 72, 21, { lo: -2, hi: 2, specials: false }))
        const [m1, m2] = pair("bool", [1, 5, 6], bytesOf("bool", 30, 22, { specials: false }))
        const [o1, o2] = emptyPair(dtype, [3, 5, 4])
        for (const [mask, causal] of [[false, false], [false, true], [true, false]] as const)
          if (alike(`attention ${dtype} mask=${mask} causal=${causal}`, (w) => ops.attention(w ? o2 : o1, w ? r : q, w ? k2 : k1, w ? v2 : v1, mask ? (w ? m2 : m1) : null, 0.35, causal)))
            bad.push(...differences(`attention ${dtype} mask=${mask} causal=${causal}`, o1, o2, dtype === "f64" ? 64 : 16))
        freeAll(ma, mb, q, r, wa, wb, k1, k2, v1, v2, m1, m2, o1, o2)
      }
      freeAll(a, b, x, y, ia, ib, sa, sb)
    }
    expect(bad).toEqual([])
  })
  parity("sort, cumprod, cummax, cummin and searchsorted over each dim, ties and NaN included, bit for bit", () => {
    const bad: string[] = []
    const shape = [5, 7, 9]
    for (const dtype of DTYPES) {
      // few distinct values (ties), the special ones (NaN, infinities, -0) first
      const [a, b] = pair(dtype, shape, bytesOf(dtype, 315, 21, { lo: -3, hi: 3, integral: true }))
      for (const dim of [0, 1, 2]) {
        for (const descending of [false, true]) {
          const [x, y] = emptyPair(dtype, shape), [i, j] = emptyPair("i64", shape)
          if (alike(`sort ${dtype} dim ${dim} descending ${descending}`, (w) => ops.sort(w ? y : x, w ? j : i, w ? b : a, dim, descending)))
            bad.push(...differences(`sort ${dtype} dim ${dim}`, x, y), ...differences(`sort indices ${dtype} dim ${dim}`, i, j))
          freeAll(x, y, i, j)
        }
        for (const op of ["max", "min"] as const) {
          const [x, y] = emptyPair(dtype, shape), [i, j] = emptyPair("i64", shape)
          if (alike(`cum${op} ${dtype} dim ${dim}`, (w) => ops.cumulative(op, w ? y : x, w ? j : i, w ? b : a, dim)))
            bad.push(...differences(`cum${op} ${dtype} dim ${dim}`, x, y), ...differences(`cum${op} indices ${dtype} dim ${dim}`, i, j))
          freeAll(x, y, i, j)
        }
        const [x, y] = emptyPair(isFloat(dtype) ? dtype : "i64", shape)
        if (alike(`cumprod ${dtype} dim ${dim}`, (w) => ops.cumulative("prod", w ? y : x, undefined, w ? b : a, dim))) bad.push(...differences(`cumprod ${dtype} dim ${dim}`, x, y))
        freeAll(x, y)
      }
      // searchsorted: a's rows sorted on the cpu, searched for a's values per row and for one shared row
      const [s, t] = emptyPair(dtype, shape), [i, j] = emptyPair("i64", shape)
      ops.sort(s, i, a, 2, false), ops.sort(t, j, b, 2, false)
      for (const right of [false, true]) {
        const [o, q] = emptyPair("i64", shape)
        if (alike(`searchsorted ${dtype} right ${right}`, (w) => ops.searchsorted(w ? q : o, w ? t : s, w ? b : a, right))) bad.push(...differences(`searchsorted ${dtype}`, o, q))
        freeAll(o, q)
      }
      freeAll(a, b, s, t, i, j)
    }
    expect(bad).toEqual([])
  })
})
