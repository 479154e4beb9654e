// The rank's random generator and the ops drawing from it (src/ops/generator.ts,
// src/ops/specs/random.ts), through real workers: manual_seed repeats a stream, ranks draw
// distinct streams unless asked for one, get_rng_state/set_rng_state continue a stream exactly,
// an explicit seed leaves the generator alone; and the draws' distributions (rand, randn,
// randint, dropout) tested statistically. cpu and cuda giving the same values is
// tests/cuda/parity.test.ts's (the kernels read one counter-based stream).
import { afterAll, beforeAll, describe, expect, test } from "bun:test"
import { philoxKey } from "../../src/ops/generator.ts"
import type { Value } from "../../src/protocol/messages.ts"
import { HostTensor } from "../../src/protocol/values.ts"
import { call, createStream, fetch, host, numbers, ref } from "../worker/build.ts"
import { startWorkers, type Harness } from "../worker/harness.ts"
import { infer, refusal, t } from "./infer.ts"

let h: Harness
let ident = 0, nextRef = 100
beforeAll(async () => {
  h = await startWorkers({ world: 2 })
  h.send("all", createStream)
}, 60_000)
afterAll(async () => {
  await h?.close()
})

/** Runs ops.<fn> on both ranks and fetches its results from each: per rank, a list of values. */
const run = async (fn: string, args: Value[], kwargs: Record<string, Value> = {}, results = 1): Promise<unknown[][]> => {
  const refs = Array.from({ length: results }, () => nextRef++), id = ident
  ident += 2
  h.send("all", call(id, refs, `ops.${fn}`, args, { kwargs }))
  h.send("all", fetch(id + 1, refs.map(ref)))
  return Promise.all([0, 1].map(async (rank) => {
    const got = await h.until(() => {
      const failed = h.seen(rank, "RemoteFunctionFailed").find((m) => m.ident === id)
      if (failed) throw new Error(failed.error.message)
      return h.seen(rank, "FetchResult").find((m) => m.ident === id + 1)
    }, 20_000, `ops.${fn} answers on rank ${rank}`)
    return got.value as unknown[]
  }))
}

/** A command with no results (manual_seed, set_rng_state), run on both ranks. */
const effect = async (fn: string, args: Value[], kwargs: Record<string, Value> = {}): Promise<void> => {
  const id = ident
  ident += 2
  h.send("all", call(id, [], `ops.${fn}`, args, { kwargs }))
  h.send("all", { _tag: "RequestStatus", ident: id })
  await Promise.all([0, 1].map((rank) => h.passed(rank, id)))
  for (const rank of [0, 1]) {
    const failed = h.seen(rank, "RemoteFunctionFailed").find((m) => m.ident === id)
    if (failed) throw new Error(failed.error.message)
  }
}

const values = (per: unknown[][], rank: number, j = 0): number[] => numbers(per[rank]![j])
const mean = (xs: number[]) => xs.reduce((a, b) => a + b, 0) / xs.length
const variance = (xs: number[]) => {
  const m = mean(xs)
  return xs.reduce((a, b) => a + (b - m) ** 2, 0) / (xs.length - 1)
}

