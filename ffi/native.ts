/**
 * Loads the shim for one backend and checks its statuses. MONARCH_DEVICE picks the backend:
 * `cpu` (the default), `cuda`, or `auto` (cuda when it probes well, else cpu, saying why).
 * Everything above this file talks to the shim through a `Native`.
 */
import { dlopen, ptr, read, type Library, type Pointer } from "bun:ffi"
import { existsSync } from "node:fs"
import { Data } from "effect"
import type { Device } from "../base/tensor.ts"
import { ShimStatus, symbols } from "./symbols.ts"

export type ShimSymbols = Library<typeof symbols>["symbols"]

const REASONS = ["Ok", "Invalid", "NoMemory", "Unsupported", "Backend", "Comm", "Timeout", "Unavailable"] as const
export type ShimReason = (typeof REASONS)[number]

/** A failed shim call: the status, the call, and the shim's own message. */
export class ShimError extends Data.TaggedError("ShimError")<{
  readonly status: number
  readonly reason: ShimReason
  readonly op: string
  readonly message: string
}> {}

export const shimError = (status: number, op: string, message: string): ShimError =>
  new ShimError({ status, reason: REASONS[status] ?? "Backend", op, message: message.startsWith(op.split("(")[0]!) ? message : `${op}: ${message}` })

/** A loaded backend library, with scratch space for out-parameters. */
export class Native {
  /** Out-parameter slots (pointers and 64-bit counts), read back with `out(i)`. */
  readonly outs = new BigUint64Array(4)
  readonly outsPtr: Pointer
  /** Shape argument buffer (SHIM_MAX_DIMS int64s). */
  readonly dims = new BigInt64Array(8)
  readonly dimsPtr: Pointer

  constructor(
    readonly device: Device,
    readonly shim: ShimSymbols,
    /** Library path. */
    readonly path: string,
    /** Why this backend was chosen (for `auto`: why cuda was not). */
    readonly reason: string,
  ) {
    this.outsPtr = ptr(this.outs)
    this.dimsPtr = ptr(this.dims)
  }

  /** Throws a ShimError naming `op` when status is not OK. */
  check(status: number, op: string): void {
    if (status !== ShimStatus.OK) throw shimError(status, op, String(this.shim.shim_last_error()))
  }

  /** The pointer an out-parameter call left in slot i. */
  outPtr(i = 0): Pointer {
    return read.ptr(this.outsPtr, i * 8) as Pointer
  }

  /** A 64-bit count an out-parameter call left in slot i. */
  outInt(i = 0): number {
    return Number(this.outs[i])
  }

  /** The memory this backend's tensors draw on: the host's (cpu) or the current device's (cuda). */
  memoryTotal(): number {
    this.check(this.shim.shim_memory_total(this.outsPtr), "shim_memory_total")
    return this.outInt(0)
  }

  /** Limits this process's tensor memory (0: none); an allocation over it fails as NoMemory. */
  setMemoryLimit(bytes: number): void {
    this.check(this.shim.shim_set_memory_limit(bytes), "shim_set_memory_limit")
  }

  /** The threads this process's kernels (and BLAS) use on cpu, n >= 1; cuda ignores it. */
  setThreads(n: number): void {
    this.check(this.shim.shim_set_threads(n), "shim_set_threads")
  }

  /** Whether freed tensor memory is kept for reuse (true, the default) or freed at once. */
  setBlockCache(enabled: boolean): void {
    this.check(this.shim.shim_set_block_cache(enabled ? 1 : 0), "shim_set_block_cache")
  }

  /** cpu: whether communicators created from now on use shared memory between members on one host (true, the default). */
  setCommShm(enabled: boolean): void {
    this.check(this.shim.shim_set_comm_shm(enabled ? 1 : 0), "shim_set_comm_shm")
  }

  /**
   * Counts `bytes` of memory this process holds outside tensors (a host copy of one) as in use,
   * or throws the NoMemory ShimError naming `what` and the limit when that would pass it.
   */
  reserveMemory(what: string, bytes: number): void {
    this.check(this.shim.shim_memory_reserve(Buffer.from(`${what}\0`), bytes), what)
  }

