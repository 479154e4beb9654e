// The sorting, scanning and sampling ops (src/ops/specs/sorting.ts) beyond their parity cases:
// each rule's refusals on the controller; what only the values show (bincount past minlength,
// multinomial's weights, fmod's integer zero) failing that command alone on a real worker; and
// multinomial's draws from the rank's generator against their distribution by a chi-square test
// (fixed seeds; torch's own generator cannot be matched, so its distribution is the reference);
// and a seeded randomised comparison with torch 1.13 over random shapes, dims, ties and NaN.
import { afterAll, beforeAll, describe, expect, test } from "bun:test"
import type { Value } from "../../src/protocol/messages.ts"
import type { DType, HostTensor } from "../../src/protocol/values.ts"
import { describeUnless } from "../skip.ts"
import { fromJson, torchMissing, TorchServer } from "../torch.ts"
import { call, createStream, fetch, host, ref } from "../worker/build.ts"
import { startWorkers, type Harness } from "../worker/harness.ts"
import { infer, refusal, t } from "./infer.ts"

describe("the rules refuse", () => {
  test("sort, argsort, topk and kthvalue: a dim out of range, k out of range", () => {
    expect(refusal(() => infer("sort", [t("f32", 2, 3), 2]))).toMatch(/ops\.sort: dim 2 out of range for 2 dims/)
    expect(refusal(() => infer("argsort", [t("f32", 2, 3)], { dim: -3 }))).toMatch(/ops\.argsort: dim -3 out of range/)
    expect(refusal(() => infer("topk", [t("f32", 2, 3), 4]))).toMatch(/ops\.topk: k 4 is out of range for dim -1 of f32\[2, 3\] \(0\.\.3\)/)
    expect(refusal(() => infer("topk", [t("f32", 2, 3), -1]))).toMatch(/k -1 is out of range/)
    expect(refusal(() => infer("topk", [t("f32", 2, 3), 1, 2]))).toMatch(/dim 2 out of range/)
    expect(refusal(() => infer("kthvalue", [t("f32", 2, 3), 0]))).toMatch(/ops\.kthvalue: k 0 is out of range for dim -1 of f32\[2, 3\] \(1\.\.3\)/)
    expect(refusal(() => infer("kthvalue", [t("f32", 2, 3), 4]))).toMatch(/k 4 is out of range/)
    expect(refusal(() => infer("kthvalue", [t("f32", 2, 0), 1, 1]))).toMatch(/k 1 is out of range for dim 1 of f32\[2, 0\] \(1\.\.0\)/)
  })

  test("cumprod, cummax, cummin and roll: dims; roll's shifts and dims must pair up", () => {
    for (const op of ["cumprod", "cummax", "cummin"]) expect(refusal(() => infer(op, [t("f64", 3), 1]))).toMatch(new RegExp(`ops\\.${op}: dim 1 out of range for 1 dims`))
    expect(refusal(() => infer("roll", [t("f32", 2, 3), [1, 2], [0]]))).toMatch(/ops\.roll: shifts \[1,2\] and dims \[0\] must have one entry each/)
    expect(refusal(() => infer("roll", [t("f32", 2, 3), [1, 2]]))).toMatch(/without dims, shifts must be one number/)
    expect(refusal(() => infer("roll", [t("f32", 2, 3), 1, 2]))).toMatch(/dim 2 out of range/)
    expect(refusal(() => infer("roll", [t("f32"), 1, 0]))).toMatch(/a 0-d tensor has no dims to roll/)
  })

  test("searchsorted: dtypes, shapes, side", () => {
    expect(refusal(() => infer("searchsorted", [t("f32", 4), t("f64", 2)]))).toMatch(/need one dtype/)
    expect(refusal(() => infer("searchsorted", [t("f32"), t("f32", 2)]))).toMatch(/at least 1 dim/)
    expect(refusal(() => infer("searchsorted", [t("f32", 2, 4), t("f32", 3, 2)]))).toMatch(/must be 1-D or have input f32\[3, 2\]'s leading dims/)
    expect(refusal(() => infer("searchsorted", [t("f32", 4), t("f32", 2)], { side: "middle" }))).toMatch(/side must be "left" or "right"/)
    expect(refusal(() => infer("searchsorted", [t("f32", 4), t("f32", 2)], { side: "left", right: true }))).toMatch(/contradicts right=True/)
    expect(infer("searchsorted", [t("f32", 4), t("f32", 2, 3)], { out_int32: true })).toEqual([t("i32", 2, 3)])
  })

  test("bincount: minlength is the result's size and must be non-negative; a 1-D integral input, weights of its length", () => {
    expect(infer("bincount", [t("i64", 5)], { minlength: 7 })).toEqual([t("i64", 7)])
    expect(infer("bincount", [t("i32", 5), t("f32", 5), 3])).toEqual([t("f32", 3)])
    expect(infer("bincount", [t("u8", 5), t("f16", 5), 3])).toEqual([t("f64", 3)])
    expect(refusal(() => infer("bincount", [t("i64", 5)], { minlength: -1 }))).toMatch(/ops\.bincount: minlength must be non-negative, got -1/)
    expect(refusal(() => infer("bincount", [t("f32", 5)], { minlength: 2 }))).toMatch(/needs a 1-D integral input, got f32\[5\]/)
    expect(refusal(() => infer("bincount", [t("i64", 2, 2)], { minlength: 2 }))).toMatch(/needs a 1-D integral input/)
    expect(refusal(() => infer("bincount", [t("i64", 5), t("f32", 4), 2]))).toMatch(/weights f32\[4\] must be 1-D with input i64\[5\]'s length/)
  })

  test("multinomial: floating 1-D or 2-D weights, a positive count, no more than the categories without replacement", () => {
    expect(infer("multinomial", [t("f32", 3, 5), 4, true])).toEqual([t("i64", 3, 4)])
    expect(refusal(() => infer("multinomial", [t("i64", 5), 1]))).toMatch(/ops\.multinomial: needs floating weights, got i64\[5\]/)
    expect(refusal(() => infer("multinomial", [t("f32", 2, 2, 2), 1]))).toMatch(/weights must be 1-D or 2-D/)
    expect(refusal(() => infer("multinomial", [t("f32", 5), 0]))).toMatch(/num_samples must be positive, got 0/)
    expect(refusal(() => infer("multinomial", [t("f32", 5), 6]))).toMatch(/cannot draw 6 samples of 5 categories without replacement/)
    expect(refusal(() => infer("multinomial", [t("f32", 2, 0), 1, true]))).toMatch(/have no categories/)
  })
})

let h: Harness
let ident = 0, nextRef = 100
beforeAll(async () => {
  h = await startWorkers({ world: 1 })
  h.send(0, createStream)
}, 60_000)
afterAll(async () => {
  await h?.close()
})

/** ops.<fn> on the worker: its fetched results (values: the first's), or the failure's type and message. */
const run = async (fn: string, args: Value[], kwargs: Record<string, Value> = {}, count = 1): Promise<{ values?: number[]; all?: number[][]; failed?: { type: string; message: string } }> => {
  const results = Array.from({ length: count }, () => nextRef++), id = ident
  ident += 2
  h.send(0, call(id, results, `ops.${fn}`, args, { kwargs }))
  h.send(0, fetch(id + 1, results.map(ref)))
  return h.until(() => {
    const failed = h.seen(0, "RemoteFunctionFailed").find((m) => m.ident === id)
    if (failed) return { failed: { type: failed.error.type, message: failed.error.message } }
    const got = h.seen(0, "FetchResult").find((m) => m.ident === id + 1)
    if (!got) return undefined
    const all = (got.value as HostTensor[]).map((v) => [...v.toArray()].map(Number))
    return { values: all[0], all }
  }, 20_000, `ops.${fn} answers`)
}

/** Restarts the worker's generator at seed (ordered before the commands sent after it). */
const manualSeed = (seed: number): void => {
  h.send(0, call(ident, [], "ops.manual_seed", [seed]))
  ident += 2
}

describe("what only the values show fails that command alone", () => {
  test("bincount: a value past minlength, or a negative one, named; then it counts", async () => {
    const past = await run("bincount", [host("i64", [4], [0, 2, 5, 1])], { minlength: 5 })
    expect(past.failed?.type).toBe("OpArgumentError")
    expect(past.failed?.message).toMatch(/ops\.bincount: input holds the value 5, past minlength 5 \(the result's size\)/)
    const negative = await run("bincount", [host("i32", [3], [0, -2, 1]), null, 4])
    expect(negative.failed?.message).toMatch(/input holds the negative value -2/)
    expect((await run("bincount", [host("i64", [4], [0, 2, 4, 2])], { minlength: 5 })).values).toEqual([1, 0, 2, 0, 1])
  })

  test("multinomial: a negative, NaN or infinite weight, a row summing to 0, too few nonzero categories", async () => {
    const message = async (data: number[], shape: number[], n: number, replacement: boolean) =>
      (await run("multinomial", [host("f32", shape, data), n, replacement])).failed?.message
    expect(await message([0.5, -0.1, 1], [3], 1, true)).toMatch(/ops\.multinomial: weights must be finite and non-negative/)
    expect(await message([0.5, NaN, 1], [3], 1, true)).toMatch(/finite and non-negative/)
    expect(await message([0.5, Infinity, 1], [3], 1, true)).toMatch(/finite and non-negative/)
    expect(await message([1, 2, 0, 0], [2, 2], 1, true)).toMatch(/every row of weights needs a positive sum/)
    expect(await message([1, 0, 0, 1, 1, 1], [2, 3], 2, false)).toMatch(/a row of weights has fewer than 2 nonzero categories/)
    expect((await run("multinomial", [host("f32", [2, 3], [0, 0, 3, 0, 1, 0]), 2, true])).values).toEqual([2, 2, 1, 1])
    expect((await run("multinomial", [host("f32", [0, 3], []), 2])).values).toEqual([])
  })

  test("fmod by an integer zero fails; a float zero gives NaN, as torch's", async () => {
    const zero = await run("fmod", [host("i64", [2], [5, 3]), host("i64", [2], [2, 0])])
    expect(zero.failed?.message).toMatch(/fmod\): integer division by zero/)
    expect((await run("fmod", [host("f64", [2], [5.5, -3]), host("f64", [2], [2, 0])])).values).toEqual([1.5, NaN])
  })
})

/** Pearson's chi-square of observed counts against expected probabilities (each bin's expectation over 5). */
const chiSquare = (counts: ReadonlyArray<number>, probabilities: ReadonlyArray<number>): number => {
  const n = counts.reduce((a, b) => a + b, 0)
  return counts.reduce((s, c, i) => s + (c - n * probabilities[i]!) ** 2 / (n * probabilities[i]!), 0)
}
/** The chi-square distribution's 0.999 quantiles by degrees of freedom: a right distribution fails once in a thousand seeds. */
const CRITICAL_999: Readonly<Record<number, number>> = { 3: 16.27, 11: 31.26 }

describe("multinomial draws from the rank's generator, by distribution", () => {
  const weights = [1, 0, 3, 2, 4], total = 10, p = weights.map((w) => w / total)

  test("with replacement: each category as often as its weight says, a zero-weight one never (chi-square, 3 dof, p = 0.001)", async () => {
    manualSeed(11)
    const rows = 8, draws = 500
    const got = (await run("multinomial", [host("f64", [rows, 5], Array.from({ length: rows }, () => weights).flat()), draws, true])).values!
    const counts = [0, 1, 2, 3, 4].map((k) => got.filter((v) => v === k).length)
    expect(counts[1]).toBe(0)
    const kept = [0, 2, 3, 4]
    const x2 = chiSquare(kept.map((k) => counts[k]!), kept.map((k) => p[k]!))
    expect(x2).toBeLessThan(CRITICAL_999[3]!)
  })

  test("without replacement: ordered pairs as torch's sequential draws give them, p_i p_j / (1 - p_i) (chi-square, 11 dof)", async () => {
    manualSeed(12)
    const rows = 3000, got = (await run("multinomial", [host("f32", [rows, 5], Array.from({ length: rows }, () => weights).flat()), 2])).values!
    const pairs = new Map<string, number>()
    for (let r = 0; r < rows; r++) {
      const [i, j] = [got[2 * r]!, got[2 * r + 1]!]
      expect(i).not.toBe(j)
      pairs.set(`${i},${j}`, (pairs.get(`${i},${j}`) ?? 0) + 1)
    }
    const kept = [0, 2, 3, 4], keys = kept.flatMap((i) => kept.filter((j) => j !== i).map((j) => [i, j] as const))
    expect([...pairs.keys()].filter((k) => k.split(",").includes("1"))).toEqual([])
    const x2 = chiSquare(keys.map(([i, j]) => pairs.get(`${i},${j}`) ?? 0), keys.map(([i, j]) => (p[i]! * p[j]!) / (1 - p[i]!)))
    expect(x2).toBeLessThan(CRITICAL_999[11]!)
  })

  test("the generator: one seed repeats the draws, the next call draws anew", async () => {
    const draw = () => run("multinomial", [host("f32", [5], weights), 40, true])
    manualSeed(5)
    const [a, b] = [(await draw()).values!, (await draw()).values!]
    manualSeed(5)
    expect((await draw()).values).toEqual(a)
    expect(b).not.toEqual(a)
  })
})

describeUnless(torchMissing())("against torch 1.13 on random shapes, dims, ties and NaN (seeded)", () => {
  let torch: TorchServer
  beforeAll(() => void (torch = new TorchServer(new URL("./torch_ref.py", import.meta.url).pathname)))
  afterAll(() => torch?.close())
  const SEEDS = 16, DTYPES: ReadonlyArray<DType> = ["f32", "f64", "bf16", "i64", "i32"]
  let asked = 0

  for (let seed = 1; seed <= SEEDS; seed++) {
    test(`seed ${seed}`, async () => {
      let s = seed * 7919
      const rnd = () => ((s = (s * 1103515245 + 12345) % 2 ** 31) / 2 ** 31)
      const int = (lo: number, hi: number) => lo + Math.floor(rnd() * (hi - lo + 1))
      const dtype = DTYPES[int(0, DTYPES.length - 1)]!, float = dtype.startsWith("f") || dtype === "bf16"
      const shape = Array.from({ length: int(1, 3) }, () => (rnd() < 0.1 ? 0 : int(1, 6))), n = shape.reduce((a, b) => a * b, 1)
      // few distinct values, so ties are common; NaN among floats
      const data = Array.from({ length: n }, () => (float && rnd() < 0.15 ? NaN : int(-3, 3)))
      const x = { t: dtype, shape, data }, wire = host(dtype, shape, data), ndim = shape.length
      const dim = int(-ndim, ndim - 1), size = shape[(dim + ndim) % ndim]!
      const cases: Array<[string, unknown[], Record<string, unknown>, number, number[]]> = [
        ["sort", [x, dim, rnd() < 0.5], {}, 2, [0, 1]],
        ["argsort", [x, dim, rnd() < 0.5], {}, 1, [0]],
        ["cummax", [x, dim], {}, 2, [0, 1]],
        ["cummin", [x, dim], {}, 2, [0, 1]],
        ["cumprod", [x, dim], {}, 1, [0]],
        ["roll", [x, [int(-8, 8), int(-8, 8)], [dim, int(-ndim, ndim - 1)]], {}, 1, [0]],
        // topk's and kthvalue's indices of ties are torch's selection's: their values only
        ["topk", [x, int(0, size), dim, rnd() < 0.5], {}, 2, [0]],
        ...(size > 0 ? [["kthvalue", [x, int(1, size), dim, rnd() < 0.5], {}, 2, [0]] as [string, unknown[], Record<string, unknown>, number, number[]]] : []),
      ]
      const divisor = { t: dtype, shape, data: Array.from({ length: n }, () => (float ? (rnd() < 0.5 ? -1 : 1) * (0.25 + int(0, 12) / 4) : (rnd() < 0.5 ? -1 : 1) * int(1, 4))) }
      cases.push(["fmod", [x, divisor], {}, 1, [0]])
      const row = Array.from({ length: int(0, 7) }, () => int(-3, 3)).sort((a, b) => a - b)
      cases.push(["searchsorted", [{ t: dtype, shape: [row.length], data: row }, x], { right: rnd() < 0.5 }, 1, [0]])
      const mismatches: string[] = []
      for (const [op, args, kwargs, count, compared] of cases) {
        const toWire = (v: unknown) => (v === x ? wire : typeof v === "object" && v !== null && "t" in v ? host((v as typeof x).t, (v as typeof x).shape, (v as typeof x).data) : v)
        const [ours, want] = await Promise.all([run(op, args.map(toWire) as Value[], kwargs as Record<string, Value>, count), torch.ask(10_000 * seed + asked++, { op, args, kwargs })])
        const theirs = (want.outs ?? [want]) as Array<{ data: Array<number | string> }>
        if (ours.failed || want.error) {
          mismatches.push(`${op}: ours ${ours.failed?.message ?? "ran"}, torch ${want.error ?? "ran"}`)
          continue
        }
        for (const k of compared) {
          const a = ours.all![k]!, b = theirs[k]!.data.map(fromJson)
          const same = a.length === b.length && a.every((v, i) => Object.is(v, b[i]) || v === b[i] || Math.abs(v - b[i]!) <= 1e-6 * Math.abs(b[i]!))
          if (!same) mismatches.push(`${op} result ${k}: ours [${a}], torch [${b}]`)
        }
      }
      expect({ seed, dtype, shape, dim, data: data.join(), mismatches }).toEqual({ seed, dtype, shape, dim, data: data.join(), mismatches: [] })
    }, 60_000)
  }
})
