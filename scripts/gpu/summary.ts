/**
 * The one table of a GPU run, from what scripts/gpu/check.sh's steps left in DIR:
 * bench.json (bench/cuda.ts: elementwise add vs copy, bf16 matmul vs torch, world-size-1 NCCL
 * all_reduce), overhead.json (bench/dispatch.ts on the run's device: microseconds per command),
 * store_findings.json (scripts/gpu/store_probe.ts) and steps.tsv (each step's exit and seconds).
 * A figure whose file is missing says so, with the exit of the step that should have made it.
 *
 *   bun run scripts/gpu/summary.ts DIR        (prints the table; writes DIR/summary.md)
 */
import { existsSync, readFileSync, writeFileSync } from "node:fs"
import { join } from "node:path"
import type { Row } from "../../bench/cuda.ts"
import type { DispatchRow } from "../../bench/dispatch.ts"
import type { Finding } from "./store_probe.ts"

/** The host cost of one command that a GPU run aims for. */
const OVERHEAD_GOAL_US = 5

interface Line {
  readonly figure: string
  readonly value: string
  readonly against: string
  readonly ratio: string
  readonly goal: string
  readonly ok: string
  /** Free text, last so that a long one does not push the other columns. */
  readonly notes: string
}

const dir = process.argv[2] ?? process.env.OUT ?? "/tmp/monarch-gpu-logs"

const steps = new Map<string, { status: string; seconds: string }>()
if (existsSync(join(dir, "steps.tsv"))) {
  for (const line of readFileSync(join(dir, "steps.tsv"), "utf8").trim().split("\n")) {
    const [name, status, seconds] = line.split("\t")
    if (name) steps.set(name, { status: status ?? "?", seconds: seconds ?? "?" })
  }
}

/** A JSON file's content, or why there is none (the step that makes it, and how it ended). */
const load = <T>(file: string, step: string): T | string => {
  const path = join(dir, file)
  if (existsSync(path)) return JSON.parse(readFileSync(path, "utf8")) as T
  const s = steps.get(step)
  return `no ${file}: step ${step} ${s === undefined ? "did not run" : s.status === "skipped" ? "was skipped (budget)" : `exited ${s.status}`}`
}

const fmt = (x: number) => (x >= 100 ? x.toFixed(0) : x >= 1 ? x.toFixed(2) : x.toPrecision(3))
const missing = (figure: string, why: string): Line => ({ figure, value: "missing", against: "-", ratio: "-", goal: "-", ok: "-", notes: why })

const benchLines = (): Line[] => {
  const rows = load<Row[]>("bench.json", "bench")
  if (typeof rows === "string") return [missing("elementwise, matmul, NCCL all_reduce", rows)]
  const pick = (figure: string, match: (r: Row) => boolean): Line => {
    const r = rows.find(match)
    if (r === undefined) return missing(figure, "no such row in bench.json (its section failed?)")
    const ratio = r.peer === undefined ? undefined : r.ours / r.peer
    return {
      figure: `${figure} (${r.unit})`,
      value: fmt(r.ours),
      against: r.peer === undefined ? "-" : `${fmt(r.peer)} ${r.peerName ?? ""}`.trim(),
      ratio: ratio === undefined ? "-" : `${(ratio * 100).toFixed(1)}%`,
      goal: r.goal === undefined ? "-" : `>= ${r.goal * 100}% ${ratio === undefined ? "(no peer)" : ratio >= r.goal ? "met" : "MISSED"}`,
      ok: `${r.ok}/${r.total}`,
      notes: "",
    }
  }
  const add = (dtype: string, peer: string) => (r: Row) => r.section === "elementwise" && r.name.startsWith(`add ${dtype}`) && r.peerName === peer
  const allreduce = rows.filter((r) => r.section === "allreduce")
  return [
    pick("add f32 vs device copy", add("f32", "our copy")),
    pick("add bf16 vs device copy", add("bf16", "our copy")),
    pick("add f32 vs torch add", add("f32", "torch add")),
    pick("matmul bf16 8192^3 vs torch.mm", (r) => r.section === "matmul"),
    ...(allreduce.length === 0
      ? [missing("NCCL all_reduce, world 1", "no allreduce rows in bench.json (its section failed?)")]
      : allreduce.map((r) => pick(`NCCL all_reduce world 1, ${r.name}`, (x) => x === r))),
  ]
}

const overheadLines = (): Line[] => {
  const rows = load<DispatchRow[]>("overhead.json", "overhead")
  if (typeof rows === "string") return [missing("per-command overhead", rows)]
  return rows.map((r) => {
    const goal = r.command === "ops.neg"
    return {
      figure: `per-command overhead, ${r.command}${r.command === "ops.neg" ? " 1 el" : ""}, ${r.group === 1 ? "single" : `groups of ${r.group}`} on ${r.device} (us)`,
      value: fmt(r.usPerCommand),
      against: `${Math.round(r.median).toLocaleString("en-US")} cmd/s`,
      ratio: "-",
      goal: goal ? `<= ${OVERHEAD_GOAL_US} us ${r.usPerCommand <= OVERHEAD_GOAL_US ? "met" : "MISSED"}` : "-",
      ok: r.failures === 0 ? "ok" : `${r.failures} failed`,
      notes: "",
    }
  })
}

const storeLines = (): Line[] => {
  const rows = load<Finding[]>("store_findings.json", "store")
  if (typeof rows === "string") return [missing("store findings", rows)]
  return rows.map((f) => ({ figure: `store §7.${f.point}: ${f.question}`, value: f.status, against: "-", ratio: "-", goal: "-", ok: "-", notes: f.answer }))
}

const stepsLine: Line = {
  figure: "steps (exit, seconds)",
  value: steps.size === 0 ? "missing" : [...steps.values()].every((s) => s.status === "0") ? "all 0" : "some failed",
  against: "-",
  ratio: "-",
  goal: "-",
  ok: "-",
  notes: steps.size === 0 ? "no steps.tsv" : [...steps].map(([n, s]) => `${n} ${s.status} (${s.seconds} s)`).join(", "),
}

const lines = [...benchLines(), ...overheadLines(), ...storeLines(), stepsLine]
const header = ["figure", "value", "against", "ratio", "goal", "ok", "notes"]
const cells = [header, ...lines.map((l) => [l.figure, l.value, l.against, l.ratio, l.goal, l.ok, l.notes])]
const widths = header.map((_, i) => Math.max(...cells.map((c) => c[i]!.length)))
const row = (c: ReadonlyArray<string>) => `| ${c.map((x, i) => (i === c.length - 1 ? x : x.padEnd(widths[i]!))).join(" | ")} |`
const table = [row(header), `|${widths.map((w, i) => "-".repeat(i === widths.length - 1 ? 3 : w + 2)).join("|")}|`, ...cells.slice(1).map(row)].join("\n")
console.log(table)
writeFileSync(join(dir, "summary.md"), `${table}\n`)
