// Strided views through the worker's dispatch: every case of the op table (tests/ops/cases.ts)
// runs as a built-in twice, once on contiguous tensors and once with each tensor argument a
// random strided view (dims permuted, stepped, from an offset, padded storage; inputs also
// expanded, stride 0) holding the same elements, and the two must agree bit for bit (the BLAS
// products within their dtype's tolerance): results, and an in-place op's target read back
// through its view, the storage's other elements left alone. A sample runs in torch 1.13 on the
// same views (torch.as_strided). A write to an expanded tensor is refused with torch's message, nothing
// changed (fill_ and zero_ aside, as torch's).
import { afterAll, afterEach, beforeAll, describe, expect, spyOn, test } from "bun:test"
import { loadNative } from "../../ffi/native.ts"
import { Stream } from "../../ffi/stream.ts"
import { Tensor } from "../../ffi/tensor.ts"
import { Generator } from "../../src/ops/generator.ts"
import type { Param } from "../../src/ops/params.ts"
import { OPS, opNamed } from "../../src/ops/registry.ts"
import { mutatedParams, type OpSpec } from "../../src/ops/spec.ts"
import { float, HostTensor } from "../../src/protocol/values.ts"
import { builtinFunction } from "../../src/worker/kernels/dispatch.ts"
import { prepareBuiltin } from "../../src/worker/kernels/prepare.ts"
import { Run } from "../../src/worker/kernels/run.ts"
import { EXPANDED_WRITE } from "../../src/worker/kernels/staging.ts"
import { c, casesOf, f, isFloatNumber, isT, tensor as drawn, TOLERANCE, type Case, type T } from "../ops/cases.ts"
import { describeUnless } from "../skip.ts"
import { fromJson, torchMissing, TorchServer } from "../torch.ts"
import { host } from "./build.ts"

const native = loadNative("cpu")
const stream = Stream.default(native)
const context = (kwargs: Record<string, unknown>) => ({
  native, rank: 0, world: 1, device: "cpu" as const, stream, coords: {}, generator: new Generator(0), kwargs, group: () => { throw new Error("no group") },
})

const made: Tensor[] = []
afterEach(() => {
  for (const t of made.splice(0)) t.free()
})
const keep = <V extends Tensor>(t: V): V => (made.push(t), t)

interface Layout { readonly shape: number[]; readonly strides: number[]; readonly offset: number; readonly storage: number }

const numel = (shape: ReadonlyArray<number>) => shape.reduce((a, b) => a * b, 1)

/** A random layout of shape: dims in a shuffled order, each stepped 1 or 2 apart and padded, from a small offset; `expand`: some dims of size > 1 get stride 0. */
const randomLayout = (next: () => number, shape: number[], expand: boolean): Layout => {
  const order = shape.map((_, d) => d).sort(() => next() - 0.5), strides = shape.map(() => 0)
  let acc = 1
  for (let k = order.length - 1; k >= 0; k--) {
    const d = order[k]!, step = 1 + Math.floor(next() * 2)
    strides[d] = acc * step
    acc = acc * step * Math.max(shape[d]!, 1) + Math.floor(next() * 2)
  }
  if (expand) for (let d = 0; d < shape.length; d++) if (shape[d]! > 1 && next() < 0.35) strides[d] = 0
  const offset = Math.floor(next() * 4), reach = shape.reduce((r, s, d) => r + (s - 1) * strides[d]!, 0)
  return { shape, strides, offset, storage: offset + (numel(shape) > 0 ? reach + 1 : 0) + Math.floor(next() * 3) }
}

const rowMajorOf = (shape: ReadonlyArray<number>): number[] => shape.map((_, d) => numel(shape.slice(d + 1)))

/** Storage positions of a layout's elements, in row-major order. */
const positions = (l: Layout): number[] => Array.from({ length: numel(l.shape) }, (_, i) => {
  let rest = i, at = l.offset
  for (let d = l.shape.length - 1; d >= 0; d--) (at += (rest % l.shape[d]!) * l.strides[d]!), (rest = Math.floor(rest / l.shape[d]!))
  return at
})

