/**
 * A real SLURM cluster for the tests, made of Debian's slurm-wlm 22.05 and munge run directly
 * as root (no systemd): one munged, one slurmctld and a slurmd per node, each started here in
 * the foreground and stopped here by its pid, with a slurm.conf, spool, state, pid and log
 * files of its own in a temp folder and ports picked for this run. One node runs on this host;
 * two nodes are the two network namespaces of rig/netns.ts, each slurmd in its own UTS
 * namespace too (its hostname is its node name), with slurmctld and every client command on
 * node 1. Names resolve through each namespace's own /etc/hosts (netns.ts nameHosts).
 */
import type { Subprocess } from "bun"
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs"
import { hostname, tmpdir } from "node:os"
import { join } from "node:path"
import { freePort, isAlive } from "../processes.ts"
import { createHosts, inHost, inNamedHost, nameHosts, type Host, type Hosts } from "../../rig/netns.ts"
import { readLines } from "../../rig/outputLines.ts"

const PROGRAMS = ["munged", "mungekey", "slurmctld", "slurmd", "srun", "sbatch", "sinfo", "squeue", "scancel", "scontrol"] as const

const missing = () => PROGRAMS.filter((p) => Bun.which(p, { PATH: `${process.env.PATH ?? ""}:/usr/sbin:/sbin` }) === null)

/**
 * Whether SLURM can run here, installing slurm-wlm and munge with apt-get (as root) when they
 * are missing; the reason when it cannot.
 */
export const slurmUnavailable = (): string | undefined => {
  if (missing().length === 0) return undefined
  if (process.getuid?.() !== 0) return `${missing().join(", ")} missing, and installing slurm-wlm and munge needs root`
  if (Bun.which("apt-get") === null) return `${missing().join(", ")} missing, and there is no apt-get to install slurm-wlm and munge`
  const install = () => Bun.spawnSync(["apt-get", "install", "-y", "-qq", "--no-install-recommends", "slurm-wlm", "munge"], {
    env: { ...process.env, DEBIAN_FRONTEND: "noninteractive" }, stdout: "pipe", stderr: "pipe",
  })
  let r = install()
  if (r.exitCode !== 0) {
    Bun.spawnSync(["apt-get", "update", "-qq"], { stdout: "ignore", stderr: "ignore" })
    r = install()
  }
  if (r.exitCode !== 0 || missing().length > 0) return `apt-get install slurm-wlm munge failed: ${r.stderr.toString().trim().split("\n").slice(-2).join(" ")}`
  return undefined
}

const sbin = (p: string) => Bun.which(p, { PATH: `${process.env.PATH ?? ""}:/usr/sbin:/sbin` })!

/** A daemon or client started here: its output kept for explaining a failure. */
interface Started {
  readonly label: string
  readonly proc: Subprocess<"ignore", "pipe", "pipe">
  readonly output: string[]
  /** Resolves once both output streams have ended. */
  readonly drained: Promise<unknown>
}

export interface Node {
  readonly name: string
  readonly address: string
  /** The namespace it runs in; none: this host. */
  readonly host: Host | undefined
}

export interface Cluster {
  readonly dir: string
  readonly nodes: ReadonlyArray<Node>
  /** The environment every client command and job step needs (SLURM_CONF). */
  readonly env: Readonly<Record<string, string>>
  /** Starts a client command (srun, scancel, ...) where the controller is, with this environment added. */
  readonly spawn: (label: string, argv: ReadonlyArray<string>, env?: Readonly<Record<string, string>>) => Started
  /** Runs a client command to its end: its status and output. */
  readonly run: (argv: ReadonlyArray<string>, env?: Readonly<Record<string, string>>) => Promise<{ status: number; output: string }>
  /** The processes of job `jobId` still running: its tasks (and their children) and its slurmstepd. */
  readonly jobProcesses: (jobId: number) => number[]
  /** The daemons' log lines, for a failure message. */
  readonly logs: () => string
  /** Cancels every job of this cluster, stops its daemons and removes its files; safe to call twice. */
  readonly stop: () => Promise<void>
}

const start = (label: string, argv: ReadonlyArray<string>, env: Readonly<Record<string, string>>): Started => {
  const proc = Bun.spawn([...argv], { env: { ...process.env, ...env }, stdin: "ignore", stdout: "pipe", stderr: "pipe" })
  const output: string[] = []
  return { label, proc, output, drained: Promise.all([readLines(proc.stdout, output), readLines(proc.stderr, output)]) }
}

/** Polls `ready` every 100 ms until it holds; throws with `why()` after `timeoutMs`. */
export const until = async (ready: () => boolean | Promise<boolean>, timeoutMs: number, why: () => string): Promise<void> => {
  const deadline = performance.now() + timeoutMs
  while (!(await ready())) {
    if (performance.now() > deadline) throw new Error(`not within ${timeoutMs} ms: ${why()}`)
    await Bun.sleep(100)
  }
}

