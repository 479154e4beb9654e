/**
 * all_reduce (sum, f32) across ranks as processes: ours (ffi/comm.ts on Gloo, met through
 * src/comm/rendezvous.ts and our store server) beside torch.distributed's Gloo
 * (bench/torch_gloo_allreduce.py under /usr/bin/python3, or TORCH_PYTHON) when torch is present.
 *
 *   node_modules/.bin/bun run bench/collectives.ts [--runs N] [--warmup N] [--tcp | --hosts]
 *
 * By default 2 ranks share this host, so ours all-reduce through shared memory
 * (c/cpu/comm_shm.h); --tcp sets MONARCH_COMM_SHM=0 to measure the TCP paths that ranks on
 * several hosts take.
 *
 * --hosts (root: it makes network namespaces) runs across two hosts: the network namespaces of
 * rig/netns.ts joined by a veth pair. World 2 (one rank per host) and world 4 (two per
 * host), each side's store on host 1 at host 1's address, ours binding each host's address and
 * torch's Gloo the host's veth (GLOO_SOCKET_IFNAME). Every one of our communicators must report
 * transport "tcp" (Gloo's TCP pairs, no shared memory: a member in another namespace counts as
 * another host), or the bench stops. Rows add the bytes that crossed the veth pair per op (both
 * directions, host 1's end, over the tensor's bytes), so a side that did not use the link shows.
 *
 * A run fills the tensor with rank + 1, barriers, then times `iters` in-place all_reduces back
 * to back; its per-op time is the slowest rank's. Both sides' processes stay up and take turns,
 * run by run and case by case, so load from elsewhere on the machine falls on both alike.
 * Rows give the median over the timed runs (warmup runs excluded), bus bandwidth
 * busbw = algbw * 2(n-1)/n as nccl-tests defines it, the two sides' time ratio, and `wrong`:
 * elements that did not hold S * world^(iters-1) after a run (S = 1 + ... + world: the first op
 * sums the ranks' values, each later one multiplies by world), summed over runs and ranks.
 *
 * The same file is each of our ranks:
 * `bun bench/collectives.ts rank <rank> <world> <store host> <store port> <bind address> <cases>`,
 * speaking the line protocol of torch_gloo_allreduce.py (its ready line adds the transport).
 */
import type { Subprocess } from "bun"
import { Duration, Effect } from "effect"
import { parseArgs } from "node:util"
import { loadNative } from "../ffi/native.ts"
import * as k from "../ffi/ops.ts"
import { Tensor } from "../ffi/tensor.ts"
import { rendezvous } from "../src/comm/rendezvous.ts"
import { makeClient } from "../src/store/client.ts"
import { startServer } from "../src/store/server.ts"
import { createHosts, inHost, type Host, type Hosts } from "../rig/netns.ts"
import { HostProcess } from "../rig/hostProcess.ts"

interface Case {
  readonly name: string
  readonly bytes: number
  /** all_reduces per timed run; values grow by world each time, so f32 stays exact below 2^127. */
  readonly iters: number
}

/** One rank's answer for one run. */
interface RunResult {
  /** Per-op seconds. */
  readonly seconds: number
  readonly wrong: number
}

const KiB = 1 << 10
const MiB = 1 << 20
/** One host, two ranks. */
const CASES: ReadonlyArray<Case> = [
  { name: "latency", bytes: 4, iters: 100 },
  { name: "1 MiB", bytes: MiB, iters: 20 },
  { name: "16 MiB", bytes: 16 * MiB, iters: 4 },
  { name: "64 MiB", bytes: 64 * MiB, iters: 2 },
]
/** Two hosts, worlds 2 and 4: 10 * 4^(iters-1) stays exact in f32 for these iters. */
const HOST_CASES: ReadonlyArray<Case> = [
  { name: "4 KiB", bytes: 4 * KiB, iters: 50 },
  { name: "256 KiB", bytes: 256 * KiB, iters: 20 },
  { name: "4 MiB", bytes: 4 * MiB, iters: 5 },
  { name: "32 MiB", bytes: 32 * MiB, iters: 2 },
]
const HOST_WORLDS = [2, 4] as const

