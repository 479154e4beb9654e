// The README's checkpoint program (the block with ctl.supervise and save) killed with SIGKILL
// once it has published a checkpoint and before it ends, then started again in the same folder:
// it resumes after the saved step and ends with the same weights, bit for bit, as the program
// run once without interruption (no step repeated or skipped, the optimizer's moments restored).
import { expect, test } from "bun:test"
import { existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from "node:fs"
import { join } from "node:path"
import { readmeBlocks } from "./blocks"

const ROOT = join(import.meta.dir, "../..")
const block = readmeBlocks(readFileSync(join(ROOT, "README.md"), "utf8")).find((b) => b.code.includes("ctl.supervise(") && b.code.includes("save(mesh"))

const folder = (name: string) => {
  const dir = join(ROOT, "build/readme-resume", name)
  rmSync(dir, { recursive: true, force: true })
  mkdirSync(dir, { recursive: true })
  writeFileSync(join(dir, "program.ts"), block!.code)
  return dir
}
const start = (dir: string) =>
  Bun.spawn([process.execPath, "run", "program.ts"], { cwd: dir, stdout: "pipe", stderr: "pipe", env: { ...process.env, MONARCH_DEVICE: "cpu" } })
const finish = async (proc: ReturnType<typeof start>) => {
  const timer = setTimeout(() => proc.kill(9), 90_000)
  const [stdout, stderr, exitCode] = await Promise.all([new Response(proc.stdout).text(), new Response(proc.stderr).text(), proc.exited])
  clearTimeout(timer)
  return { lines: stdout.trim().split("\n"), stderr, exitCode, signal: proc.signalCode }
}

test("the README's checkpoint program, killed mid-run (SIGKILL) and run again, resumes and ends bitwise as an uninterrupted run", async () => {
  expect(block).toBeDefined()
  const whole = await finish(start(folder("whole")))
  expect({ exitCode: whole.exitCode, stderr: whole.stderr }).toEqual({ exitCode: 0, stderr: "" })
  const weights = JSON.parse(whole.lines.at(-1)!) as number[]
  expect(weights.length).toBeGreaterThan(0)

  const dir = folder("killed")
  const latest = join(dir, "ckpt/run/LATEST")
  const first = start(dir)
  // Killed as soon as its first checkpoint is published (polled every millisecond).
  while (!existsSync(latest) && first.exitCode === null) await Bun.sleep(1)
  first.kill(9)
  const killed = await finish(first)
  expect(killed.signal).toBe("SIGKILL")
  const saved = Number(/^step-(\d+)-/.exec(readFileSync(latest, "utf8").trim())![1])
  expect(saved).toBeLessThan(100)
  expect(killed.lines.some((l) => l.startsWith("["))).toBe(false)

  const again = await finish(start(dir))
  expect({ exitCode: again.exitCode, stderr: again.stderr }).toEqual({ exitCode: 0, stderr: "" })
  const resumedAt = Number(/^resumed after step (\d+)$/.exec(again.lines[0]!)![1])
  expect(resumedAt).toBeGreaterThanOrEqual(saved)
  // Bit for bit: the JSON of each float32 (widened to a double) round-trips exactly.
  expect(JSON.parse(again.lines.at(-1)!)).toEqual(weights)
}, 200_000)
