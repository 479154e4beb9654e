/**
 * The per-rank random generator every worker session holds: a Philox key and the counter
 * offset of its next draw. Random ops without an explicit seed (rand, randn, randint, dropout)
 * take their numbers from it, advancing it by their element count; because Philox is counter
 * based (element i of a draw is a function of (key, offset + i) only, c/common/numeric.h), the
 * same state gives the same values on cpu and cuda, and a state saved and restored (get_rng_state
 * / set_rng_state) continues the stream exactly. A rank's key mixes the seed with its rank, so
 * ranks draw distinct streams unless manual_seed asks for one shared stream.
 * The API (ops, state layout, what a checkpoint saves) is in /work/notes/generator-api.md.
 */

const U64 = (1n << 64n) - 1n

/** The seed a session starts from: a fixed one, so runs are reproducible without manual_seed. */
export const DEFAULT_SEED = 0

/** splitmix64 of seed + (stream + 1) * golden: for one seed, a bijection of the stream (the rank) onto keys. */
export const philoxKey = (seed: bigint, stream: bigint): bigint => {
  let z = (seed + (stream + 1n) * 0x9e3779b97f4a7c15n) & U64
  z = ((z ^ (z >> 30n)) * 0xbf58476d1ce4e5b9n) & U64
  z = ((z ^ (z >> 27n)) * 0x94d049bb133111ebn) & U64
  return z ^ (z >> 31n)
}

/** Where a draw of n numbers reads: Philox key and first counter. */
export interface Draw {
  readonly seed: bigint
  readonly offset: bigint
}

export class Generator {
  key = 0n
  offset = 0n

  constructor(readonly rank: number) {
    this.manualSeed(DEFAULT_SEED, true)
  }

  /** Restarts the stream at seed: this rank's own (distinct) or the one every rank shares. */
  manualSeed(seed: number | bigint, distinct: boolean): void {
    this.key = philoxKey(BigInt.asUintN(64, BigInt(seed)), distinct ? BigInt(this.rank) : -1n & U64)
    this.offset = 0n
  }

  /** The next n numbers: where they start; the generator moves past them. */
  draw(n: number): Draw {
    const d = { seed: this.key, offset: this.offset }
    this.offset = (this.offset + BigInt(n)) & U64
    return d
  }

  /** [key, offset] as i64 bit patterns (get_rng_state's tensor). */
  state(): [bigint, bigint] {
    return [BigInt.asIntN(64, this.key), BigInt.asIntN(64, this.offset)]
  }

  setState(key: bigint, offset: bigint): void {
    this.key = BigInt.asUintN(64, key)
    this.offset = BigInt.asUintN(64, offset)
  }
}
