// The typed op surface on the controller: model code as in PyTorch (methods and ops.*, no
// yield* per op), metadata known at the call, typed fetches, refusals caught by tag through
// eager(), in-place methods. The project's typecheck (tests/typecheck) checks the types below,
// the @ts-expect-error lines included.
import { afterAll, beforeAll, describe, expect, spyOn, test } from "bun:test"
import { Effect, ManagedRuntime } from "effect"
import { Controller, eager, ops, opsOn, type ControllerApi, type HostTensor, type RemoteTensor } from "../../src/controller/index.ts"

let rt: ManagedRuntime.ManagedRuntime<Controller, unknown>
let ctl: ControllerApi
beforeAll(async () => {
  rt = ManagedRuntime.make(Controller.local({ world: 2, onWorkerLine: () => {} }))
  ctl = await rt.runPromise(Effect.service(Controller))
}, 60_000)
afterAll(() => rt?.dispose())

/** log-softmax cross-entropy of rows of `logits` against class indices, in plain JS. */
const crossEntropy = (logits: Float32Array, classes: number, targets: BigInt64Array): number => {
  let total = 0
  for (let n = 0; n < targets.length; n++) {
    const row = [...logits.subarray(n * classes, (n + 1) * classes)], m = Math.max(...row)
    const lse = m + Math.log(row.reduce((s, v) => s + Math.exp(v - m), 0))
    total += lse - row[Number(targets[n])]!
  }
  return total / targets.length
}

