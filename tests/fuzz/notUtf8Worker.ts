/**
 * Strs that are not UTF-8 sent to a live worker in random worker-bound fields: each frame must
 * be answered by a ProtocolError naming the field (what the codec answers, notUtf8.ts), and
 * the worker must keep its values and go on serving.
 */
import { expectedProblem, isWorkerBound, randomCase, withText } from "../protocol/notUtf8.ts"
import { rng } from "../protocol/lookups.ts"
import { call, createStream, fetch, numbers, ref } from "../worker/build.ts"
import { startWorkers } from "../worker/harness.ts"

export interface NotUtf8WorkerResult {
  readonly frames: number
  /** Frames answered by a ProtocolError with the expected message. */
  readonly answered: number
  /** The worker kept a value defined before and served a fetch of it after. */
  readonly served: boolean
  readonly failures: ReadonlyArray<string>
}

export const notUtf8ToWorker = async (o: { readonly frames: number; readonly seed: number }): Promise<NotUtf8WorkerResult> => {
  const h = await startWorkers({ world: 1 })
  try {
    h.send(0, createStream)
    h.send(0, call(0, [50], "ops.full", [[3], 7]))
    const next = rng(o.seed)
    const expected: string[] = []
    const before = h.seen(0, "ProtocolError").length
    while (expected.length < o.frames) {
      const c = randomCase(next)
      const sample = c.placement.make("")
      if (!isWorkerBound(sample)) continue
      expected.push(expectedProblem(c.placement))
      h.links[0]!.sendRawForTestsOnly(withText(c.placement, c.bad))
    }
    h.send(0, fetch(1, ref(50)))
    const reply = await h.next(0, "FetchResult", 30_000)
    const got = h.seen(0, "ProtocolError").slice(before).map((p) => p.message)
    let answered = 0
    const failures: string[] = []
    expected.forEach((want, i) => {
      if (got[i] === want) answered++
      else if (failures.length < 5) failures.push(`frame ${i}: expected "${want}", got ${got[i] === undefined ? "nothing" : `"${got[i]}"`}`)
    })
    return { frames: o.frames, answered, served: h.exits.length === 0 && JSON.stringify(numbers(reply.value)) === "[7,7,7]", failures }
  } finally {
    await h.close()
  }
}
