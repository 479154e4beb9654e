/**
 * The controller's cost per op: mesh-wide ops on a one-element tensor through the
 * public API (mesh.run / mesh.call), N of them then one fetch, at world 1 and 4, beside torch
 * eager running the same op in the same run (Debian's torch 1.13 at /usr/bin/python3; at world
 * 4, four torch processes each running it at once on the same cores). Rounds alternate: ours,
 * then torch's, per case. Each op goes through mesh.run / mesh.call (an Effect per op) and
 * through the typed surface (x.add_(1), synchronous: a round's ops as one burst of plain code).
 *
 *   bun run bench/controller.ts [--ops N] [--rounds R] [--worlds 1,4] [--no-sites] [--compare-flush] [--sections] [--worker-profile DIR] [--alone]
 *
 * --compare-flush: also the burst cases with the batch sent only at the next tick (flushEvery
 * Infinity), in the same rounds.
 * --alone: only the controller, no workers (links that take each frame and drop it; a Status
 * after each round settles its commands): its CPU per op for the burst cases, with call sites
 * captured and not, and with --sections the parts (each its share of the round's wall time,
 * times the CPU per op). Load on the host affects it least.
 * --sections: also where the controller's time per op goes, from timing wrappers around the
 * methods that do each part (their own clock reads, ~0.05 us a call, are counted in); a second
 * table. --worker-profile DIR: the workers run under Bun's sampling profiler, writing a
 * markdown profile each into DIR on exit.
 *
 * Prints, per case, medians over the rounds: end-to-end us per op (issue to fetched), the
 * controller's CPU us per op (this process; and of it, until the last op was issued), the
 * workers' CPU us per op (per worker, from /proc/<pid>/stat), commands per frame sent,
 * torch's us per op, and ours / torch's.
 */
import { Effect, type Layer, ManagedRuntime } from "effect"
import { Controller, Mesh, type RemoteTensor } from "../src/controller/index.ts"
import { Core, FLUSH_EVERY } from "../src/controller/core.ts"
import { Graph } from "../src/controller/graph.ts"
import { RemoteStream } from "../src/controller/handles.ts"
import { createMesh } from "../src/controller/mesh.ts"
import { opsOn } from "../src/controller/ops.ts"
import { NDSlice } from "../src/protocol/ndslice.ts"
import { cpuOf, load, median, selfCpu } from "./cpu.ts"

const args = process.argv.slice(2)
const flag = (name: string) => (args.includes(name) ? args[args.indexOf(name) + 1] : undefined)
const OPS = Number(flag("--ops") ?? 20_000)
const ROUNDS = Number(flag("--rounds") ?? 5)
const WORLDS = (flag("--worlds") ?? "1,4").split(",").map(Number)
const CAPTURE_SITES = !args.includes("--no-sites")
const SECTIONS = args.includes("--sections")
const WORKER_PROFILE = flag("--worker-profile")
const ALONE = args.includes("--alone")
const TORCH = "/usr/bin/python3"

/** The cases: our op on a handle, and torch's same op in Python. */
interface Case {
  readonly name: string
  readonly torch: "inplace" | "fresh"
  /** Issues one op on `x` through the mesh as an Effect; returns the handle that holds the result. */
  readonly issue?: (mesh: Mesh, x: RemoteTensor) => Effect.Effect<RemoteTensor, unknown>
  /** Or: all n ops of a round as plain code, one synchronous burst; returns the handle to fetch. */
  readonly burst?: (x: RemoteTensor, n: number) => RemoteTensor
  /** The controller's flushEvery for the round (default FLUSH_EVERY). */
  readonly flushEvery?: number
}

const CASES: ReadonlyArray<Case> = [
  { name: "add_ in place (x.add_(1))", torch: "inplace", issue: (mesh, x) => Effect.as(mesh.run("ops.add_", [x, 1], {}, { mutates: [x] }), x) },
  { name: "add, fresh result (y = x.add(1))", torch: "fresh", issue: (mesh, x) => mesh.call("ops.add", [x, 1]) },
  // The typed surface as model code calls it: plain synchronous op calls, no Effect per op.
  { name: "typed x.add_(1), a synchronous burst", torch: "inplace", burst: (x, n) => {
    for (let i = 0; i < n; i++) x.add_(1)
    return x
  } },
  { name: "typed y = x.add(1), a synchronous burst", torch: "fresh", burst: (x, n) => {
    for (let i = 0; i < n; i++) x.add(1)
    return x
  } },
]
/** With --compare-flush, the burst cases again, the batch going out only at the next tick (as before the flush during a burst). */
const AT_TICK: ReadonlyArray<Case> = CASES.filter((c) => c.burst).map((c) => ({ ...c, name: `${c.name}, sent at the tick only`, flushEvery: Infinity }))
const ALL_CASES: ReadonlyArray<Case> = [
  ...CASES,
  ...(args.includes("--compare-flush") ? AT_TICK : []),
]

