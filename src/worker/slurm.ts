/**
 * A worker started by `srun` (no torchrun variables): its place in the job from SLURM's
 * environment. Pure: the environment in, the rank, world, node and store address out, or a
 * SlurmError naming the variable at fault. config.ts uses it when RANK is absent.
 *
 * The step's variables come first (SLURM_STEP_NUM_TASKS, SLURM_STEP_TASKS_PER_NODE,
 * SLURM_STEP_NODELIST: srun inside an sbatch allocation may run on part of it), then the
 * job's (SLURM_NTASKS, SLURM_TASKS_PER_NODE, SLURM_NODELIST / SLURM_JOB_NODELIST).
 */
import { Data } from "effect"

export class SlurmError extends Data.TaggedError("SlurmError")<{
  readonly reason: "hostlist" | "tasks-per-node" | "variable" | "devices"
  readonly message: string
}> {}

/** Slurm refuses ranges longer than this (hostlist.c's MAX_RANGE); so does a whole list here. */
export const MAX_HOSTS = 65_536

const hostlistError = (text: string, why: string) => new SlurmError({ reason: "hostlist", message: `hostlist "${text}": ${why}` })

/** One bracket group's numbers, each as text padded to the width of its range's low bound. */
const expandRanges = (text: string, inside: string): string[] => {
  const out: string[] = []
  for (const part of inside.split(",")) {
    const m = /^(\d+)(?:-(\d+))?$/.exec(part)
    if (!m) throw hostlistError(text, `"${part}" is not a number or a range lo-hi`)
    const lo = Number(m[1]), hi = m[2] === undefined ? lo : Number(m[2])
    if (hi < lo) throw hostlistError(text, `range ${part} runs backwards`)
    if (out.length + hi - lo + 1 > MAX_HOSTS) throw hostlistError(text, `more than ${MAX_HOSTS} hosts`)
    for (let n = lo; n <= hi; n++) out.push(String(n).padStart(m[1]!.length, "0"))
  }
  return out
}

/**
 * One name with bracket groups ("rack[1-2]-node[01-04]"), in scontrol's order: the last group
 * varies fastest, then the first, the second, ... up to the next-to-last, which varies slowest
 * (hostlist.c expands the last group with its prefix, then the others around it). Text after
 * the last group is refused, as scontrol refuses it.
 */
const expandName = (text: string, name: string): string[] => {
  const pieces: string[] = [], groups: string[][] = []
  let rest = name
  while (rest.includes("[") || rest.includes("]")) {
    const open = rest.indexOf("["), close = rest.indexOf("]")
    if (open < 0 || close < open) throw hostlistError(text, `unbalanced brackets in "${name}"`)
    pieces.push(rest.slice(0, open))
    groups.push(expandRanges(text, rest.slice(open + 1, close)))
    rest = rest.slice(close + 1)
  }
  if (groups.length === 0) return [name]
  if (rest !== "") throw hostlistError(text, `"${rest}" follows the last bracket group of "${name}"`)
  // Odometer digits from most to least significant: groups n-2 down to 0, then n-1.
  const last = groups.length - 1
  const order = [...Array.from({ length: last }, (_, i) => last - 1 - i), last]
  const total = groups.reduce((n, g) => n * g.length, 1)
  if (total > MAX_HOSTS) throw hostlistError(text, `more than ${MAX_HOSTS} hosts`)
  const out: string[] = []
  const at = groups.map(() => 0)
  for (let k = 0; k < total; k++) {
    out.push(pieces.map((p, g) => p + groups[g]![at[g]!]).join(""))
    for (let d = order.length - 1; d >= 0; d--) {
      const g = order[d]!
      if (++at[g]! < groups[g]!.length) break
      at[g] = 0
    }
  }
  return out
}

/**
 * Expands a Slurm hostlist ("node[01-03,07],gpu-a[1-2]") as `scontrol show hostnames` does:
 * names separated by commas or spaces outside brackets, each bracket group a comma list of
 * numbers and lo-hi ranges zero-padded to the low bound's width, duplicates kept in order.
 */
