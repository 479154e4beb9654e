/**
 * Real torchrun jobs of src/worker.ts for the torchrun tests: Debian's torch 1.13 at
 * /usr/bin/python3 (or TORCH_PYTHON), `--no_python --nproc_per_node 2`, every line it prints kept.
 */
import { readFileSync } from "node:fs"

export const PYTHON = process.env.TORCH_PYTHON ?? "/usr/bin/python3"
export const WORKER = new URL("../../src/worker.ts", import.meta.url).pathname

/** A process's environment, from /proc: what torchrun actually gave a worker. */
export const environOf = (pid: number): Record<string, string> =>
  Object.fromEntries(readFileSync(`/proc/${pid}/environ`, "latin1").split("\0").filter((e) => e.includes("="))
    .map((e) => [e.slice(0, e.indexOf("=")), e.slice(e.indexOf("=") + 1)]))

export interface Torchrun {
  readonly output: string[]
  readonly status: Promise<number>
  readonly running: () => boolean
  readonly kill: () => void
}

/**
 * Runs torchrun over two workers. Debian's 1.13 on Python 3.11 cannot parse the default
 * --redirects/--tee of "0" (its Std flag lookup misses the zero member), so stdout goes to the
 * log folder only (1) and stderr, where the workers log, is teed to the console as well (2).
 */
export const torchrun = (flags: string[], env: Record<string, string>, logDir: string): Torchrun => {
  const proc = Bun.spawn([
    PYTHON, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--no_python", "--redirects", "1", "--tee", "2",
    "--log_dir", logDir, "--monitor_interval", "0.2", ...flags, process.execPath, WORKER,
  ], { env: { ...process.env, ...env }, stdin: "ignore", stdout: "pipe", stderr: "pipe" })
  const output: string[] = []
  const pump = async (s: ReadableStream<Uint8Array>) => {
    const decoder = new TextDecoder()
    let pending = ""
    for await (const chunk of s) {
      const lines = (pending + decoder.decode(chunk, { stream: true })).split("\n")
      pending = lines.pop()!
      output.push(...lines)
    }
    if (pending) output.push(pending)
  }
  let exited = false
  const drained = Promise.all([pump(proc.stdout), pump(proc.stderr)])
  const status = drained.then(() => proc.exited).finally(() => { exited = true })
  return { output, status, running: () => !exited, kill: () => proc.kill("SIGKILL") }
}