describe("the rank's generator", () => {
  test("manual_seed repeats a stream; draws without a seed advance it", async () => {
    await effect("manual_seed", [7])
    const a = await run("rand", [[64]]), b = await run("rand", [[64]])
    await effect("manual_seed", [7])
    const c = await run("rand", [[64]]), d = await run("rand", [[64]])
    expect(values(c, 0)).toEqual(values(a, 0))
    expect(values(d, 1)).toEqual(values(b, 1))
    expect(values(b, 0)).not.toEqual(values(a, 0))
  })

  test("each rank draws its own stream, unless manual_seed asks for one shared stream", async () => {
    await effect("manual_seed", [3])
    const own = await run("randn", [[32]])
    expect(values(own, 0)).not.toEqual(values(own, 1))
    await effect("manual_seed", [3], { distinct: false })
    const shared = await run("randn", [[32]])
    expect(values(shared, 0)).toEqual(values(shared, 1))
  })

  test("get_rng_state is [key, offset]; set_rng_state continues a stream exactly", async () => {
    await effect("manual_seed", [11])
    await run("rand", [[5]])
    const state = await run("get_rng_state", [])
    for (const rank of [0, 1])
      expect([...(state[rank]![0] as HostTensor).toArray() as BigInt64Array]).toEqual([BigInt.asIntN(64, philoxKey(11n, BigInt(rank))), 5n])
    const first = await run("rand", [[40]])
    await run("randn", [[9]])
    // each rank gets its own state back (the value fetched from it)
    for (const rank of [0, 1]) {
      const id = ident
      ident += 2
      h.send(rank, call(id, [], "ops.set_rng_state", [state[rank]![0] as HostTensor]))
      h.send(rank, { _tag: "RequestStatus", ident: id })
      await h.passed(rank, id)
    }
    const again = await run("rand", [[40]])
    expect(values(again, 0)).toEqual(values(first, 0))
    expect(values(again, 1)).toEqual(values(first, 1))
  })

  test("an explicit seed reads that stream and leaves the generator where it was", async () => {
    await effect("manual_seed", [5])
    const seeded = await run("rand", [[16]], { seed: 42, offset: 3 })
    const next = await run("rand", [[16]])
    await effect("manual_seed", [5])
    expect(values(await run("rand", [[16]]), 0)).toEqual(values(next, 0))
    expect(values(seeded, 0)).toEqual(values(seeded, 1))
    expect(values(await run("rand", [[13]], { seed: 42, offset: 6 }), 0)).toEqual(values(seeded, 0).slice(3))
  })
})

