/**
 * A benchmark here against the same benchmark in another checkout (a worktree of an earlier
 * commit), as interleaved rounds: each round runs both, in alternating order, and each row's
 * figure is the median over the rounds of this tree's rate over the other's (> 1: faster here),
 * with the lowest and highest ratio, so a loaded machine shows as spread instead of a verdict.
 *
 *   bun run bench/interleave.ts <other checkout> <bench/script.ts> [rounds] [-- args for the script]
 *
 * Rows are the script's table rows: a `name  unit  median ...` line (bench/codec.ts) or a
 * markdown row `| name | batching | rate | ...` (bench/dispatch.ts), rates as printed.
 */
import { readFileSync } from "node:fs"
import { join } from "node:path"

const [other, script, roundsArg, ...rest] = process.argv.slice(2)
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
  for (const line of out.split("\n")) {
    const text = /^(\S.*?)\s{2,}(M msg\/s|M cmd\/s|GB\/s)\s+([\d.e+]+)/.exec(line)
    if (text) {
      rows.set(text[1]!.trim(), Number(text[3]))
      continue
    }
    const cells = line.trim().replace(/^\||\|$/g, "").split("|").map((c) => c.trim())
    if (cells.length >= 3 && /^[\d,]+(\.\d+)?$/.test(cells[2]!)) rows.set(`${cells[0]} / ${cells[1]}`, Number(cells[2]!.replaceAll(",", "")))
  }
  return rows
}

const run = (dir: string): Map<string, number> => {
  const p = Bun.spawnSync([process.execPath, "run", script, ...extra], { cwd: dir, stdout: "pipe", stderr: "inherit" })
  return rowsOf(p.stdout.toString())
}

const load = () => readFileSync("/proc/loadavg", "utf8").split(" ")[0]!
const ratios = new Map<string, number[]>()
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
    if (peer !== undefined && peer > 0) ratios.set(name, [...(ratios.get(name) ?? []), rate / peer])
  }
}
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!
console.log(`${script}: this tree against ${other}, ${ROUNDS} interleaved rounds; load at each round's start: ${loads.join(", ")}`)
console.log("| row | median ratio (this / other) | lowest | highest |")
console.log("|---|---:|---:|---:|")
for (const [name, rs] of ratios) console.log(`| ${name} | ${median(rs).toFixed(3)} | ${Math.min(...rs).toFixed(3)} | ${Math.max(...rs).toFixed(3)} |`)
