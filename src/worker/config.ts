/**
 * The worker's configuration, read from its environment: torchrun's names (RANK,
 * WORLD_SIZE, LOCAL_RANK, MASTER_ADDR/MASTER_PORT, TORCHELASTIC_*) and the original
 * worker's (STORE_HOSTNAME/STORE_PORT), or, where those are absent, SLURM's (slurm.ts),
 * plus MONARCH_* settings. README lists them all.
 */
import { Data } from "effect"
import { readToken } from "../net/token.ts"
import { readRecordingLimits, type RecordingLimits } from "../protocol/recordingLimits.ts"
import { isSlurmTask, readSlurmPlace, type SlurmPlace } from "./slurm.ts"

/** A missing or malformed environment variable. */
export class ConfigError extends Data.TaggedError("ConfigError")<{ readonly message: string }> {}

export interface WorkerConfig {
  readonly rank: number
  readonly world: number
  readonly localRank: number
  /** Workers on this host (LOCAL_WORLD_SIZE), sharing its memory. */
  readonly localWorld: number
  /** The CUDA device this worker uses: LOCAL_RANK, or under SLURM the one its GPU binding leaves it. */
  readonly deviceOrdinal: number
  /** SLURM_JOB_ID, when srun started this worker. */
  readonly slurmJob: number | undefined
  readonly store: {
    readonly host: string
    readonly port: number
    /** Key prefix in the store: torchrun's agent prefix (when its store is used) + ours. */
    readonly prefix: string
    /** torchrun without an agent store, or srun: rank 0 hosts the store itself. */
    readonly hostedByRank0: boolean
  }
  /** host:port or unix:/path; absent: read `<prefix>/controller` from the store. */
  readonly controllerAddress: string | undefined
  /** The job's token (MONARCH_TOKEN or MONARCH_TOKEN_FILE; never from the store, see src/net/token.ts). */
  readonly token: string
  /**
   * How long a worker keeps trying to reach a controller that admits it (MONARCH_CONNECT_TIMEOUT_MS):
   * refused connections, a controller address not yet in the store and links closed before any
   * command are retried with backoff until then. A restartable worker waits for good.
   */
  readonly connectTimeoutMs: number
  /** MONARCH_STORE_FILE: where rank 0 writes the store's address and prefix, as JSON, once it is up. */
  readonly storeFile: string | undefined
  /** MONARCH_TRACE_DIR: record every command's span and write `rank-<r>.json` there at the end. */
  readonly traceDir: string | undefined
  readonly device: string
  readonly restartable: boolean
  /** Where user modules may load from (MONARCH_FUNCTION_PATH); none when it is unset. */
  readonly functionRoots: ReadonlyArray<string>
  /** MONARCH_CHECKPOINT_DIR: the only folder checkpoint commands write or read (none: they are refused). */
  readonly checkpointRoot: string | undefined
  /** MONARCH_MAX_RECORDINGS, MONARCH_MAX_RECORDED_COMMANDS: what DefineRecordings may hold on this worker. */
  readonly recordingLimits: RecordingLimits
  /** Collective and p2p timeout. */
  readonly commTimeoutMs: number
  /** Rendezvous and store-wait timeout. */
  readonly storeTimeoutMs: number
  /** Restartable: how long to wait for a new controller while the store does not answer either. */
  readonly orphanTimeoutMs: number
  /**
   * MONARCH_CPU_THREADS: the threads a cpu worker's kernels and BLAS use (default 1: a host
   * usually runs a worker per rank, and more threads than cores only contend).
   */
  readonly cpuThreads: number
  /** MONARCH_MEMORY_LIMIT: bytes, a share of the backend's memory, off, or undefined (the default share). */
  readonly memoryLimit: MemoryLimit | undefined
  /**
   * Whether freed tensor memory is kept for reuse, by backend (shim_set_block_cache):
   * MONARCH_CPU_CACHE and MONARCH_CUDA_CACHE, 1 (the default) or 0.
   */
  readonly blockCache: { readonly cpu: boolean; readonly cuda: boolean }
  /** MONARCH_COMM_SHM, 1 (the default) or 0: collectives between ranks on one host through shared memory, or over TCP (shim_set_comm_shm). */
  readonly commShm: boolean
  /**
   * The address Gloo binds and advertises for this worker's pairs (MONARCH_HOSTNAME); absent:
   * the address this host reaches the store from (startup.ts), so several hosts need no setting.
   */
  readonly hostname: string | undefined
}

