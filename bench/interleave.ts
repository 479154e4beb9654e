/**
 * A benchmark here against the same benchmark in another checkout (a worktree of an earlier
 * commit), as interleaved rounds: each round runs both, in alternating order, and each row's
 * figure is the median over the rounds of this tree's rate over the other's (> 1: faster here),
 * with the lowest and highest ratio, so a loaded machine shows as spread instead of a verdict.
 *
 *   bun run bench/interleave.ts <other checkout> <bench/script.ts> [rounds] [--cells 2,3] [-- args for the script]
 *
 * Rows are the script's table rows: a `name  unit  median ...` line (bench/codec.ts) or a
 * markdown row `| name | batching | rate | ...` (bench/dispatch.ts), rates as printed.
 * `--cells`: which cells of a markdown row are figures (default 2, the third), one row each,
 * named by the table's header; for figures where lower is better (us/op) a ratio below 1 is
 * faster here. Each row also shows the median figure of each side.
 */
import { readFileSync } from "node:fs"
import { join } from "node:path"

const argv = process.argv.slice(2)
const end = argv.includes("--") ? argv.indexOf("--") : argv.length
const cellsAt = argv.indexOf("--cells")
const CELLS = cellsAt >= 0 && cellsAt < end ? argv.splice(cellsAt, 2)[1]!.split(",").map(Number) : [2]
/** The cells before the first figure name the row. */
const FIRST = Math.min(...CELLS)
const [other, script, roundsArg, ...rest] = argv
if (other === undefined || script === undefined) {
  console.log("usage: bun run bench/interleave.ts <other checkout> <bench/script.ts> [rounds] [-- args]")
  process.exit(2)
}
const ROUNDS = Number(roundsArg ?? 5)
const extra = rest[0] === "--" ? rest.slice(1) : rest
const here = join(import.meta.dir, "..")

/** The rows a run printed: name -> rate. */
const rowsOf = (out: string): Map<string, number> => {
  const rows = new Map<string, number>()
  let header: string[] = []
  for (const line of out.split("\n")) {
    const text = /^(\S.*?)\s{2,}(M msg\/s|M cmd\/s|GB\/s)\s+([\d.e+]+)/.exec(line)
    if (text) {
      rows.set(text[1]!.trim(), Number(text[3]))
      continue
    }
    const cells = line.trim().replace(/^\||\|$/g, "").split("|").map((c) => c.trim())
    if (cells.length < 2) continue
    const figure = (c: string | undefined) => (c !== undefined && /^[\d,]+(\.\d+)?x?$/.test(c) ? Number(c.replace(/[,x]/g, "")) : undefined)
    if (CELLS.every((k) => figure(cells[k]) === undefined)) {
      if (!cells[0]!.startsWith("-")) header = cells
      continue
    }
    for (const k of CELLS) {
      const v = figure(cells[k])
      if (v !== undefined) rows.set(`${cells.slice(0, FIRST).join(" / ")}${CELLS.length > 1 ? ` / ${header[k] ?? `cell ${k}`}` : ""}`, v)
    }
  }
  return rows
}

const run = (dir: string): Map<string, number> => {
  const p = Bun.spawnSync([process.execPath, "run", script, ...extra], { cwd: dir, stdout: "pipe", stderr: "inherit" })
  return rowsOf(p.stdout.toString())
}

const load = () => readFileSync("/proc/loadavg", "utf8").split(" ")[0]!
const ratios = new Map<string, number[]>()
const figures = new Map<string, { here: number[]; there: number[] }>()
const loads: string[] = []
for (let r = 0; r < ROUNDS; r++) {
  loads.push(load())
  let ours: Map<string, number>, theirs: Map<string, number>
  if (r % 2 === 0) {
    ours = run(here)
    theirs = run(other)
  } else {
    theirs = run(other)
    ours = run(here)
  }
  for (const [name, rate] of ours) {
    const peer = theirs.get(name)
    if (peer === undefined || peer <= 0) continue
    ratios.set(name, [...(ratios.get(name) ?? []), rate / peer])
    const f = figures.get(name) ?? { here: [], there: [] }
    f.here.push(rate)
    f.there.push(peer)
    figures.set(name, f)
  }
}
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!
console.log(`${script}: this tree against ${other}, ${ROUNDS} interleaved rounds; load at each round's start: ${loads.join(", ")}`)
console.log("| row | median ratio (this / other) | lowest | highest | median here | median other |")
console.log("|---|---:|---:|---:|---:|---:|")
for (const [name, rs] of ratios) {
  const f = figures.get(name)!
  console.log(`| ${name} | ${median(rs).toFixed(3)} | ${Math.min(...rs).toFixed(3)} | ${Math.max(...rs).toFixed(3)} | ${median(f.here)} | ${median(f.there)} |`)
}
