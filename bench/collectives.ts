/**
 * all_reduce (sum, f32) across 2 ranks as 2 processes: ours (ffi/comm.ts on Gloo, met through
 * src/comm/rendezvous.ts and a store server in this process) beside torch.distributed's Gloo
 * (bench/torch_gloo_allreduce.py under /usr/bin/python3, or TORCH_PYTHON) when torch is present.
 *
 *   node_modules/.bin/bun run bench/collectives.ts [--runs N] [--warmup N] [--tcp]
 *
 * Our ranks share a host, so they all-reduce through shared memory (c/cpu/comm_shm.h); --tcp
 * sets MONARCH_COMM_SHM=0 to measure the TCP paths that ranks on several hosts take.
 *
 * A run fills the tensor with rank + 1, barriers, then times `iters` in-place all_reduces back
 * to back; its per-op time is the slowest rank's. Both sides' processes stay up and take turns,
 * run by run and case by case, so load from elsewhere on the machine falls on both alike.
 * Rows give the median over the timed runs (warmup runs excluded), bus bandwidth
 * busbw = algbw * 2(n-1)/n as nccl-tests defines it, torch's time over ours (> 1: we are
 * faster), and `wrong`: elements that did not hold 3 * 2^(iters-1) after a run (each op doubles
 * the 1 + 2 of the first), summed over runs and ranks.
 *
 * The same file is each of our ranks: `bun bench/collectives.ts rank <rank> <world> <port> <cases>`,
 * speaking the line protocol of torch_gloo_allreduce.py.
 */
import type { Subprocess } from "bun"
import { Duration, Effect } from "effect"
import { parseArgs } from "node:util"
import { loadNative } from "../ffi/native.ts"
import * as k from "../ffi/ops.ts"
import { Tensor } from "../ffi/tensor.ts"
import { rendezvous } from "../src/comm/rendezvous.ts"
import { makeClient } from "../src/store/client.ts"
import { startServer, type RunningServer } from "../src/store/server.ts"

interface Case {
  readonly name: string
  readonly bytes: number
  /** all_reduces per timed run; values double each time, so f32 stays exact below ~127. */
  readonly iters: number
}

/** One rank's answer for one run. */
interface RunResult {
  /** Per-op seconds. */
  readonly seconds: number
  readonly wrong: number
}

const MiB = 1 << 20
const CASES: ReadonlyArray<Case> = [
  { name: "latency", bytes: 4, iters: 100 },
  { name: "1 MiB", bytes: MiB, iters: 20 },
  { name: "16 MiB", bytes: 16 * MiB, iters: 4 },
  { name: "64 MiB", bytes: 64 * MiB, iters: 2 },
]

/** Two ranks: the checks below count on each all-reduce exactly doubling the value. */
const WORLD = 2
const expectedValue = (iters: number) => 3 * 2 ** (iters - 1)

// ---- one of our ranks -------------------------------------------------------------------------

