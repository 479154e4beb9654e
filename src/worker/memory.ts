/**
 * The worker's tensor memory limit (MONARCH_MEMORY_LIMIT), set in the shim, whose allocator
 * refuses any tensor that would pass it with a NoMemory ShimError: that command fails, the
 * worker goes on. By default each worker gets DEFAULT_SHARE of its backend's memory: on cpu,
 * the host's, divided among the host's workers (LOCAL_WORLD_SIZE); on cuda, its own device's.
 * On cpu, host copies of tensors count too while the worker holds them (holdHostCopy): a fetch's
 * reply until the socket has taken it, a save's snapshot until its file is written.
 */
import type { Native } from "../../ffi/native.ts"
import type { WorkerConfig } from "./config.ts"

/** Of the memory a worker's tensors draw on; the rest is left to the process itself and the host. */
export const DEFAULT_SHARE = 0.8

const gib = (bytes: number) => `${(bytes / 2 ** 30).toFixed(2)} GiB`

/** The limit for this worker in bytes (0: none), and how it was chosen, for the log. */
export const memoryLimitOf = (config: Pick<WorkerConfig, "memoryLimit" | "localWorld">, device: string, total: number): { readonly bytes: number; readonly why: string } => {
  const limit = config.memoryLimit
  const memory = device === "cuda" ? "the device's memory" : "host memory"
  if (limit === "off") return { bytes: 0, why: "no memory limit (MONARCH_MEMORY_LIMIT=off)" }
  if (limit !== undefined && "bytes" in limit) return { bytes: limit.bytes, why: `memory limit ${gib(limit.bytes)} (MONARCH_MEMORY_LIMIT)` }
  // cuda: one device per worker; cpu: the host's workers share its memory.
  const sharing = device === "cuda" ? 1 : config.localWorld
  const fraction = limit === undefined ? DEFAULT_SHARE / sharing : limit.fraction
  const bytes = Math.floor(total * fraction)
  const how = limit === undefined ? `${DEFAULT_SHARE * 100}% of ${memory} (${gib(total)})${sharing > 1 ? ` shared by ${sharing} local workers` : ""}` : `${limit.fraction * 100}% of ${memory} (${gib(total)}, MONARCH_MEMORY_LIMIT)`
  return { bytes, why: `memory limit ${gib(bytes)}: ${how}` }
}

/** Sets this worker's limit in the shim; returns the line to log. */
export const applyMemoryLimit = (native: Native, config: Pick<WorkerConfig, "memoryLimit" | "localWorld">): string => {
  const { bytes, why } = memoryLimitOf(config, native.device, native.memoryTotal())
  native.setMemoryLimit(bytes)
  return why
}

/**
 * Counts a host copy of `bytes` against the limit (or throws the NoMemory ShimError naming
 * `what` and the limit, before anything is copied); returns its release, which gives the bytes
 * back once however often it is called. On cpu only, where tensors and their copies share host
 * memory; cuda's limit is of device memory, which a host copy does not take.
 */
export const holdHostCopy = (native: Native, bytes: number, what: string): (() => void) => {
  if (bytes === 0 || native.device !== "cpu") return () => {}
  native.reserveMemory(what, bytes)
  let held = true
  return () => {
    if (!held) return
    held = false
    native.releaseMemory(bytes)
  }
}