/** A case tensor laid out as l: its storage (the case's elements where l puts them; of an expanded dim, the last one written), the view, its elements. */
interface Placed { readonly x: T; readonly layout: Layout; readonly storage: number[]; readonly elements: number[] }
const place = (x: T, l: Layout): Placed => {
  const storage = Array.from({ length: l.storage }, (_, i) => x.data[i % Math.max(x.data.length, 1)] ?? 0), at = positions(l)
  at.forEach((p, i) => (storage[p] = x.data[i]!))
  return { x, layout: l, storage, elements: at.map((p) => storage[p]!) }
}

/** What a comparison reads of a tensor: its dtype, shape and bytes (its elements in row-major order). */
interface Read { readonly dtype: string; readonly shape: number[]; readonly bytes: number[] }
const read = (t: Tensor): Read => ({ dtype: t.dtype, shape: [...t.shape], bytes: [...t.toHost(stream).data] })
const numbersOf = (r: Read): number[] => [...new HostTensor(r.dtype as never, r.shape, new Uint8Array(r.bytes)).toArray()].map(Number)

/**
 * A case's arguments as worker values: each tensor made by `tensor` (which records what it made),
 * a float number as one, lists and keyword objects element by element.
 */
const argsOf = (v: unknown, tensor: (x: T) => Tensor): unknown => {
  if (isT(v)) return tensor(v)
  if (isFloatNumber(v)) return float(v.float)
  if (Array.isArray(v)) return v.map((x) => argsOf(x, tensor))
  return typeof v === "object" && v !== null ? Object.fromEntries(Object.entries(v).map(([k, x]) => [k, argsOf(x, tensor)])) : v
}

/** The names of case.op's parameters its call writes, and the tensors bound there (in argument order). */
const writtenTensors = (cs: Case, args: unknown[], kwargs: Record<string, unknown>): Tensor[] => {
  const op = opNamed(cs.op)!, names = mutatedParams(op as OpSpec)
  if (names.length === 0) return []
  const bound = op.bind(args, kwargs, (v): v is Tensor => v instanceof Tensor) as Record<string, unknown>
  return names.flatMap((n) => [bound[n]].flat().filter((t): t is Tensor => t instanceof Tensor))
}

type Outcome = { readonly error: string } | { readonly results: Read[]; readonly written: Read[] }

/** Runs cs with its tensors made by `tensor`: its results' bytes and its written tensors' bytes read back through them, or its error. */
const outcome = (cs: Case, tensor: (x: T) => Tensor): Outcome => {
  const args = argsOf(cs.args, tensor) as unknown[], kwargs = argsOf(cs.kwargs ?? {}, tensor) as Record<string, unknown>
  try {
    const out = builtinFunction(cs.op)!(context(kwargs), ...args)
    const results = (out === undefined ? [] : Array.isArray(out) ? out : [out]) as Tensor[]
    results.forEach(keep)
    return { results: results.map(read), written: writtenTensors(cs, args, kwargs).map(read) }
  } catch (e) {
    return { error: (e as Error).message }
  }
}

const contiguousTensor = (x: T): Tensor => keep(Tensor.fromHost(native, host(x.t, x.shape, x.data), stream))

/** A strided view of placed p (its storage a tensor of its own), with the storage kept for the check of what lies outside. */
const viewOf = (p: Placed, storages: Array<{ readonly base: Tensor; readonly p: Placed }>): Tensor => {
  const base = keep(Tensor.fromHost(native, host(p.x.t, [p.layout.storage], p.storage), stream))
  storages.push({ base, p })
  return keep(base.asStrided(p.layout.shape, p.layout.strides, p.layout.offset))
}

/** The case's tensors in the order argsOf meets them. */
const tensorsOf = (v: unknown): T[] =>
  isT(v) ? [v] : Array.isArray(v) ? v.flatMap(tensorsOf) : typeof v === "object" && v !== null && !isFloatNumber(v) ? Object.values(v).flatMap(tensorsOf) : []

