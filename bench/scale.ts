/**
 * One controller driving many ranks: a real Controller.attach (its listener, the handshake with
 * the job token, the core and graph) and simulated workers (bench/simWorkers.ts: one socket per
 * rank, the real wire, nothing computed) in processes of their own, up to SIM_RANKS_PER_PROCESS
 * ranks each. Each world size runs in a fresh controller process (so its memory is its own),
 * which measures:
 *
 * - attach: from starting the simulated processes until every rank is admitted, and how many
 *   handshakes the listener cut off before admitting them (it keeps a world's, at least
 *   MAX_PENDING_CONNECTIONS, half-open connections; a worker cut off retries with backoff).
 * - controller CPU per op: OPS typed ops (x.add_(1), a synchronous burst) on the whole mesh then a
 *   fetchAll, CPU of the controller process over the round divided by OPS (medians over ROUNDS),
 *   and of it the issuing loop alone; the same on a sub-mesh of 8 ranks.
 * - memory: RSS and JS heap (after a full GC) once attached, less before, per rank.
 * - time to a fetch (issue -> value) on a quiet mesh: from one rank, from every rank, and of an
 *   all_reduce's result over the whole mesh.
 * - loss: a rank's socket closes (sim:close) while a fetchAll waits on it: from the close (the
 *   simulated process's clock) to the fetch failing with WorkerLost naming it.
 * - hang: a rank stops (sim:stall) in a whole-mesh command: from issue to onHang, against
 *   hangAfterMs (HANG_AFTER_MS; the controller checks once a second).
 * - with --sections, a second table: where a whole-mesh round's time goes, each part's share of
 *   the round's wall time (timing wrappers around the methods that do each part; they add their
 *   own clock reads).
 *
 *   bun run bench/scale.ts [--quick] [--worlds 16,64,256,1024] [--ops N] [--rounds R] [--sections] [--profile DIR]
 *
 * --quick: worlds 16 and 64, fewer ops. --profile DIR: the controller processes run under Bun's
 * sampling profiler, a markdown profile each into DIR.
 */
import { Effect } from "effect"
import { randomBytes } from "node:crypto"
import { Controller, type RemoteTensor } from "../src/controller/index.ts"
import { Core } from "../src/controller/core.ts"
import { Graph } from "../src/controller/graph.ts"
import { load, median, selfCpu } from "./cpu.ts"
import { now } from "./simWorkers.ts"

const args = process.argv.slice(2)
const flag = (name: string) => (args.includes(name) ? args[args.indexOf(name) + 1] : undefined)
const QUICK = args.includes("--quick")
const WORLDS = (flag("--worlds") ?? (QUICK ? "16,64" : "16,64,256,1024")).split(",").map(Number)
const OPS = Number(flag("--ops") ?? (QUICK ? 1000 : 4000))
const ROUNDS = Number(flag("--rounds") ?? (QUICK ? 3 : 5))
const SECTIONS = args.includes("--sections")
const PROFILE = flag("--profile")
const ONE = flag("--one")
const HANG_AFTER_MS = 1000
const SIM_RANKS_PER_PROCESS = 256
const SUB = 8
const SIM = new URL("./simWorkers.ts", import.meta.url).pathname

interface Row {
  readonly world: number
  readonly attachMs: number
  readonly cutOff: number
  readonly meshUs: number
  readonly meshIssueUs: number
  readonly subUs: number
  readonly rssKiB: number
  readonly heapKiB: number
  readonly fetchOneMs: number
  readonly fetchAllMs: number
  readonly fetchReducedMs: number
  readonly lossMs: number
  readonly lostRank: number | undefined
  readonly hangMs: number
  readonly hangBehind: ReadonlyArray<number>
  /** Hang reports of ordinary commands (outstanding past hangAfterMs only because the host was slow). */
  readonly otherHangs: number
  readonly parts: Record<string, number>
}

/**
 * The parts timed with --sections: those that run once per op or per batch without resuming the
 * program (a fetch's completion runs the program's next steps inside onMessage, so it is not
 * timed; the CPU profile, --profile, shows the reading and decoding of the ranks' frames).
 */
const PARTS = {
  "Graph.add (per op)": [Graph.prototype, "add"],
  "Core.flush (batches out: a frame per rank)": [Core.prototype, "flush"],
  "of it, Core.encodeBatch (once per batch)": [Core.prototype, "encodeBatch"],
  "Graph.advance (each rank's Status)": [Graph.prototype, "advance"],
} as const
const spent = new Map<string, number>()
const wrapParts = () => {
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
}

/** A port nothing listens on now (the controller binds it next). */
const freePort = (): number => {
  const l = Bun.listen({ hostname: "127.0.0.1", port: 0, socket: { data() {} } })
  const port = l.port
  l.stop(true)
  return port
}