  /** Gives back what reserveMemory counted. */
  releaseMemory(bytes: number): void {
    this.check(this.shim.shim_memory_release(bytes), "shim_memory_release")
  }

  /** Tensor bytes in use and the limit (0: none). */
  memoryUsage(): { readonly inUse: number; readonly limit: number } {
    this.check(this.shim.shim_memory_usage(this.outsPtr, ptr(this.outs, 8)), "shim_memory_usage")
    return { inUse: this.outInt(0), limit: this.outInt(1) }
  }

  /** Fills the shape buffer and returns its pointer. */
  shapeArg(shape: ReadonlyArray<number>): Pointer {
    for (let i = 0; i < shape.length; i++) this.dims[i] = BigInt(shape[i]!)
    return this.dimsPtr
  }
}

/** Where the libraries are: MONARCH_SHIM_DIR, else the package's build/ (make, or `monarch-bun build`). */
const buildDir = process.env.MONARCH_SHIM_DIR ?? new URL("../build/", import.meta.url).pathname
export const libraryPath = (device: Device): string => `${buildDir.replace(/\/$/, "")}/libshim-${device}.so`

const open = (device: Device, reason: string): Native => {
  const path = libraryPath(device)
  const lib = dlopen(path, symbols)
  return new Native(device, lib.symbols, path, reason)
}

/** Tries the cuda backend; returns why it cannot be used, or the loaded Native. */
const tryCuda = (reason: string): Native | string => {
  const path = libraryPath("cuda")
  if (!existsSync(path)) return `${path} is not built (nvcc was not found when make ran)`
  let native: Native
  try {
    native = open("cuda", reason)
  } catch (e) {
    return `${path} does not load: ${(e as Error).message}`
  }
  // Where NCCL and cuBLAS are, before the probe loads them.
  for (const [which, variable] of [["nccl", "MONARCH_NCCL_LIB"], ["cublas", "MONARCH_CUBLAS_LIB"], ["cublaslt", "MONARCH_CUBLASLT_LIB"]] as const) {
    const path = process.env[variable]
    if (path !== undefined && path !== "" && native.shim.shim_set_library(Buffer.from(`${which}\0`), Buffer.from(`${path}\0`)) !== ShimStatus.OK)
      return `${variable}: ${String(native.shim.shim_last_error())}`
  }
  const status = native.shim.shim_probe()
  if (status !== ShimStatus.OK) return `cuda probe failed: ${String(native.shim.shim_last_error())}`
  return native
}

const loaded = new Map<string, Native>()

/**
 * The backend for this process, loaded once. Throws a ShimError (Unavailable) when cuda is
 * asked for and cannot run, naming the reason and what to set.
 */
export function loadNative(request: string = process.env.MONARCH_DEVICE ?? "cpu"): Native {
  const cached = loaded.get(request)
  if (cached) return cached
  let native: Native
  if (request === "cpu") {
    const cpu = libraryPath("cpu")
    if (!existsSync(cpu)) throw shimError(ShimStatus.UNAVAILABLE, "load", `${cpu} is not built: run \`make\` in a clone, or \`monarch-bun build\` where the package is installed (it needs make, gcc, g++, libgloo-dev and libopenblas-dev), or set MONARCH_SHIM_DIR to a folder holding libshim-cpu.so`)
    native = open("cpu", "MONARCH_DEVICE=cpu")
  } else if (request === "cuda") {
    const cuda = tryCuda("MONARCH_DEVICE=cuda")
    if (typeof cuda === "string")
      throw shimError(ShimStatus.UNAVAILABLE, "load", `${cuda} (set MONARCH_DEVICE=cpu or auto; MONARCH_NCCL_LIB and MONARCH_CUBLAS_LIB locate the libraries)`)
    native = cuda
  } else if (request === "auto") {
    const cuda = tryCuda("MONARCH_DEVICE=auto found a usable device")
    native = typeof cuda === "string" ? open("cpu", `MONARCH_DEVICE=auto chose cpu: ${cuda}`) : cuda
  } else {
    throw shimError(ShimStatus.INVALID, "load", `MONARCH_DEVICE must be cpu, cuda or auto, not ${JSON.stringify(request)}`)
  }
  loaded.set(request, native)
  return native
}
