/**
 * A torch 1.13 reference process for parity tests: one Python process (Debian's, which has
 * torch) serving many cases over pipes, one JSON object per line each way, answers matched to
 * requests by id. JSON has no NaN or infinities: numbers that are not finite go as strings
 * ("NaN", "Infinity", "-Infinity"); the scripts spell theirs "nan", "inf" (`fromJson` reads both).
 */
import { existsSync } from "node:fs"

export const PYTHON = "/usr/bin/python3"

/** Why torch cannot serve here, or undefined when it can. */
export const torchMissing = (): string | undefined => {
  if (!existsSync(PYTHON)) return `${PYTHON} not found`
  const r = Bun.spawnSync([PYTHON, "-c", "import torch"], { stderr: "pipe" })
  return r.exitCode === 0 ? undefined : `torch does not import in ${PYTHON}: ${r.stderr.toString().trim().split("\n").at(-1)}`
}

const NON_FINITE: Readonly<Record<string, number>> = { inf: Infinity, "-inf": -Infinity, Infinity, "-Infinity": -Infinity }
/** A number from a JSON answer: itself, or the value its string spells. */
export const fromJson = (v: number | string): number => (typeof v === "string" ? NON_FINITE[v] ?? NaN : v)

/** The reference process running `script` (one thread, as the workers' kernels are compared at). */
export class TorchServer {
  private readonly proc
  private readonly answers = new Map<number, unknown>()
  private readonly waiting = new Map<number, (v: unknown) => void>()

  constructor(script: string) {
    this.proc = Bun.spawn([PYTHON, script], { stdin: "pipe", stdout: "pipe", stderr: "inherit", env: { ...process.env, OMP_NUM_THREADS: "1" } })
    void this.read()
  }

  private async read(): Promise<void> {
    let buf = ""
    for await (const chunk of this.proc.stdout) {
      buf += new TextDecoder().decode(chunk)
      let nl: number
      while ((nl = buf.indexOf("\n")) >= 0) {
        const answer = JSON.parse(buf.slice(0, nl)) as { id: number }
        buf = buf.slice(nl + 1)
        const w = this.waiting.get(answer.id)
        if (w) w(answer)
        else this.answers.set(answer.id, answer)
      }
    }
  }

  /** Sends `request` with its `id`; resolves with the answer of that id. */
  ask<A = any>(id: number, request: Readonly<Record<string, unknown>>): Promise<A> {
    this.proc.stdin.write(JSON.stringify({ id, ...request }, (_, v) => (typeof v === "number" && !Number.isFinite(v) ? String(v) : v)) + "\n")
    this.proc.stdin.flush()
    if (this.answers.has(id)) return Promise.resolve(this.answers.get(id) as A)
    return new Promise<A>((resolve) => this.waiting.set(id, (v) => resolve(v as A)))
  }

  close(): void {
    this.proc.stdin.end()
  }
}