describe("model code through the typed surface", () => {
  test("an MLP forward pass with broadcasting, softmax, cat, indexing and cross_entropy", async () => {
    const got = await rt.runPromise(Effect.gen(function* () {
      const mesh = yield* ctl.mesh({ dp: 2 })
      const on = opsOn(mesh)
      const { x, logits, probs, both, picked, loss, targets } = yield* eager(() => {
        const x = on.randn([4, 3], { seed: 1 }), w1 = on.randn([3, 8], { seed: 2 }), b1 = on.randn([8], { seed: 3 })
        const w2 = on.randn([5, 8], { seed: 4 })
        const logits = ops.linear(x.matmul(w1).add(b1).relu(), w2)       // [4, 8] + [8] broadcasts
        const probs = logits.softmax(-1)
        const both = ops.cat([logits, probs], { dim: 1 })
        const targets = on.arange(4)                                     // i64, as torch's
        const picked = logits.index_select(0, targets.flip([0]))
        return { x, logits, probs, both, picked, targets, loss: ops.cross_entropy(logits, targets) }
      })
      // Metadata without a round trip.
      expect([x.shape, logits.shape, probs.shape, both.shape, picked.shape, loss.shape]).toEqual([[4, 3], [4, 5], [4, 5], [4, 10], [4, 5], []])
      expect([logits.dtype, targets.dtype, loss.dtype]).toEqual(["f32", "i64", "f32"])
      const l: HostTensor<"f32"> = yield* logits.fetch({ dp: 1 })
      const values: Float32Array = l.toArray()
      // @ts-expect-error an f32 tensor's values are not a Float64Array
      const wrong: Float64Array = l.toArray()
      void wrong
      return {
        logits: values, probs: (yield* probs.fetch()).toArray(), both: (yield* both.fetch()).toArray(),
        picked: (yield* picked.fetch()).toArray(), loss: (yield* loss.fetch()).toArray(), targets: (yield* targets.fetch()).toArray(),
      }
    }))
    expect(got.logits).toBeInstanceOf(Float32Array)
    expect(got.targets).toBeInstanceOf(BigInt64Array)
    expect([...got.targets]).toEqual([0n, 1n, 2n, 3n])
    for (let n = 0; n < 4; n++) expect(got.probs.subarray(n * 5, n * 5 + 5).reduce((a, b) => a + b, 0)).toBeCloseTo(1, 5)
    expect([...got.both.subarray(0, 5)]).toEqual([...got.logits.subarray(0, 5)])
    expect([...got.picked.subarray(0, 5)]).toEqual([...got.logits.subarray(15, 20)])
    expect(got.loss[0]!).toBeCloseTo(crossEntropy(got.logits, 5, got.targets), 5)
  })

  test("a refused call fails eager() with a ControllerError caught by its tag, and sends nothing", async () => {
    const issued = spyOn(ctl.core, "command")
    const messages = await rt.runPromise(Effect.gen(function* () {
      const mesh = yield* ctl.mesh({ dp: 2 })
      const on = opsOn(mesh)
      const x = yield* eager(() => on.ones([4, 3]))
      issued.mockClear()
      const reason = (f: () => unknown) => eager(f).pipe(Effect.as("sent"), Effect.catchTag("ControllerError", (e) => Effect.succeed(e.message)))
      return [
        yield* reason(() => x.matmul(on.ones([4, 3])).relu()),
        // @ts-expect-error sum has no keyword "axis"
        yield* reason(() => x.sum({ axis: 0 })),
        yield* reason(() => x.add(on.ones([2]))),
      ]
    }))
    expect(messages[0]).toMatch(/ops\.matmul: inner dims differ: f32\[4, 3\] @ f32\[4, 3\]/)
    expect(messages[1]).toMatch(/unexpected keyword argument 'axis'/)
    expect(messages[2]).toMatch(/shapes do not broadcast/)
    // Only the ones() calls inside the refused blocks were issued; no refused op was.
    expect(issued.mock.calls.map((c) => c[1])).toEqual(["ops.ones", "ops.ones"])
    issued.mockRestore()
  })

  test("in-place methods change their tensor and return it; keyword and positional forms agree", async () => {
    const [w, byKw, byPos] = await rt.runPromise(Effect.gen(function* () {
      const mesh = yield* ctl.mesh({ dp: 2 })
      const w: RemoteTensor<"f32"> = yield* eager(() => opsOn(mesh).full([2, 2], 3))
      const same = yield* eager(() => w.mul_(2))
      expect(same).toBe(w)
      const [a, b] = yield* eager(() => [w.sum({ dim: 0, keepdim: true }), w.sum(0, true)])
      const counted: RemoteTensor<"i64"> = yield* eager(() => opsOn(mesh).ones([2], { dtype: "bool" }).sum())
      void counted
      expect(a!.shape).toEqual([1, 2])
      return [(yield* w.fetch()).toArray(), (yield* a!.fetch()).toArray(), (yield* b!.fetch()).toArray()]
    }))
    expect([...w]).toEqual([6, 6, 6, 6])
    expect([...byKw]).toEqual([12, 12])
    expect([...byPos]).toEqual([...byKw])
  })

  test("an in-place op given a list writes every tensor of it: each one's version moves, by position and by keyword", async () => {
    await rt.runPromise(Effect.gen(function* () {
      const mesh = yield* ctl.mesh({ dp: 2 })
      const on = opsOn(mesh)
      const [a, b, c, norm] = yield* eager(() => [on.full([2], 3), on.full([3], 4), on.full([1], 5), on.full([], 100)])
      yield* eager(() => ops._clip_by_total_norm_([a!, b!, c!], norm!, 1))
      expect([a!.version, b!.version, c!.version, norm!.version]).toEqual([1, 1, 1, 0])
      // Every parameter by keyword: the typed signature has no such form, the op call takes it.
      const byKeyword = ops._clip_by_total_norm_ as unknown as (kwargs: Record<string, unknown>) => void
      yield* eager(() => byKeyword({ tensors: [b!, c!], total_norm: norm!, max_norm: 1 }))
      expect([a!.version, b!.version, c!.version]).toEqual([1, 2, 2])
      // The values: each scaled by max_norm / (total_norm + 1e-6), twice for b and c.
      const k = Math.fround(1 / (100 + 1e-6))
      expect([...(yield* b!.fetch()).toArray()].map((v) => Math.abs(v - 4 * k * k) < 1e-9)).toEqual([true, true, true])
    }))
  })

  test("an attention block: split gives a list, dropout one tensor, manual_seed nothing; results typed and shaped", async () => {
    const got = await rt.runPromise(Effect.gen(function* () {
      const mesh = yield* ctl.mesh({ dp: 2 })
      const on = opsOn(mesh)
      const { y, pieces, loss } = yield* eager(() => {
        const seeded: void = on.manual_seed(0)
        void seeded
        const x = on.randn([2, 4, 24])
        const pieces: RemoteTensor<"f32">[] = x.split(8, -1)
        // @ts-expect-error split gives a list, not one tensor
        const notOne: RemoteTensor = x.split(8, -1)
        void notOne
        const [q, k, v] = pieces as [RemoteTensor<"f32">, RemoteTensor<"f32">, RemoteTensor<"f32">]
        const attended: RemoteTensor<"f32"> = ops.scaled_dot_product_attention(q, k, v, { is_causal: true })
        const y = attended.dropout(0.1).rms_norm([8]).tril()
        return { y, pieces, loss: ops.mse_loss(y, q) }
      })
      expect([pieces.length, y.shape, loss.shape]).toEqual([3, [2, 4, 8], []])
      return { y: (yield* y.fetch()).toArray(), loss: (yield* loss.fetch()).toArray() }
    }))
    expect(got.y).toBeInstanceOf(Float32Array)
    expect(got.y[1]).toBe(0) // above the diagonal of the first [4, 8] matrix
    expect(Number.isFinite(got.loss[0]!)).toBe(true)
  })

  test("dtype keywords type their results: *_like, sum and cumsum, mean, softmax; in-place forms return their input", async () => {
    const dtypes = await rt.runPromise(Effect.gen(function* () {
      const mesh = yield* ctl.mesh({ dp: 2 })
      const on = opsOn(mesh)
      return yield* eager(() => {
        const i = on.arange(6), x = on.randn([2, 3], { seed: 1 })
        const z: RemoteTensor<"f64"> = ops.zeros_like(i, { dtype: "f64" })
        const same: RemoteTensor<"i64"> = i.ones_like()
        const s: RemoteTensor<"f16"> = i.sum({ dtype: "f16" })
        const c: RemoteTensor<"i64"> = i.cumsum(0)
        const m: RemoteTensor<"f64"> = x.mean({ dtype: "f64" })
        const p: RemoteTensor<"f64"> = x.softmax(-1, { dtype: "f64" })
        // @ts-expect-error zeros_like keeps the input's dtype: i64, not f32
        const wrong: RemoteTensor<"f32"> = i.zeros_like()
        void wrong
        const e: RemoteTensor<"f32"> = x.exp_()
        return [z, same, s, c, m, p, e].map((t) => t.dtype)
      })
    }))
    expect(dtypes).toEqual(["f64", "i64", "f16", "i64", "f64", "f64", "f32"])
  })

  test("sort, topk, kthvalue, cummax and cummin give [values, indices], typed: the input's dtype and i64", async () => {
    const got = await rt.runPromise(Effect.gen(function* () {
      const mesh = yield* ctl.mesh({ dp: 2 })
      const on = opsOn(mesh)
      return yield* eager(() => {
        const x = on.randn([2, 5], { seed: 3 })
        const pairs: Array<[RemoteTensor<"f32">, RemoteTensor<"i64">]> = [x.sort(-1, true), x.topk(2), x.kthvalue(3, 1, true), x.cummax(1), ops.cummin(x, 0)]
        // @ts-expect-error the indices are i64
        const wrong: RemoteTensor<"f32"> = x.sort()[1]
        void wrong
        const order: RemoteTensor<"i64"> = x.argsort()
        return [...pairs.map(([v, i]) => [v.dtype, v.shape, i.dtype, i.shape]), [order.dtype, order.shape]]
      })
    }))
    expect(got).toEqual([
      ["f32", [2, 5], "i64", [2, 5]], ["f32", [2, 2], "i64", [2, 2]], ["f32", [2, 1], "i64", [2, 1]], ["f32", [2, 5], "i64", [2, 5]], ["f32", [2, 5], "i64", [2, 5]], ["i64", [2, 5]],
    ])
  })

  test("an op with no tensor argument needs a mesh, and says so", async () => {
    const message = await rt.runPromise(eager(() => ops.zeros([2])).pipe(Effect.flip, Effect.map((e) => e.message)))
    expect(message).toMatch(/ops\.zeros has no tensor argument to take a mesh from; use opsOn\(mesh\)\.zeros/)
  })
})