export const expandHostlist = (text: string): string[] => {
  const names: string[] = []
  let depth = 0, start = 0
  const flush = (end: number) => {
    const name = text.slice(start, end)
    if (name !== "") names.push(...expandName(text, name))
    if (names.length > MAX_HOSTS) throw hostlistError(text, `more than ${MAX_HOSTS} hosts`)
  }
  for (let i = 0; i < text.length; i++) {
    const c = text[i]!
    if (c === "[") depth++
    else if (c === "]") depth--
    if (depth < 0 || depth > 1) throw hostlistError(text, "unbalanced or nested brackets")
    if (depth === 0 && (c === "," || /\s/.test(c))) {
      flush(i)
      start = i + 1
    }
  }
  if (depth !== 0) throw hostlistError(text, "an unclosed bracket")
  flush(text.length)
  if (names.length === 0) throw hostlistError(text, "no host names")
  return names
}

/** Expands SLURM_TASKS_PER_NODE's compressed form ("2(x3),1" is 2, 2, 2, 1). */
export const expandTasksPerNode = (text: string): number[] => {
  const out: number[] = []
  for (const part of text.split(",")) {
    const m = /^\s*(\d+)(?:\(x(\d+)\))?\s*$/.exec(part)
    if (!m) throw new SlurmError({ reason: "tasks-per-node", message: `tasks per node "${text}": "${part}" is not N or N(xM)` })
    const count = m[2] === undefined ? 1 : Number(m[2])
    if (count < 1 || out.length + count > MAX_HOSTS) throw new SlurmError({ reason: "tasks-per-node", message: `tasks per node "${text}": "${part}" repeats ${count} times` })
    for (let i = 0; i < count; i++) out.push(Number(m[1]))
  }
  return out
}

/** Where a task runs in its job, from SLURM's environment. */
export interface SlurmPlace {
  readonly rank: number
  readonly world: number
  /** SLURM_LOCALID: this task's index on its node. */
  readonly localRank: number
  /** Tasks on this node. */
  readonly localWorld: number
  /** The step's nodes, expanded, and this one's index among them (SLURM_NODEID). */
  readonly nodes: ReadonlyArray<string>
  readonly nodeIndex: number
  readonly jobId: number
  /** Where the job's store is: STORE_HOSTNAME/STORE_PORT given (hosted there), else MASTER_ADDR or the first node, hosted by rank 0. */
  readonly store: { readonly host: string; readonly port: number; readonly hostedByRank0: boolean }
  /** The CUDA device this task uses. */
  readonly deviceOrdinal: number
}

type Env = Readonly<Record<string, string | undefined>>

const first = (env: Env, names: ReadonlyArray<string>): { name: string; value: string } | undefined => {
  for (const name of names) {
    const value = env[name]
    if (value !== undefined && value !== "") return { name, value }
  }
  return undefined
}

const count = (env: Env, names: ReadonlyArray<string>): number => {
  const v = first(env, names)
  if (v === undefined) throw new SlurmError({ reason: "variable", message: `${names.join(" / ")} is not set (srun sets it)` })
  const n = Number(v.value)
  if (!/^\d+$/.test(v.value.trim()) || !Number.isSafeInteger(n)) throw new SlurmError({ reason: "variable", message: `${v.name}=${v.value} is not a non-negative integer` })
  return n
}

/** The store's port when none is given: 15000 plus the job id's last four digits, so jobs sharing a node differ. */
export const defaultStorePort = (jobId: number): number => 15_000 + (jobId % 10_000)

/**
 * The CUDA device for this task: with CUDA_VISIBLE_DEVICES (srun --gpus-per-task, or a gres
 * binding) the task sees its GPUs from 0, one per task or the node's to share by SLURM_LOCALID;
 * with only SLURM_STEP_GPUS it sees the node's and takes its own by physical index.
 */
const deviceOrdinal = (env: Env, localRank: number, localWorld: number): number => {
  const pick = (name: string, list: string[], ordinal: (i: number) => number) => {
    if (list.length === 1) return ordinal(0)
    if (localRank >= list.length)
      throw new SlurmError({ reason: "devices", message: `${name}=${env[name]} lists ${list.length} GPUs, fewer than this node's ${localWorld} tasks (task ${localRank} has none)` })
    return ordinal(localRank)
  }
  const visible = env.CUDA_VISIBLE_DEVICES
  if (visible !== undefined && visible.trim() !== "") return pick("CUDA_VISIBLE_DEVICES", visible.split(","), (i) => i)
  const step = env.SLURM_STEP_GPUS
  if (step !== undefined && step.trim() !== "") {
    const ids = step.split(",").map((s) => s.trim())
    if (!ids.every((s) => /^\d+$/.test(s))) throw new SlurmError({ reason: "devices", message: `SLURM_STEP_GPUS=${step} is not a list of GPU indices` })
    return pick("SLURM_STEP_GPUS", ids, (i) => Number(ids[i]))
  }
  return localRank
}

