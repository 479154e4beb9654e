/**
 * The multi-host checks, shared by tests/hosts/hosts.test.ts and scripts/reliability.ts.
 * Two network namespaces joined by a veth pair stand in for two hosts; the store and the
 * controller run on host 1, two ranks on each host, each in its own process:
 *   - Gloo communicators across the hosts (tests/comm/scenarios.ts through tests/comm/worker.ts):
 *     every collective and dtype, broadcast from every root, barrier; then sub-communicators
 *     along a dim that crosses the hosts, and p2p both ways round a ring;
 *   - the real worker (src/worker.ts, torchrun-style env; Gloo on its host's address, given by
 *     MONARCH_HOSTNAME on host 1 and found from the route to the store on host 2) driven by a
 *     controller program on host 1 (Controller.attach, listener on host 1's address):
 *     rendezvous, all_reduce, all_gather, reduce_scatter, all_to_all over the world and across
 *     the hosts, and sends each way (plan.ts), checked against values computed here.
 * Each try also reads host 1's veth counters, to show the traffic really crossed the link.
 */
import { createHosts, type Host, type Hosts } from "../../rig/netns.ts"
import { mismatch, N, STEPS, WORLD, type ControllerReport } from "./plan.ts"
import { HostProcess } from "../../rig/hostProcess.ts"
import type { Mode, ReliabilityRow } from "../reliability.ts"


const BUN = process.execPath
const ROOT = new URL("../..", import.meta.url).pathname.replace(/\/$/, "")
const file = (p: string) => new URL(p, import.meta.url).pathname
const STORE = file("../../rig/hostStore.ts"), COMM_PEER = file("../comm/worker.ts"), CONTROLLER = file("./controller.ts")
const WORKER = file("../../src/worker.ts")
/** Collective, rendezvous and store timeouts inside the tries; far above what a try needs. */
const TIMEOUT_MS = 30_000

const ranks = Array.from({ length: WORLD }, (_, r) => r)
const hostOf = (hosts: Hosts, rank: number): Host => hosts.hosts[Math.floor(rank / 2)]!

/** How one try went: whether every condition held, and its figures or what failed. */
interface Outcome {
  readonly held: boolean
  readonly detail: string
}

const kib = (bytes: number) => `${(bytes / 1024).toFixed(0)} KiB`
const seconds = (ms: number) => `${(ms / 1000).toFixed(1)} s`

/** Runs `body` with the processes it starts, killing any still running afterwards. */
const withProcesses = async (body: (spawn: (p: HostProcess) => HostProcess) => Promise<Outcome>): Promise<Outcome> => {
  const procs: HostProcess[] = []
  try {
    return await body((p) => (procs.push(p), p))
  } catch (e) {
    return { held: false, detail: `${(e as Error).message}\n${procs.map((p) => p.tail(8)).join("\n")}` }
  } finally {
    for (const p of procs) p.kill()
    await Promise.all(procs.map((p) => p.status))
  }
}

/** The store on host 1, bound to its address; resolves once it listens. */
const startStore = async (spawn: (p: HostProcess) => HostProcess, host: Host, port: number): Promise<void> => {
  await spawn(new HostProcess("store", host, [BUN, STORE, host.address, String(port)], {})).line((l) => l.startsWith("store "), 20_000)
}

type Line = { check?: string; ok?: boolean; detail?: string; event?: string; entered?: number; left?: number }

/**
 * One scenario of tests/comm/scenarios.ts on four processes, two per host. `needs`: check-name
 * prefixes every rank must have passed (so a scenario that silently ran less does not hold).
 */
