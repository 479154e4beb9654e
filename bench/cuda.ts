/**
 * The cuda backend against its peers, on the device it runs on (scripts/gpu/check.sh runs it
 * on the lent H200):
 *   elementwise  f32 and bf16 add in GB/s against a device-to-device copy of the same size
 *                measured in this run (goal: add >= 90% of copy), torch's add for context
 *   matmul       bf16 8192^3 in TFLOP/s against torch.mm in this run (goal >= 95%)
 *   allreduce    NCCL all_reduce at world size 1: latency and bandwidth
 *   alloc        tensor alloc + free cycles (MONARCH_CUDA_CACHE=0 turns the cache off)
 * Each row is the best of ROUNDS timed rounds after a warmup; `ok` counts the checks of the
 * row's results that passed. The torch peer runs in a python3 child (TORCH_PYTHON, if set; torch
 * must see a GPU).
 *
 *   bun run bench/cuda.ts [--only section,section] [--json file]
 *
 * Sections are functions in SECTIONS and print in one table; --json writes its rows (Row) for
 * scripts/gpu/summary.ts, which puts them beside the worker overhead and the store findings.
 */
import { writeFileSync } from "node:fs"
import { Comm } from "../ffi/comm.ts"
import { loadNative, type Native } from "../ffi/native.ts"
import * as ops from "../ffi/ops.ts"
import { Stream } from "../ffi/stream.ts"
import { Tensor } from "../ffi/tensor.ts"
import type { DType } from "../src/protocol/values.ts"

const ROUNDS = 5

export interface Row {
  readonly section: string
  readonly name: string
  readonly unit: string
  readonly ours: number
  /** The peer's figure in the same unit, when there is one. */
  readonly peer?: number
  readonly peerName?: string
  /** ours / peer must reach this (a fraction), when the row has a goal. */
  readonly goal?: number
  readonly ok: number
  readonly total: number
}

type Section = (native: Native) => Row[]

/** Best seconds per call of `body` over ROUNDS rounds of `calls` calls, after one warmup round. */
const timePerCall = (native: Native, calls: number, body: () => void): number => {
  const device = Stream.default(native)
  for (let i = 0; i < calls; i++) body()
  device.synchronize()
  let best = Infinity
  for (let r = 0; r < ROUNDS; r++) {
    const start = Bun.nanoseconds()
    for (let i = 0; i < calls; i++) body()
    device.synchronize()
    best = Math.min(best, (Bun.nanoseconds() - start) / 1e9 / calls)
  }
  return best
}

/** The min and max of a tensor, computed on the device and read back. */
const range = (native: Native, t: Tensor): [number, number] => {
  using lo = Tensor.empty(native, "f64", [])
  using hi = Tensor.empty(native, "f64", [])
  ops.reduce("min", lo, t, undefined)
  ops.reduce("max", hi, t, undefined)
  return [new Float64Array(lo.toHost().data.slice().buffer)[0]!, new Float64Array(hi.toHost().data.slice().buffer)[0]!]
}

// ---- the torch peer ---------------------------------------------------------------------------

interface TorchFigures {
  readonly matmulSeconds?: number
  readonly addSeconds?: number
  readonly version?: string
  readonly error?: string
}

const TORCH_PEER = `
import json, sys, time
try:
    import torch
    assert torch.cuda.is_available(), "torch sees no GPU"
    rounds = int(sys.argv[1]); n = int(sys.argv[2]); elems = int(sys.argv[3])
    def best(calls, body):
        for _ in range(calls): body()
        torch.cuda.synchronize()
        out = float("inf")
        for _ in range(rounds):
            t0 = time.perf_counter()
            for _ in range(calls): body()
            torch.cuda.synchronize()
            out = min(out, (time.perf_counter() - t0) / calls)
        return out
    a = torch.randn(n, n, dtype=torch.bfloat16, device="cuda"); b = torch.randn_like(a); c = torch.empty_like(a)
    mm = best(10, lambda: torch.mm(a, b, out=c))
    del a, b, c
    x = torch.full((elems,), 1.5, device="cuda"); y = torch.full((elems,), 2.25, device="cuda"); z = torch.empty_like(x)
    add = best(20, lambda: torch.add(x, y, out=z))
    print(json.dumps({"matmulSeconds": mm, "addSeconds": add, "version": f"torch {torch.__version__} cuda {torch.version.cuda} {torch.cuda.get_device_name()}"}))
except Exception as e:
    print(json.dumps({"error": f"{type(e).__name__}: {e}"}))
`

