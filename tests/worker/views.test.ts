// What reads or writes a tensor's bytes on a real worker, given a strided view (made by the
// built-in as_strided): a fetch gives the view's elements in row-major order; an all_reduce (in place or not) and a SendTensor of a view go through a
// dense copy, in place written back through the view and nothing else of its storage; an
// in-place all_reduce of an expanded view is refused as torch refuses the write, the peers not
// left waiting, and the mesh goes on; a checkpoint shard of a view holds the view's elements.
import { afterAll, beforeAll, describe, expect, test } from "bun:test"
import { mkdtempSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { SafetensorsReader } from "../../src/checkpoint/files.ts"
import { NDSlice } from "../../src/protocol/ndslice.ts"
import { Ref } from "../../src/protocol/values.ts"
import { call, createStream, factory, fetch, host, mesh, numbers, reduce, ref, send, STREAM } from "./build.ts"
import { startWorkers, type Harness } from "./harness.ts"

const WORLD = 2, MESH = 3
const dir = mkdtempSync(join(tmpdir(), "views-"))
let h: Harness
let ident = 0
const next = () => ident++
let refs = 100
const fresh = () => refs++

beforeAll(async () => {
  h = await startWorkers({ world: WORLD, env: { MONARCH_CHECKPOINT_DIR: dir } })
  h.send("all", createStream)
  h.send("all", mesh(MESH, ["x"], [2]))
}, 60_000)
afterAll(async () => {
  await h?.close()
  rmSync(dir, { recursive: true, force: true })
})

/** On every rank, a base of 8 elements (rank r: 10 r + [0..7]) and a view of it; returns [base, view]. */
const viewOnAll = (shape: number[], strides: number[], offset: number): [number, number] => {
  const base = fresh(), view = fresh()
  for (const r of [0, 1]) h.send(r, call(next(), [base], "ops.add", [host("f32", [8], [0, 1, 2, 3, 4, 5, 6, 7]), 10 * r]))
  h.send("all", call(next(), [view], "ops.as_strided", [ref(base), shape, strides, offset]))
  return [base, view]
}

/** Commands that are meant to fail (the refusals): any other's failure fails the wait for a fetch at once. */
const refused = new Set<number>()

/** Each rank's value of ref r; a command's failure on any rank (other than a refusal) fails it at once, saying why. */
const fetchAll = (r: number, ranks = [0, 1]): Promise<number[][]> => {
  const id = next()
  h.send(ranks, fetch(id, ref(r)))
  return Promise.all(ranks.map(async (rank) => {
    const got = await h.until(() => {
      for (const any of [0, 1]) {
        const failed = h.seen(any, "RemoteFunctionFailed").find((m) => !refused.has(m.ident))
        if (failed) throw new Error(`rank ${any}: command ${failed.ident} failed: ${failed.error.message}`)
      }
      return h.seen(rank, "FetchResult").find((m) => m.ident === id)
    }, 20_000, `the fetch of ${r}`)
    return numbers(got.value)
  }))
}

/** Base rank r's elements at positions of a [2, 2] view with strides [1, 4] from 1: 1, 5, 2, 6. */
const AT = [1, 5, 2, 6]

describe("a strided view on a worker", () => {
  test("a fetch gives the view's elements in row-major order", async () => {
    const [, view] = viewOnAll([2, 2], [1, 4], 1)
    expect(await fetchAll(view)).toEqual([AT, AT.map((p) => p + 10)])
  })

  test("all_reduce of a view gives the sum of the views' elements", async () => {
    const [, view] = viewOnAll([2, 2], [1, 4], 1), out = fresh()
    h.send("all", reduce(next(), out, view, MESH, ["x"], "sum", factory([2, 2])))
    expect(await fetchAll(out)).toEqual([0, 1].map(() => AT.map((p) => 2 * p + 10)))
  })

  test("all_reduce in place on a view writes the sum through it, and nothing else of the base", async () => {
    const [base, view] = viewOnAll([2, 2], [1, 4], 1), out = fresh()
    h.send("all", reduce(next(), out, view, MESH, ["x"], "sum", factory([2, 2]), { inplace: true }))
    const sums = AT.map((p) => 2 * p + 10)
    expect(await fetchAll(out)).toEqual([sums, sums])
    const bases = await fetchAll(base)
    for (const r of [0, 1]) {
      const want = [0, 1, 2, 3, 4, 5, 6, 7].map((v) => v + 10 * r)
      AT.forEach((p, i) => (want[p] = sums[i]!))
      expect(bases[r]!).toEqual(want)
    }
  })

  test("all_reduce in place on an expanded view is refused on every rank, nothing written; the mesh goes on", async () => {
    const [base, view] = viewOnAll([2, 3], [0, 1], 0), out = fresh(), id = next()
    refused.add(id)
    h.send("all", reduce(id, out, view, MESH, ["x"], "sum", factory([2, 3]), { inplace: true }))
    for (const r of [0, 1]) {
      const failed = await h.until(() => h.seen(r, "RemoteFunctionFailed").find((m) => m.ident === id), 20_000, "the refusal")
      expect(failed.error.message).toContain("more than one element of the written-to tensor refers to a single memory location")
    }
    expect(await fetchAll(base)).toEqual([0, 1].map((r) => [0, 1, 2, 3, 4, 5, 6, 7].map((v) => v + 10 * r)))
    const [, again] = viewOnAll([2, 2], [1, 4], 1), sum = fresh()
    h.send("all", reduce(next(), sum, again, MESH, ["x"], "sum", factory([2, 2])))
    expect(await fetchAll(sum)).toEqual([0, 1].map(() => AT.map((p) => 2 * p + 10)))
  })

  test("SendTensor of a view sends its elements", async () => {
    const [, view] = viewOnAll([2, 2], [1, 4], 1), got = fresh()
    h.send("all", send(next(), got, new NDSlice(0, [1], [1]), new NDSlice(1, [1], [1]), view, factory([2, 2])))
    expect(await fetchAll(got, [1])).toEqual([AT])
  })

  test("a checkpoint shard of a view holds the view's elements", async () => {
    const [, view] = viewOnAll([2, 2], [1, 4], 1)
    const id = next()
    h.send(0, { _tag: "SaveShards", ident: id, dir: "shard", tensors: [new Ref(view)], names: ["w"], writers: [[0]], stream: STREAM })
    const saved = await h.until(() => h.seen(0, "FetchResult").find((m) => m.ident === id), 20_000, "the shard written")
    expect((saved.value as { error?: string }).error).toBeUndefined()
    using reader = new SafetensorsReader(join(dir, "shard", "rank-0.safetensors"), "rank-0")
    const entry = reader.header.tensors.get("w")!
    expect({ dtype: entry.dtype, shape: [...entry.shape] }).toEqual({ dtype: "f32", shape: [2, 2] })
    const data = reader.read(reader.header.dataStart + entry.offsets[0], 16, new Uint8Array(16), 0)
    expect([...new Float32Array(data.buffer, 0, 4)]).toEqual(AT)
  })
})
