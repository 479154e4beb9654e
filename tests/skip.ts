/** Skips that say why: bun prints a skipped test's name but no reason. */
import { test } from "bun:test"

/** `test` when `why` is undefined; otherwise `test.skip`, printing the test's name and `why`. */
export const testUnless = (why: string | undefined): typeof test =>
  why === undefined
    ? test
    : (((name: string, ...rest: Parameters<typeof test.skip> extends [unknown, ...infer R] ? R : never) => {
      console.log(`skipped "${name}": ${why}`)
      return test.skip(name, ...rest)
    }) as unknown as typeof test)
