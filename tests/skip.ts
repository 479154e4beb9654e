/**
 * Skips that say why: bun prints a skipped test's name but no reason, so every skip in tests/
 * goes through these (tests/skips.test.ts holds them to it).
 */
import { describe, test } from "bun:test"

type Rest<F> = F extends (name: string, ...rest: infer R) => unknown ? R : never

/** `test` when `why` is undefined; otherwise `test.skip`, printing the test's name and `why`. */
export const testUnless = (why: string | undefined): typeof test =>
  why === undefined
    ? test
    : (((name: string, ...rest: Rest<typeof test.skip>) => {
      console.log(`skipped "${name}": ${why}`)
      return test.skip(name, ...rest)
    }) as unknown as typeof test)

/** `describe` when `why` is undefined; otherwise `describe.skip`, printing its name and `why`. */
export const describeUnless = (why: string | undefined): typeof describe =>
  why === undefined
    ? describe
    : (((name: string, ...rest: Rest<typeof describe.skip>) => {
      console.log(`skipped "${name}": ${why}`)
      return describe.skip(name, ...rest)
    }) as unknown as typeof describe)
