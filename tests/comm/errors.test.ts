// CommError's reason: taken from the shim's status, carried in the failure's payload across
// the wire, and read by the controller, which loads no native code to do it.
import { describe, expect, test } from "bun:test"
import { Result } from "effect"
import { readFileSync } from "node:fs"
import { dirname, resolve } from "node:path"
import { shimError } from "../../ffi/native.ts"
import { ShimStatus } from "../../ffi/symbols.ts"
import { commError } from "../../src/comm/communicators.ts"
import { CommError, mayBePeerLoss } from "../../src/comm/errors.ts"
import { decodeControllerMessage, encodeMessage } from "../../src/protocol/codec.ts"
import { ErrorPayload } from "../../src/protocol/values.ts"
import { toErrorPayload } from "../../src/worker/errors.ts"

const ROOT = resolve(import.meta.dir, "../..")

/** Every module `file` imports, transitively (relative imports and bare specifiers). */
const importClosure = (file: string, seen = new Set<string>()): Set<string> => {
  if (seen.has(file)) return seen
  seen.add(file)
  const source = readFileSync(file, "utf8")
  for (const [, spec] of source.matchAll(/^(?:import|export)\s+(?!type\b)(?:[^"';]*?\sfrom\s+)?["']([^"']+)["']/gm)) {
    if (spec!.startsWith(".")) importClosure(resolve(dirname(file), spec!), seen)
    else seen.add(spec!)
  }
  return seen
}

describe("CommError's reason", () => {
  test("comes from the shim's status", () => {
    const reasons = [ShimStatus.TIMEOUT, ShimStatus.COMM, ShimStatus.INVALID, ShimStatus.UNSUPPORTED, ShimStatus.NOMEM, ShimStatus.BACKEND]
      .map((status) => commError(shimError(status, "shim_all_reduce", "x")).reason)
    expect(reasons).toEqual(["timeout", "peer-lost", "invalid", "invalid", "device", "device"])
  })

  test("a CommError stays as it is; another throw is the fallback reason", () => {
    const own = new CommError({ reason: "rendezvous", message: "m" })
    expect(commError(own)).toBe(own)
    expect(commError(new RangeError("bad"), "invalid")).toMatchObject({ reason: "invalid", message: "bad" })
  })

  test("travels in the failure's payload over the wire", () => {
    const payload = toErrorPayload(commError(shimError(ShimStatus.TIMEOUT, "shim_all_reduce", "timed out after 50 ms")))
    expect(payload).toMatchObject({ type: "CommError", reason: "timeout" })
    const bytes = encodeMessage({ _tag: "RemoteFunctionFailed", ident: 3, error: payload })
    if (!Result.isSuccess(bytes)) throw new Error(bytes.failure.message)
    const decoded = decodeControllerMessage(bytes.success)
    if (!Result.isSuccess(decoded)) throw new Error(decoded.failure.message)
    expect(decoded.success).toMatchObject({ _tag: "RemoteFunctionFailed", error: { type: "CommError", reason: "timeout", message: payload.message } })
  })

  test("an error without a reason sends none, and decodes without one", () => {
    const payload = toErrorPayload(new TypeError("no reason"))
    expect(payload.reason).toBeUndefined()
    const bytes = encodeMessage({ _tag: "RemoteFunctionFailed", ident: 3, error: payload })
    if (!Result.isSuccess(bytes)) throw new Error(bytes.failure.message)
    const decoded = decodeControllerMessage(bytes.success)
    expect(Result.isSuccess(decoded) && decoded.success._tag === "RemoteFunctionFailed" && decoded.success.error.reason).toBeUndefined()
  })

  test("a reason that is not a string is refused", () => {
    const bytes = encodeMessage({ _tag: "RemoteFunctionFailed", ident: 3, error: new ErrorPayload("CommError", "m", [], 7 as unknown as string) })
    expect(Result.isFailure(bytes) && bytes.failure.message).toContain("reason")
  })

  test("the controller tells a peer's loss from a bad call by tag and reason", () => {
    expect(["timeout", "peer-lost", "rendezvous", "invalid", "device", undefined].map((r) => mayBePeerLoss("CommError", r)))
      .toEqual([true, true, true, false, false, false])
    expect(mayBePeerLoss("ShimError", "timeout")).toBe(false)
  })

  test("the controller's engine and the comm errors load no native code", () => {
    for (const entry of ["src/comm/errors.ts", "src/controller/core.ts"]) {
      const native = [...importClosure(resolve(ROOT, entry))].filter((m) => m === "bun:ffi" || m.startsWith(resolve(ROOT, "ffi")))
      expect({ entry, native }).toEqual({ entry, native: [] })
    }
  })
})