/** Which of a case's tensors (by their order) its call writes: those bound to a written parameter. */
const writtenIndices = (cs: Case): Set<number> => {
  const all = [...tensorsOf(cs.args), ...tensorsOf(cs.kwargs ?? {})], marks = all.map((_, i) => ({ i }))
  const ix = new Map(all.map((x, i) => [x, i]))
  const op = opNamed(cs.op)!, names = mutatedParams(op as OpSpec)
  if (names.length === 0) return new Set()
  const bound = op.bind(argsOf(cs.args, (x) => marks[ix.get(x)!] as never) as unknown[], argsOf(cs.kwargs ?? {}, (x) => marks[ix.get(x)!] as never) as Record<string, unknown>,
    (v): v is never => marks.includes(v as never)) as Record<string, unknown>
  return new Set(names.flatMap((n) => [bound[n]].flat().filter((m) => marks.includes(m as never)).map((m) => (m as { i: number }).i)))
}

const TABLE = casesOf(12345)
/** The ops with tensor operands the torch table has no case of (torch has no form of most): here, against themselves. */
const EXTRA: Case[] = [
  c("_fused_sgd_ with momentum", "_fused_sgd_", [[f(3, 4), f(5)], [f(3, 4), f(5)], [f(3, 4), f(5)]], { lr: 0.1, momentum: 0.9 }),
  c("_fused_sgd_ plain", "_fused_sgd_", [[f(2, 3)], [f(2, 3)], []], { lr: 0.1 }),
  c("_fused_adamw_ amsgrad", "_fused_adamw_", [[f(3, 4)], [f(3, 4)], [f(3, 4)], [{ ...f(3, 4), data: f(3, 4).data.map(Math.abs) }], [{ ...f(3, 4), data: f(3, 4).data.map(Math.abs) }]], { amsgrad: true, step: 3 }),
  c("_sum_of_squares", "_sum_of_squares", [[f(3, 4), f(2, 5)]]),
  c("_clip_by_total_norm_", "_clip_by_total_norm_", [[f(3, 4), f(2, 5)], { ...f(), data: [7.5] }, 1]),
  c("broadcast_to", "broadcast_to", [f(3, 1), [2, 3, 4]]),
  c("clone", "clone", [f(3, 4)]),
  c("copy_ broadcast", "copy_", [f(3, 4), f(4)]),
  c("copy_ cast", "copy_", [f(2, 3), drawn("i64", [2, 3])]),
  c("fill_", "fill_", [f(3, 4), 2.5]),
  c("mm", "mm", [f(3, 4), f(4, 5)]),
  c("mul_ tensor", "mul_", [f(3, 4), f(3, 4)]),
  // A split of one dim views every layout (torch's computeStride); a merge may not, and view refuses it then (tests/ops/views.test.ts).
  c("view", "view", [f(3, 4), [3, 2, 2]]),
  c("alias", "alias", [f(3, 4)]),
  c("diagonal", "diagonal", [f(3, 4), 1]),
  c("unfold", "unfold", [f(3, 4), 1, 2, 1]),
  c("dropout", "dropout", [f(4, 5), 0.5]),
  c("multinomial", "multinomial", [{ ...f(3, 4), data: f(3, 4).data.map((v) => Math.abs(v) + 0.1) }, 2]),
  c("rand_like", "rand_like", [f(3, 4)]),
  c("randn_like", "randn_like", [f(3, 4)]),
  c("randint_like", "randint_like", [f(3, 4), 10]),
  c("set_rng_state", "set_rng_state", [{ ...drawn("i64", [2]), data: [5, 7] }]),
]
const CASES = [...TABLE, ...EXTRA]
/**
 * The products BLAS reads strided operands of in place (its transpose flags and leading dims):
 * another kernel may sum in another order, so these agree within the result dtype's tolerance.
 */
const BLAS = new Set(["matmul", "mm", "bmm", "_matmul_t", "linear"])
/** Unit roundoff by dtype (integers exact). */
const UNIT: Readonly<Record<string, number>> = { f32: 2 ** -24, f64: 2 ** -53, f16: 2 ** -11, bf16: 2 ** -8 }
/**
 * How far two summation orders of one product may differ: 4 u K max|a| max|b| (K bounded by the
 * longest dim of any operand; the table's values lie in [-3, 3]), far below a wrong element's error.
 */
const blasBound = (dtype: string, placed: ReadonlyArray<Placed>): number => {
  const k = Math.max(...placed.flatMap((p) => p.layout.shape), 1)
  return (UNIT[dtype] ?? 0) * k * 9 * 4
}
const VARIANTS = 2