/** A tensor memory limit as configured: bytes, a fraction of the backend's memory, or none. */
export type MemoryLimit = { readonly bytes: number } | { readonly fraction: number } | "off"

const UNITS: Readonly<Record<string, number>> = { "": 1, k: 2 ** 10, m: 2 ** 20, g: 2 ** 30, t: 2 ** 40 }

/** "off", "0", "512MiB", "8G", "1073741824" or "40%". */
export const parseMemoryLimit = (raw: string): MemoryLimit => {
  const text = raw.trim().toLowerCase()
  if (text === "off" || text === "0") return "off"
  const percent = /^(\d+(?:\.\d+)?)%$/.exec(text)
  if (percent) {
    const fraction = Number(percent[1]) / 100
    if (fraction > 0 && fraction <= 1) return { fraction }
  }
  const size = /^(\d+(?:\.\d+)?)\s*([kmgt]?)(?:i?b)?$/.exec(text)
  if (size) {
    const bytes = Math.floor(Number(size[1]) * UNITS[size[2]!]!)
    if (Number.isSafeInteger(bytes) && bytes > 0) return { bytes }
  }
  throw new ConfigError({ message: `MONARCH_MEMORY_LIMIT=${raw} is not off, a size (bytes, or with K, M, G, T: 512MiB) or a share of memory (40%)` })
}

const int = (env: Record<string, string | undefined>, name: string, fallback?: number): number => {
  const raw = env[name]
  if (raw === undefined || raw === "") {
    if (fallback !== undefined) return fallback
    throw new ConfigError({ message: `${name} is not set (the launcher or torchrun sets it)` })
  }
  const n = Number(raw)
  if (!Number.isSafeInteger(n) || n < 0) throw new ConfigError({ message: `${name}=${raw} is not a non-negative integer` })
  return n
}

/** The shim takes 1 to 64 (shim_set_threads). */
const cpuThreads = (env: Record<string, string | undefined>): number => {
  const n = int(env, "MONARCH_CPU_THREADS", 1)
  if (n < 1 || n > 64) throw new ConfigError({ message: `MONARCH_CPU_THREADS=${n} is not 1 to 64` })
  return n
}

/** A setting of 0 or 1 (unset or empty: the default). */
const flag = (env: Record<string, string | undefined>, name: string, fallback: boolean): boolean => {
  const raw = env[name]
  if (raw === undefined || raw === "") return fallback
  if (raw !== "0" && raw !== "1") throw new ConfigError({ message: `${name}=${raw} is not 0 or 1` })
  return raw === "1"
}

/** A SLURM task's place, its SlurmError as a ConfigError. */
const slurmPlace = (env: Record<string, string | undefined>): SlurmPlace => {
  try {
    return readSlurmPlace(env)
  } catch (e) {
    throw new ConfigError({ message: `SLURM: ${(e as Error).message}` })
  }
}

