// The process-wide settings the shim takes through its ABI (the worker reads them from its
// configuration and calls these): values outside 0 and 1, and unknown library names, are
// refused with a message naming them; the block cache hands a freed block out again while it
// is on. The shared-memory setting's effect is tests/comm/collectives.test.ts's (TCP vs shm+tcp).
import { afterAll, describe, expect, test } from "bun:test"
import { ptr, read } from "bun:ffi"
import { ConfigError, readConfig } from "../../src/worker/config.ts"
import { empty, expectShimError, native } from "./helpers.ts"

const shim = native.shim
const check = (name: string, status: number) => native.check(status, name)
const cstr = (s: string) => Buffer.from(`${s}\0`)
afterAll(() => native.setBlockCache(true))

describe("shim_set_block_cache, shim_set_comm_shm", () => {
  for (const [fn, set] of [["shim_set_block_cache", shim.shim_set_block_cache], ["shim_set_comm_shm", shim.shim_set_comm_shm]] as const)
    test(`${fn}: 0 and 1 are taken, 2 and -1 are Invalid`, () => {
      check(fn, set(0))
      check(fn, set(1))
      for (const v of [2, -1]) expectShimError(() => check(fn, set(v)), "Invalid", new RegExp(`${fn}: enabled must be 0 or 1, not ${v}`))
    })

  /** The host address of a fresh 1 MiB tensor's elements, the tensor freed again. */
  const blockAddress = (): number => {
    const t = empty("u8", [1 << 20])
    const out = new BigUint64Array(1)
    check("shim_tensor_host_data", shim.shim_tensor_host_data(t.handle, ptr(out)))
    t.free()
    return Number(read.u64(ptr(out), 0))
  }

  test("with the cache on, a freed block of 1 MiB is the next one of its size", () => {
    native.setBlockCache(true)
    const first = blockAddress()
    expect(blockAddress()).toBe(first)
  })
})

describe("shim_set_library", () => {
  test("cpu takes nccl, cublas and cublaslt (and loads nothing)", () => {
    for (const which of ["nccl", "cublas", "cublaslt"]) check("shim_set_library", shim.shim_set_library(cstr(which), cstr("/nowhere/lib.so")))
  })

  test("an unknown library is Invalid, naming it", () => {
    expectShimError(() => check("shim_set_library", shim.shim_set_library(cstr("cudnn"), cstr(""))), "Invalid",
      /shim_set_library: which must be nccl, cublas or cublaslt, not "cudnn"/)
  })
})

describe("the worker's configuration of them", () => {
  const env = (extra: Record<string, string>) => ({ RANK: "0", WORLD_SIZE: "1", MASTER_ADDR: "127.0.0.1", MASTER_PORT: "29500", MONARCH_TOKEN: "t", ...extra })

  test("MONARCH_CPU_CACHE, MONARCH_CUDA_CACHE and MONARCH_COMM_SHM default to on and take 0", () => {
    expect(readConfig(env({}))).toMatchObject({ blockCache: { cpu: true, cuda: true }, commShm: true })
    expect(readConfig(env({ MONARCH_CPU_CACHE: "0", MONARCH_CUDA_CACHE: "0", MONARCH_COMM_SHM: "0" }))).toMatchObject({ blockCache: { cpu: false, cuda: false }, commShm: false })
  })

  test("a value other than 0 or 1 is a ConfigError naming the variable", () => {
    expect(() => readConfig(env({ MONARCH_COMM_SHM: "off" }))).toThrow(ConfigError)
    expect(() => readConfig(env({ MONARCH_CPU_CACHE: "2" }))).toThrow(/MONARCH_CPU_CACHE=2 is not 0 or 1/)
  })
})
