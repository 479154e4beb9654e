/** What the cuda tests compare: one call on the cpu (0) and the cuda (1) backend. */
import { expect } from "bun:test"
import { ShimError } from "../../ffi/native.ts"

/** Runs a call on each backend: both succeed, or both fail with the same status and message. */
export const alike = (what: string, call: (which: 0 | 1) => void): boolean => {
  const outcome = (which: 0 | 1) => {
    try {
      call(which)
      return "ok"
    } catch (e) {
      if (!(e instanceof ShimError)) throw e
      return `${e.reason}: ${e.message}`
    }
  }
  const [c, g] = [outcome(0), outcome(1)]
  expect(`${what}: ${g}`).toBe(`${what}: ${c}`)
  return c === "ok"
}