const expectedValue = (world: number, iters: number) => ((world * (world + 1)) / 2) * world ** (iters - 1)

// ---- one of our ranks -------------------------------------------------------------------------

const runRank = async (rank: number, world: number, storeHost: string, port: number, hostname: string, cases: ReadonlyArray<Case>) => {
  const native = loadNative("cpu")
  native.setCommShm(process.env.MONARCH_COMM_SHM !== "0") // as a worker's config sets it
  const timeoutMs = 120_000
  const comm = await Effect.runPromise(Effect.scoped(Effect.gen(function* () {
    const store = yield* makeClient({ host: storeHost, port, timeout: Duration.millis(timeoutMs) })
    return yield* rendezvous({ native, store, key: "bench/world", members: Array.from({ length: world }, (_, r) => r), rank, timeoutMs, hostname })
  })))
  const tensors = cases.map((c) => Tensor.empty(native, "f32", [c.bytes / 4]))
  console.log(JSON.stringify({ ready: true, transport: comm.transport() }))
  for await (const line of console) {
    if (line.trim() === "exit") break
    const index = Number(line), c = cases[index]!, t = tensors[index]!
    k.fill(t, rank + 1)
    comm.barrier()
    const start = Bun.nanoseconds()
    for (let i = 0; i < c.iters; i++) comm.allReduce(t, t, "sum")
    const seconds = (Bun.nanoseconds() - start) / 1e9 / c.iters
    const { data } = t.toHost()
    const expected = expectedValue(world, c.iters)
    let wrong = 0
    for (const v of new Float32Array(data.buffer, data.byteOffset, data.byteLength / 4)) if (v !== expected) wrong++
    console.log(JSON.stringify({ seconds, wrong } satisfies RunResult))
  }
  comm.barrier()
  for (const t of tensors) t.free()
  comm.destroy()
}

// ---- the driver -------------------------------------------------------------------------------

const PYTHON = process.env.TORCH_PYTHON ?? "/usr/bin/python3"
const PEER = new URL("./torch_gloo_allreduce.py", import.meta.url).pathname
const STORE = new URL("../rig/hostStore.ts", import.meta.url).pathname

const torchVersion = (): { ok: true; version: string } | { ok: false; reason: string } => {
  const r = Bun.spawnSync([PYTHON, "-c", "import torch, torch.distributed as d; assert d.is_gloo_available(); print(torch.__version__)"], { stdout: "pipe", stderr: "pipe" })
  return r.exitCode === 0 ? { ok: true, version: r.stdout.toString().trim() } : { ok: false, reason: r.stderr.toString().trim().split("\n").pop() || `exit ${r.exitCode}` }
}

/** Reads a process's stdout one JSON line at a time. */
class Lines {
  private readonly queue: unknown[] = []
  private waiting: ((line: unknown) => void) | undefined
  private ended = false

  constructor(stream: ReadableStream<Uint8Array>, private readonly failure: () => Promise<string>) {
    void this.pump(stream)
  }

  private async pump(stream: ReadableStream<Uint8Array>) {
    const decoder = new TextDecoder()
    let pending = ""
    for await (const chunk of stream) {
      const parts = (pending + decoder.decode(chunk, { stream: true })).split("\n")
      pending = parts.pop()!
      for (const p of parts) if (p.trim() !== "") this.push(JSON.parse(p))
    }
    this.ended = true
    this.waiting?.(undefined)
  }

  private push(line: unknown) {
    const wake = this.waiting
    this.waiting = undefined
    if (wake) wake(line)
    else this.queue.push(line)
  }

  async next(): Promise<unknown> {
    if (this.queue.length > 0) return this.queue.shift()
    if (this.ended) throw new Error(await this.failure())
    const line = await new Promise<unknown>((resolve) => (this.waiting = resolve))
    if (line === undefined) throw new Error(await this.failure())
    return line
  }
}

