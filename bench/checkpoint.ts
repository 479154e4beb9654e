/**
 * Checkpoint speed on a mesh of 2 CPU workers (dp=2, every tensor sharded over dp, so each rank
 * writes its own file), against a plain sequential write of the same bytes with one writeSync
 * and fsync per file, and a plain read of them, in this process, in the same run.
 *
 *   node_modules/.bin/bun run bench/checkpoint.ts [--mib N] [--runs N] [--dir PATH]
 *
 * Rows: save, per worker, GB/s = its file's bytes over the time its background write and fsync
 * took (what the worker reports, the two writing at once), and end to end: both files' bytes over
 * save called to `durable` (all files synced, the version published) against the peer writing
 * the same two files one after the other; load: both files' bytes over load's time (each rank
 * reads and checks its file, in parallel) against a plain read of them into a buffer touched
 * before, and into fresh memory (readFileSync: a load's tensors are new memory too); ratios of
 * ours to the plain ones (goal >= 0.8); both loads again cold: every file's pages dropped from the page
 * cache first (posix_fadvise DONTNEED on each file, after its fsync: only these files, not the
 * machine's whole cache as drop_caches would). Then a training step (a few matmuls and a fetch) on its own and while
 * a save of the state is written in the background (goal <= 1.2x). Medians over the runs.
 */
import { Effect, Fiber } from "effect"
import { dlopen, FFIType } from "bun:ffi"
import { closeSync, fsyncSync, mkdirSync, mkdtempSync, openSync, readdirSync, readFileSync, readSync, rmSync, statSync, writeSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { parseArgs } from "node:util"
import { Controller, eager, load, opsOn, save, shard, type Mesh, type RemoteTensor } from "../src/controller/index.ts"

const { values: args } = parseArgs({ options: { mib: { type: "string", default: "256" }, runs: { type: "string", default: "5" }, dir: { type: "string" } } })
const MIB = Number(args.mib), RUNS = Number(args.runs)
const ROOT = args.dir ?? mkdtempSync(join(tmpdir(), "monarch-bench-ckpt-"))
mkdirSync(ROOT, { recursive: true })
const TENSORS = 8
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor((xs.length - 1) / 2)]!
const gbps = (bytes: number, ms: number) => bytes / ms / 1e6

/** The plain peers: `data` written to a file with writeSync and an fsync, or read back with readSync; ms. */
const plain = (path: string, data: Uint8Array, write: boolean): number => {
  const t = performance.now()
  const fd = openSync(path, write ? "w" : "r")
  let done = 0
  while (done < data.length) done += write ? writeSync(fd, data, done, data.length - done, done) : readSync(fd, data, done, data.length - done, done)
  if (write) fsyncSync(fd)
  closeSync(fd)
  return performance.now() - t
}

const libc = dlopen("libc.so.6", { posix_fadvise: { args: [FFIType.i32, FFIType.i64, FFIType.i64, FFIType.i32], returns: FFIType.i32 } }).symbols
const POSIX_FADV_DONTNEED = 4

/** Drops the page cache's pages of every file under `path` (synced already, so none is dirty). */
const evict = (path: string): void => {
  if (statSync(path).isDirectory()) return readdirSync(path).forEach((f) => evict(join(path, f)))
  const fd = openSync(path, "r")
  const rc = libc.posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED)
  closeSync(fd)
  if (rc !== 0) throw new Error(`posix_fadvise(${path}) failed: ${rc}`)
}

