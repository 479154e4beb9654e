// Whatever way a controller program ends, its workers end with it (program_end_child.ts, real
// processes): a defect that skips the layer's finalizers, a runtime never disposed, an uncaught
// exception, also with the workers inside a long command. The program's process exits on its
// own, and its workers are gone soon after.
import { expect, test } from "bun:test"
import { isAlive } from "../processes.ts"

const CHILD = new URL("./program_end_child.ts", import.meta.url).pathname
/** How long the program's process may take from its start to its exit (workers start, one fetch), and its workers after it. */
const EXIT_MS = 15_000, WORKERS_MS = 3000

const HOW = {
  invalid: "with a non-Effect yielded (past its finalizers)",
  forgotten: "without disposing its runtime",
  throws: "with an uncaught exception",
  busy: "with an uncaught exception while its workers are inside a 30 s command",
} as const

for (const mode of Object.keys(HOW) as Array<keyof typeof HOW>)
  test(`a program that ends ${HOW[mode]}: its process exits and its workers end`, async () => {
    const proc = Bun.spawn([process.execPath, CHILD, mode], { stdout: "pipe", stderr: "pipe", env: { ...process.env, MONARCH_LOG: "error" } })
    let out = ""
    const reading = (async () => {
      for await (const chunk of proc.stdout) out += new TextDecoder().decode(chunk)
    })()
    const t0 = performance.now()
    const exited = await Promise.race([proc.exited, Bun.sleep(EXIT_MS).then(() => "still running")])
    await Promise.race([reading, Bun.sleep(1000)])
    const pids = JSON.parse(/pids (\[[\d,]*\])/.exec(out)?.[1] ?? "[]") as number[]
    try {
      expect(pids.length, `the program printed: ${out}`).toBe(2)
      expect(exited, `the program's process (${performance.now() - t0} ms): ${out}`).not.toBe("still running")
      const deadline = performance.now() + WORKERS_MS
      while (pids.some(isAlive) && performance.now() < deadline) await Bun.sleep(20)
      expect(pids.filter(isAlive), "workers alive after their program's process exited").toEqual([])
    } finally {
      for (const p of pids) if (isAlive(p)) process.kill(p, "SIGKILL")
      proc.kill("SIGKILL")
    }
    if (mode === "invalid") expect(out).toContain("rejected: ")
    if (mode !== "invalid") expect(out).toContain("fetched 1")
  }, 40_000)