/** Where a side's ranks meet, and how to stop it. */
interface Store {
  readonly host: string
  readonly port: number
  readonly stop: () => void
}

/** A store server in this process, on loopback. */
const localStore = (): Store => {
  const server = startServer({ port: 0 })
  return { host: "127.0.0.1", port: server.port, stop: () => server.stop() }
}

/** A store server as its own process inside `host`, bound to the host's address. */
const hostStore = async (host: Host): Promise<Store> => {
  const proc = new HostProcess(`store on ${host.address}`, host, [process.execPath, STORE, host.address, "0"], {})
  const line = await proc.line((l) => l.startsWith("store "), 60_000).catch((e: Error) => {
    throw new Error(`${e.message}\n${proc.tail()}`)
  })
  return { host: host.address, port: Number(line.slice(line.lastIndexOf(":") + 1)), stop: () => proc.kill() }
}

/** How one rank starts: its argv (the store known) and what it adds to the environment. */
type Launch = (rank: number, store: Store) => { readonly argv: string[]; readonly env: Record<string, string> }

/** One implementation's ranks, started and ready, taking one run at a time. */
class Side {
  private constructor(
    readonly label: string,
    /** Each rank's ready line. */
    readonly ready: ReadonlyArray<{ readonly transport?: string }>,
    private readonly store: Store,
    private readonly procs: Subprocess<"pipe", "pipe", "pipe">[],
    private readonly lines: Lines[],
  ) {}

  static async start(label: string, world: number, store: Store, launch: Launch): Promise<Side> {
    const procs = Array.from({ length: world }, (_, rank) => {
      const { argv, env } = launch(rank, store)
      return Bun.spawn(argv, { env: { ...process.env, ...env }, stdin: "pipe", stdout: "pipe", stderr: "pipe" })
    })
    const lines = procs.map((p, rank) => new Lines(p.stdout, async () => `${label} rank ${rank} ended (${await p.exited}):\n${await p.stderr.text()}`))
    const ready = (await Promise.all(lines.map((l) => l.next()))) as { transport?: string }[]
    return new Side(label, ready, store, procs, lines)
  }

  /** One run of case `index` on every rank. */
  async run(index: number): Promise<RunResult[]> {
    for (const p of this.procs) {
      p.stdin.write(`${index}\n`)
      p.stdin.flush()
    }
    return (await Promise.all(this.lines.map((l) => l.next()))) as RunResult[]
  }

  async stop() {
    for (const p of this.procs) {
      p.stdin.write("exit\n")
      p.stdin.end()
    }
    await Promise.all(this.procs.map((p) => p.exited))
    this.store.stop()
  }
}

/** Every side's runs of every case, taking turns; with `crossed`, also the bytes it counts per run. */
const alternate = async (sides: Side[], cases: ReadonlyArray<Case>, warmup: number, runs: number, crossed?: () => number) => {
  const results = sides.map(() => cases.map((): RunResult[][] => []))
  const bytes = sides.map(() => cases.map((): number[] => []))
  for (let run = 0; run < warmup + runs; run++) {
    for (let c = 0; c < cases.length; c++) {
      // Alternate who goes first, so neither always runs right after the other.
      const order = sides.map((_, s) => s)
      if (run % 2 === 1) order.reverse()
      for (const s of order) {
        const before = crossed?.() ?? 0
        const got = await sides[s]!.run(c)
        const after = crossed?.() ?? 0
        if (run >= warmup) {
          results[s]![c]!.push(got)
          bytes[s]![c]!.push(after - before)
        }
      }
    }
  }
  return { results, bytes }
}

