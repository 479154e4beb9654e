/**
 * Mutation testing: applies each deliberate break in scripts/mutations.ts, one at a time, to a
 * scratch copy of the repository, runs the test files that should notice, and prints a table
 * of which breaks were caught (and how fast, and by which failure) and which survived.
 *
 *   bun run scripts/mutate.ts                 every break, one at a time (--jobs 1)
 *   bun run scripts/mutate.ts --jobs 2        two scratch copies, two breaks at once
 *   bun run scripts/mutate.ts --only token    the breaks whose behaviour or area contains "token"
 *   bun run scripts/mutate.ts --check         only locate every edit (a stale entry fails)
 *   --every                                   run every listed file under each break, not only
 *                                             until the first fails, and show each one's verdict
 *   --timeout 90                              seconds per test file before it is killed
 *
 * An edit is located by its exact text anywhere under src/, ffi/ and c/, so files may move; text
 * found other than exactly once stops the run before anything is tested, naming the entry.
 * The copies take the working tree as it is (tracked and untracked files, not ignored ones)
 * with node_modules and build/ linked, and go away at the end. A break in the C shim (c/)
 * gets a build/ of its own for its run: a copy of this one, in which `make cpu` rebuilds only
 * what the break touched. First the named test files run
 * once unbroken: a break is only "caught" against tests that pass without it. Under a break the
 * files run one at a time, in the order listed, until one fails. Exits 1 when a break survived
 * or an entry is stale.
 */