let torchCache: TorchFigures | undefined
const torch = (): TorchFigures => {
  if (torchCache) return torchCache
  const child = Bun.spawnSync(["/usr/bin/env", process.env.TORCH_PYTHON ?? "python3", "-c", TORCH_PEER, String(ROUNDS), String(MATMUL_N), String(ADD_ELEMS)], {
    timeout: 180_000,
  })
  const line = child.stdout.toString().trim().split("\n").at(-1) ?? ""
  try {
    torchCache = JSON.parse(line) as TorchFigures
  } catch {
    torchCache = { error: `python3 exited ${child.exitCode}: ${child.stderr.toString().trim().slice(-400)}` }
  }
  if (torchCache.version) console.log(`peer: ${torchCache.version}`)
  if (torchCache.error) console.log(`peer: torch unavailable: ${torchCache.error}`)
  return torchCache
}

// ---- sections ----------------------------------------------------------------------------------

const ADD_ELEMS = 64 * 1024 * 1024 // 256 MiB of f32 per operand
const MATMUL_N = 8192

const elementwise: Section = (native) => {
  const rows: Row[] = []
  for (const dtype of ["f32", "bf16"] as const satisfies ReadonlyArray<DType>) {
    const itemBytes = dtype === "f32" ? 4 : 2
    using x = Tensor.empty(native, dtype, [ADD_ELEMS])
    using y = Tensor.empty(native, dtype, [ADD_ELEMS])
    using z = Tensor.empty(native, dtype, [ADD_ELEMS])
    ops.fill(x, 1.5)
    ops.fill(y, 2.25)
    const bytes = ADD_ELEMS * itemBytes
    const copy = timePerCall(native, 20, () => ops.cast(z, x))
    const [clo, chi] = range(native, z)
    const add = timePerCall(native, 20, () => ops.binary("add", z, x, y))
    const [alo, ahi] = range(native, z)
    const copyRate = (2 * bytes) / copy / 1e9, addRate = (3 * bytes) / add / 1e9
    rows.push({ section: "elementwise", name: `copy ${dtype} ${ADD_ELEMS / 2 ** 20}M el (d2d)`, unit: "GB/s", ours: copyRate, ok: +(clo === 1.5 && chi === 1.5), total: 1 })
    const peer = dtype === "f32" ? torch().addSeconds : undefined
    rows.push({
      section: "elementwise", name: `add ${dtype} ${ADD_ELEMS / 2 ** 20}M el`, unit: "GB/s", ours: addRate, peer: copyRate, peerName: "our copy", goal: 0.9,
      ok: +(alo === 3.75 && ahi === 3.75), total: 1,
    })
    if (peer !== undefined)
      rows.push({ section: "elementwise", name: `add ${dtype} ${ADD_ELEMS / 2 ** 20}M el`, unit: "GB/s", ours: addRate, peer: (3 * bytes) / peer / 1e9, peerName: "torch add", ok: 1, total: 1 })
  }
  return rows
}

/** C = A @ B in bf16 at 8192^3, checked on a few entries of row 0 against a host dot product. */
const matmul: Section = (native) => {
  const n = MATMUL_N
  using a = Tensor.empty(native, "bf16", [n, n])
  using b = Tensor.empty(native, "bf16", [n, n])
  using c = Tensor.empty(native, "bf16", [n, n])
  ops.rand(a, 1, 0, true)
  ops.rand(b, 2, 0, true)
  const seconds = timePerCall(native, 10, () => ops.matmul(c, a, b))
  const tflops = (2 * n ** 3) / seconds / 1e12
  const bf16 = (bits: Uint16Array, i: number) => new Float32Array(new Uint32Array([bits[i]! << 16]).buffer)[0]!
  const ah = new Uint16Array(a.toHost().data.slice().buffer), bh = new Uint16Array(b.toHost().data.slice().buffer)
  const ch = new Uint16Array(c.toHost().data.slice().buffer)
  let ok = 0
  const checked = 8
  for (let j = 0; j < checked; j++) {
    let dot = 0, scale = 0
    for (let p = 0; p < n; p++) {
      const term = bf16(ah, p) * bf16(bh, p * n + j)
      dot += term
      scale += Math.abs(term)
    }
    if (Math.abs(bf16(ch, j) - dot) <= 1e-2 * scale / Math.sqrt(n) + 1e-2 * Math.abs(dot)) ok++
  }
  const peer = torch().matmulSeconds
  return [{
    section: "matmul", name: `bf16 ${n}^3`, unit: "TFLOP/s", ours: tflops,
    peer: peer === undefined ? undefined : (2 * n ** 3) / peer / 1e12, peerName: "torch.mm", goal: 0.95, ok, total: checked,
  }]
}