const program = Effect.gen(function* () {
  const mesh: Mesh = yield* (yield* Controller).mesh({ dp: 2 })
  const on = opsOn(mesh)
  const n = (MIB << 20) / 4 / TENSORS
  const state = yield* eager(() => ({ params: Array.from({ length: TENSORS }, (_, i) => on.full([n], i + 0.5).place({ dp: shard(0) })), step: 1 }))
  yield* mesh.fetch(state.params[0]!)
  const save1 = [] as number[], saveEnd = [] as number[], load1 = [] as number[], plainW = [] as number[], plainR = [] as number[], plainFresh = [] as number[], loadCold = [] as number[], plainCold = [] as number[]
  let perRank = 0
  const buffer = new Uint8Array(MIB << 20).fill(7)
  for (let run = 0; run < RUNS; run++) {
    // Ours and the peer take turns, so load from elsewhere falls on both alike.
    const t = performance.now()
    const saved = yield* Effect.flatMap(save(mesh, state, "bench", { keep: 1 }), (p) => p.durable)
    saveEnd.push(performance.now() - t)
    perRank = saved.writes[0]!.bytes
    save1.push(median(saved.writes.map((w) => gbps(w.bytes, w.ms))))
    const l = performance.now()
    const loaded = yield* load(mesh, "bench")
    load1.push(gbps(2 * perRank, performance.now() - l))
    for (const t of (loaded.state as { params: RemoteTensor[] }).params) t.release()
    const files = [0, 1].map((r) => join(ROOT, `plain-${r}.bin`))
    // The peer writes (then reads) both ranks' bytes, one file after the other.
    const w = files.map((f) => plain(f, buffer.subarray(0, perRank), true))
    plainW.push(gbps(2 * perRank, w[0]! + w[1]!))
    const r = files.map((f) => plain(f, buffer.subarray(0, perRank), false))
    plainR.push(gbps(2 * perRank, r[0]! + r[1]!))
    // A load makes new tensors: the same read into memory of its own, never touched before.
    const f0 = performance.now()
    for (const f of files) readFileSync(f)
    plainFresh.push(gbps(2 * perRank, performance.now() - f0))
    // Cold: the same loads once every file's pages are out of the page cache.
    evict(join(ROOT, "bench"))
    const c = performance.now()
    const cold = yield* load(mesh, "bench")
    loadCold.push(gbps(2 * perRank, performance.now() - c))
    for (const t of (cold.state as { params: RemoteTensor[] }).params) t.release()
    files.forEach(evict)
    const rc = files.map((f) => plain(f, buffer.subarray(0, perRank), false))
    plainCold.push(gbps(2 * perRank, rc[0]! + rc[1]!))
  }

  // A training step: matmuls on 256x256 blocks and a fetch, alone and during a background save.
  const x = yield* eager(() => on.randn([256, 256], { seed: 1 }))
  const step = Effect.gen(function* () {
    const t = performance.now()
    const y = yield* eager(() => {
      let y = x
      for (let i = 0; i < 8; i++) y = y.matmul(x).tanh()
      return y.sum()
    })
    yield* mesh.fetch(y)
    return performance.now() - t
  })
  for (let i = 0; i < 3; i++) yield* step
  const alone: number[] = [], during: number[] = []
  for (let run = 0; run < RUNS; run++) {
    for (let i = 0; i < 5; i++) alone.push(yield* step)
    const pending = yield* save(mesh, state, "bench", { keep: 1 })
    let done = false
    const fiber = yield* Effect.forkChild(Effect.tap(pending.durable, () => Effect.sync(() => (done = true))))
    // Steps while the files are written; the first also waits for the snapshot copies.
    while (!done) during.push(yield* step)
    yield* Fiber.join(fiber)
  }
  const saveAll = gbps(2 * perRank, median(saveEnd))
  const rows = [
    ["save: each worker's background write + fsync, both at once", `${median(save1).toFixed(2)} GB/s per worker`, "", ""],
    ["save: call to durable (2 files synced, version published), both workers' bytes", `${saveAll.toFixed(2)} GB/s (${(saveAll / 2).toFixed(2)} per worker)`, `${median(plainW).toFixed(2)} GB/s`, `${(saveAll / median(plainW)).toFixed(2)}x`],
    ["load: read, hash check and to tensor on both workers (page cache warm)", `${median(load1).toFixed(2)} GB/s (${(median(load1) / 2).toFixed(2)} per worker)`, `${median(plainR).toFixed(2)} GB/s (plain read)`, `${(median(load1) / median(plainR)).toFixed(2)}x`],
    ["load (the same), against a plain read into fresh memory (readFileSync: a buffer of its own, as a load's new tensors are)", `${median(load1).toFixed(2)} GB/s`, `${median(plainFresh).toFixed(2)} GB/s (readFileSync)`, `${(median(load1) / median(plainFresh)).toFixed(2)}x`],
    ["load, page cache cold (posix_fadvise DONTNEED on each file first)", `${median(loadCold).toFixed(2)} GB/s (${(median(loadCold) / 2).toFixed(2)} per worker)`, `${median(plainCold).toFixed(2)} GB/s (plain read, cold)`, `${(median(loadCold) / median(plainCold)).toFixed(2)}x`],
  ]
  console.log(`checkpoint of ${MIB} MiB per worker (${TENSORS} tensors), 2 workers (dp=2), ${RUNS} runs, in ${ROOT}\n`)
  console.log("| case | ours | plain sequential peer | ours / peer |\n|---|---:|---:|---:|")
  for (const r of rows) console.log(`| ${r.join(" | ")} |`)
  console.log(`\n| training step | median | ratio |\n|---|---:|---:|`)
  console.log(`| alone | ${median(alone).toFixed(1)} ms | 1.00 |`)
  console.log(`| during a background save (${during.length} steps) | ${median(during).toFixed(1)} ms | ${(median(during) / median(alone)).toFixed(2)}x |`)
})

await Effect.runPromise(program.pipe(Effect.provide(Controller.local({ world: 2, checkpoints: ROOT }))))
if (args.dir === undefined) rmSync(ROOT, { recursive: true, force: true })
