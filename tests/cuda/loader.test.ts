// How the cuda shim finds NCCL at run time, checked without a GPU: MONARCH_NCCL_LIB points at
// a missing file, at a stub library missing an entry point, and at one reporting too old a
// version (stubs compiled here with cc). Each load must fail with SHIM_E_UNAVAILABLE and say
// what was tried and what to set, not crash. Skipped, saying why, without libshim-cuda.so or cc.
import { beforeAll, afterAll, describe, expect, test } from "bun:test"
import { testUnless } from "../skip.ts"
import { existsSync, mkdtempSync, rmSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { libraryPath } from "../../ffi/native.ts"
import { ShimStatus } from "../../ffi/symbols.ts"

const ENTRY_POINTS = [
  "ncclGetVersion", "ncclGetUniqueId", "ncclCommInitRankConfig", "ncclCommGetAsyncError", "ncclCommFinalize",
  "ncclCommDestroy", "ncclCommAbort", "ncclGetErrorString", "ncclGetLastError", "ncclAllReduce", "ncclAllGather",
  "ncclReduceScatter", "ncclBroadcast", "ncclSend", "ncclRecv", "ncclGroupStart", "ncclGroupEnd",
]

const cc = Bun.which("cc")
const why = !existsSync(libraryPath("cuda"))
  ? `${libraryPath("cuda")} is not built`
  : cc === null
    ? "no C compiler (cc) to build the stub libraries"
    : ""
const loaderTest = testUnless(why || undefined)

let dir = ""

/** A shared library exporting `names`; ncclGetVersion reports `version`. */
const stub = (file: string, names: ReadonlyArray<string>, version: number): string => {
  const source = names
    .map((name) =>
      name === "ncclGetVersion" ? `int ncclGetVersion(int *v) { *v = ${version}; return 0; }` : `int ${name}(void) { return 0; }`,
    )
    .join("\n")
  const c = join(dir, `${file}.c`), so = join(dir, `${file}.so`)
  writeFileSync(c, source)
  const built = Bun.spawnSync([cc!, "-shared", "-fPIC", "-o", so, c])
  if (built.exitCode !== 0) throw new Error(`cc failed: ${built.stderr.toString()}`)
  return so
}

/** Runs the child with MONARCH_NCCL_LIB set; returns its status and error text. */
const load = (ncclLib: string): { status: number; error: string } => {
  const child = Bun.spawnSync([process.execPath, join(import.meta.dir, "loader_child.ts")], {
    env: { ...process.env, MONARCH_NCCL_LIB: ncclLib },
    timeout: 15_000,
  })
  const text = child.stdout.toString().trim()
  if (child.exitCode !== 0 || text === "") throw new Error(`child failed (${child.exitCode}): ${child.stderr.toString()}`)
  return JSON.parse(text.split("\n").at(-1)!)
}

describe("loading NCCL", () => {
  beforeAll(() => {
    if (!why) dir = mkdtempSync(join(tmpdir(), "monarch-nccl-stub-"))
  })
  afterAll(() => {
    if (dir) rmSync(dir, { recursive: true, force: true })
  })

  loaderTest("a missing file names itself and the variable to set", () => {
    const missing = join(tmpdir(), "no-such-dir", "libnccl.so.2")
    const { status, error } = load(missing)
    expect(status).toBe(ShimStatus.UNAVAILABLE)
    expect(error).toContain(`NCCL did not load; tried ${missing} (`)
    expect(error).toContain("Set MONARCH_NCCL_LIB")
  })

  loaderTest("a library without every entry point names the first missing one", () => {
    const partial = stub("partial", ["ncclGetVersion", "ncclGetUniqueId"], 22703)
    const { status, error } = load(partial)
    expect(status).toBe(ShimStatus.UNAVAILABLE)
    expect(error).toBe(`${partial} does not export ncclCommInitRankConfig`)
  })

  loaderTest("a release older than 2.14 is refused with its version code", () => {
    const old = stub("old", ENTRY_POINTS, 21304)
    const { status, error } = load(old)
    expect(status).toBe(ShimStatus.UNAVAILABLE)
    expect(error).toContain(`${old} reports NCCL version code 21304`)
    expect(error).toContain("2.14 or a later 2.x is needed")
  }, 20_000)
})