/** Lines of a child's stdout, each to `onLine`. */
const readLines = async (stream: ReadableStream<Uint8Array>, onLine: (line: string) => void) => {
  const decoder = new TextDecoder()
  let rest = ""
  for await (const chunk of stream) {
    rest += decoder.decode(chunk, { stream: true })
    const lines = rest.split("\n")
    rest = lines.pop()!
    for (const l of lines) onLine(l)
  }
}

/** One world in this process: the controller, its simulated ranks in child processes. */
const one = async (world: number): Promise<Row> => {
  Bun.gc(true)
  const before = process.memoryUsage()
  const token = randomBytes(16).toString("hex")
  const address = `127.0.0.1:${freePort()}`
  const closedAt = new Map<number, number>()
  const hangs: Array<{ at: number; behind: ReadonlyArray<number> }> = []
  let admittedProcs = 0, cutOff = 0
  const procs: Bun.Subprocess[] = []
  let startedAt = 0
  // The listener binds as the layer starts; the simulated processes take longer than that to boot.
  setTimeout(() => {
    startedAt = now()
    for (let first = 0; first < world; first += SIM_RANKS_PER_PROCESS) {
      const p = Bun.spawn([process.execPath, SIM, "--address", address, "--world", String(world), "--ranks", `${first}:${Math.min(world, first + SIM_RANKS_PER_PROCESS)}`], {
        env: { ...process.env, MONARCH_TOKEN: token, BUN_OPTIONS: "" }, stdout: "pipe", stderr: "inherit",
      })
      procs.push(p)
      void readLines(p.stdout, (line) => {
        const [what, a, b] = line.split(" ")
        if (what === "admitted") (admittedProcs++, (cutOff += Number(a)))
        if (what === "closed") closedAt.set(Number(a), Number(b))
      })
    }
  }, 20)
  const layer = Controller.attach({ world, listen: address, token, hangAfterMs: HANG_AFTER_MS, onHang: (r) => hangs.push({ at: now(), behind: r.behind }), onProblem: () => {}, startTimeoutMs: 120_000 })
  try {
    return await Effect.runPromise(Effect.gen(function* () {
      const ctl = yield* Controller
      const attachMs = now() - startedAt
      const mesh = yield* ctl.mesh({ x: world })
      const sub = yield* (yield* ctl.mesh({ dp: world / SUB, tp: SUB })).slice({ dp: 0 })
      const x = yield* mesh.call("ops.full", [[1], 0])
      const y = yield* sub.call("ops.full", [[1], 0])
      yield* mesh.fetchAll(x)
      while (admittedProcs < procs.length) yield* Effect.sleep("10 millis")
      Bun.gc(true)
      const attached = process.memoryUsage()
      /** Controller CPU per op over a round of OPS ops then a fetchAll, and of it the issuing. */
      const round = (m: typeof mesh, t: RemoteTensor) => Effect.gen(function* () {
        const c0 = selfCpu()
        for (let i = 0; i < OPS; i++) t.add_(1)
        const c1 = selfCpu()
        yield* m.fetchAll(t)
        return { all: ((selfCpu() - c0) / OPS) * 1e6, issue: ((c1 - c0) / OPS) * 1e6 }
      })
      yield* round(mesh, x) // warm-up
      const meshRounds = [], subRounds = []
      for (let r = 0; r < ROUNDS; r++) {
        meshRounds.push(yield* round(mesh, x))
        subRounds.push(yield* round(sub, y))
      }
      const parts: Record<string, number> = {}
      if (SECTIONS) {
        wrapParts()
        // Each part as a share of the round's wall time (the host is shared: a part's wall time
        // includes time the process waited for a core, as the round's does).
        const shares: Array<Map<string, number>> = []
        for (let r = 0; r < ROUNDS; r++) {
          for (const k of spent.keys()) spent.set(k, 0)
          const t0 = performance.now()
          yield* round(mesh, x)
          const wall = performance.now() - t0
          shares.push(new Map([...spent].map(([k, ms]) => [k, (100 * ms) / wall])))
        }
        for (const k of spent.keys()) parts[k] = median(shares.map((s) => s.get(k)!))
      }
      const timed = <A, E>(e: Effect.Effect<A, E>) => Effect.gen(function* () {
        const t0 = performance.now()
        yield* e
        return performance.now() - t0
      })
      const fetchOne: number[] = [], fetchAll: number[] = [], fetchReduced: number[] = []
      for (let i = 0; i < 10; i++) {
        fetchOne.push(yield* timed(mesh.fetch(x, world - 1)))
        fetchAll.push(yield* timed(mesh.fetchAll(x)))
        fetchReduced.push(yield* timed(Effect.flatMap(mesh.reduce(x, "x", "sum"), (s) => mesh.fetch(s, 0))))
      }
      // The last rank's socket closes on receipt of this batch, which holds the fetch it fails.
      const lost = world - 1
      yield* mesh.run("sim:close", [lost])
      const failure = yield* Effect.flip(mesh.fetchAll(x))
      const failedAt = now()
      while (!closedAt.has(lost)) yield* Effect.sleep("5 millis")
      const lossMs = failedAt - closedAt.get(lost)!
      // Rank 1 stops inside this command.
      const stalledAt = now()
      yield* mesh.run("sim:stall", [1])
      let seen = 0, hang: (typeof hangs)[number] | undefined
      while (hang === undefined) {
        yield* Effect.sleep("5 millis")
        for (; seen < hangs.length && hang === undefined; seen++) if (hangs[seen]!.at >= stalledAt && hangs[seen]!.behind.includes(1)) hang = hangs[seen]
      }
      return {
        world, attachMs, cutOff,
        meshUs: median(meshRounds.map((r) => r.all)), meshIssueUs: median(meshRounds.map((r) => r.issue)), subUs: median(subRounds.map((r) => r.all)),
        rssKiB: (attached.rss - before.rss) / 1024 / world, heapKiB: (attached.heapUsed - before.heapUsed) / 1024 / world,
        fetchOneMs: median(fetchOne), fetchAllMs: median(fetchAll), fetchReducedMs: median(fetchReduced),
        lossMs, lostRank: failure._tag === "WorkerLost" ? failure.rank : undefined,
        hangMs: hang.at - stalledAt, hangBehind: hang.behind, otherHangs: hangs.length - 1, parts,
      } satisfies Row
    }).pipe(Effect.provide(layer)))
  } finally {
    await Promise.race([Promise.all(procs.map((p) => p.exited)), Bun.sleep(5000)])
    for (const p of procs) p.kill("SIGKILL")
  }
}