const commTry = (hosts: Hosts, scenario: string, port: number, needs: ReadonlyArray<string>): Promise<Outcome> =>
  withProcesses(async (spawn) => {
    const host1 = hosts.hosts[0], before = hosts.traffic(host1), started = performance.now()
    await startStore(spawn, host1, port)
    const peers = ranks.map((r) => spawn(new HostProcess(`rank ${r}`, hostOf(hosts, r), [
      BUN, COMM_PEER, scenario, String(r), String(WORLD), String(TIMEOUT_MS), String(port), host1.address, hostOf(hosts, r).address,
    ], {})))
    const codes = await Promise.all(peers.map((p) => p.exit(TIMEOUT_MS * 2)))
    const ms = performance.now() - started, after = hosts.traffic(host1)
    const problems: string[] = []
    const lines = peers.map((p) => p.stdout.filter((l) => l.trim() !== "").map((l) => JSON.parse(l) as Line))
    const names = lines.map((ls) => ls.filter((l) => l.check !== undefined).map((l) => l.check!))
    peers.forEach((p, r) => {
      if (codes[r] !== 0) problems.push(`rank ${r} exited ${codes[r] ?? "not at all"}: ${p.stderr.slice(-5).join(" | ")}`)
      for (const l of lines[r]!.filter((l) => l.ok === false)) problems.push(`rank ${r}: ${l.check} failed: ${l.detail}`)
      if (!lines[r]!.some((l) => l.event === "done")) problems.push(`rank ${r} did not finish`)
      for (const need of needs) if (!names[r]!.some((n) => n.startsWith(need))) problems.push(`rank ${r} ran no "${need}" check`)
      if (names[r]!.join() !== names[0]!.join()) problems.push(`rank ${r} ran other checks than rank 0`)
    })
    const barriers = lines.map((ls) => ls.find((l) => l.event === "barrier"))
    if (barriers.some((b) => b !== undefined)) {
      const lastIn = Math.max(...barriers.map((b) => b?.entered ?? Infinity))
      const early = barriers.flatMap((b, r) => (b === undefined || b.left! < lastIn ? [r] : []))
      if (early.length > 0) problems.push(`ranks [${early}] left the barrier before the last rank entered it (or never did)`)
    }
    const rx = after.rx - before.rx, tx = after.tx - before.tx
    // Host 1's ranks must at least receive host 2's data and send their own, so both directions move bytes.
    if (rx === 0 || tx === 0) problems.push(`host 1's veth moved ${rx} bytes in, ${tx} out`)
    if (problems.length > 0) return { held: false, detail: problems.slice(0, 5).join("; ") }
    return { held: true, detail: `${names[0]!.length} checks on each rank; veth ${kib(rx)} in, ${kib(tx)} out; ${seconds(ms)}` }
  })

/**
 * The worker's torchrun-style environment. Host 1's ranks use the original worker's names and
 * say which address Gloo binds (MONARCH_HOSTNAME); host 2's get only what a multi-node torchrun
 * gives (MASTER_ADDR/PORT, no MONARCH_HOSTNAME), so they find the address that reaches the store.
 */
const workerEnv = (hosts: Hosts, rank: number, port: number): Record<string, string> => {
  const store = hosts.hosts[0].address
  const names: Record<string, string> = rank < 2
    ? { STORE_HOSTNAME: store, STORE_PORT: String(port), MONARCH_HOSTNAME: hostOf(hosts, rank).address }
    : { MASTER_ADDR: store, MASTER_PORT: String(port) }
  return {
    ...names,
    RANK: String(rank),
    WORLD_SIZE: String(WORLD),
    LOCAL_RANK: String(rank % 2),
    LOCAL_WORLD_SIZE: "2",
    MONARCH_DEVICE: "cpu",
    MONARCH_FUNCTION_PATH: ROOT,
    MONARCH_COMM_TIMEOUT_MS: String(TIMEOUT_MS),
    MONARCH_STORE_TIMEOUT_MS: String(TIMEOUT_MS),
    MONARCH_LOG: "warn",
    MONARCH_TOKEN: HOSTS_TOKEN,
  }
}

/** The job token, in every process's environment (attach never puts it in the store). */
const HOSTS_TOKEN = "hosts-job-token-0123456789"

/**
 * The lower bound on what host 1 receives in the plan: ranks 2 and 3's f32 vectors (the world
 * all_gather) and their i64 vectors (the send to host 1). Traffic below it did not go over the veth.
 */
const MIN_RX = 2 * N * 4 + 2 * N * 8
/** And what it must send: ranks 0 and 1's f32 vectors, gathered on host 2 and sent there. */
const MIN_TX = 2 * N * 4 + 2 * N * 4

