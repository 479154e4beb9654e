// empty, empty_like and the random *_like forms on a real worker (their values are not torch's
// to compare: empty's are whatever the memory held, the random ones are tests/ops/random.test.ts's
// generator): each gives the shape and dtype it declares, and a random *_like draws exactly what its
// plain form draws from the same seed. linspace, eye, zeros_like, ones_like and full_like are held
// against torch in parity.test.ts.
import { afterAll, beforeAll, describe, expect, test } from "bun:test"
import type { Value } from "../../src/protocol/messages.ts"
import type { HostTensor } from "../../src/protocol/values.ts"
import { call, createStream, fetch, host, numbers, ref } from "../worker/build.ts"
import { startWorkers, type Harness } from "../worker/harness.ts"
import { infer, refusal, t } from "./infer.ts"

let h: Harness
let ident = 0, nextRef = 100
beforeAll(async () => {
  h = await startWorkers({ world: 1 })
  h.send(0, createStream)
}, 60_000)
afterAll(async () => {
  await h?.close()
})

/** ops.<fn>'s one result, fetched. */
const run = async (fn: string, args: Value[], kwargs: Record<string, Value> = {}): Promise<HostTensor> => {
  const r = nextRef++, id = ident
  ident += 2
  h.send(0, call(id, [r], `ops.${fn}`, args, { kwargs }))
  h.send(0, fetch(id + 1, ref(r)))
  const got = await h.until(() => {
    const failed = h.seen(0, "RemoteFunctionFailed").find((m) => m.ident === id)
    if (failed) throw new Error(failed.error.message)
    return h.seen(0, "FetchResult").find((m) => m.ident === id + 1)
  }, 20_000, `ops.${fn} answers`)
  return got.value as HostTensor
}
const meta = (x: HostTensor) => ({ dtype: x.dtype, shape: [...x.shape] })

describe("creation without torch's values", () => {
  test("empty and empty_like give the shape and dtype asked for", async () => {
    expect(meta(await run("empty", [[2, 3]], { dtype: "i32" }))).toEqual({ dtype: "i32", shape: [2, 3] })
    expect(meta(await run("empty", [0]))).toEqual({ dtype: "f32", shape: [0] })
    const x = host("f64", [4], [1, 2, 3, 4])
    expect(meta(await run("empty_like", [x]))).toEqual({ dtype: "f64", shape: [4] })
    expect(meta(await run("empty_like", [x], { dtype: "bf16" }))).toEqual({ dtype: "bf16", shape: [4] })
  })

  test("rand_like, randn_like and randint_like draw what rand, randn and randint draw from the same seed, over the input's shape", async () => {
    const x = host("f64", [2, 3], [0, 0, 0, 0, 0, 0])
    for (const [like, plain] of [["rand_like", "rand"], ["randn_like", "randn"]] as const) {
      const a = await run(like, [x], { seed: 7 }), b = await run(plain, [[2, 3]], { seed: 7, dtype: "f64" })
      expect(meta(a)).toEqual({ dtype: "f64", shape: [2, 3] })
      expect(numbers(a)).toEqual(numbers(b))
      expect(meta(await run(like, [x], { dtype: "f32", seed: 7 }))).toEqual({ dtype: "f32", shape: [2, 3] })
    }
    const wide = host("i32", [8, 8], new Array<number>(64).fill(0))
    const i = await run("randint_like", [wide, -300, 9000], { seed: 5 }), j = await run("randint", [-300, 9000, [8, 8]], { seed: 5, dtype: "i32" })
    expect(meta(i)).toEqual({ dtype: "i32", shape: [8, 8] })
    expect(numbers(i)).toEqual(numbers(j))
  })

  test("rules: rand, randn and their *_like forms need a floating dtype (randint_like any that holds integers); linspace and eye need sizes that are not negative", () => {
    expect(refusal(() => infer("rand_like", [t("i64", 2)]))).toMatch(/ops\.rand_like: needs a floating dtype, got i64\[2\]/)
    expect(refusal(() => infer("randn", [[2]], { dtype: "i32" }))).toMatch(/ops\.randn: needs a floating dtype, got i32\[2\]/)
    expect(infer("rand", [[2]], { dtype: "bf16" })).toEqual([t("bf16", 2)])
    expect(infer("randn_like", [t("i64", 2)], { dtype: "f16" })).toEqual([t("f16", 2)])
    expect(infer("randint_like", [t("u8", 3), 0, 4])).toEqual([t("u8", 3)])
    expect(refusal(() => infer("randint_like", [t("f32", 3), 4, 4]))).toMatch(/needs low < high/)
    expect(refusal(() => infer("linspace", [0, 1, -1]))).toMatch(/steps must be non-negative/)
    expect(infer("linspace", [0, 1, 5])).toEqual([t("f32", 5)])
    expect(refusal(() => infer("eye", [2, -1]))).toMatch(/n and m must be non-negative/)
    expect(infer("eye", [2, 3], { dtype: "bool" })).toEqual([t("bool", 2, 3)])
    expect(infer("full_like", [t("i32", 2), 3], { dtype: "f16" })).toEqual([t("f16", 2)])
  })
})