/** A case's strided variant v: each tensor's layout (written ones never expanded). */
const layoutsOf = (cs: Case, i: number, v: number): Placed[] => {
  let state = 1 + i * 7919 + v * 104729
  const next = () => ((state = (state * 1103515245 + 12345) % 2 ** 31) / 2 ** 31)
  const written = writtenIndices(cs)
  return [...tensorsOf(cs.args), ...tensorsOf(cs.kwargs ?? {})].map((x, j) => place(x, randomLayout(next, x.shape, v === 1 && !written.has(j))))
}

/** The case with each tensor's elements replaced by what its placed layout holds (an expanded one repeats some). */
const withElements = (cs: Case, placed: ReadonlyArray<Placed>): Case => {
  const byTensor = new Map(placed.map((p) => [p.x, p.elements]))
  const swap = (v: unknown): unknown =>
    isT(v) ? { ...v, data: byTensor.get(v)! } : Array.isArray(v) ? v.map(swap) : typeof v === "object" && v !== null && !isFloatNumber(v) ? Object.fromEntries(Object.entries(v).map(([k, x]) => [k, swap(x)])) : v
  return { ...cs, args: swap(cs.args) as unknown[], kwargs: swap(cs.kwargs ?? {}) as Record<string, unknown> }
}

describe("every op on strided views gives what it gives on contiguous copies, bit for bit", () => {
  for (const [i, cs] of CASES.entries()) {
    if ([...tensorsOf(cs.args), ...tensorsOf(cs.kwargs ?? {})].length === 0) continue
    test(cs.name, () => {
      for (let v = 0; v < VARIANTS; v++) {
        const placed = layoutsOf(cs, i, v), same = withElements(cs, placed), byTensor = new Map(same.args.length >= 0 ? [...tensorsOf(same.args), ...tensorsOf(same.kwargs ?? {})].map((x, j) => [x, placed[j]!]) : [])
        const want = outcome(same, contiguousTensor)
        const storages: Array<{ readonly base: Tensor; readonly p: Placed }> = []
        const got = outcome(same, (x) => viewOf({ ...byTensor.get(x)!, x }, storages))
        const layouts = placed.map((p) => `${p.layout.shape}/${p.layout.strides}+${p.layout.offset}`)
        if (BLAS.has(cs.op) && "results" in got && "results" in want) {
          expect({ variant: v, layouts, results: got.results.map(({ dtype, shape }) => ({ dtype, shape })) }).toEqual({ variant: v, layouts, results: want.results.map(({ dtype, shape }) => ({ dtype, shape })) })
          got.results.forEach((r, j) => {
            const theirs = numbersOf(want.results[j]!), bound = blasBound(r.dtype, placed)
            expect({ variant: v, layouts, off: numbersOf(r).map((x, k) => [x, theirs[k]!]).filter(([x, y]) => !(Object.is(x, y) || Math.abs(x! - y!) <= bound)).slice(0, 4) }).toEqual({ variant: v, layouts, off: [] })
          })
        } else expect({ variant: v, layouts, ...got }).toEqual({ variant: v, layouts, ...want })
        // What no view reaches is as it was.
        for (const { base, p } of storages) {
          const inside = new Set(positions(p.layout)), now = (base.toHost(stream).toArray() as ArrayLike<number | bigint>)
          const before = host(p.x.t, [p.layout.storage], p.storage).toArray() as ArrayLike<number | bigint>
          const changed = [...Array(p.layout.storage).keys()].filter((k) => !inside.has(k) && !Object.is(Number(now[k]), Number(before[k])) && !(Number.isNaN(Number(now[k])) && Number.isNaN(Number(before[k]))))
          expect(changed).toEqual([])
        }
      }
    })
  }

  test("the table reaches every op that takes a tensor, but those listed", () => {
    const covered = new Set(CASES.map((cs) => cs.op))
    const takesTensors = Object.values(OPS).filter((o) => ((o as OpSpec).params as ReadonlyArray<Param>).some((p) => p.kind === "tensor" || p.kind === "tensors"))
    expect(takesTensors.map((o): string => o.name).filter((n) => !covered.has(n)).sort()).toEqual([...UNCOVERED])
  })
})

/** Ops with tensor operands the table has no case of (their kernels' staging is the one every op shares). */
// empty_like: uninitialised, nothing to compare; as_strided reads its input's storage, not its
// elements, so a strided input differs from its copy by design (tests/ops/views.test.ts checks it against torch).
const UNCOVERED: ReadonlyArray<string> = ["as_strided", "empty_like"]

