/**
 * Sampled generation for the GPT (the demo's held-out check stays greedy: examples/gpt.ts does
 * not use this): each next token drawn from softmax(logits / temperature) over the topK largest
 * logits (every other logit -inf; logits tied with the kth are kept too, as nanoGPT's), by one
 * multinomial draw from each rank's generator (ops.manual_seed repeats a run).
 */
import { Effect } from "effect"
import { HostTensor, type Mesh, noGrad, type RemoteTensor, shard } from "../../src/controller/index.ts"
import { distribute, type GPT } from "./model.ts"

export interface Sampling {
  /** Divides the logits: below 1 sharper, above 1 flatter; 0 takes the largest (greedy). */
  readonly temperature: number
  /** Only the topK most likely tokens can be drawn (all when absent). */
  readonly topK?: number
}

/** The next token of each row of logits [rows, vocab], as i64 [rows, 1]. */
export const sampleNext = (logits: RemoteTensor, { temperature, topK }: Sampling): RemoteTensor => noGrad(() => {
  if (!(temperature >= 0)) throw new RangeError(`temperature must be non-negative, got ${temperature}`)
  if (topK !== undefined && !(Number.isInteger(topK) && topK >= 1)) throw new RangeError(`topK must be a positive integer, got ${topK}`)
  if (temperature === 0) return logits.argmax(-1, true)
  const vocab = logits.shape!.at(-1)!
  let scaled = logits.div(temperature)
  if (topK !== undefined && topK < vocab) {
    const [kept] = scaled.topk(topK, -1)
    scaled = scaled.masked_fill(scaled.lt(kept.narrow(-1, topK - 1, 1)), -Infinity)
  }
  return scaled.softmax(-1).multinomial(1, true)
})

const i64 = (shape: ReadonlyArray<number>, data: ReadonlyArray<number>) => new HostTensor("i64", shape, new Uint8Array(BigInt64Array.from(data, BigInt).buffer))

/**
 * `steps` tokens after each prompt (rows of one length, split over the model's dp; each token
 * read from tp rank 0), one forward
 * pass per token over the whole block, each fed the tokens drawn so far.
 */
export const generate = (mesh: Mesh, model: GPT, prompts: ReadonlyArray<ReadonlyArray<number>>, steps: number, sampling: Sampling) =>
  Effect.gen(function* () {
    const rows = prompts.length, length = model.config.block, start = prompts[0]!.length, dp = mesh.dims.dp!, perRank = rows / dp
    if (start + steps > length) return yield* Effect.die(new RangeError(`${start} prompt tokens and ${steps} more exceed the block of ${length}`))
    const x = prompts.flatMap((p) => [...p, ...new Array<number>(length - start).fill(0)])
    const out: number[][] = prompts.map(() => [])
    for (let p = start - 1; p < start - 1 + steps; p++) {
      const input = yield* distribute(mesh, i64([rows, length], x), { dp: shard(0) })
      const next = noGrad(() => sampleNext(model.forward(input).select(1, p), sampling))
      for (let d = 0; d < dp; d++) {
        const picked = ((yield* mesh.fetch(next, { dp: d, tp: 0 })) as HostTensor<"i64">).toArray()
        picked.forEach((v, r) => {
          const row = d * perRank + r
          out[row]!.push(Number(v))
          if (p + 1 < length) x[row * length + p + 1] = Number(v)
        })
      }
    }
    return out
  })