/** A process's environment (empty once it is gone or unreadable). */
const environOf = (pid: number): string[] => {
  try {
    return readFileSync(`/proc/${pid}/environ`, "latin1").split("\0")
  } catch {
    return []
  }
}

/** Live processes (not this one) whose environment holds every one of `entries`. */
const processesWith = (entries: ReadonlyArray<string>): number[] =>
  readdirSync("/proc").map(Number).filter((pid) => {
    if (!Number.isSafeInteger(pid) || pid === process.pid) return false
    const env = environOf(pid)
    return entries.every((e) => env.includes(e)) && isAlive(pid)
  })

const cmdline = (pid: number): string => {
  try {
    return readFileSync(`/proc/${pid}/cmdline`, "latin1")
  } catch {
    return ""
  }
}

/**
 * Shell commands that mount this host's cgroup hierarchies again at /sys/fs/cgroup: `ip netns
 * exec` mounts a fresh /sys (in a mount namespace of its own), and slurmd will not start without
 * them even with proctrack/linuxproc and task/none.
 */
const cgroupMounts = (): string => {
  const mounts = readFileSync("/proc/self/mounts", "utf8").split("\n").map((l) => l.split(" "))
    .filter((f) => f[1]?.startsWith("/sys/fs/cgroup") && ["tmpfs", "cgroup", "cgroup2"].includes(f[2] ?? ""))
  return mounts.map(([, path, type, options]) => {
    const keep = type === "cgroup" ? options!.split(",").filter((o) => !["rw", "ro", "relatime", "nosuid", "nodev", "noexec"].includes(o)).join(",") : ""
    return `mkdir -p ${path} && mount -t ${type} ${keep === "" ? "" : `-o ${keep} `}${type} ${path} && `
  }).join("")
}

const conf = (dir: string, nodes: ReadonlyArray<Node>, ports: { ctld: number; slurmd: number }, munge: string, cpus: number) => [
  "ClusterName=monarch",
  `SlurmctldHost=${nodes[0]!.name}(${nodes[0]!.address})`,
  "SlurmUser=root",
  "SlurmdUser=root",
  "AuthType=auth/munge",
  "CredType=cred/munge",
  `AuthInfo=socket=${munge}`,
  "ProctrackType=proctrack/linuxproc",
  "TaskPlugin=task/none",
  "SelectType=select/cons_tres",
  "SelectTypeParameters=CR_Core",
  "MpiDefault=none",
  "SwitchType=switch/none",
  "JobAcctGatherType=jobacct_gather/none",
  "AccountingStorageType=accounting_storage/none",
  "MailProg=/bin/true",
  `SlurmctldPort=${ports.ctld}`,
  `SlurmdPort=${ports.slurmd}`,
  `StateSaveLocation=${dir}/state`,
  `SlurmdSpoolDir=${dir}/spool/%n`,
  `SlurmctldPidFile=${dir}/slurmctld.pid`,
  `SlurmdPidFile=${dir}/slurmd.%n.pid`,
  `SlurmctldLogFile=${dir}/slurmctld.log`,
  `SlurmdLogFile=${dir}/slurmd.%n.log`,
  // The node's CPUs as written here, not as counted (this host may have fewer than the tasks).
  "SlurmdParameters=config_overrides",
  "ReturnToService=2",
  // scancel's SIGTERM, then SIGKILL after 2 s (30 s by default).
  "KillWait=2",
  ...nodes.map((n) => `NodeName=${n.name} NodeAddr=${n.address} CPUs=${cpus} State=UNKNOWN`),
  "PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE",
  "",
].join("\n")

/**
 * Starts a cluster of one node on this host (`nodes: 1`) or of two namespace hosts (`nodes: 2`),
 * returning once every node is idle; a failure to start stops whatever did start.
 */
