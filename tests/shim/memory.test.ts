// The shim's memory limit (c/common/memory.c), which every tensor allocation passes on both
// backends: what is in use is counted from allocation to the last free, and an allocation
// over the limit fails as NoMemory naming the limit, before taking memory. The worker's
// default limit (src/worker/memory.ts) is checked here too, as arithmetic.
import { afterEach, describe, expect, test } from "bun:test"
import { DEFAULT_SHARE, memoryLimitOf } from "../../src/worker/memory.ts"
import { parseMemoryLimit } from "../../src/worker/config.ts"
import { testUnless } from "../skip.ts"
import { empty, expectShimError, freeAll, native, viewOf } from "./helpers.ts"

afterEach(() => {
  freeAll()
  native.setMemoryLimit(0)
})

describe("the shim's memory limit", () => {
  test("counts each storage from allocation to its last free, views included", () => {
    const before = native.memoryUsage().inUse
    const a = empty("f32", [1000])
    expect(native.memoryUsage().inUse - before).toBe(4000)
    const v = viewOf(a, [10, 100])
    a.free()
    expect(native.memoryUsage().inUse - before).toBe(4000)
    v.free()
    expect(native.memoryUsage().inUse).toBe(before)
  })

  // In a process of its own (memory_child.ts): the limit is the whole process's, and here other
  // files' tensors may be freed or made while it is measured.
  test("refuses an allocation that would pass it, naming the limit; smaller ones and freed room still work", () => {
    const child = Bun.spawnSync([process.execPath, new URL("./memory_child.ts", import.meta.url).pathname], { stdout: "pipe", stderr: "pipe" })
    expect(child.stderr.toString()).toBe("")
    const seen = JSON.parse(child.stdout.toString())
    expect(seen.limit).toBe(1 << 20)
    expect(seen.over?.reason).toBe("NoMemory")
    expect(seen.over?.op).toBe("shim_tensor_alloc")
    expect(seen.over?.message).toMatch(/shim_tensor_alloc: 524288 bytes would pass the memory limit of \d+ bytes \(\d+ in use; MONARCH_MEMORY_LIMIT\)/)
    expect(seen.inUseAfter).toBe(768 << 10)
    expect({ smaller: seen.smaller, freedRoom: seen.freedRoom }).toEqual({ smaller: null, freedRoom: null })
    expect(seen.huge?.reason).toBe("NoMemory")
    expect(seen.huge?.message).toMatch(/12000000000 bytes would pass the memory limit/)
  }, 30_000)

  test("0 is no limit, and a negative one is refused", () => {
    native.setMemoryLimit(0)
    expect(native.memoryUsage().limit).toBe(0)
    empty("f32", [1 << 20])
    expectShimError(() => native.setMemoryLimit(-1), "Invalid", /negative/)
  })

  testUnless(native.device === "cpu" ? undefined : `the backend loaded is ${native.device}, not cpu`)("cpu: the memory total is the host's", () => {
    expect(native.memoryTotal()).toBe(require("node:os").totalmem())
  })
})

describe("the worker's limit", () => {
  const GiB = 2 ** 30
  test(`default: ${DEFAULT_SHARE * 100}% of host memory shared by the local workers on cpu, of the device's own on cuda`, () => {
    expect(memoryLimitOf({ memoryLimit: undefined, localWorld: 4 }, "cpu", 20 * GiB).bytes).toBe(Math.floor(20 * GiB * DEFAULT_SHARE / 4))
    expect(memoryLimitOf({ memoryLimit: undefined, localWorld: 8 }, "cuda", 80 * GiB).bytes).toBe(Math.floor(80 * GiB * DEFAULT_SHARE))
    expect(memoryLimitOf({ memoryLimit: undefined, localWorld: 4 }, "cpu", 20 * GiB).why).toContain("shared by 4 local workers")
  })

  test("MONARCH_MEMORY_LIMIT: a size, a share, or off; anything else is a ConfigError", () => {
    expect(parseMemoryLimit("512MiB")).toEqual({ bytes: 512 * 2 ** 20 })
    expect(parseMemoryLimit("8G")).toEqual({ bytes: 8 * GiB })
    expect(parseMemoryLimit("1.5gb")).toEqual({ bytes: 1.5 * GiB })
    expect(parseMemoryLimit("4096")).toEqual({ bytes: 4096 })
    expect(parseMemoryLimit("40%")).toEqual({ fraction: 0.4 })
    expect(parseMemoryLimit("off")).toBe("off")
    expect(parseMemoryLimit("0")).toBe("off")
    for (const bad of ["lots", "-5", "150%", "0%", "5 parsecs"]) expect(() => parseMemoryLimit(bad)).toThrow(/MONARCH_MEMORY_LIMIT=/)
    expect(memoryLimitOf({ memoryLimit: { fraction: 0.4 }, localWorld: 4 }, "cpu", 10 * GiB).bytes).toBe(4 * GiB)
    expect(memoryLimitOf({ memoryLimit: { bytes: 123 }, localWorld: 4 }, "cpu", 10 * GiB).bytes).toBe(123)
    expect(memoryLimitOf({ memoryLimit: "off", localWorld: 4 }, "cpu", 10 * GiB).bytes).toBe(0)
  })
})