interface Summary {
  /** Median over runs of the slowest rank's per-op seconds. */
  readonly seconds: number
  readonly busbw: number
  readonly wrong: number
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!

const summarize = (c: Case, world: number, runs: RunResult[][]): Summary => {
  const seconds = median(runs.map((ranks) => Math.max(...ranks.map((r) => r.seconds))))
  const wrong = runs.flat().reduce((n, r) => n + r.wrong, 0)
  return { seconds, busbw: (c.bytes / seconds / 1e9) * ((2 * (world - 1)) / world), wrong }
}

const time = (s: number) => (s < 1e-3 ? `${(s * 1e6).toFixed(1)} us` : `${(s * 1e3).toFixed(2)} ms`)

const printTable = (header: string[], units: string[], rows: string[][]) => {
  const widths = header.map((h, i) => Math.max(h.length, units[i]!.length, ...rows.map((r) => r[i]!.length)))
  const line = (cells: string[]) => cells.map((cell, i) => (i === 0 ? cell.padEnd(widths[i]!) : cell.padStart(widths[i]!))).join("  ")
  console.log(line(header))
  console.log(line(units))
  for (const r of rows) console.log(line(r))
}

const torchEnv = { OMP_NUM_THREADS: "1", PYTHONUNBUFFERED: "1" }

const oneHost = async (runs: number, warmup: number, tcp: boolean) => {
  const world = 2
  const cases = JSON.stringify(CASES)
  const torch = torchVersion()
  console.log(`all_reduce sum f32, ${world} ranks as processes on one host, ${navigator.hardwareConcurrency} cores; ${warmup} warmup + ${runs} timed runs per case`)
  console.log(`ours: ${tcp ? "TCP only (MONARCH_COMM_SHM=0): small-input exchange, else Gloo's ring" : "shared memory"}`)
  if (torch.ok) console.log(`torch ${torch.version} Gloo from ${PYTHON}, taking turns with ours`)
  else console.log(`torch columns left empty: ${PYTHON} has no torch with Gloo (${torch.reason})`)

  const ourEnv: Record<string, string> = tcp ? { MONARCH_COMM_SHM: "0" } : {}
  const sides = await Promise.all([
    Side.start("ours", world, localStore(), (rank, store) => ({
      argv: [process.execPath, import.meta.path, "rank", String(rank), String(world), store.host, String(store.port), "", cases],
      env: ourEnv,
    })),
    ...(torch.ok ? [Side.start("torch", world, localStore(), (rank, store) => ({
      argv: [PYTHON, PEER, String(rank), String(world), store.host, String(store.port), cases],
      env: { ...torchEnv, GLOO_SOCKET_IFNAME: "lo" },
    }))] : []),
  ])
  const { results } = await alternate(sides, CASES, warmup, runs)
  await Promise.all(sides.map((s) => s.stop()))
  const [ours, theirs] = results.map((perCase) => perCase.map((r, c) => summarize(CASES[c]!, world, r)))
  printTable(
    ["case", "bytes", "iters x runs", "ours time", "ours busbw", "ours wrong", "torch time", "torch busbw", "torch wrong", "torch/ours"],
    ["", "", "", "median/op", "GB/s", "elements", "median/op", "GB/s", "elements", "time ratio"],
    CASES.map((c, i) => {
      const o = ours![i]!, t = theirs?.[i]
      return [c.name, String(c.bytes), `${c.iters} x ${runs}`, time(o.seconds), o.busbw.toFixed(3), String(o.wrong),
        t ? time(t.seconds) : "-", t ? t.busbw.toFixed(3) : "-", t ? String(t.wrong) : "-", t ? `${(t.seconds / o.seconds).toFixed(2)}x` : "-"]
    }),
  )
}

/** Rank r of `world` on the hosts: the first half on host 1, the rest on host 2. */
const hostOf = (hosts: Hosts, world: number, rank: number): Host => hosts.hosts[rank < world / 2 ? 0 : 1]

const twoHosts = async (runs: number, warmup: number) => {
  const torch = torchVersion()
  if (!torch.ok) throw new Error(`--hosts compares against torch's Gloo: ${PYTHON} has no torch with Gloo (${torch.reason})`)
  const made = createHosts()
  if ("unavailable" in made) throw new Error(`--hosts: ${made.unavailable}`)
  const hosts = made
  try {
    const [h1, h2] = hosts.hosts
    console.log(`all_reduce sum f32 across two hosts: network namespaces ${h1.address} and ${h2.address} joined by a veth pair (${h1.device}, ${h2.device}), ${navigator.hardwareConcurrency} cores; ${warmup} warmup + ${runs} timed runs per case`)
    console.log(`ours: Gloo's TCP pairs bound to each host's address; torch ${torch.version} Gloo from ${PYTHON} on each host's veth, taking turns with ours`)
    const cases = JSON.stringify(HOST_CASES)
    const crossed = () => {
      const t = hosts.traffic(h1)
      return t.rx + t.tx
    }
    const rows: string[][] = []
    for (const world of HOST_WORLDS) {
      const sides = await Promise.all([
        hostStore(h1).then((store) => Side.start("ours", world, store, (rank, s) => ({
          argv: inHost(hostOf(hosts, world, rank), [process.execPath, import.meta.path, "rank", String(rank), String(world), s.host, String(s.port), hostOf(hosts, world, rank).address, cases]),
          env: {},
        }))),
        hostStore(h1).then((store) => Side.start("torch", world, store, (rank, s) => ({
          argv: inHost(hostOf(hosts, world, rank), [PYTHON, PEER, String(rank), String(world), s.host, String(s.port), cases]),
          env: { ...torchEnv, GLOO_SOCKET_IFNAME: hostOf(hosts, world, rank).device },
        }))),
      ])
      const transports = sides[0]!.ready.map((r) => r.transport)
      console.log(`world ${world}: our communicators' transport by rank: ${transports.join(", ")}`)
      if (transports.some((t) => t !== "tcp")) throw new Error(`world ${world}: a communicator across two hosts is not on Gloo's TCP pairs: ${transports.join(", ")}`)
      const { results, bytes } = await alternate(sides, HOST_CASES, warmup, runs, crossed)
      await Promise.all(sides.map((s) => s.stop()))
      const [ours, theirs] = results.map((perCase) => perCase.map((r, c) => summarize(HOST_CASES[c]!, world, r)))
      const perOp = (s: number, c: number) => median(bytes[s]![c]!) / HOST_CASES[c]!.iters / HOST_CASES[c]!.bytes
      HOST_CASES.forEach((c, i) => {
        const o = ours![i]!, t = theirs![i]!
        rows.push([String(world), c.name, `${c.iters} x ${runs}`, time(o.seconds), o.busbw.toFixed(3), String(o.wrong), perOp(0, i).toFixed(2),
          time(t.seconds), t.busbw.toFixed(3), String(t.wrong), perOp(1, i).toFixed(2), `${(o.seconds / t.seconds).toFixed(2)}x`])
      })
    }
    printTable(
      ["world", "size", "iters x runs", "ours time", "ours busbw", "ours wrong", "ours veth", "torch time", "torch busbw", "torch wrong", "torch veth", "ours/torch"],
      ["", "", "", "median/op", "GB/s", "elements", "x bytes", "median/op", "GB/s", "elements", "x bytes", "time ratio"],
      rows,
    )
    console.log("veth: bytes through host 1's end of the pair (both directions) per op, over the tensor's bytes (median over runs)")
  } finally {
    hosts.remove()
  }
}

const main = async () => {
  const { values } = parseArgs({
    options: {
      runs: { type: "string", default: "21" },
      warmup: { type: "string", default: "2" },
      tcp: { type: "boolean", default: false },
      hosts: { type: "boolean", default: false },
    },
  })
  const runs = Number(values.runs), warmup = Number(values.warmup)
  if (values.hosts) await twoHosts(runs, warmup)
  else await oneHost(runs, warmup, values.tcp)
}

if (process.argv[2] === "rank") {
  const [rank, world, storeHost, port, hostname, cases] = process.argv.slice(3)
  await runRank(Number(rank), Number(world), storeHost!, Number(port), hostname!, JSON.parse(cases!) as Case[])
} else {
  await main()
}