/** World size 1: the collective path (issue, event, poll) without a network. */
const allreduce: Section = (native) => {
  const comm = Comm.create(native, 0, 1, 30_000)
  try {
    comm.connect([comm.address()])
    const rows: Row[] = []
    for (const elems of [1, 256 * 1024, 64 * 1024 * 1024]) {
      using t = Tensor.empty(native, "f32", [elems])
      ops.fill(t, 3)
      const seconds = timePerCall(native, elems === 1 ? 200 : 20, () => comm.allReduce(t, t, "sum"))
      comm.allReduce(t, t, "avg")
      const [lo, hi] = range(native, t)
      const bytes = elems * 4
      rows.push({ section: "allreduce", name: `f32 ${elems} el`, unit: "us", ours: seconds * 1e6, ok: +(lo === 3 && hi === 3), total: 1 })
      if (elems > 1) rows.push({ section: "allreduce", name: `f32 ${elems} el`, unit: "GB/s", ours: bytes / seconds / 1e9, ok: 1, total: 1 })
    }
    comm.barrier()
    return rows
  } finally {
    comm.destroy()
  }
}

/** Cycles of alloc, fill, free at a few sizes: the allocator's cost per cycle. */
const alloc: Section = (native) => {
  const cache = process.env.MONARCH_CUDA_CACHE === "0" ? "cache off" : "cache on"
  return [4 * 1024, 4 * 1024 * 1024, 256 * 1024 * 1024].map((bytes) => {
    let ok = 0
    const seconds = timePerCall(native, 50, () => {
      const t = Tensor.empty(native, "u8", [bytes])
      ops.fill(t, 1)
      t.free()
      ok++
    })
    return { section: "alloc", name: `${bytes} B alloc+fill+free, ${cache}`, unit: "us", ours: seconds * 1e6, ok: ok > 0 ? 1 : 0, total: 1 }
  })
}

/** Every section, in the order they print; add new ones here. */
const SECTIONS: Record<string, Section> = { elementwise, matmul, allreduce, alloc }

// ---- table ----------------------------------------------------------------------------------------

const fmt = (x: number | undefined) => (x === undefined ? "-" : x >= 100 ? x.toFixed(0) : x >= 1 ? x.toFixed(2) : x.toPrecision(3))

const print = (rows: ReadonlyArray<Row>) => {
  const header = ["section", "case", "unit", "ours", "peer", "peer is", "ratio", "goal", "ok"]
  const table = rows.map((r) => {
    const ratio = r.peer === undefined ? undefined : r.ours / r.peer
    const verdict = r.goal === undefined || ratio === undefined ? "" : ratio >= r.goal ? " met" : " MISSED"
    return [
      r.section, r.name, r.unit, fmt(r.ours), fmt(r.peer), r.peerName ?? "-", ratio === undefined ? "-" : `${(ratio * 100).toFixed(1)}%`,
      r.goal === undefined ? "-" : `>=${r.goal * 100}%${verdict}`, `${r.ok}/${r.total}`,
    ]
  })
  const widths = header.map((h, i) => Math.max(h.length, ...table.map((row) => row[i]!.length)))
  const line = (cells: ReadonlyArray<string>) => cells.map((c, i) => c.padEnd(widths[i]!)).join("  ")
  console.log(line(header))
  for (const row of table) console.log(line(row))
}

const args = process.argv.slice(2)
const flag = (name: string) => {
  const i = args.indexOf(name)
  return i >= 0 ? args[i + 1] : undefined
}
const only = flag("--only")?.split(",")
const chosen = Object.entries(SECTIONS).filter(([name]) => only === undefined || only.includes(name))

let native: Native
try {
  native = loadNative("cuda")
  native.setBlockCache(process.env.MONARCH_CUDA_CACHE !== "0")
} catch (e) {
  console.log(`bench/cuda: the cuda backend cannot load: ${(e as Error).message}`)
  process.exit(1)
}

const rows: Row[] = []
let failed = 0
for (const [name, section] of chosen) {
  try {
    rows.push(...section(native))
  } catch (e) {
    failed++
    console.log(`bench/cuda: section ${name} failed: ${(e as Error).message}`)
  }
}
print(rows)
const json = flag("--json")
if (json) writeFileSync(json, JSON.stringify(rows, null, 2))
process.exit(failed > 0 || rows.some((r) => r.ok < r.total) ? 1 : 0)