/** The rank, world, node and store: torchrun's or our launcher's variables, else SLURM's. */
const place = (env: Record<string, string | undefined>) => {
  if (isSlurmTask(env)) {
    const p = slurmPlace(env)
    return { rank: p.rank, world: p.world, localRank: p.localRank, localWorld: p.localWorld, deviceOrdinal: p.deviceOrdinal, slurmJob: p.jobId, store: { ...p.store, agentPrefix: "" } }
  }
  const rank = int(env, "RANK"), world = int(env, "WORLD_SIZE")
  if (rank >= world) throw new ConfigError({ message: `RANK=${rank} is not below WORLD_SIZE=${world}` })
  const host = env.STORE_HOSTNAME ?? env.MASTER_ADDR
  if (!host) throw new ConfigError({ message: "neither STORE_HOSTNAME nor MASTER_ADDR is set" })
  const port = env.STORE_PORT !== undefined ? int(env, "STORE_PORT") : int(env, "MASTER_PORT")
  const underTorchrun = env.TORCHELASTIC_USE_AGENT_STORE !== undefined && env.STORE_HOSTNAME === undefined
  const agentStore = env.TORCHELASTIC_USE_AGENT_STORE === "True"
  // torch's env:// rendezvous puts workers under the agent's /worker/attempt_<n> prefix.
  const agentPrefix = underTorchrun && agentStore ? `/worker/attempt_${int(env, "TORCHELASTIC_RESTART_COUNT", 0)}/` : ""
  const localRank = int(env, "LOCAL_RANK", 0)
  return {
    rank, world, localRank, localWorld: Math.max(1, int(env, "LOCAL_WORLD_SIZE", 1)), deviceOrdinal: localRank, slurmJob: undefined,
    store: { host, port, hostedByRank0: underTorchrun && !agentStore, agentPrefix },
  }
}

/** Reads the configuration; throws ConfigError naming the variable at fault. */
export const readConfig = (env: Record<string, string | undefined> = process.env): WorkerConfig => {
  const { rank, world, localRank, localWorld, deviceOrdinal, slurmJob, store } = place(env)
  const token = readToken(env)
  if ("problem" in token) throw new ConfigError({ message: token.problem })
  if (token.token === undefined)
    throw new ConfigError({ message: "neither MONARCH_TOKEN nor MONARCH_TOKEN_FILE is set: the job token is never read from the store, which anyone who reaches it can read" })
  const recordings = readRecordingLimits(env)
  if ("problem" in recordings) throw new ConfigError({ message: recordings.problem })
  return {
    rank,
    world,
    localRank,
    localWorld,
    deviceOrdinal,
    slurmJob,
    store: {
      host: store.host,
      port: store.port,
      prefix: `${store.agentPrefix}${env.MONARCH_STORE_PREFIX ?? "monarch"}`,
      hostedByRank0: store.hostedByRank0,
    },
    controllerAddress: env.CONTROLLER_ADDR || undefined,
    token: token.token,
    connectTimeoutMs: int(env, "MONARCH_CONNECT_TIMEOUT_MS", 60_000),
    storeFile: env.MONARCH_STORE_FILE || undefined,
    traceDir: env.MONARCH_TRACE_DIR || undefined,
    device: env.MONARCH_DEVICE ?? "cpu",
    restartable: env.MONARCH_RESTARTABLE === "1",
    // No default: under torchrun the working directory is wherever the job was started from.
    functionRoots: (env.MONARCH_FUNCTION_PATH ?? "").split(":").filter((r) => r.length > 0),
    checkpointRoot: env.MONARCH_CHECKPOINT_DIR || undefined,
    recordingLimits: recordings.limits,
    commTimeoutMs: int(env, "MONARCH_COMM_TIMEOUT_MS", 60_000),
    storeTimeoutMs: int(env, "MONARCH_STORE_TIMEOUT_MS", 60_000),
    orphanTimeoutMs: int(env, "MONARCH_ORPHAN_TIMEOUT_MS", 60_000),
    cpuThreads: cpuThreads(env),
    memoryLimit: env.MONARCH_MEMORY_LIMIT ? parseMemoryLimit(env.MONARCH_MEMORY_LIMIT) : undefined,
    blockCache: { cpu: flag(env, "MONARCH_CPU_CACHE", true), cuda: flag(env, "MONARCH_CUDA_CACHE", true) },
    commShm: flag(env, "MONARCH_COMM_SHM", true),
    hostname: env.MONARCH_HOSTNAME || undefined,
  }
}
