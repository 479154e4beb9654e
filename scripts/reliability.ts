/**
 * Regenerates RELIABILITY.md: runs every area's reliability checks (tests/<area>/reliability.ts,
 * each exporting `run(mode)` that returns rows), one area at a time, each in a process of its
 * own, and writes their rows as one table with the date, the mode and the machine.
 *
 *   bun run scripts/reliability.ts            default mode (what the bun tests run)
 *   bun run scripts/reliability.ts --long     long mode (also MONARCH_LONG=1)
 *   bun run scripts/reliability.ts load hosts only these areas, printed (not written)
 *   --out=PATH                                write there (a partial table says so)
 *
 * An area whose module is missing, fails to load, throws, crashes or outlasts its time gets a
 * row saying so. Exits 1 when any check did not hold every try, or an area gave no rows.
 */
import { spawn } from "node:child_process"
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs"
import { writeFile } from "node:fs/promises"
import { availableParallelism, cpus, release, tmpdir, totalmem } from "node:os"
import { join } from "node:path"
import { pathToFileURL } from "node:url"
import type { Mode, ReliabilityRow } from "../tests/reliability.ts"



const ROOT = new URL("..", import.meta.url).pathname
const TESTS = join(ROOT, "tests")

/** The areas of the reliability table, in table order; any other tests/<area>/reliability.ts follows them. */
const EXPECTED = ["fuzz", "security", "faults", "hosts", "load"]

/** How long one area may take before its process group is killed and it is reported as timed out. */
const AREA_LIMIT_MS: Record<Mode, number> = { default: 15 * 60_000, long: 3 * 60 * 60_000 }

const args = process.argv.slice(2)
const mode: Mode = args.includes("--long") || process.env.MONARCH_LONG === "1" ? "long" : "default"
const option = (name: string) => args.find((a) => a.startsWith(`--${name}=`))?.slice(name.length + 3)

const message = (e: unknown) => (e instanceof Error ? e.message : String(e)).split("\n")[0]!
const problem = (area: string, what: string): ReliabilityRow => ({ area, check: "the area's checks", tries: 0, held: 0, detail: what })

const isRow = (r: unknown): r is ReliabilityRow => {
  const o = r as Record<string, unknown>
  return typeof o === "object" && o !== null && typeof o.area === "string" && typeof o.check === "string" &&
    Number.isInteger(o.tries) && Number.isInteger(o.held) && typeof o.detail === "string"
}

/** In the area's own process: imports its module, runs it, and leaves the rows (or why there are none) in `result`. */
const runInChild = async (area: string, result: string): Promise<never> => {
  const file = join(TESTS, area, "reliability.ts")
  let rows: ReliabilityRow[]
  try {
    const run: unknown = (await import(pathToFileURL(file).href)).run
    if (typeof run !== "function") rows = [problem(area, `tests/${area}/reliability.ts exports no run(mode)`)]
    else {
      const got: unknown = await (run as (m: Mode) => Promise<unknown>)(mode)
      rows = !Array.isArray(got) || !got.every(isRow) ? [problem(area, "run(mode) did not return rows of { area, check, tries, held, detail }")]
        : got.length === 0 ? [problem(area, "run(mode) returned no rows")] : got
    }
  } catch (e) {
    // The table gets the first line; the whole error (often with the processes' last lines) goes to the log.
    console.error(`reliability: ${area}: run("${mode}") failed:`, e)
    rows = [problem(area, `run("${mode}") failed: ${message(e)}`)]
  }
  await writeFile(result, JSON.stringify(rows))
  // An area may leave handles open (servers, timers); its rows are out, so end here.
  process.exit(0)
}

/** One area's rows, from a process of its own (so a crash, a leftover handle or a hang stays there). */
const runArea = (area: string): Promise<ReliabilityRow[]> => {
  if (!existsSync(join(TESTS, area, "reliability.ts"))) return Promise.resolve([problem(area, `missing: no tests/${area}/reliability.ts`)])
  const dir = mkdtempSync(join(tmpdir(), "monarch-reliability-")), result = join(dir, "rows.json")
  const limit = AREA_LIMIT_MS[mode]
  return new Promise<ReliabilityRow[]>((resolve) => {
    // Its own process group, so a timeout ends the workers it started too; what it prints
    // goes to stderr, so a printed table stays clean.
    const child = spawn(process.execPath, [import.meta.path, `--child=${area}`, `--result=${result}`, ...(mode === "long" ? ["--long"] : [])], { stdio: ["ignore", 2, 2], detached: true })
    let timedOut = false
    const timer = setTimeout(() => {
      timedOut = true
      if (child.pid !== undefined) process.kill(-child.pid, "SIGKILL")
    }, limit)
    child.on("exit", (status, signal) => {
      clearTimeout(timer)
      try {
        if (timedOut) return resolve([problem(area, `did not finish within ${limit / 60_000} min`)])
        if (!existsSync(result)) return resolve([problem(area, `its process ended (${signal ?? `status ${status}`}) without rows`)])
        resolve(JSON.parse(readFileSync(result, "utf8")) as ReliabilityRow[])
      } finally {
        rmSync(dir, { recursive: true, force: true })
      }
    })
  })
}