describe("the worker Tensor's layout, worked out where it is made, is the shim's", () => {
  test("random layouts (permuted, stepped, offset, expanded, size-0 and size-1 dims): contiguous, expanded and strides as shim_tensor_layout says; hostBytes only for a contiguous one; copyOut gives the view's elements", () => {
    let state = 99
    const next = () => ((state = (state * 1103515245 + 12345) % 2 ** 31) / 2 ** 31)
    const shapes = [[5], [3, 4], [2, 3, 4], [4, 1, 3], [1, 1], [3, 0, 2], [], [2, 1, 2, 3]]
    let strided = 0
    for (let i = 0; i < 200; i++) {
      const shape = shapes[i % shapes.length]!, l = randomLayout(next, shape, i % 3 === 0)
      const p = place({ t: "f32", shape, data: Array.from({ length: numel(shape) }, (_, k) => k + 1) }, i % 5 === 0 ? { ...l, strides: rowMajorOf(shape), offset: 0, storage: Math.max(numel(shape), 1) } : { ...l, strides: [...l.strides] })
      const base = keep(Tensor.fromHost(native, host("f32", [p.layout.storage], p.storage), stream)), v = keep(base.asStrided(p.layout.shape, p.layout.strides, p.layout.offset))
      const shim = v.layout(), where = `${shape}/${p.layout.strides}`
      expect({ where, contiguous: v.contiguous, strides: [...v.strides], expanded: v.expanded }).toEqual({ where, contiguous: shim.contiguous, strides: [...shim.strides], expanded: numel(shape) > 0 && shape.some((d, k) => d > 1 && p.layout.strides[k] === 0) })
      expect({ where, host: v.hostBytes() !== undefined }).toEqual({ where, host: v.contiguous })
      expect({ where, elements: [...v.toHost(stream).toArray() as Float32Array] }).toEqual({ where, elements: p.elements })
      if (!v.contiguous) strided++
    }
    expect(strided).toBeGreaterThan(80)
  })

  test("an allocated tensor and a view or block of it are contiguous, not expanded, with row-major strides", () => {
    const t = keep(Tensor.empty(native, "f32", [2, 3, 4]))
    for (const v of [t, keep(t.view([6, 4])), keep(t.block(4, [2, 4]))]) {
      expect({ contiguous: v.contiguous, expanded: v.expanded, strides: [...v.strides] }).toEqual({ contiguous: true, expanded: false, strides: [...v.layout().strides] })
    }
  })
})

describe("an op whose spec reads strides is given the view itself; any other a contiguous copy", () => {
  const transposed = () => keep(keep(Tensor.fromHost(native, host("f32", [6], [1, 2, 3, 4, 5, 6]), stream)).asStrided([3, 2], [1, 3], 0))
  const temps = (f: () => unknown): number => {
    const spy = spyOn(Run.prototype, "temp")
    try {
      const out = f()
      if (out instanceof Tensor) keep(out)
      return spy.mock.calls.length
    } finally {
      spy.mockRestore()
    }
  }
  test("add, add_, mul_, exp_, pow_, sum, softmax and mm on a transposed view make no temporary; cumsum and tril make one, its copy", () => {
    const counts = {
      add: temps(() => builtinFunction("add")!(context({}), transposed(), 1)),
      add_: temps(() => builtinFunction("add_")!(context({}), transposed(), 1)),
      mul_: temps(() => builtinFunction("mul_")!(context({}), transposed(), transposed())),
      exp_: temps(() => builtinFunction("exp_")!(context({}), transposed())),
      pow_: temps(() => builtinFunction("pow_")!(context({}), transposed(), 2)),
      sum: temps(() => builtinFunction("sum")!(context({}), transposed(), 0)),
      softmax: temps(() => builtinFunction("softmax")!(context({}), transposed(), 1)),
      mm: temps(() => builtinFunction("mm")!(context({}), transposed(), keep(Tensor.fromHost(native, host("f32", [2, 2], [1, 0, 0, 1]), stream)))),
      cumsum: temps(() => builtinFunction("cumsum")!(context({}), transposed(), 1)),
      tril: temps(() => builtinFunction("tril")!(context({}), transposed())),
      "cumsum of a contiguous tensor": temps(() => builtinFunction("cumsum")!(context({}), keep(Tensor.fromHost(native, host("f32", [3, 2], [1, 2, 3, 4, 5, 6]), stream)), 1)),
    }
    expect(counts).toEqual({ add: 0, add_: 0, mul_: 0, exp_: 0, pow_: 0, sum: 0, softmax: 0, mm: 0, cumsum: 1, tril: 1, "cumsum of a contiguous tensor": 0 })
  })
})