if (ONE !== undefined) {
  console.log(`RESULT ${JSON.stringify(await one(Number(ONE)))}`)
  process.exit(0)
}

const f = (n: number, d = 1) => n.toFixed(d)
console.log(`bench/scale: one controller, simulated ranks (real wire and handshake, ${SIM_RANKS_PER_PROCESS} per process); ${OPS} typed ops per round, ${ROUNDS} rounds, medians; load ${load()}`)
console.log("")
console.log(`| ranks | attach ms (handshakes cut off) | ctl CPU us/op, whole mesh | of it, issuing | us/op, ${SUB}-rank sub-mesh | RSS KiB/rank | heap KiB/rank | fetch 1 rank ms | fetchAll ms | fetch all_reduce ms | close -> WorkerLost ms | stall -> hang report ms, hangAfterMs ${HANG_AFTER_MS} |`)
console.log("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
const rows: Row[] = []
for (const world of WORLDS) {
  const child = Bun.spawn([process.execPath, import.meta.path, "--one", String(world), "--ops", String(OPS), "--rounds", String(ROUNDS), ...(SECTIONS ? ["--sections"] : [])], {
    env: { ...process.env, ...(PROFILE === undefined ? {} : { BUN_OPTIONS: `--cpu-prof-md --cpu-prof-dir=${PROFILE}` }) }, stdout: "pipe", stderr: "inherit",
  })
  let row: Row | undefined
  await readLines(child.stdout, (line) => {
    if (line.startsWith("RESULT ")) row = JSON.parse(line.slice(7))
  })
  if ((await child.exited) !== 0 || row === undefined) throw new Error(`world ${world}: the controller process failed`)
  const r: Row = row
  rows.push(r)
  const lost = r.lostRank === world - 1 ? "" : ` (WorkerLost named ${r.lostRank}, not ${world - 1})`
  const hung = `${r.hangBehind.length === 1 ? "" : `, ${r.hangBehind.length} ranks behind`}${r.otherHangs === 0 ? "" : `; ${r.otherHangs} other reports`}`
  console.log(`| ${world} | ${f(r.attachMs, 0)} (${r.cutOff}) | ${f(r.meshUs, 2)} | ${f(r.meshIssueUs, 2)} | ${f(r.subUs, 2)} | ${f(r.rssKiB)} | ${f(r.heapKiB)} | ${f(r.fetchOneMs, 2)} | ${f(r.fetchAllMs, 2)} | ${f(r.fetchReducedMs, 2)} | ${f(r.lossMs, 2)}${lost} | ${f(r.hangMs, 0)}${hung} |`)
}
if (SECTIONS) {
  console.log("")
  console.log(`| % of a whole-mesh round's wall time, by part | ${rows.map((r) => `${r.world} ranks`).join(" | ")} |`)
  console.log(`|---|${rows.map(() => "---:").join("|")}|`)
  for (const part of Object.keys(rows[0]!.parts)) console.log(`| ${part} | ${rows.map((r) => f(r.parts[part]!, 2)).join(" | ")} |`)
}