describe("distributions", () => {
  const N = 20_000
  test("rand is uniform in [0, 1): mean 1/2, variance 1/12, each decile about a tenth", async () => {
    const xs = values(await run("rand", [[N]]), 0)
    expect(xs.every((x) => x >= 0 && x < 1)).toBe(true)
    expect(Math.abs(mean(xs) - 0.5)).toBeLessThan(5 * Math.sqrt(1 / 12 / N))
    expect(Math.abs(variance(xs) - 1 / 12)).toBeLessThan(0.004)
    const deciles = new Array<number>(10).fill(0)
    for (const x of xs) deciles[Math.floor(x * 10)]!++
    const chi2 = deciles.reduce((a, n) => a + (n - N / 10) ** 2 / (N / 10), 0)
    expect(chi2).toBeLessThan(30) // 9 degrees of freedom: p < 0.001
  })

  test("randn is standard normal: mean 0, variance 1, about 68% within one sigma", async () => {
    const xs = values(await run("randn", [[N]], { dtype: "f64" }), 1)
    expect(Math.abs(mean(xs))).toBeLessThan(5 / Math.sqrt(N))
    expect(Math.abs(variance(xs) - 1)).toBeLessThan(0.05)
    expect(Math.abs(xs.filter((x) => Math.abs(x) < 1).length / N - 0.6827)).toBeLessThan(0.02)
  })

  test("randint covers [low, high) evenly, as i64 by default", async () => {
    const per = await run("randint", [-3, 4, [N]])
    expect((per[0]![0] as HostTensor).dtype).toBe("i64")
    const xs = values(per, 0), counts = new Map<number, number>()
    for (const x of xs) counts.set(x, (counts.get(x) ?? 0) + 1)
    expect([...counts.keys()].sort((a, b) => a - b)).toEqual([-3, -2, -1, 0, 1, 2, 3])
    const chi2 = [...counts.values()].reduce((a, n) => a + (n - N / 7) ** 2 / (N / 7), 0)
    expect(chi2).toBeLessThan(23) // 6 degrees of freedom: p < 0.001
    const narrow = values(await run("randint", [0, 2, [50]], { dtype: "u8" }), 1)
    expect(narrow.every((x) => x === 0 || x === 1)).toBe(true)
  })

  test("randint(high, size) draws [0, high) evenly from the rank's generator, as i64", async () => {
    await effect("manual_seed", [11])
    const per = await run("randint", [5, [N]])
    expect((per[0]![0] as HostTensor).dtype).toBe("i64")
    expect((per[0]![0] as HostTensor).shape).toEqual([N])
    const xs = values(per, 0), counts = new Map<number, number>()
    for (const x of xs) counts.set(x, (counts.get(x) ?? 0) + 1)
    expect([...counts.keys()].sort((a, b) => a - b)).toEqual([0, 1, 2, 3, 4])
    const chi2 = [...counts.values()].reduce((a, n) => a + (n - N / 5) ** 2 / (N / 5), 0)
    expect(chi2).toBeLessThan(18.5) // 4 degrees of freedom: p < 0.001
    // the rank's generator: the same seed repeats it, the other rank draws its own, and the form is randint(0, high, size)'s
    await effect("manual_seed", [11])
    expect(values(await run("randint", [0, 5, [N]]), 0)).toEqual(xs)
    expect(values(per, 1)).not.toEqual(xs)
  })

  test("dropout drops about p, scales the rest by 1 / (1 - p) and says which in its mask", async () => {
    const x = host("f32", [N], Array.from({ length: N }, (_, i) => 1 + (i % 7)))
    const per = await run("dropout", [x, 0.3], {}, 2)
    const out = values(per, 0), mask = values(per, 0, 1), input = numbers(x)
    const kept = mask.filter((m) => m === 1).length
    expect(Math.abs(kept / N - 0.7)).toBeLessThan(5 * Math.sqrt(0.21 / N))
    expect(out.every((v, i) => (mask[i] ? v === Math.fround(input[i]! * Math.fround(1 / 0.7)) : v === 0))).toBe(true)
    expect(values(per, 1, 1)).not.toEqual(mask) // the other rank drops others
  })

  test("dropout in eval mode or with p = 0 is the input; p = 1 drops everything", async () => {
    const x = host("f64", [2, 3], [1, -2, 3, -4, 5, -6])
    const cases: Array<[Value[], Record<string, Value>]> = [[[x, 0.5], { training: false }], [[x, 0], {}]]
    for (const [args, kwargs] of cases) {
      const per = await run("dropout", args, kwargs, 2)
      expect(values(per, 0)).toEqual(numbers(x))
      expect((per[0]![1] as HostTensor).shape).toEqual([])
    }
    expect(values(await run("dropout", [x, 1], {}, 2), 1)).toEqual([0, 0, 0, 0, 0, 0])
  })
})

describe("rules", () => {
  test("randint needs low < high; dropout a floating input and p in [0, 1]; set_rng_state its state's shape", () => {
    expect(refusal(() => infer("randint", [5, 5, [2]]))).toMatch(/ops\.randint: needs low < high, got 5 and 5/)
    expect(infer("randint", [7, [2, 3]])).toEqual([t("i64", 2, 3)])
    expect(refusal(() => infer("randint", [0, [2]]))).toMatch(/ops\.randint: needs low < high, got 0 and 0/)
    expect(refusal(() => infer("randint", [3, 7]))).toMatch(/ops\.randint: needs a size: randint\(high, size\) or randint\(low, high, size\)/)
    expect(refusal(() => infer("randint", [0, [3], [2]]))).toMatch(/high must be an integer when size is given, got \[3\]/)
    expect(refusal(() => infer("dropout", [t("i64", 3)]))).toMatch(/ops\.dropout: needs a floating input/)
    expect(refusal(() => infer("dropout", [t("f32", 3), 1.5]))).toMatch(/p must be in \[0, 1\], got 1\.5/)
    expect(refusal(() => infer("set_rng_state", [t("i64", 3)]))).toMatch(/state must be get_rng_state's i64\[2\], got i64\[3\]/)
    expect(infer("dropout", [t("bf16", 2, 3)], { training: false })).toEqual([t("bf16", 2, 3), t("bool")])
    expect(infer("manual_seed", [1])).toEqual([])
  })
})