describe("writes to an expanded tensor are refused as torch refuses them, nothing changed (fill_ and zero_ aside, as torch's)", () => {
  const x = () => keep(Tensor.fromHost(native, host("f32", [3], [1, 2, 3]), stream))
  const expanded = (base: Tensor) => keep(base.asStrided([2, 3], [0, 1], 0))
  const cases: Array<[string, (e: Tensor) => unknown[]]> = [
    ["add_", (e) => [e, 1]], ["mul_", (e) => [e, x()]], ["copy_", (e) => [e, keep(Tensor.fromHost(native, host("f32", [2, 3], [1, 2, 3, 4, 5, 6]), stream))]],
    ["exp_", (e) => [e]], ["masked_fill_", (e) => [e, keep(Tensor.fromHost(native, host("bool", [3], [1, 0, 1]), stream)), 0]],
    ["scatter_", (e) => [e, 1, keep(Tensor.fromHost(native, host("i64", [2, 1], [0, 2]), stream)), 5]],
    ["index_add_", (e) => [e, 1, keep(Tensor.fromHost(native, host("i64", [1], [0]), stream)), keep(Tensor.fromHost(native, host("f32", [2, 1], [1, 1]), stream))]],
  ]
  for (const [op, args] of cases)
    test(op, () => {
      const base = x()
      expect(() => builtinFunction(op)!(context({}), ...args(expanded(base)))).toThrow(EXPANDED_WRITE)
      expect([...base.toHost(stream).toArray() as Float32Array]).toEqual([1, 2, 3])
    })

  test("fill_ and zero_ write one, as torch's: each location the expanded elements share gets the value", () => {
    const base = x()
    builtinFunction("fill_")!(context({}), expanded(base), 7)
    expect([...base.toHost(stream).toArray() as Float32Array]).toEqual([7, 7, 7])
    builtinFunction("zero_")!(context({}), expanded(base))
    expect([...base.toHost(stream).toArray() as Float32Array]).toEqual([0, 0, 0])
  })

  test("an optimizer step whose parameter is expanded is refused before any parameter is written", () => {
    const first = x(), base = x(), grads = [x(), keep(Tensor.fromHost(native, host("f32", [2, 3], [1, 1, 1, 1, 1, 1]), stream))]
    expect(() => builtinFunction("_fused_sgd_")!(context({ lr: 0.1 }), [first, expanded(base)], grads, [])).toThrow(EXPANDED_WRITE)
    expect([...first.toHost(stream).toArray() as Float32Array]).toEqual([1, 2, 3])
  })
})

