/**
 * One try of a fault scenario: the conditions it checked that did not hold (`problems`) and
 * the times it measured (`figures`, in ms), plus how a row of tries is summarised.
 */
import { HostTensor } from "../../src/protocol/values.ts"

export class Trial {
  readonly problems: string[] = []
  readonly figures: Record<string, number> = {}
  /** Facts worth a count across tries (e.g. which of two racing reports came first). */
  readonly facts: string[] = []

  /** Records `problem` unless `ok`; returns `ok`. */
  check(ok: boolean, problem: string): boolean {
    if (!ok) this.problems.push(problem)
    return ok
  }

  /** Checks that a value is a tensor holding exactly `expected`. */
  checkValues(value: unknown, expected: ReadonlyArray<number>, what: string): void {
    const got = value instanceof HostTensor ? [...value.toArray()].map(Number) : undefined
    this.check(got !== undefined && got.length === expected.length && got.every((x, i) => x === expected[i]), `${what}: expected [${expected}], got ${got ? `[${got}]` : Bun.inspect(value)}`)
  }

  figure(name: string, ms: number): number {
    this.figures[name] = ms
    return ms
  }
}

/** Runs `body` as one try; a throw is a problem of that try, not the end of the row. */
export const attempt = async (body: (t: Trial) => Promise<void>): Promise<Trial> => {
  const t = new Trial()
  try {
    await body(t)
  } catch (e) {
    // The message first: an Effect error's stack is captured before its message getter can run, so it reads just "Error".
    t.problems.push(`threw: ${e instanceof Error ? `${e.name}: ${e.message}\n${e.stack ?? ""}` : String(e)}`)
  }
  return t
}

const seconds = (ms: number) => `${(ms / 1000).toFixed(ms < 1000 ? 3 : 2)} s`

/** "name median (max)" for each figure, in the order first seen, over the tries that have it. */
export const summarise = (trials: ReadonlyArray<Trial>): string => {
  const names = [...new Set(trials.flatMap((t) => Object.keys(t.figures)))]
  const parts = names.map((name) => {
    const xs = trials.flatMap((t) => (name in t.figures ? [t.figures[name]!] : [])).sort((a, b) => a - b)
    const median = xs[Math.floor((xs.length - 1) / 2)]!
    return xs.length > 1 ? `${name} ${seconds(median)} (max ${seconds(xs.at(-1)!)})` : `${name} ${seconds(median)}`
  })
  const facts = [...new Set(trials.flatMap((t) => t.facts))].map((f) => `${f} in ${trials.filter((t) => t.facts.includes(f)).length}/${trials.length}`)
  return [...parts, ...facts].join("; ")
}
