// The project typechecks, and so does every TypeScript block in README.md, compiled the way a
// user's program is: each block is its own module, importing the package by its name.
import { describe, expect, test } from "bun:test"
import { mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs"
import { join } from "node:path"
import { readmeBlocks } from "../readme/blocks"

const ROOT = new URL("../..", import.meta.url).pathname
const TSC = join(ROOT, "node_modules/.bin/tsc")

/** Runs tsc on a project; its diagnostics are on stdout. */
const tsc = (project: string) => {
  const run = Bun.spawnSync([TSC, "--noEmit", "--pretty", "false", "-p", project], { cwd: ROOT, stdout: "pipe", stderr: "pipe" })
  return { exitCode: run.exitCode, output: `${run.stdout.toString()}${run.stderr.toString()}`.trim() }
}

describe("typecheck", () => {
  test("src, ffi, tests, bench, examples and scripts typecheck (tsc --noEmit -p .)", () => {
    const { exitCode, output } = tsc("tsconfig.json")
    if (exitCode !== 0) console.error(output)
    expect(output).toBe("")
    expect(exitCode).toBe(0)
  }, 120_000)

  test("every TypeScript block in README.md typechecks as a program of its own", () => {
    const blocks = readmeBlocks(readFileSync(join(ROOT, "README.md"), "utf8"))
    expect(blocks.length).toBeGreaterThanOrEqual(2)
    // Inside the repository so that `monarch-bun/...` resolves to this package (its exports),
    // as it does from a user's node_modules.
    const dir = join(ROOT, "build/readme-blocks")
    rmSync(dir, { recursive: true, force: true })
    mkdirSync(dir, { recursive: true })
    for (const b of blocks) writeFileSync(join(dir, `README.md-line-${b.line}.ts`), `${b.code}\nexport {}\n`)
    writeFileSync(join(dir, "tsconfig.json"), JSON.stringify({ extends: "../../tsconfig.json", include: ["."] }))
    const { exitCode, output } = tsc(join(dir, "tsconfig.json"))
    if (exitCode !== 0) console.error(`README.md's TypeScript blocks (file names give each block's first line):\n${output}`)
    expect(output).toBe("")
    expect(exitCode).toBe(0)
  }, 120_000)

  test("examples and README.md use no member the sources mark @internal", () => {
    // `/** @internal ... */ readonly core: Core` and the like, anywhere in src/.
    const internal = new Set<string>()
    const walk = (dir: string) => {
      for (const e of readdirSync(dir, { withFileTypes: true })) {
        const path = join(dir, e.name)
        if (e.isDirectory()) walk(path)
        else if (e.name.endsWith(".ts"))
          for (const m of readFileSync(path, "utf8").matchAll(/@internal[^*]*\*\/\s*(?:readonly\s+|static\s+|get\s+)*(\w+)/g)) internal.add(m[1]!)
      }
    }
    walk(join(ROOT, "src"))
    expect(internal.size).toBeGreaterThan(0)
    const users = [
      ...readdirSync(join(ROOT, "examples")).filter((f) => f.endsWith(".ts")).map((f) => ({ name: `examples/${f}`, code: readFileSync(join(ROOT, "examples", f), "utf8") })),
      ...readmeBlocks(readFileSync(join(ROOT, "README.md"), "utf8")).map((b) => ({ name: `README.md line ${b.line}`, code: b.code })),
    ]
    const uses = users.flatMap(({ name, code }) => [...internal].filter((m) => new RegExp(`\\.${m}\\b`).test(code)).map((m) => `${name}: .${m}`))
    expect(uses).toEqual([])
  })
})
