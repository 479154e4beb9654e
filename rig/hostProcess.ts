/**
 * A process started inside one of the hosts (`ip netns exec`, which execs the program itself,
 * so the pid is the program's), with its output kept line by line for waiting and for
 * explaining a failure. It gets only the environment given (plus PATH and HOME), so nothing
 * from the test's own environment (a CONTROLLER_ADDR, a torchrun variable) leaks in.
 */
import type { Subprocess } from "bun"
import { inHost, type Host } from "./netns.ts"
import { OutputLines } from "./outputLines.ts"

const running = new Set<HostProcess>()

/** Kills every host process still running (a test's afterAll, whatever state a run was left in). */
export const killHostProcesses = (): void => {
  for (const p of running) p.kill()
}

export class HostProcess {
  /** The exit status once both output streams have ended. */
  readonly status: Promise<number>
  private readonly output: OutputLines
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
    this.output = new OutputLines(this.proc.stdout, this.proc.stderr)
    this.status = this.output.drained.then(() => this.proc.exited)
    void this.status.then(() => {
      running.delete(this)
      this.output.wake()
    })
  }

  get stdout(): string[] {
    return this.output.stdout
  }

  get stderr(): string[] {
    return this.output.stderr
  }

  get exited(): boolean {
    return this.proc.exitCode !== null || this.proc.signalCode !== null
  }

  /** The first stdout line that `match` accepts; rejects if the process ends or time runs out first. */
  line(match: (line: string) => boolean, timeoutMs: number): Promise<string> {
    return this.output.when(
      () => this.stdout.find(match) ?? (this.exited ? new Error(`${this.label} exited (${this.proc.exitCode ?? this.proc.signalCode}) first`) : undefined),
      timeoutMs,
      () => `${this.label}: no awaited line within ${timeoutMs} ms`,
    )
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
