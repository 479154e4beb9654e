/**
 * Mutation testing: applies each deliberate break in scripts/mutations.ts, one at a time, to a
 * scratch copy of the repository, runs the test files that should notice, and prints a table
 * of which breaks were caught (and how fast, and by which failure) and which survived.
 *
 *   bun run scripts/mutate.ts                 every break, one at a time (--jobs 1)
 *   bun run scripts/mutate.ts --jobs 2        two scratch copies, two breaks at once
 *   bun run scripts/mutate.ts --only token    the breaks whose behaviour or area contains "token"
 *   bun run scripts/mutate.ts --check         only locate every edit (a stale entry fails)
 *   --list scratch/breaks.ts                  the breaks a module of that shape exports as
 *                                             MUTATIONS instead of scripts/mutations.ts's
 *   --every                                   run every listed file under each break, not only
 *                                             until the first fails, and show each one's verdict
 *   --timeout 90                              seconds per test file before it is killed
 *
 * An edit is located by its exact text anywhere under src/, base/, ffi/, c/ and bench/, so files may move;
 * text found other than exactly once stops the run before anything is tested, naming the entry
 * (tests/readme/mutations.test.ts holds the list to that, so `make test` fails on a stale
 * entry). The copies take the working tree as it is (tracked and untracked files, not ignored
 * ones) with node_modules and build/ linked, and go away at the end; under a break with an edit
 * in c/ the copy's build/ is its own instead (the tree's, taken as built from its c/), which
 * `make -j1 all` in the copy rebuilds around the edit. First the named test files run once
 * unbroken: a break is only "caught" against tests that pass without it. Under a break the files
 * run one at a time, in the order listed, until one fails other than by a timeout. A failure
 * that only a timeout brought (bun's per-test timeout, or a timeout error such as Gloo's, read
 * from the failure's text) is not a catch: it is reported as "timeout only", as is a file killed
 * past --timeout. Exits 1 when a break was not caught or an entry is stale.
 */