export const startCluster = async (options: { nodes: 1 | 2; cpus: number }): Promise<Cluster> => {
  const dir = mkdtempSync(join(tmpdir(), "monarch-slurm-"))
  const daemons: Started[] = []
  let hosts: Hosts | undefined
  let removeNames: (() => void) | undefined
  let stopped = false
  const nodes: Node[] = []
  const env: Record<string, string> = { SLURM_CONF: join(dir, "slurm.conf") }
  const where = (argv: ReadonlyArray<string>) => (nodes[0]?.host === undefined ? [...argv] : inHost(nodes[0].host, argv))
  const spawn = (label: string, argv: ReadonlyArray<string>, extra: Readonly<Record<string, string>> = {}) => start(label, where(argv), { ...env, ...extra })
  const run = async (argv: ReadonlyArray<string>, extra: Readonly<Record<string, string>> = {}) => {
    const s = spawn(argv[0]!, argv, extra)
    const status = await s.proc.exited
    await s.drained
    return { status, output: s.output.join("\n") }
  }
  const logs = () => {
    const lines = daemons.flatMap((d) => d.output.slice(-10).map((l) => `  [${d.label}] ${l}`))
    for (const f of readdirSync(dir).filter((f) => f.endsWith(".log"))) {
      try {
        lines.push(...readFileSync(join(dir, f), "utf8").split("\n").filter((l) => /error|fatal/i.test(l)).slice(-8).map((l) => `  [${f}] ${l}`))
      } catch {}
    }
    return lines.join("\n")
  }
  const mine = `SLURM_CONF=${env.SLURM_CONF}`
  const jobProcesses = (jobId: number) => [
    ...processesWith([mine, `SLURM_JOB_ID=${jobId}`]),
    ...processesWith([mine]).filter((pid) => cmdline(pid).startsWith(`slurmstepd: [${jobId}.`)),
  ]
  const stop = async () => {
    if (stopped) return
    stopped = true
    // Jobs first, while slurmctld can still end them; then the daemons, slurmd before slurmctld.
    if (daemons.some((d) => d.label === "slurmctld" && d.proc.exitCode === null)) {
      const cancel = spawn("scancel", ["scancel", "--user", "root"])
      await Promise.race([cancel.proc.exited, Bun.sleep(5000)])
      await until(async () => (await run(["squeue", "-h"])).output.trim() === "", 10_000, () => "").catch(() => {})
    }
    for (const d of [...daemons].reverse()) {
      d.proc.kill("SIGTERM")
      const ended = await Promise.race([d.proc.exited.then(() => true), Bun.sleep(5000).then(() => false)])
      if (!ended) d.proc.kill("SIGKILL")
      await d.proc.exited
    }
    // Whatever of this cluster outlived its daemons (a slurmstepd cut off mid-step, its tasks) goes too.
    for (const pid of processesWith([mine])) {
      try {
        process.kill(pid, "SIGKILL")
      } catch {}
    }
    hosts?.remove()
    removeNames?.()
    rmSync(dir, { recursive: true, force: true })
  }
  try {
    if (options.nodes === 1) {
      nodes.push({ name: hostname(), address: "127.0.0.1", host: undefined })
    } else {
      const made = createHosts()
      if ("unavailable" in made) throw new Error(made.unavailable)
      hosts = made
      made.hosts.forEach((h, i) => nodes.push({ name: `monarch-n${i + 1}`, address: h.address, host: h }))
      // Each namespace resolves both node names (its /etc/hosts, mounted by `ip netns exec`).
      removeNames = nameHosts(nodes.map((n) => ({ host: n.host!, name: n.name })))
    }
    // Free on this host's loopback; inside the namespaces any port is free.
    const ports = { ctld: await freePort(), slurmd: await freePort() }
    for (const sub of ["state", "munge", "spool", ...nodes.map((n) => `spool/${n.name}`)]) mkdirSync(join(dir, sub), { recursive: true, mode: 0o700 })
    const key = join(dir, "munge", "munge.key"), socket = join(dir, "munge", "socket")
    const made = Bun.spawnSync([sbin("mungekey"), "--create", `--keyfile=${key}`], { stdout: "pipe", stderr: "pipe" })
    if (made.exitCode !== 0) throw new Error(`mungekey: ${made.stderr.toString().trim()}`)
    // -f: munged refuses a socket folder other users cannot reach, which is what this one is meant to be.
    const munged = start("munged", [sbin("munged"), "-F", "-f", `--socket=${socket}`, `--key-file=${key}`, `--log-file=${dir}/munge/log`, `--pid-file=${dir}/munge/pid`, `--seed-file=${dir}/munge/seed`], {})
    daemons.push(munged)
    await until(() => munged.output.some((l) => l.includes("Created socket")) || munged.proc.exitCode !== null, 15_000, () => `munged did not start:\n${munged.output.join("\n")}`)
    if (munged.proc.exitCode !== null) throw new Error(`munged exited: ${munged.output.join("\n")}`)
    writeFileSync(env.SLURM_CONF!, conf(dir, nodes, ports, socket, options.cpus))
    const inNode = (n: Node, argv: string[]) => (n.host === undefined ? argv
      : inNamedHost(n.host, n.name, argv, cgroupMounts()))
    daemons.push(start("slurmctld", inNode(nodes[0]!, [sbin("slurmctld"), "-D", "-i", "-f", env.SLURM_CONF!]), env))
    for (const n of nodes) daemons.push(start(`slurmd ${n.name}`, inNode(n, [sbin("slurmd"), "-D", "-f", env.SLURM_CONF!, "-N", n.name]), env))
    await until(async () => {
      const dead = daemons.find((d) => d.proc.exitCode !== null)
      if (dead) throw new Error(`${dead.label} exited (${dead.proc.exitCode}):\n${logs()}`)
      const states = (await run(["sinfo", "-h", "-N", "-o", "%N %T"])).output.split("\n").filter((l) => l.trim() !== "")
      return states.length === nodes.length && states.every((l) => l.endsWith(" idle"))
    }, 30_000, () => `the nodes were not idle:\n${logs()}`)
    return { dir, nodes, env, spawn, run, jobProcesses, logs, stop }
  } catch (e) {
    await stop()
    throw e
  }
}