/** Whether this process was started as a SLURM task (and not by torchrun or our launcher). */
export const isSlurmTask = (env: Env): boolean => env.RANK === undefined && env.SLURM_PROCID !== undefined

/** Reads a SLURM task's place; throws SlurmError naming the variable at fault. */
export const readSlurmPlace = (env: Env): SlurmPlace => {
  const rank = count(env, ["SLURM_PROCID"])
  const world = count(env, ["SLURM_STEP_NUM_TASKS", "SLURM_NTASKS"])
  if (rank >= world) throw new SlurmError({ reason: "variable", message: `SLURM_PROCID=${rank} is not below the step's ${world} tasks` })
  const localRank = count(env, ["SLURM_LOCALID"])
  const nodelist = first(env, ["SLURM_STEP_NODELIST", "SLURM_NODELIST", "SLURM_JOB_NODELIST"])
  if (nodelist === undefined) throw new SlurmError({ reason: "variable", message: "SLURM_STEP_NODELIST / SLURM_NODELIST is not set (srun sets it)" })
  const nodes = expandHostlist(nodelist.value)
  const nodeIndex = first(env, ["SLURM_NODEID"]) === undefined ? 0 : count(env, ["SLURM_NODEID"])
  if (nodeIndex >= nodes.length) throw new SlurmError({ reason: "variable", message: `SLURM_NODEID=${nodeIndex} is past ${nodelist.name}'s ${nodes.length} nodes` })
  // --ntasks-per-node gives one number for every node; otherwise the compressed per-node list.
  const perNode = first(env, ["SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE"])
  const fixed = first(env, ["SLURM_NTASKS_PER_NODE"])
  const tasks = perNode !== undefined ? expandTasksPerNode(perNode.value)
    : fixed !== undefined ? nodes.map(() => count(env, ["SLURM_NTASKS_PER_NODE"]))
    : undefined
  if (tasks !== undefined && tasks.length !== nodes.length)
    throw new SlurmError({ reason: "tasks-per-node", message: `${perNode?.name ?? "SLURM_NTASKS_PER_NODE"} gives ${tasks.length} nodes, ${nodelist.name} ${nodes.length}` })
  if (perNode !== undefined && tasks!.reduce((a, b) => a + b, 0) !== world)
    throw new SlurmError({ reason: "tasks-per-node", message: `${perNode.name}=${perNode.value} adds up to ${tasks!.reduce((a, b) => a + b, 0)} tasks, not the step's ${world}` })
  const localWorld = tasks === undefined ? localRank + 1 : tasks[nodeIndex]!
  if (localRank >= localWorld) throw new SlurmError({ reason: "variable", message: `SLURM_LOCALID=${localRank} is not below this node's ${localWorld} tasks` })
  const jobId = count(env, ["SLURM_JOB_ID", "SLURM_JOBID"])
  const given = first(env, ["STORE_HOSTNAME"])
  const master = first(env, ["MASTER_ADDR"])
  // Rank 0 hosts the store at the first node's name, so it has to run there.
  if (given === undefined && master === undefined && rank === 0 && nodeIndex !== 0)
    throw new SlurmError({ reason: "variable", message: `task 0 runs on node ${nodeIndex} (${nodes[nodeIndex]}), not the first (${nodes[0]}), where it would host the store: set MASTER_ADDR` })
  const portGiven = given !== undefined ? first(env, ["STORE_PORT"]) : first(env, ["MASTER_PORT"])
  const port = portGiven === undefined ? defaultStorePort(jobId) : count(env, [portGiven.name])
  if (port < 1 || port > 65_535) throw new SlurmError({ reason: "variable", message: `${portGiven?.name}=${port} is not a TCP port` })
  return {
    rank, world, localRank, localWorld, nodes, nodeIndex, jobId,
    store: { host: given?.value ?? master?.value ?? nodes[0]!, port, hostedByRank0: given === undefined },
    deviceOrdinal: deviceOrdinal(env, localRank, localWorld),
  }
}