import { spawn, spawnSync } from "node:child_process"
import { copyFileSync, cpSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, symlinkSync, unlinkSync, utimesSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { dirname, join, relative, resolve } from "node:path"
import { MUTATIONS, type Mutation } from "./mutations.ts"

const ROOT = new URL("..", import.meta.url).pathname.replace(/\/$/, "")
const SEARCHED = ["src", "base", "ffi", "c", "bench"]
/** The folder whose edits need the copy's own build/. */
const NATIVE = "c/"

const arg = (name: string): string | undefined => {
  const i = process.argv.indexOf(`--${name}`)
  return i < 0 ? undefined : process.argv[i + 1]
}
const jobs = Math.max(1, Number(arg("jobs") ?? 1))
const timeoutMs = Number(arg("timeout") ?? 90) * 1000
const only = arg("only")?.toLowerCase()
const listFile = arg("list")
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
export const locate = (mutations: ReadonlyArray<Mutation>): { readonly located: Located[]; readonly stale: string[] } => {
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

/**
 * Gives the copy its own build/ for a break in c/: the tree's, its outputs marked newer than the
 * copy's c/ (the copy's files are all newer than the tree's build), so `make` rebuilds only what
 * the edit touches.
 */
const ownBuild = (dir: string): void => {
  const build = join(dir, "build")
  unlinkSync(build) // the link to the tree's
  cpSync(join(ROOT, "build"), build, { recursive: true })
  const now = Date.now()
  setTimes(join(dir, "c"), new Date(now - 60_000))
  setTimes(build, new Date(now - 30_000))
}

const setTimes = (dir: string, time: Date): void => {
  for (const e of readdirSync(dir, { withFileTypes: true })) {
    const path = join(dir, e.name)
    if (e.isDirectory()) setTimes(path, time)
    utimesSync(path, time, time)
  }
}

/** The copy's build/ a link to the tree's again. */
const sharedBuild = (dir: string): void => {
  rmSync(join(dir, "build"), { recursive: true, force: true })
  symlinkSync(join(ROOT, "build"), join(dir, "build"))
}

interface Run {
  readonly code: number | null
  readonly timedOut: boolean
  readonly ms: number
  readonly output: string
}

/** Process groups of the runs in progress, killed if this script is interrupted. */
const running = new Set<number>()

/** The environment of the runs: MONARCH_SHIM_DIR unset, so the copy's code loads the copy's build/. */
const { MONARCH_SHIM_DIR: _shimDir, ...inherited } = process.env

/** Runs `argv` in `dir`, in a process group of its own killed after `limitMs`. */
const runIn = (dir: string, argv: ReadonlyArray<string>, limitMs: number): Promise<Run> =>
  new Promise((resolve) => {
    const t0 = performance.now()
    const child = spawn("setsid", [...argv], { cwd: dir, stdio: ["ignore", "pipe", "pipe"], env: { ...inherited, MONARCH_TEST_VERBOSE: "" } })
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

/** Runs `bun test --bail` on `tests` in `dir`. */
const runTests = (dir: string, tests: ReadonlyArray<string>, limitMs: number): Promise<Run> =>
  runIn(dir, [join(dir, "node_modules/.bin/bun"), "test", "--bail", ...tests], limitMs)

interface Failure {
  /** The failing test and the first line of its error. */
  readonly text: string
  /** Why the failure counts as brought by a timeout, when it does. */
  readonly timeout: string | undefined
}

const TIMEOUT = /timed out|timeout/i
/** A failure sooner than this is a check that noticed, whatever its text says of timeouts (a wait of 1 ms that found nothing). */
const SLOW_MS = 1000

/**
 * The first failing test, the first line of its error, and whether a timeout brought it, from
 * bun test's output: bun's note below the "(fail)" line that the test timed out, or a timeout
 * in what the test got (as Gloo's "Timed out waiting"): the received side of a failed
 * expectation, else the error thrown, of a test that ran SLOW_MS or longer. Not an expectation's
 * own message, which may well name a timeout the break would bring. A test's error is printed
 * above its "(fail)" line, its time at the end of that line.
 */
const firstFailure = (output: string): Failure => {
  const lines = output.split("\n")
  const failAt = lines.findIndex((l) => l.startsWith("(fail)"))
  let from = failAt < 0 ? 0 : failAt
  while (from > 0 && !/^\((pass|skip|todo)\)|^\S+\.test\.[jt]sx?:$/.test(lines[from - 1]!)) from--
  const block = lines.slice(from, failAt < 0 ? undefined : failAt)
  const errorLine = block.find((l) => /^(error|Error)\b/.test(l.trim()))
  const test = failAt < 0 ? "" : lines[failAt]!.replace(/^\(fail\) /, "").replace(/ \[[\d.]+m?s\]$/, "")
  const [, took, unit] = (failAt < 0 ? undefined : / \[([\d.]+)(m?s)\]$/.exec(lines[failAt]!)) ?? []
  const ms = took === undefined ? Infinity : Number(took) * (unit === "s" ? 1000 : 1)
  const why = (errorLine ?? "").trim().replace(/^error: /, "")
  const text = [test, why].filter(Boolean).join(": ") || lines.filter((l) => l.trim()).slice(-1)[0] || ""
  const note = failAt < 0 ? undefined : /this test timed out after \S+/.exec(lines[failAt + 1] ?? "")?.[0]
  const expectation = block.some((l) => /^\s*(\+ )?Received\b/.test(l))
  const got = expectation ? block.filter((l) => /^\s*(Received\b|\+ )/.test(l)) : errorLine === undefined ? [] : [errorLine]
  const timeoutLine = ms < SLOW_MS ? undefined : got.find((l) => TIMEOUT.test(l))?.trim()
  return { text, timeout: note ?? (timeoutLine === undefined ? undefined : `a timeout error after ${(ms / 1000).toFixed(1)} s: ${timeoutLine}`) }
}

// ---- the run ------------------------------------------------------------------------------

/** From best to worst: a test failed on the break; failures came only from timeouts; files were killed; none failed; it did not compile. */
const VERDICTS = ["caught", "timeout only", "hung (killed)", "SURVIVED", "does not build"] as const
type Verdict = (typeof VERDICTS)[number]

interface Outcome {
  readonly located: Located
  readonly verdict: Verdict
  readonly ms: number
  readonly failure: string
  /** How the failure came: "a failing check", or the timeout that brought it. */
  readonly how: string
}

const better = (a: Outcome | undefined, b: Outcome): Outcome =>
  a === undefined || VERDICTS.indexOf(b.verdict) < VERDICTS.indexOf(a.verdict) ? b : a

const applyAndRun = async (dir: string, l: Located): Promise<Outcome> => {
  const originals = new Map<string, string>()
  const native = l.files.some((f) => f.startsWith(NATIVE))
  try {
    if (native) ownBuild(dir)
    l.mutation.edits.forEach((e, i) => {
      const path = join(dir, l.files[i]!)
      const text = readFileSync(path, "utf8")
      if (!originals.has(path)) originals.set(path, text)
      writeFileSync(path, text.replace(e.search, () => e.replace))
    })
    let ms = 0
    if (native) {
      const built = await runIn(dir, ["make", "-j1", "--no-print-directory", "all"], 10 * timeoutMs)
      ms += built.ms
      if (built.code !== 0) {
        const last = built.output.split("\n").filter((x) => /error/i.test(x))[0] ?? (built.timedOut ? "make was killed" : built.output.trim().split("\n").slice(-1)[0])
        return { located: l, verdict: "does not build", ms, failure: last ?? "", how: "make -j1 all failed" }
      }
    }
    // One file at a time in the order listed (the most direct first), so the time says how
    // soon the first test that should notice does; the first file that fails other than by a
    // timeout ends it (unless --every).
    const seen: string[] = []
    let best: Outcome | undefined
    for (const test of l.mutation.tests) {
      const r = await runTests(dir, [test], timeoutMs)
      ms += r.ms
      const name = relative("tests", test)
      let outcome: Outcome | undefined
      if (r.timedOut) outcome = { located: l, verdict: "hung (killed)", ms, failure: `${name} still running`, how: `killed after --timeout ${timeoutMs / 1000} s` }
      else if (r.code !== 0) {
        const f = firstFailure(r.output)
        outcome = { located: l, verdict: f.timeout === undefined ? "caught" : "timeout only", ms, failure: `${name}: ${f.text}`, how: f.timeout ?? "a failing check" }
      }
      if (outcome !== undefined) best = better(best, outcome)
      seen.push(`${name} ${outcome === undefined ? "passed" : `${outcome.verdict} in ${(r.ms / 1000).toFixed(1)} s`}`)
      if (!every && best?.verdict === "caught") break
    }
    if (every) return { located: l, verdict: best?.verdict ?? "SURVIVED", ms: best?.ms ?? ms, failure: seen.join("; "), how: best?.how ?? "" }
    return best ?? { located: l, verdict: "SURVIVED", ms, failure: "", how: "" }
  } finally {
    for (const [path, text] of originals) writeFileSync(path, text)
    if (native) sharedBuild(dir)
  }
}

const cell = (s: string, max = 110) => (s.length > max ? `${s.slice(0, max - 1)}…` : s).replaceAll("|", "\\|")

const main = async () => {
  const listed: ReadonlyArray<Mutation> = listFile === undefined ? MUTATIONS : ((await import(resolve(listFile))) as { readonly MUTATIONS: ReadonlyArray<Mutation> }).MUTATIONS
  const chosen = listed.filter((m) => !only || `${m.area} ${m.behaviour}`.toLowerCase().includes(only))
  const { located, stale } = locate(chosen)
  if (stale.length > 0) {
    console.error(`stale entries in ${listFile ?? "scripts/mutations.ts"} (fix them before running):\n  ${stale.join("\n  ")}`)
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
        console.log(`  ${o.verdict.padEnd(14)} ${(o.ms / 1000).toFixed(1).padStart(5)} s  ${o.located.mutation.behaviour}${o.verdict === "caught" ? "" : `  (${o.how || "no test failed"})`}`)
      }
    }))
    console.log(`\n| # | area | behaviour broken | where | tests | result | time | how | first failure |`)
    console.log(`|---|---|---|---|---|---|---|---|---|`)
    outcomes.forEach((o, i) => {
      const m = o.located.mutation
      const tests = m.tests.map((t) => relative("tests", t)).join(", ")
      console.log(`| ${i + 1} | ${m.area} | ${cell(m.behaviour)} | ${o.located.where} | ${tests} | ${o.verdict} | ${(o.ms / 1000).toFixed(1)} s | ${cell(o.how, 80)} | ${cell(o.failure, 160)} |`)
    })
    const counted = (v: Verdict) => outcomes.filter((o) => o.verdict === v).length
    console.log(`\n${counted("caught")} of ${outcomes.length} breaks caught; ${counted("timeout only")} failed only by a timeout (not caught); ${counted("hung (killed)")} hung past ${timeoutMs / 1000} s; ${counted("SURVIVED")} survived; ${counted("does not build")} did not build`)
    if (counted("caught") !== outcomes.length) process.exitCode = 1
  } finally {
    rmSync(base, { recursive: true, force: true })
  }
}

if (import.meta.main) await main()