/** torch's side: each process imports torch once, then per "go" line times N ops of a case. */
const TORCH_SCRIPT = `
import sys, time, torch
torch.set_num_threads(1)
x = torch.ones(1)
print("ready", flush=True)
for line in sys.stdin:
    case, n = line.split(); n = int(n)
    if case == "inplace":
        for _ in range(1000): x.add_(1)
        t = time.perf_counter()
        for _ in range(n): x.add_(1)
        dt = time.perf_counter() - t
    else:
        for _ in range(1000): y = x.add(1)
        t = time.perf_counter()
        for _ in range(n): y = x.add(1)
        dt = time.perf_counter() - t
    print(dt, flush=True)
`

class TorchPeers {
  private readonly procs: Array<Bun.Subprocess<"pipe", "pipe", "inherit">>
  /** Per process, the lines it printed not read yet, and a reader waiting for the next. */
  private readonly lines: string[][]
  private readonly waiting: Array<((line: string) => void) | undefined>
  constructor(count: number) {
    this.procs = Array.from({ length: count }, () => Bun.spawn([TORCH, "-c", TORCH_SCRIPT], { stdin: "pipe", stdout: "pipe", stderr: "inherit" }))
    this.lines = this.procs.map(() => [])
    this.waiting = this.procs.map(() => undefined)
    this.procs.forEach((p, i) => void this.pump(p, i))
  }
  private async pump(p: Bun.Subprocess<"pipe", "pipe", "inherit">, i: number): Promise<void> {
    let text = ""
    for await (const chunk of p.stdout) {
      text += new TextDecoder().decode(chunk)
      for (let nl = text.indexOf("\n"); nl >= 0; nl = text.indexOf("\n")) {
        const line = text.slice(0, nl)
        text = text.slice(nl + 1)
        const w = this.waiting[i]
        if (w) (this.waiting[i] = undefined), w(line)
        else this.lines[i]!.push(line)
      }
    }
    this.waiting[i]?.(`torch process ${i} ended (is torch at ${TORCH}?)`)
  }
  private line(i: number): Promise<string> {
    const l = this.lines[i]!.shift()
    return l !== undefined ? Promise.resolve(l) : new Promise((resolve) => (this.waiting[i] = resolve))
  }
  async ready(): Promise<void> {
    await Promise.all(this.procs.map((_, i) => this.line(i)))
  }
  /** All processes run n ops at once; the slowest one's seconds per op (they share the cores). */
  async perOp(c: Case["torch"], n: number): Promise<number> {
    for (const p of this.procs) p.stdin.write(`${c} ${n}\n`), p.stdin.flush()
    const secs = await Promise.all(this.procs.map((_, i) => this.line(i).then((l) => {
      if (!Number.isFinite(Number(l))) throw new Error(l)
      return Number(l)
    })))
    return Math.max(...secs) / n
  }
  stop(): void {
    for (const p of this.procs) p.stdin.end(), p.kill()
  }
}

/**
 * The parts of the controller's work, each the method that does it (nested: an op call's
 * site, rule and graph node are inside it; a flush's encoding inside the flush, whose rest is
 * the socket write). Seconds spent in each since the last take().
 */
const PARTS = {
  "call site (Core.site)": [Core.prototype, "site"],
  "metadata rule (Mesh.resultMetas)": [Mesh.prototype, "resultMetas"],
  "graph node (Graph.add)": [Graph.prototype, "add"],
  "worker reports: Status, settling (Core.onMessage)": [Core.prototype, "onMessage"],
  "GC'd handles' releases (Core.collected)": [Core.prototype, "collected"],
  "flush (Core.flush)": [Core.prototype, "flush"],
  "of it, encoding (Core.encodeBatch)": [Core.prototype, "encodeBatch"],
} as const
const spent = new Map<string, number>()
if (SECTIONS)
  for (const [name, [proto, method]] of Object.entries(PARTS)) {
    const target = proto as unknown as Record<string, (...a: unknown[]) => unknown>
    const inner = target[method]!
    spent.set(name, 0)
    target[method] = function (this: unknown, ...a: unknown[]) {
      const t = performance.now()
      try {
        return inner.apply(this, a)
      } finally {
        spent.set(name, spent.get(name)! + performance.now() - t)
      }
    }
  }