const runRank = async (rank: number, world: number, port: number, cases: ReadonlyArray<Case>) => {
  const native = loadNative("cpu")
  const timeoutMs = 120_000
  const comm = await Effect.runPromise(Effect.scoped(Effect.gen(function* () {
    const store = yield* makeClient({ port, timeout: Duration.millis(timeoutMs) })
    return yield* rendezvous({ native, store, key: "bench/world", members: Array.from({ length: world }, (_, r) => r), rank, timeoutMs })
  })))
  const tensors = cases.map((c) => Tensor.empty(native, "f32", [c.bytes / 4]))
  console.log(JSON.stringify({ ready: true }))
  for await (const line of console) {
    if (line.trim() === "exit") break
    const index = Number(line), c = cases[index]!, t = tensors[index]!
    k.fill(t, rank + 1)
    comm.barrier()
    const start = Bun.nanoseconds()
    for (let i = 0; i < c.iters; i++) comm.allReduce(t, t, "sum")
    const seconds = (Bun.nanoseconds() - start) / 1e9 / c.iters
    const { data } = t.toHost()
    const expected = expectedValue(c.iters)
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

/** One implementation's ranks, started and ready, taking one run at a time. */
class Side {
  private constructor(
    readonly label: string,
    private readonly server: RunningServer,
    private readonly procs: Subprocess<"pipe", "pipe", "pipe">[],
    private readonly lines: Lines[],
  ) {}

  static async start(label: string, world: number, command: (rank: number, port: number) => string[], env: Record<string, string>): Promise<Side> {
    const server = startServer({ port: 0 })
    const procs = Array.from({ length: world }, (_, rank) =>
      Bun.spawn(command(rank, server.port), { env: { ...process.env, ...env }, stdin: "pipe", stdout: "pipe", stderr: "pipe" }))
    const lines = procs.map((p, rank) => new Lines(p.stdout, async () => `${label} rank ${rank} ended (${await p.exited}):\n${await p.stderr.text()}`))
    const side = new Side(label, server, procs, lines)
    await Promise.all(lines.map((l) => l.next()))
    return side
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
    this.server.stop()
  }
}

interface Summary {
  /** Median over runs of the slowest rank's per-op seconds. */
  readonly seconds: number
  readonly busbw: number
  readonly wrong: number
}

const summarize = (c: Case, world: number, runs: RunResult[][]): Summary => {
  const slowest = runs.map((ranks) => Math.max(...ranks.map((r) => r.seconds))).sort((a, b) => a - b)
  const seconds = slowest[Math.floor(slowest.length / 2)]!
  const wrong = runs.flat().reduce((n, r) => n + r.wrong, 0)
  return { seconds, busbw: (c.bytes / seconds / 1e9) * ((2 * (world - 1)) / world), wrong }
}

const time = (s: number) => (s < 1e-3 ? `${(s * 1e6).toFixed(1)} us` : `${(s * 1e3).toFixed(2)} ms`)

const printTable = (world: number, runs: number, ours: Summary[], torch: Summary[] | undefined) => {
  const header = ["case", "bytes", "iters x runs", "ours time", "ours busbw", "ours wrong", "torch time", "torch busbw", "torch wrong", "torch/ours"]
  const units = ["", "", "", "median/op", "GB/s", "elements", "median/op", "GB/s", "elements", "time ratio"]
  const rows = CASES.map((c, i) => {
    const o = ours[i]!, t = torch?.[i]
    return [c.name, String(c.bytes), `${c.iters} x ${runs}`, time(o.seconds), o.busbw.toFixed(3), String(o.wrong),
      t ? time(t.seconds) : "-", t ? t.busbw.toFixed(3) : "-", t ? String(t.wrong) : "-", t ? `${(t.seconds / o.seconds).toFixed(2)}x` : "-"]
  })
  const widths = header.map((h, i) => Math.max(h.length, units[i]!.length, ...rows.map((r) => r[i]!.length)))
  const line = (cells: string[]) => cells.map((cell, i) => (i === 0 ? cell.padEnd(widths[i]!) : cell.padStart(widths[i]!))).join("  ")
  console.log(line(header))
  console.log(line(units))
  for (const r of rows) console.log(line(r))
}

const main = async () => {
  const { values } = parseArgs({
    options: { runs: { type: "string", default: "21" }, warmup: { type: "string", default: "2" }, tcp: { type: "boolean", default: false } },
  })
  const world = WORLD, runs = Number(values.runs), warmup = Number(values.warmup)
  const cases = JSON.stringify(CASES)
  const torch = torchVersion()
  console.log(`all_reduce sum f32, ${world} ranks as processes on one host, ${navigator.hardwareConcurrency} cores; ${warmup} warmup + ${runs} timed runs per case`)
  console.log(`ours: ${values.tcp ? "TCP only (MONARCH_COMM_SHM=0): small-input exchange, else Gloo's ring" : "shared memory"}`)
  if (torch.ok) console.log(`torch ${torch.version} Gloo from ${PYTHON}, taking turns with ours`)
  else console.log(`torch columns left empty: ${PYTHON} has no torch with Gloo (${torch.reason})`)

  const sides = await Promise.all([
    Side.start("ours", world, (rank, port) => [process.execPath, import.meta.path, "rank", String(rank), String(world), String(port), cases], values.tcp ? { MONARCH_COMM_SHM: "0" } : {}),
    ...(torch.ok ? [Side.start("torch", world, (rank, port) => [PYTHON, PEER, String(rank), String(world), String(port), cases], { GLOO_SOCKET_IFNAME: "lo", OMP_NUM_THREADS: "1", PYTHONUNBUFFERED: "1" })] : []),
  ])
  const results = sides.map(() => CASES.map((): RunResult[][] => []))
  for (let run = 0; run < warmup + runs; run++) {
    for (let c = 0; c < CASES.length; c++) {
      // Alternate who goes first, so neither always runs right after the other.
      const order = sides.map((_, s) => s)
      if (run % 2 === 1) order.reverse()
      for (const s of order) {
        const got = await sides[s]!.run(c)
        if (run >= warmup) results[s]![c]!.push(got)
      }
    }
  }
  await Promise.all(sides.map((s) => s.stop()))
  const [ours, theirs] = results.map((perCase) => perCase.map((r, c) => summarize(CASES[c]!, world, r)))
  printTable(world, runs, ours!, theirs)
}

if (process.argv[2] === "rank") {
  const [rank, world, port, cases] = process.argv.slice(3)
  await runRank(Number(rank), Number(world), Number(port), JSON.parse(cases!) as Case[])
} else {
  await main()
}
