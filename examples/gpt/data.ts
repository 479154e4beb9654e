/**
 * The task the GPT learns, generated here so nothing is downloaded: reverse a string of digits.
 * A sequence is `d1 .. dn = dn .. d1`; the model reads it shifted by one and is scored only on
 * the reversed half (the digits before `=` are random, so no model could predict them), and
 * held-out accuracy is the share of answers it gets exactly right, greedily decoded.
 *
 * Batches come from a seeded generator, so the mesh and the torch twin (examples/gpt/twin.py,
 * which is handed these very batches) see the same data, and a run is reproducible.
 */

/** Tokens 0-9 are digits; SEP is `=`. */
export const SEP = 10
export const VOCAB = 11
/** The target of a position that is not scored (torch's cross_entropy default ignore_index). */
export const IGNORE = -100

/** mulberry32: a small seeded generator of uniform numbers in [0, 1). */
export const generator = (seed: number) => {
  let a = seed >>> 0
  return (): number => {
    a = (a + 0x6d2b79f5) >>> 0
    let t = a
    t = Math.imul(t ^ (t >>> 15), t | 1)
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61)
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296
  }
}

/** One batch: inputs and targets, row-major [rows, 2 * digits]. */
export interface Batch {
  readonly rows: number
  readonly length: number
  readonly x: ReadonlyArray<number>
  readonly y: ReadonlyArray<number>
}

/** The sequence length the model sees for `digits` digits (the last token is never an input). */
export const blockSize = (digits: number) => 2 * digits

/** `rows` random problems of `digits` digits. */
export const makeBatch = (random: () => number, rows: number, digits: number): Batch => {
  const length = blockSize(digits), x: number[] = [], y: number[] = []
  for (let r = 0; r < rows; r++) {
    const ds = Array.from({ length: digits }, () => Math.floor(random() * 10))
    const seq = [...ds, SEP, ...ds.toReversed()]
    for (let i = 0; i < length; i++) {
      x.push(seq[i]!)
      // Position i predicts token i + 1; only the reversed digits (after `=`) are scored.
      y.push(i + 1 > digits ? seq[i + 1]! : IGNORE)
    }
  }
  return { rows, length, x, y }
}

/** The `n` batches of a run, from `seed`. */
export const makeBatches = (seed: number, n: number, rows: number, digits: number): Batch[] => {
  const random = generator(seed)
  return Array.from({ length: n }, () => makeBatch(random, rows, digits))
}

/** Rows `[start, start + count)` of a batch (a dp rank's part). */
export const rowsOf = (b: Batch, start: number, count: number): Batch => ({
  rows: count,
  length: b.length,
  x: b.x.slice(start * b.length, (start + count) * b.length),
  y: b.y.slice(start * b.length, (start + count) * b.length),
})

/** A problem as text: `3141=1413`. */
export const show = (tokens: ReadonlyArray<number>): string => tokens.map((t) => (t === SEP ? "=" : String(t))).join("")
