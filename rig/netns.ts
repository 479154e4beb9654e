/**
 * Two "hosts" for the multi-host checks: two network namespaces joined by a veth pair, with
 * addresses that exist inside the namespaces only. Names carry this process's pid, so runs
 * side by side do not meet, and a run killed before its cleanup is swept by the next one.
 */
import { existsSync, mkdirSync, readdirSync, rmSync, writeFileSync } from "node:fs"
import { join } from "node:path"
import { isAlive } from "./processes.ts"

export interface Host {
  /** The namespace's name (`ip netns exec <ns> ...`). */
  readonly ns: string
  /** Its one non-loopback address. */
  readonly address: string
  /** Its end of the veth pair. */
  readonly device: string
}

export interface Hosts {
  readonly hosts: readonly [Host, Host]
  /** Bytes through a host's veth end so far (received, sent). */
  readonly traffic: (host: Host) => { rx: number; tx: number }
  /** Removes both namespaces (and so the veth pair); safe to call twice. */
  readonly remove: () => void
}

const PREFIX = "monarch-hosts-"
const SUBNET = "10.77.0"

/** Runs `ip` and returns its stdout; throws with its stderr when it fails. */
const ip = (...args: string[]): string => {
  const r = Bun.spawnSync(["ip", ...args], { stdin: "ignore", stdout: "pipe", stderr: "pipe" })
  if (r.exitCode !== 0) throw new Error(`ip ${args.join(" ")}: ${r.stderr.toString().trim() || `exit ${r.exitCode}`}`)
  return r.stdout.toString()
}

/** Whether a process is running (a zombie, killed but not yet reaped, counts as gone). */
/**
 * Namespaces left by runs whose process is gone (killed before cleaning up), with whatever
 * still runs inside them (a store serves until killed).
 */
const sweepStale = (): void => {
  // The hosts files of named hosts (nameHosts) whose run is gone, and /etc/netns once it is empty.
  try {
    for (const name of readdirSync("/etc/netns")) {
      const pid = Number(name.slice(PREFIX.length).split("-")[0])
      if (name.startsWith(PREFIX) && Number.isSafeInteger(pid) && pid !== process.pid && !isAlive(pid)) rmSync(join("/etc/netns", name), { recursive: true, force: true })
    }
    if (readdirSync("/etc/netns").length === 0) rmSync("/etc/netns", { recursive: true, force: true })
  } catch {}
  let names: string[]
  try {
    names = readdirSync("/run/netns")
  } catch {
    return
  }
  for (const name of names) {
    const pid = Number(name.slice(PREFIX.length).split("-")[0])
    if (!name.startsWith(PREFIX) || !Number.isSafeInteger(pid) || pid === process.pid || isAlive(pid)) continue
    try {
      for (const left of ip("netns", "pids", name).split("\n").filter((l) => l.trim() !== "")) process.kill(Number(left), "SIGKILL")
      ip("netns", "del", name)
    } catch {}
  }
}

let serial = 0
/** How to remove each pair of hosts this process still has. */
const live = new Set<() => void>()

/** Removes every pair of hosts this process still has (a test's afterAll). */
export const removeAllHosts = (): void => {
  for (const remove of [...live]) remove()
}

// Whatever way this process ends short of SIGKILL, its namespaces go with it.
process.once("exit", removeAllHosts)

/**
 * Creates the two hosts, or returns why it cannot (no `ip`, no CAP_NET_ADMIN, ...): the first
 * `ip netns add` is the probe, so nothing is assumed about the machine.
 */
