// Every complete program in README.md (a block that ends in Effect.runPromise) runs as a user
// would run it, `bun run program.ts`, importing the package by its name, and exits cleanly.
// The typed-tensors block is a "program written only from the README": broadcasting,
// softmax, cat, indexing and cross_entropy through the typed API; its printed shape and loss are
// checked too, and so are the rows each dp rank gets in the how-to that uploads a host batch.
import { describe, expect, test } from "bun:test"
import { mkdirSync, readFileSync, rmSync, writeFileSync } from "node:fs"
import { join } from "node:path"
import { readmeBlocks } from "./blocks"

const ROOT = join(import.meta.dir, "../..")
const BUN = process.execPath
const blocks = readmeBlocks(readFileSync(join(ROOT, "README.md"), "utf8"))
const programs = blocks.filter((b) => b.code.includes("Effect.runPromise("))
/** Modules a program calls into (a block whose first line is `// <name>.ts`): written beside every program, under its function root. */
const modules = blocks.flatMap((b) => {
  const name = /^\/\/ (\w+\.ts)\n/.exec(b.code)?.[1]
  return name === undefined ? [] : [{ name, code: b.code }]
})

/** Runs one block from its own folder inside the repository (so `monarch-bun/...` resolves to this package). */
const run = async (b: { line: number; code: string }) => {
  const dir = join(ROOT, "build/readme-programs", `line-${b.line}`)
  rmSync(dir, { recursive: true, force: true })
  mkdirSync(dir, { recursive: true })
  writeFileSync(join(dir, "program.ts"), b.code)
  for (const m of modules) writeFileSync(join(dir, m.name), m.code)
  const proc = Bun.spawn([BUN, "run", "program.ts"], { cwd: dir, stdout: "pipe", stderr: "pipe", env: { ...process.env, MONARCH_DEVICE: "cpu" } })
  const timer = setTimeout(() => proc.kill(9), 90_000)
  const [stdout, stderr, exitCode] = await Promise.all([new Response(proc.stdout).text(), new Response(proc.stderr).text(), proc.exited])
  clearTimeout(timer)
  return { stdout, stderr, exitCode }
}

describe("README.md's programs run", () => {
  test("the README has its programs (the quick start and the typed-tensors one among them)", () => {
    expect(programs.length).toBeGreaterThanOrEqual(5)
    expect(programs.some((b) => b.code.includes("probs.shape") && b.code.includes("cross_entropy") && b.code.includes("softmax") && b.code.includes("ops.cat"))).toBe(true)
  })

  for (const b of programs) {
    test(`README.md line ${b.line} runs and exits 0`, async () => {
      const { stdout, stderr, exitCode } = await run(b)
      if (exitCode !== 0) console.error(`README.md line ${b.line} exited ${exitCode}:\n${stdout}\n${stderr}`)
      expect(exitCode).toBe(0)
      if (b.code.includes("console.log")) expect(stdout.trim()).not.toBe("")
      if (b.code.includes("ranks: held")) {
        // The how-to's host batch: every dp rank holds its own block of rows, in rank order, and the handle printed as such.
        const { batch, ranks } = JSON.parse(stdout.trim().split("\n").at(-1)!) as { batch: number[]; ranks: number[][] }
        const per = batch.length / ranks.length
        expect(ranks).toEqual(ranks.map((_, r) => batch.slice(r * per, (r + 1) * per)))
        expect(stdout).toContain("placement={dp: shard(0)}, local_size=[4, 3]")
      }
      if (b.code.includes("tp:rowParallel")) {
        // The function's tp all_reduce gives x @ w on the controller's own matmul, up to f32 rounding.
        const gap = Number(/largest difference from x @ w: (\S+)/.exec(stdout)?.[1])
        expect(gap).toBeGreaterThanOrEqual(0)
        expect(gap).toBeLessThan(1e-5)
      }
      if (b.code.includes("probs.shape")) {
        // the shape known at the call, then the loss fetched as a Float32Array element
        const [shape, loss] = stdout.trim().split("\n")
        expect(shape).toBe("[ 8, 10 ]")
        expect(Number.isFinite(Number(loss))).toBe(true)
        expect(Number(loss)).toBeGreaterThan(0)
      }
    }, 120_000)
  }
})
