/**
 * A process started inside one of the hosts (`ip netns exec`, which execs the program itself,
 * so the pid is the program's), with its output kept line by line for waiting and for
 * explaining a failure. It gets only the environment given (plus PATH and HOME), so nothing
 * from the test's own environment (a CONTROLLER_ADDR, a torchrun variable) leaks in.
 */
import type { Subprocess } from "bun"
import { inHost, type Host } from "./netns.ts"

const running = new Set<HostProcess>()

/** Kills every host process still running (a test's afterAll, whatever state a run was left in). */
export const killHostProcesses = (): void => {
  for (const p of running) p.kill()
}

export class HostProcess {
  readonly stdout: string[] = []
  readonly stderr: string[] = []
  /** The exit status once both output streams have ended. */
  readonly status: Promise<number>
  private readonly wakers = new Set<() => void>()
  /** stdin is a pipe nobody writes: it closes when this process dies, however it dies. */
  private readonly proc: Subprocess<"pipe", "pipe", "pipe">

  constructor(
    readonly label: string,
    host: Host,
    argv: ReadonlyArray<string>,
    env: Readonly<Record<string, string>>,
  ) {
    const base = { PATH: process.env.PATH ?? "/usr/bin:/bin", HOME: process.env.HOME ?? "/root" }
    this.proc = Bun.spawn(inHost(host, argv), { env: { ...base, ...env }, stdin: "pipe", stdout: "pipe", stderr: "pipe" })
    running.add(this)
    const drained = Promise.all([this.pump(this.proc.stdout, this.stdout), this.pump(this.proc.stderr, this.stderr)])
    this.status = drained.then(() => this.proc.exited)
    void this.status.then(() => {
      running.delete(this)
      this.wake()
    })
  }

  get exited(): boolean {
    return this.proc.exitCode !== null || this.proc.signalCode !== null
  }

  private wake(): void {
    for (const w of [...this.wakers]) w()
  }

  private async pump(stream: ReadableStream<Uint8Array>, into: string[]): Promise<void> {
    const decoder = new TextDecoder()
    let pending = ""
    for await (const chunk of stream) {
      const parts = (pending + decoder.decode(chunk, { stream: true })).split("\n")
      pending = parts.pop()!
      into.push(...parts)
      this.wake()
    }
    if (pending) into.push(pending)
  }

  /** The first stdout line that `match` accepts; rejects if the process ends or time runs out first. */
  line(match: (line: string) => boolean, timeoutMs: number): Promise<string> {
    return new Promise((resolve, reject) => {
      const check = () => {
        const found = this.stdout.find(match)
        if (found !== undefined) return finish(() => resolve(found))
        if (this.exited) return finish(() => reject(new Error(`${this.label} exited (${this.proc.exitCode ?? this.proc.signalCode}) first`)))
      }
      const finish = (f: () => void) => {
        this.wakers.delete(check)
        clearTimeout(timer)
        f()
      }
      const timer = setTimeout(() => finish(() => reject(new Error(`${this.label}: no awaited line within ${timeoutMs} ms`))), timeoutMs)
      this.wakers.add(check)
      check()
    })
  }

  /** The exit status, or undefined if it has not exited within `timeoutMs`. */
  async exit(timeoutMs: number): Promise<number | undefined> {
    let timer: Timer | undefined
    const late = new Promise<undefined>((resolve) => (timer = setTimeout(resolve, timeoutMs)))
    const status = await Promise.race([this.status, late])
    clearTimeout(timer)
    return status
  }

  kill(): void {
    if (!this.exited) this.proc.kill("SIGKILL")
  }

  /** The last lines of its output, for a failure message. */
  tail(n = 15): string {
    return [...this.stdout.slice(-n).map((l) => `  [${this.label} out] ${l}`), ...this.stderr.slice(-n).map((l) => `  [${this.label} err] ${l}`)].join("\n")
  }
}