/** The controller program on host 1 and four workers, two per host. */
const controllerTry = (hosts: Hosts, port: number): Promise<Outcome> =>
  withProcesses(async (spawn) => {
    const [host1, host2] = hosts.hosts, before = hosts.traffic(host1), started = performance.now()
    await startStore(spawn, host1, port)
    const controller = spawn(new HostProcess("controller", host1, [BUN, CONTROLLER, host1.address, String(port), String(WORLD)], { MONARCH_TOKEN: HOSTS_TOKEN }))
    const workers = ranks.map((r) => spawn(new HostProcess(`worker ${r}`, hostOf(hosts, r), [BUN, WORKER], workerEnv(hosts, r, port))))
    const reportLine = await controller.line((l) => l.startsWith("{"), 3 * TIMEOUT_MS)
    const report = JSON.parse(reportLine) as ControllerReport
    const ms = performance.now() - started
    const codes = [await controller.exit(10_000), ...(await Promise.all(workers.map((w) => w.exit(10_000))))]
    const after = hosts.traffic(host1)
    const problems: string[] = []
    codes.forEach((c, i) => {
      if (c !== 0) problems.push(`${i === 0 ? "the controller" : `worker ${i - 1}`} exited ${c ?? "not at all"}`)
    })
    ranks.forEach((r) => {
      const want = hostOf(hosts, r).address
      if (report.placement[r]?.join() !== want) problems.push(`rank ${r} ran at [${report.placement[r]}], not on ${want}`)
    })
    for (const step of STEPS) {
      const why = mismatch(step, report.results[step.name])
      if (why !== undefined) problems.push(`${step.name}: ${why}`)
    }
    const rx = after.rx - before.rx, tx = after.tx - before.tx
    if (rx < MIN_RX || tx < MIN_TX) problems.push(`host 1's veth moved ${rx} bytes in and ${tx} out, below the ${MIN_RX} and ${MIN_TX} the plan needs`)
    if (problems.length > 0) return { held: false, detail: `${problems.slice(0, 5).join("; ")}\n${[controller, ...workers].map((p) => p.tail(5)).join("\n")}` }
    return {
      held: true,
      detail: `${STEPS.length} results exact on every rank (ranks 0-1 on ${host1.address}, 2-3 on ${host2.address}); ` +
        `${seconds(ms)} from the first spawn to the report (steps ${seconds(report.runMs)}); veth ${kib(rx)} in, ${kib(tx)} out; all exited 0`,
    }
  })

interface Check {
  readonly check: string
  readonly tries: (mode: "default" | "long") => number
  readonly attempt: (hosts: Hosts, port: number) => Promise<Outcome>
}

const CHECKS: ReadonlyArray<Check> = [
  {
    check: "Gloo across 2 hosts (2 ranks each): every collective and dtype, broadcast from each root, barrier",
    tries: (mode) => (mode === "long" ? 3 : 1),
    attempt: (hosts, port) => commTry(hosts, "collectives", port, ["all_reduce ", "all_gather ", "reduce_scatter ", "all_to_all ", "broadcast "]),
  },
  {
    check: "Gloo across 2 hosts: sub-communicators on a dim that crosses them, p2p both ways round a ring",
    tries: (mode) => (mode === "long" ? 3 : 1),
    attempt: async (hosts, port) => {
      const mesh = await commTry(hosts, "mesh", port, ["col all_reduce", "col broadcast", "col p2p exchange", "row all_gather"])
      if (!mesh.held) return { held: false, detail: `mesh: ${mesh.detail}` }
      const ring = await commTry(hosts, "p2p", port + 1, ["ring round", "pair exchange", "two to one peer"])
      return { held: ring.held, detail: `mesh: ${mesh.detail}; ring: ${ring.detail}` }
    },
  },
  {
    check: "controller on host 1 (Controller.attach, listener on its address), 4 workers on 2 hosts: rendezvous, collectives, sends both ways",
    tries: (mode) => (mode === "long" ? 5 : 1),
    attempt: controllerTry,
  },
]

/** Whether two hosts can be made here; the reason when not. Makes and removes them once. */
export const unavailable = (): string | undefined => {
  const made = createHosts()
  if ("unavailable" in made) return made.unavailable
  made.remove()
  return undefined
}

export const run = async (mode: "default" | "long"): Promise<ReliabilityRow[]> => {
  const made = createHosts()
  if ("unavailable" in made) return CHECKS.map((c) => ({ area: "hosts", check: c.check, tries: 0, held: 0, detail: `skipped: ${made.unavailable}` }))
  try {
    // The namespaces are this run's own, so fixed ports cannot collide; each try takes fresh ones.
    let port = 29_500
    const rows: ReliabilityRow[] = []
    for (const c of CHECKS) {
      const outcomes: Outcome[] = []
      for (let i = 0; i < c.tries(mode); i++, port += 2) outcomes.push(await c.attempt(made, port))
      const failed = outcomes.find((o) => !o.held)
      const last = outcomes.at(-1)!
      rows.push({
        area: "hosts",
        check: c.check,
        tries: outcomes.length,
        held: outcomes.filter((o) => o.held).length,
        detail: failed ? `failed: ${failed.detail}` : last.detail,
      })
    }
    return rows
  } finally {
    made.remove()
  }
}