export const createHosts = (): Hosts | { readonly unavailable: string } => {
  if (Bun.which("ip") === null) return { unavailable: "the `ip` command (iproute2) is not installed" }
  sweepStale()
  const tag = `${process.pid}-${serial++}`
  // veth names are limited to 15 characters; these are unique per run within this machine.
  const id = `${(process.pid % 0xfffff).toString(36)}${serial.toString(36)}`
  const hosts: [Host, Host] = [
    { ns: `${PREFIX}${tag}-a`, address: `${SUBNET}.1`, device: `mbh${id}a` },
    { ns: `${PREFIX}${tag}-b`, address: `${SUBNET}.2`, device: `mbh${id}b` },
  ]
  const made: string[] = []
  const remove = () => {
    live.delete(remove)
    for (const ns of made.splice(0)) {
      try {
        // What still runs inside goes first (a launcher's workers outlive a launcher killed -9).
        for (const left of ip("netns", "pids", ns).split("\n").filter((l) => l.trim() !== "")) process.kill(Number(left), "SIGKILL")
        ip("netns", "del", ns)
      } catch {}
    }
  }
  try {
    ip("netns", "add", hosts[0].ns)
  } catch (e) {
    return { unavailable: `cannot create a network namespace (needs root or CAP_NET_ADMIN): ${(e as Error).message}` }
  }
  made.push(hosts[0].ns)
  live.add(remove)
  try {
    ip("netns", "add", hosts[1].ns)
    made.push(hosts[1].ns)
    ip("link", "add", hosts[0].device, "netns", hosts[0].ns, "type", "veth", "peer", "name", hosts[1].device, "netns", hosts[1].ns)
    for (const h of hosts) {
      ip("-n", h.ns, "addr", "add", `${h.address}/24`, "dev", h.device)
      ip("-n", h.ns, "link", "set", "lo", "up")
      ip("-n", h.ns, "link", "set", h.device, "up")
    }
    // Running a program inside needs more than making the namespace (it remounts /sys).
    ip("netns", "exec", hosts[0].ns, process.execPath, "--version")
  } catch (e) {
    remove()
    return { unavailable: `cannot set up two namespaces joined by a veth pair and run in them: ${(e as Error).message}` }
  }
  const traffic = (h: Host) => {
    const [link] = JSON.parse(ip("-n", h.ns, "-j", "-s", "link", "show", "dev", h.device)) as Array<{ stats64: { rx: { bytes: number }; tx: { bytes: number } } }>
    return { rx: link!.stats64.rx.bytes, tx: link!.stats64.tx.bytes }
  }
  return { hosts, traffic, remove }
}

/** The argv that runs `argv` inside a host's namespace. */
export const inHost = (host: Host, argv: ReadonlyArray<string>): string[] => ["ip", "netns", "exec", host.ns, ...argv]

/**
 * Gives the hosts names: each namespace's /etc/hosts (`/etc/netns/<ns>/hosts`, which `ip netns
 * exec` mounts over /etc/hosts inside it only) maps every name to its host's address. Returns
 * how to remove those files again.
 */
export const nameHosts = (named: ReadonlyArray<{ readonly host: Host; readonly name: string }>): (() => void) => {
  const madeRoot = !existsSync("/etc/netns")
  const dirs = named.map(({ host }) => join("/etc/netns", host.ns))
  const remove = () => {
    for (const d of dirs) rmSync(d, { recursive: true, force: true })
    if (madeRoot) rmSync("/etc/netns", { recursive: true, force: true })
  }
  try {
    for (const d of dirs) {
      mkdirSync(d, { recursive: true })
      writeFileSync(join(d, "hosts"), ["127.0.0.1 localhost", ...named.map((n) => `${n.host.address} ${n.name}`), ""].join("\n"))
    }
  } catch (e) {
    remove()
    throw e
  }
  return remove
}

/**
 * The argv that runs `argv` inside a host's namespace with `name` as its hostname (a UTS
 * namespace of its own), after `setup` (shell commands ending in "&& ", or ""): programs that
 * find their own address from their hostname (torchrun's agents, slurmd) then find the host's.
 */
export const inNamedHost = (host: Host, name: string, argv: ReadonlyArray<string>, setup = ""): string[] => inHost(host, named(name, argv, setup))

/** inNamedHost's argv inside the namespace (for HostProcess, which adds `ip netns exec`). */
export const named = (name: string, argv: ReadonlyArray<string>, setup = ""): string[] =>
  ["unshare", "--uts", "sh", "-c", `hostname ${name} && ${setup}exec "$@"`, "sh", ...argv]