const child = option("child")
if (child !== undefined) await runInChild(child, option("result")!)

const chosen = args.filter((a) => !a.startsWith("--"))
// A partial run must not replace the full table by accident.
const out = option("out") ?? (chosen.length > 0 ? undefined : join(ROOT, "RELIABILITY.md"))
const discovered = readdirSync(TESTS, { withFileTypes: true })
  .filter((d) => d.isDirectory() && existsSync(join(TESTS, d.name, "reliability.ts")))
  .map((d) => d.name)
const unknownChoice = chosen.filter((a) => !discovered.includes(a) && !EXPECTED.includes(a))
if (unknownChoice.length > 0) {
  console.error(`no area ${unknownChoice.join(", ")}; areas: ${[...new Set([...EXPECTED, ...discovered])].join(", ")}`)
  process.exit(2)
}
const areas = [...EXPECTED, ...discovered.filter((a) => !EXPECTED.includes(a)).sort()].filter((a) => chosen.length === 0 || chosen.includes(a))

const cell = (s: string | number) => String(s).replace(/\|/g, "\\|").replace(/\r?\n/g, " ")
const held = (r: ReliabilityRow) => r.tries > 0 && r.held === r.tries
const seconds = (ms: number) => (ms >= 60_000 ? `${(ms / 60_000).toFixed(1)} min` : `${(ms / 1000).toFixed(1)} s`)

const started = new Date()
const results: Array<{ area: string; rows: ReliabilityRow[]; ms: number }> = []
for (const area of areas) {
  console.error(`reliability: ${area} (${mode})...`)
  const t = performance.now()
  const rows = await runArea(area)
  const ms = performance.now() - t
  results.push({ area, rows, ms })
  for (const r of rows) console.error(`  ${held(r) ? "held" : "NOT HELD"} ${r.held}/${r.tries} ${r.check}: ${r.detail}`)
  console.error(`  (${seconds(ms)})`)
}

const rows = results.flatMap((r) => r.rows)
const failing = rows.filter((r) => !held(r))
const machine = `${availableParallelism()} CPUs (${cpus()[0]?.model.trim() ?? "unknown model"}), ${(totalmem() / 2 ** 30).toFixed(1)} GiB memory, Linux ${release()}, Bun ${Bun.version}`
const text = [
  "# Reliability",
  "",
  "What the project's reliability checks tried and what held: malformed and random input to",
  "the protocol and the workers (fuzz), hostile peers (security), killed workers, controllers",
  "and stores (faults), workers on separate network hosts (hosts), and a long command stream",
  "under load (load). Each area's checks live in `tests/<area>/reliability.ts`; its bun",
  "tests run the same code in default mode and assert on the same rows. A try holds when it",
  "met every condition of its check; `figures` are the measurements of the run.",
  "",
  "Regenerate this file with one command (each area runs in a process of its own; leave out",
  "`--long`, or MONARCH_LONG=1, for the default mode the bun tests use, with fewer tries):",
  "",
  "```sh",
  `node_modules/.bin/bun run scripts/reliability.ts${mode === "long" ? " --long" : ""}`,
  "```",
  "",
  `- Generated: ${started.toISOString().replace(/\.\d+Z$/, "Z")} (took ${seconds(Date.now() - started.getTime())})`,
  `- Mode: ${mode}${chosen.length > 0 ? `; areas run: ${areas.join(", ")} (not all areas)` : ""}`,
  `- Machine: ${machine}`,
  `- Result: ${failing.length === 0 ? `every check held on every try (${rows.length} checks)` : `${failing.length} of ${rows.length} checks did not hold on every try (marked **no**)`}`,
  "",
  "| area | what was tried | tries | held | figures |",
  "|---|---|---:|---:|---|",
  ...rows.map((r) => `| ${cell(r.area)} | ${cell(r.check)} | ${r.tries} | ${held(r) ? r.held : `**no**: ${r.held}`} | ${cell(r.detail)} |`),
  "",
  `Time per area: ${results.map((r) => `${r.area} ${seconds(r.ms)}`).join(", ")}.`,
  "",
].join("\n")

if (out === undefined) process.stdout.write(text)
else await writeFile(out, text)
console.error(`reliability: ${out === undefined ? "printed the table" : `wrote ${out}`}: ${rows.length} checks, ${failing.length} not held`)
process.exitCode = failing.length === 0 ? 0 : 1