describe("a prepared call (a recording's replay) takes views as the dispatch does", () => {
  const f32 = (values: number[]) => keep(Tensor.fromHost(native, host("f32", [values.length], values), stream))
  const elements = (t: Tensor) => [...t.toHost(stream).toArray() as Float32Array]
  test("prepared on contiguous tensors, run on transposed views: a flat kernel gets a copy, a strided one the view, an in-place target written back", () => {
    const x = keep(Tensor.fromHost(native, host("f32", [3, 2], [1, 2, 3, 4, 5, 6]), stream))
    const index = keep(Tensor.fromHost(native, host("i64", [1, 2], [2, 0]), stream))
    const cumsum = prepareBuiltin("cumsum", [x, 0], {}, [x])!, mul = prepareBuiltin("mul_", [x, 2], {}, [x])!, scatter = prepareBuiltin("scatter_", [x, 0, index, 9], {}, [x, index])!
    for (let i = 0; i < 3; i++) {
      // The [3, 2] view of storage [1..6] laid out as its transpose: [[1, 4], [2, 5], [3, 6]].
      const base = f32([1, 2, 3, 4, 5, 6]), v = keep(base.asStrided([3, 2], [1, 3], 0))
      expect(elements(keep(cumsum.run(context({}), [v])[0]!))).toEqual([1, 4, 3, 9, 6, 15])
      mul.run(context({}), [v])
      expect(elements(base)).toEqual([2, 4, 6, 8, 10, 12])
      // Row 2 of column 0 and row 0 of column 1 become 9: storage 2 and 3.
      scatter.run(context({}), [v, index])
      expect(elements(base)).toEqual([2, 4, 9, 9, 10, 12])
    }
  })
  test("an elementwise result is laid out as its operands: a reused output of that layout is written, one of another is replaced", () => {
    const x = keep(Tensor.fromHost(native, host("f32", [3, 2], [1, 2, 3, 4, 5, 6]), stream))
    const mul = prepareBuiltin("mul", [x, 2], {}, [x])!
    const rowMajor = mul.run(context({}), [x])[0]!
    expect([rowMajor.contiguous, [...rowMajor.strides]]).toEqual([true, [2, 1]])
    // The transposed view [[1, 4], [2, 5], [3, 6]]: its result is transposed too, the row-major output not reused.
    const v = keep(f32([1, 2, 3, 4, 5, 6]).asStrided([3, 2], [1, 3], 0))
    const transposed = keep(mul.run(context({}), [v], [rowMajor])[0]!)
    expect(rowMajor.freed).toBe(true)
    expect([transposed.contiguous, [...transposed.strides], transposed.layout().strides, elements(transposed)]).toEqual([false, [1, 3], [1, 3], [2, 8, 4, 10, 6, 12]])
    const again = mul.run(context({}), [v], [transposed])[0]!
    expect(again).toBe(transposed)
    const back = keep(mul.run(context({}), [x], [transposed])[0]!)
    expect([transposed.freed, back.contiguous, [...back.strides], elements(back)]).toEqual([true, true, [2, 1], [2, 4, 6, 8, 10, 12]])
  })
})

describe("in place through a view writes its base", () => {
  test("a non-strided kernel (scatter_) on a transposed target: computed contiguous, copied back through the view", () => {
    const base = keep(Tensor.fromHost(native, host("f32", [6], [0, 1, 2, 3, 4, 5]), stream)), t = keep(base.asStrided([3, 2], [1, 3], 0))
    builtinFunction("scatter_")!(context({}), t, 0, keep(Tensor.fromHost(native, host("i64", [1, 2], [2, 0]), stream)), 9)
    // t was [[0, 3], [1, 4], [2, 5]]; row 2 col 0 and row 0 col 1 become 9.
    expect([...base.toHost(stream).toArray() as Float32Array]).toEqual([0, 1, 9, 9, 4, 5])
  })

  test("an in-place op whose operand is its target (the same view) reads it before writing, strided kernel or staged copy", () => {
    const base = keep(Tensor.fromHost(native, host("f32", [6], [0, 1, 2, 3, 4, 5]), stream)), t = keep(base.asStrided([3, 2], [1, 3], 0))
    builtinFunction("add_")!(context({}), t, t)
    expect([...base.toHost(stream).toArray() as Float32Array]).toEqual([0, 2, 4, 6, 8, 10])
    // Staged once for both places: the kernel sees one tensor, as torch's does.
    builtinFunction("copy_")!(context({}), t, t)
    expect([...base.toHost(stream).toArray() as Float32Array]).toEqual([0, 2, 4, 6, 8, 10])
    const index = keep(Tensor.fromHost(native, host("i64", [3, 2], [0, 0, 0, 0, 0, 0]), stream))
    builtinFunction("scatter_add_")!(context({}), t, 0, index, keep(Tensor.fromHost(native, host("f32", [3, 2], [1, 1, 1, 1, 1, 1]), stream)))
    // Row 0 of t ([0, 6]) gains 3 each: storage 0 and 3.
    expect([...base.toHost(stream).toArray() as Float32Array]).toEqual([3, 2, 4, 9, 8, 10])
  })

  test("size-0 and size-1 dims: an empty view and a view whose only non-trivial stride is odd go through staging and back", () => {
    const base = keep(Tensor.fromHost(native, host("f32", [6], [0, 1, 2, 3, 4, 5]), stream))
    const empty = keep(base.asStrided([3, 0], [1, 3], 0)), column = keep(base.asStrided([3, 1], [2, 7], 1))
    expect(empty.contiguous).toBe(true)
    expect(keep(builtinFunction("cumsum")!(context({}), empty, 0) as Tensor).shape).toEqual([3, 0])
    expect(column.contiguous).toBe(false)
    expect([...keep(builtinFunction("cumsum")!(context({}), column, 0) as Tensor).toHost(stream).toArray() as Float32Array]).toEqual([1, 4, 9])
    builtinFunction("scatter_")!(context({}), column, 0, keep(Tensor.fromHost(native, host("i64", [1, 1], [2]), stream)), 7)
    expect([...base.toHost(stream).toArray() as Float32Array]).toEqual([0, 1, 2, 3, 4, 7])
  })

  test("the fused optimizer step on parameters that are views of one flat buffer updates the buffer", () => {
    const flat = keep(Tensor.fromHost(native, host("f32", [8], [1, 2, 3, 4, 5, 6, 7, 8]), stream))
    const p = keep(flat.asStrided([2, 2], [1, 4], 1)), g = keep(Tensor.fromHost(native, host("f32", [2, 2], [10, 10, 10, 10]), stream))
    builtinFunction("_fused_sgd_")!(context({ lr: 0.1 }), [p], [g], [])
    expect([...flat.toHost(stream).toArray() as Float32Array]).toEqual([1, 1, 2, 4, 5, 5, 6, 8])
  })
})