const takeParts = (): Map<string, number> => {
  const out = new Map([...spent].map(([k, ms]) => [k, ms / 1000]))
  for (const k of spent.keys()) spent.set(k, 0)
  return out
}

interface Sample {
  readonly e2e: number
  readonly controllerCpu: number
  /** The controller's CPU until the last op was issued (before the fetch's wait). */
  readonly issueCpu: number
  readonly workerCpu: number
  readonly perFrame: number
  readonly torch: number
  /** Per part (PARTS), seconds per op; and the synchronous issuing loop's wall time per op. */
  readonly parts: Map<string, number>
}

const runWorld = (world: number, torch: TorchPeers) =>
  Effect.gen(function* () {
    const ctl = yield* Controller
    const mesh = yield* ctl.mesh({ all: world })
    const pids = ctl.workers().map((w) => w.pid)
    const samples = new Map<string, Sample[]>(ALL_CASES.map((c) => [c.name, []]))
    const round = (c: Case, n: number) =>
      Effect.gen(function* () {
        let x = yield* mesh.call("ops.ones", [[1]])
        yield* mesh.fetch(x)
        ctl.core.flushEvery = c.flushEvery ?? FLUSH_EVERY
        const sent0 = { ...ctl.core.sent }, w0 = pids.map(cpuOf), c0 = selfCpu()
        takeParts()
        const t0 = performance.now()
        if (c.burst) x = c.burst(x, n)
        else
          for (let i = 0; i < n; i++) {
            const y = yield* c.issue!(mesh, x)
            if (c.torch === "inplace") x = y
          }
        const issuedAt = performance.now(), issued = selfCpu()
        yield* mesh.fetch(x)
        const t1 = performance.now(), c1 = selfCpu(), w1 = pids.map(cpuOf)
        const frames = ctl.core.sent.frames - sent0.frames, commands = ctl.core.sent.commands - sent0.commands
        const workerCpu = w1.reduce((s, w, r) => s + w - w0[r]!, 0) / world
        const parts = new Map([...takeParts()].map(([k, secs]) => [k, secs / n]))
        parts.set("issuing loop, wall (op calls and what ran between them)", (issuedAt - t0) / 1000 / n)
        return { e2e: (t1 - t0) / 1000 / n, controllerCpu: (c1 - c0) / n, issueCpu: (issued - c0) / n, workerCpu: workerCpu / n, perFrame: commands / Math.max(frames, 1), parts }
      })
    for (const c of ALL_CASES) yield* round(c, Math.min(OPS, 2000)) // warm-up
    for (let r = 0; r < ROUNDS; r++) {
      for (const c of ALL_CASES) {
        const ours = yield* round(c, OPS)
        const t = yield* Effect.promise(() => torch.perOp(c.torch, OPS))
        samples.get(c.name)!.push({ ...ours, torch: t })
      }
    }
    return samples
  })

const us = (s: number) => (s * 1e6).toFixed(2)

