/**
 * Runs the worker processes of a communicator test: a store server on a free port in this
 * process, N `tests/comm/worker.ts` processes that meet through it, and their stdout lines
 * (scenarios.ts) parsed as they arrive so a test can wait for an event.
 */
import type { Subprocess } from "bun"
import { startServer, type RunningServer } from "../../src/store/server.ts"
import type { WorkerLine } from "./scenarios.ts"

const BUN = process.execPath
const WORKER = new URL("./worker.ts", import.meta.url).pathname

/**
 * The two ways a communicator whose members share a host all-reduces: through shared memory
 * (the default), or over TCP as between hosts. The variable is set either way, so a value
 * exported in the test's own environment cannot change which path a test means.
 */
export interface CommPath {
  readonly name: string
  readonly env: Readonly<Record<string, string>>
  /** Whether a communicator of several members maps every member's shared segment. */
  readonly sharedMemory: boolean
}
export const SHARED_MEMORY: CommPath = { name: "shared memory", env: { MONARCH_COMM_SHM: "1" }, sharedMemory: true }
export const TCP: CommPath = { name: "TCP", env: { MONARCH_COMM_SHM: "0" }, sharedMemory: false }

export class WorkerProcess {
  readonly lines: WorkerLine[] = []
  readonly stderr: Promise<string>
  /** Settles once stdout has ended and every line is in `lines`. */
  readonly drained: Promise<void>
  private readonly waiters: Array<() => void> = []

  constructor(
    readonly rank: number,
    readonly proc: Subprocess<"ignore", "pipe", "pipe">,
  ) {
    this.stderr = new Response(proc.stderr).text()
    this.drained = this.read()
  }

  private async read(): Promise<void> {
    let pending = ""
    for await (const chunk of this.proc.stdout.pipeThrough(new TextDecoderStream())) {
      pending += chunk
      const parts = pending.split("\n")
      pending = parts.pop() ?? ""
      for (const part of parts) if (part.trim() !== "") this.lines.push(JSON.parse(part) as WorkerLine)
      for (const wake of this.waiters.splice(0)) wake()
    }
  }

  event(name: string): Extract<WorkerLine, { event: string }> | undefined {
    return this.lines.find((l): l is Extract<WorkerLine, { event: string }> => "event" in l && l.event === name)
  }

  /** Resolves with the event once the worker prints it; rejects if its output ends first. */
  async waitFor(name: string): Promise<Extract<WorkerLine, { event: string }>> {
    for (;;) {
      const found = this.event(name)
      if (found) return found
      const woke = new Promise<void>((resolve) => this.waiters.push(resolve))
      const exited = this.drained.then(() => "exited" as const)
      if ((await Promise.race([woke, exited])) === "exited") {
        const late = this.event(name)
        if (late) return late
        throw new Error(`worker ${this.rank} exited (${this.proc.exitCode}) before "${name}": ${await this.stderr}`)
      }
    }
  }

  checks(): Array<Extract<WorkerLine, { check: string }>> {
    return this.lines.filter((l): l is Extract<WorkerLine, { check: string }> => "check" in l)
  }
}

export class WorkerGroup implements AsyncDisposable {
  private constructor(
    readonly server: RunningServer,
    readonly workers: WorkerProcess[],
  ) {}

  /** env: variables set in every worker on top of this process's own (e.g. MONARCH_COMM_SHM). */
  static start(scenario: string, size: number, timeoutMs: number, env: Readonly<Record<string, string>> = {}): WorkerGroup {
    const server = startServer({ port: 0 })
    const workers = Array.from({ length: size }, (_, rank) => {
      const proc = Bun.spawn([BUN, WORKER, scenario, String(rank), String(size), String(timeoutMs), String(server.port)], {
        env: { ...process.env, ...env },
        stdin: "ignore",
        stdout: "pipe",
        stderr: "pipe",
      })
      return new WorkerProcess(rank, proc)
    })
    return new WorkerGroup(server, workers)
  }

  /** Waits for every worker to exit and returns their exit codes. */
  async exits(): Promise<number[]> {
    return Promise.all(this.workers.map(async (w) => {
      const code = await w.proc.exited
      await w.drained
      return code
    }))
  }

  async [Symbol.asyncDispose](): Promise<void> {
    for (const w of this.workers) if (w.proc.exitCode === null) w.proc.kill("SIGKILL")
    await this.exits()
    this.server.stop()
  }
}