describeUnless(torchMissing())("a sample of the strided cases against torch 1.13 on the same views", () => {
  let torch: TorchServer
  beforeAll(() => void (torch = new TorchServer(new URL("../ops/torch_ref.py", import.meta.url).pathname)), 90_000)
  afterAll(() => torch?.close())
  const SAMPLE = TABLE.map((cs, i) => [cs, i] as const).filter(([cs, i]) => i % 9 === 0 && [...tensorsOf(cs.args), ...tensorsOf(cs.kwargs ?? {})].length > 0)
  for (const [cs, i] of SAMPLE)
    test(cs.name, async () => {
      const placed = layoutsOf(cs, i, 1), same = withElements(cs, placed)
      const all = [...tensorsOf(same.args), ...tensorsOf(same.kwargs ?? {})], byTensor = new Map(all.map((x, j) => [x, placed[j]!]))
      const storages: Array<{ readonly base: Tensor; readonly p: Placed }> = []
      const got = outcome(same, (x) => viewOf({ ...byTensor.get(x)!, x }, storages))
      const strided = (v: unknown): unknown => {
        if (isT(v)) {
          const p = byTensor.get(v)!
          return { t: v.t, shape: p.layout.shape, data: p.storage, strides: p.layout.strides, offset: p.layout.offset }
        }
        return Array.isArray(v) ? v.map(strided) : typeof v === "object" && v !== null && !isFloatNumber(v) ? Object.fromEntries(Object.entries(v).map(([k, x]) => [k, strided(x)])) : v
      }
      const want = await torch.ask(i, { op: cs.op, args: strided(same.args), kwargs: strided(same.kwargs ?? {}) })
      if ("error" in got) return void expect(want.error).toBeDefined()
      expect(want.error).toBeUndefined()
      const theirs = (want.outs ?? [want]) as Array<{ dtype: keyof typeof TOLERANCE; shape: number[]; data: Array<number | string> }>
      // An in-place op's answer is its target; ours is read back through the view.
      const ours = got.results.length > 0 ? got.results : got.written.slice(0, 1)
      expect(ours.length).toBe(theirs.length)
      ours.forEach((r, j) => {
        const w = theirs[j]!, { rtol, atol } = TOLERANCE[w.dtype]
        expect({ dtype: r.dtype, shape: r.shape }).toEqual({ dtype: w.dtype, shape: w.shape })
        const mine = numbersOf(r), want = w.data.map(fromJson)
        const off = mine.map((x, k) => [k, x, want[k]!] as const).filter(([, x, y]) => !(Object.is(x, y) || Math.abs(x - y) <= atol + rtol * Math.abs(y) || (Number.isNaN(x) && Number.isNaN(y))))
        expect(off.slice(0, 4)).toEqual([])
      })
    })
})