import { spawn, spawnSync } from "node:child_process"
import { copyFileSync, cpSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, symlinkSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { dirname, join, relative } from "node:path"
import { MUTATIONS, type Mutation } from "./mutations.ts"

const ROOT = new URL("..", import.meta.url).pathname.replace(/\/$/, "")
const SEARCHED = ["src", "ffi", "c"]

const arg = (name: string): string | undefined => {
  const i = process.argv.indexOf(`--${name}`)
  return i < 0 ? undefined : process.argv[i + 1]
}
const jobs = Math.max(1, Number(arg("jobs") ?? 1))
const timeoutMs = Number(arg("timeout") ?? 90) * 1000
const only = arg("only")?.toLowerCase()
const every = process.argv.includes("--every")

// ---- locating edits -----------------------------------------------------------------------

const sourceFiles = (dir: string): string[] =>
  readdirSync(join(ROOT, dir), { withFileTypes: true }).flatMap((e) => {
    const path = join(dir, e.name)
    return e.isDirectory() ? sourceFiles(path) : /\.(ts|js|c|cc|cu|h)$/.test(e.name) ? [path] : []
  })

const count = (text: string, search: string): number => {
  let n = 0
  for (let at = text.indexOf(search); at >= 0; at = text.indexOf(search, at + 1)) n++
  return n
}

interface Located {
  readonly mutation: Mutation
  /** Per edit, the file (relative to the root) holding its text exactly once. */
  readonly files: ReadonlyArray<string>
  /** "file:line" of the first edit. */
  readonly where: string
}

/** Each mutation's files, or the reasons some entries are stale. */
const locate = (mutations: ReadonlyArray<Mutation>): { readonly located: Located[]; readonly stale: string[] } => {
  const texts = new Map(SEARCHED.flatMap(sourceFiles).map((f) => [f, readFileSync(join(ROOT, f), "utf8")]))
  const located: Located[] = [], stale: string[] = []
  for (const m of mutations) {
    const files: string[] = []
    for (const e of m.edits) {
      const hits = [...texts].flatMap(([f, text]) => Array<string>(count(text, e.search)).fill(f))
      if (hits.length !== 1) stale.push(`"${m.behaviour}": ${JSON.stringify(e.search)} found ${hits.length === 0 ? "nowhere" : `${hits.length} times (${[...new Set(hits)].join(", ")})`} under ${SEARCHED.join(", ")}`)
      else files.push(hits[0]!)
    }
    for (const t of m.tests) {
      try {
        statSync(join(ROOT, t))
      } catch {
        stale.push(`"${m.behaviour}": test file ${t} does not exist`)
      }
    }
    if (files.length !== m.edits.length) continue
    const text = texts.get(files[0]!)!
    const line = text.slice(0, text.indexOf(m.edits[0]!.search)).split("\n").length + (m.edits[0]!.search.startsWith("\n") ? 1 : 0)
    located.push({ mutation: m, files, where: `${files[0]}:${line}${files[0] === m.file ? "" : ` (was ${m.file})`}` })
  }
  return { located, stale }
}

// ---- scratch copies -----------------------------------------------------------------------

/** A copy of the working tree (tracked and untracked files git does not ignore) under `dir`. */
const makeCopy = (dir: string): void => {
  const listed = spawnSync("git", ["ls-files", "-z", "--cached", "--others", "--exclude-standard"], { cwd: ROOT, encoding: "utf8" })
  if (listed.status !== 0) throw new Error(`git ls-files failed: ${listed.stderr}`)
  for (const f of listed.stdout.split("\0").filter(Boolean)) {
    let isFile = false
    try {
      isFile = statSync(join(ROOT, f)).isFile()
    } catch {}
    if (!isFile) continue // deleted in the working tree, or a submodule
    mkdirSync(dirname(join(dir, f)), { recursive: true })
    copyFileSync(join(ROOT, f), join(dir, f))
  }
  for (const linked of ["node_modules", "build"]) symlinkSync(join(ROOT, linked), join(dir, linked))
}

interface TestRun {
  readonly code: number | null
  readonly timedOut: boolean
  readonly ms: number
  readonly output: string
}

/** Process groups of the test runs in progress, killed if this script is interrupted. */
const running = new Set<number>()

/** Runs `bun test --bail` on `tests` in `dir`, in a process group of its own killed after `limitMs`. */
const runTests = (dir: string, tests: ReadonlyArray<string>, limitMs: number): Promise<TestRun> =>
  new Promise((resolve) => {
    const t0 = performance.now()
    const child = spawn("setsid", [join(dir, "node_modules/.bin/bun"), "test", "--bail", ...tests], {
      cwd: dir, stdio: ["ignore", "pipe", "pipe"], env: { ...process.env, MONARCH_TEST_VERBOSE: "" },
    })
    running.add(child.pid!)
    let output = ""
    child.stdout.on("data", (d) => (output += d))
    child.stderr.on("data", (d) => (output += d))
    let timedOut = false
    const killGroup = () => {
      try {
        process.kill(-child.pid!, "SIGKILL")
      } catch {}
    }
    const timer = setTimeout(() => {
      timedOut = true
      killGroup()
    }, limitMs)
    child.on("close", (code) => {
      running.delete(child.pid!)
      clearTimeout(timer)
      killGroup() // workers a failing test left behind
      resolve({ code, timedOut, ms: performance.now() - t0, output })
    })
  })

/** The first failing test and the first line of its error, from bun test's output. */
const firstFailure = (output: string): string => {
  const lines = output.split("\n")
  const failAt = lines.findIndex((l) => l.startsWith("(fail)"))
  const errorLine = lines.slice(0, failAt < 0 ? undefined : failAt).find((l) => /^(error|Error)\b/.test(l.trim()))
  const test = failAt < 0 ? "" : lines[failAt]!.replace(/^\(fail\) /, "").replace(/ \[[\d.]+m?s\]$/, "")
  const why = (errorLine ?? "").trim().replace(/^error: /, "")
  return [test, why].filter(Boolean).join(": ") || lines.filter((l) => l.trim()).slice(-1)[0] || ""
}

// ---- the run ------------------------------------------------------------------------------

interface Outcome {
  readonly located: Located
  readonly verdict: "caught" | "SURVIVED" | "hung (killed)" | "does not build"
  readonly ms: number
  readonly failure: string
}

/** Gives the copy in `dir` a build/ of its own and rebuilds the cpu shim there: the output of a failed make, or undefined. */
const buildShim = (dir: string): string | undefined => {
  rmSync(join(dir, "build"))
  cpSync(join(ROOT, "build"), join(dir, "build"), { recursive: true, preserveTimestamps: true })
  const made = spawnSync("make", ["-j2", "cpu"], { cwd: dir, encoding: "utf8" })
  return made.status === 0 ? undefined : `${made.stdout}${made.stderr}`.trim().split("\n").slice(-3).join(" ")
}

const applyAndRun = async (dir: string, l: Located): Promise<Outcome> => {
  const originals = new Map<string, string>()
  const native = l.files.some((f) => f.startsWith("c/"))
  try {
    l.mutation.edits.forEach((e, i) => {
      const path = join(dir, l.files[i]!)
      const text = readFileSync(path, "utf8")
      if (!originals.has(path)) originals.set(path, text)
      writeFileSync(path, text.replace(e.search, () => e.replace))
    })
    const unbuilt = native ? buildShim(dir) : undefined
    if (unbuilt !== undefined) return { located: l, verdict: "does not build", ms: 0, failure: unbuilt }
    // One file at a time in the order listed (the most direct first), so the time says how
    // soon the first test that should notice does; the first failing file ends it (unless --every).
    let ms = 0
    const seen: string[] = []
    let first: Outcome | undefined
    for (const test of l.mutation.tests) {
      const r = await runTests(dir, [test], timeoutMs)
      ms += r.ms
      const name = relative("tests", test)
      const outcome: Outcome | undefined = r.timedOut
        ? { located: l, verdict: "hung (killed)", ms, failure: `${name} still running` }
        : r.code !== 0 ? { located: l, verdict: "caught", ms, failure: `${name}: ${firstFailure(r.output)}` } : undefined
      first ??= outcome
      if (!every && outcome !== undefined) break
      seen.push(`${name} ${outcome === undefined ? "passed" : `${outcome.verdict} in ${(r.ms / 1000).toFixed(1)} s`}`)
    }
    if (every) return { located: l, verdict: first?.verdict ?? "SURVIVED", ms: first?.ms ?? ms, failure: seen.join("; ") }
    return first ?? { located: l, verdict: "SURVIVED", ms, failure: "" }
  } finally {
    for (const [path, text] of originals) writeFileSync(path, text)
    if (native) {
      rmSync(join(dir, "build"), { recursive: true, force: true })
      symlinkSync(join(ROOT, "build"), join(dir, "build"))
    }
  }
}

const cell = (s: string, max = 110) => (s.length > max ? `${s.slice(0, max - 1)}…` : s).replaceAll("|", "\\|")

const main = async () => {
  const chosen = MUTATIONS.filter((m) => !only || `${m.area} ${m.behaviour}`.toLowerCase().includes(only))
  const { located, stale } = locate(chosen)
  if (stale.length > 0) {
    console.error(`stale entries in scripts/mutations.ts (fix them before running):\n  ${stale.join("\n  ")}`)
    process.exit(1)
  }
  if (process.argv.includes("--check")) {
    console.log(`every edit of ${located.length} breaks found exactly once`)
    for (const l of located) console.log(`  ${l.where}  ${l.mutation.behaviour}`)
    return
  }
  const base = mkdtempSync(join(tmpdir(), "monarch-mutate-"))
  // The runs are in sessions of their own, out of reach of the terminal's signals.
  for (const signal of ["SIGINT", "SIGTERM"] as const)
    process.on(signal, () => {
      for (const pid of running) {
        try {
          process.kill(-pid, "SIGKILL")
        } catch {}
      }
      rmSync(base, { recursive: true, force: true })
      process.exit(130)
    })
  const slots = Array.from({ length: Math.min(jobs, located.length) }, (_, i) => join(base, `copy${i}`))
  try {
    for (const s of slots) makeCopy(s)
    const allTests = [...new Set(located.flatMap((l) => l.mutation.tests))]
    console.log(`${located.length} breaks, ${slots.length} at a time, ${timeoutMs / 1000} s each at most; first the ${allTests.length} test files unbroken`)
    const baseline = await runTests(slots[0]!, allTests, 10 * timeoutMs)
    if (baseline.code !== 0) {
      console.error(`the tests fail unbroken (${Math.round(baseline.ms / 1000)} s), so no break can be judged:\n${baseline.output.split("\n").slice(-40).join("\n")}`)
      process.exitCode = 1
      return // through the finally below, which removes the copies
    }
    console.log(`unbroken: ${/Ran \d+ tests? across \d+ files?/.exec(baseline.output)?.[0] ?? "ran"}, all passing, in ${(baseline.ms / 1000).toFixed(1)} s`)
    const outcomes: Outcome[] = new Array(located.length)
    let next = 0
    await Promise.all(slots.map(async (dir) => {
      while (next < located.length) {
        const i = next++
        outcomes[i] = await applyAndRun(dir, located[i]!)
        const o = outcomes[i]!
        console.log(`  ${o.verdict.padEnd(13)} ${(o.ms / 1000).toFixed(1).padStart(5)} s  ${o.located.mutation.behaviour}`)
      }
    }))
    const caught = outcomes.filter((o) => o.verdict === "caught").length
    console.log(`\n| # | area | behaviour broken | where | tests | result | time | first failure |`)
    console.log(`|---|---|---|---|---|---|---|---|`)
    outcomes.forEach((o, i) => {
      const m = o.located.mutation
      const tests = m.tests.map((t) => relative("tests", t)).join(", ")
      console.log(`| ${i + 1} | ${m.area} | ${cell(m.behaviour)} | ${o.located.where} | ${tests} | ${o.verdict} | ${(o.ms / 1000).toFixed(1)} s | ${cell(o.failure, 160)} |`)
    })
    console.log(`\n${caught} of ${outcomes.length} breaks caught; ${outcomes.filter((o) => o.verdict === "SURVIVED").length} survived; ${outcomes.filter((o) => o.verdict === "hung (killed)").length} hung past ${timeoutMs / 1000} s`)
    if (caught !== outcomes.length) process.exitCode = 1
  } finally {
    rmSync(base, { recursive: true, force: true })
  }
}

await main()