/** --alone: the burst cases on a Core with no workers; per (world, case, sites): CPU us/op and parts, medians over the rounds. */
const alone = async (): Promise<void> => {
  console.log(`bench/controller --alone: the controller only, ${OPS} ops per round, ${ROUNDS} rounds, medians; load ${load()}`)
  console.log("")
  const rows: Array<{ head: string; cpu: number; parts: Map<string, number> }> = []
  for (const world of WORLDS)
    for (const sites of [true, false])
      for (const c of CASES.filter((c) => c.burst)) {
        const core = new Core({ world, captureSites: sites })
        for (let rank = 0; rank < world; rank++)
          core.admit({ hello: { _tag: "WorkerHello", rank, world, pid: 0, proof: new Uint8Array(32), device: "cpu" }, host: "local", send: () => true, sendEncoded: () => true, sendRawForTestsOnly: () => {}, close: () => {} })
        const mesh = createMesh(core, ["all"], NDSlice.contiguous([world]), new RemoteStream(core, core.newRef()))
        let x: RemoteTensor = opsOn(mesh).ones([1])
        const cpus: number[] = [], parts: Array<Map<string, number>> = []
        for (let r = -2; r < ROUNDS; r++) { // two warm-up rounds
          takeParts()
          const c0 = selfCpu(), t0 = performance.now()
          x = c.burst!(x, OPS)
          core.flush()
          const next = core.graph.passed(0) + core.inFlight(mesh.ranks) // the first ident not issued yet
          for (let rank = 0; rank < world; rank++) core.onMessage(rank, { _tag: "Status", firstUncompletedIdent: next })
          await Bun.sleep(0) // the tick the program would yield at; GC'd handles' releases run around it
          if (r < 0) continue
          const cpu = selfCpu() - c0, wall = (performance.now() - t0) / 1000
          cpus.push(cpu / OPS)
          // The wrappers read the wall clock; this process is busy all round, so each part's
          // share of the round's wall time is its share of the CPU (time the host gave other
          // processes falls into the parts as often as it would into anything else).
          parts.push(new Map([...takeParts()].map(([k, secs]) => [k, (secs / wall) * cpu / OPS])))
        }
        rows.push({ head: `w${world} ${c.name}, sites ${sites ? "on" : "off"}`, cpu: median(cpus), parts: new Map([...parts[0]!.keys()].map((k) => [k, median(parts.map((p) => p.get(k)!))])) })
      }
  console.log("| world, op, call sites | controller CPU us/op |")
  console.log("|---|---:|")
  for (const r of rows) console.log(`| ${r.head} | ${us(r.cpu)} |`)
  if (!SECTIONS) return
  console.log("")
  console.log(`| controller us/op, by part | ${rows.map((r) => r.head).join(" | ")} |`)
  console.log(`|---|${rows.map(() => "---:").join("|")}|`)
  for (const part of rows[0]!.parts.keys()) console.log(`| ${part} | ${rows.map((r) => us(r.parts.get(part)!)).join(" | ")} |`)
}
if (ALONE) {
  await alone()
  process.exit(0)
}

console.log(`bench/controller: ${OPS} ops then a fetch per round, ${ROUNDS} rounds, medians; call sites ${CAPTURE_SITES ? "captured" : "off"}; load ${load()}`)
console.log("")
console.log("| world | op | end to end us/op | controller CPU us/op | of it, issuing | worker CPU us/op | commands/frame | torch us/op | ours / torch |")
console.log("|---:|---|---:|---:|---:|---:|---:|---:|---:|")
const all = new Map<number, Map<string, Sample[]>>()
for (const world of WORLDS) {
  const torch = new TorchPeers(world)
  await torch.ready()
  const env = WORKER_PROFILE === undefined ? undefined : { BUN_OPTIONS: `--cpu-prof-md --cpu-prof-dir=${WORKER_PROFILE}` }
  const layer = Controller.local({ world, captureSites: CAPTURE_SITES, onWorkerLine: () => {}, ...(env ? { env } : {}) })
  const rt = ManagedRuntime.make(layer as Layer.Layer<Controller, unknown>)
  try {
    const samples = await rt.runPromise(runWorld(world, torch))
    all.set(world, samples)
    for (const [name, ss] of samples) {
      const e2e = median(ss.map((s) => s.e2e)), t = median(ss.map((s) => s.torch))
      const ratio = median(ss.map((s) => s.e2e / s.torch))
      console.log(`| ${world} | ${name} | ${us(e2e)} | ${us(median(ss.map((s) => s.controllerCpu)))} | ${us(median(ss.map((s) => s.issueCpu)))} | ${us(median(ss.map((s) => s.workerCpu)))} | ${median(ss.map((s) => s.perFrame)).toFixed(1)} | ${us(t)} | ${ratio.toFixed(2)}x |`)
    }
  } finally {
    await rt.dispose()
    torch.stop()
  }
}

if (SECTIONS) {
  // One column per (world, case): the median over the rounds of each part's us per op.
  const columns = [...all].flatMap(([world, samples]) => [...samples].map(([name, ss]) => ({ head: `w${world} ${name}`, ss })))
  console.log("")
  console.log(`| controller us/op, by part | ${columns.map((c) => c.head).join(" | ")} |`)
  console.log(`|---|${columns.map(() => "---:").join("|")}|`)
  for (const part of columns[0]!.ss[0]!.parts.keys())
    console.log(`| ${part} | ${columns.map((c) => us(median(c.ss.map((s) => s.parts.get(part)!)))).join(" | ")} |`)
}
