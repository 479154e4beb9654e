/**
 * The processes of a fault scenario, started here so a test can kill exactly one of them:
 * worker processes (src/worker.ts with torchrun's environment, pointed at any store), a store
 * server in a process of its own (store_child.ts) and a controller program in a process of
 * its own (controller_child.ts). Every output line is kept with the time it arrived, so a
 * scenario can wait for a line and measure from it.
 */
import type { Subprocess } from "bun"

const BUN = process.execPath
const WORKER = new URL("../../src/worker.ts", import.meta.url).pathname
export const ROOT = new URL("../..", import.meta.url).pathname

export interface Line {
  readonly at: number
  readonly text: string
}

export interface Ended {
  /** Exit code, or 128 + signal number. */
  readonly status: number
  readonly signal: string | null
  readonly at: number
}

/** One child process: its lines as they come, and its end. */
export class Proc implements AsyncDisposable {
  readonly lines: Line[] = []
  readonly ended: Promise<Ended>
  private readonly wakers = new Set<() => void>()
  private end: Ended | undefined

  constructor(readonly name: string, readonly proc: Subprocess<"ignore", "pipe", "pipe">) {
    void this.pipe(proc.stdout)
    void this.pipe(proc.stderr)
    this.ended = proc.exited.then((status) => {
      this.end = { status, signal: proc.signalCode === null ? null : String(proc.signalCode), at: performance.now() }
      this.wake()
      return this.end
    })
  }

  get running(): boolean {
    return this.end === undefined
  }

  private wake(): void {
    for (const w of [...this.wakers]) w()
  }

  private async pipe(stream: ReadableStream<Uint8Array>): Promise<void> {
    const decoder = new TextDecoder()
    let pending = ""
    for await (const chunk of stream) {
      const parts = (pending + decoder.decode(chunk, { stream: true })).split("\n")
      pending = parts.pop()!
      const at = performance.now()
      for (const text of parts) this.lines.push({ at, text })
      this.wake()
    }
    if (pending) this.lines.push({ at: performance.now(), text: pending })
    this.wake()
  }

  /** The first line matching `pattern`, waiting up to `timeoutMs`; undefined if none came. */
  line(pattern: RegExp, timeoutMs: number): Promise<Line | undefined> {
    return this.until(() => this.lines.find((l) => pattern.test(l.text)), timeoutMs)
  }

  /** How the process ended, waiting up to `timeoutMs`; undefined if it is still running. */
  exit(timeoutMs: number): Promise<Ended | undefined> {
    return this.until(() => this.end, timeoutMs)
  }

  private until<A>(found: () => A | undefined, timeoutMs: number): Promise<A | undefined> {
    return new Promise((resolve) => {
      const check = () => {
        const v = found()
        if (v === undefined) return false
        this.wakers.delete(check)
        clearTimeout(timer)
        resolve(v)
        return true
      }
      const timer = setTimeout(() => {
        this.wakers.delete(check)
        resolve(found())
      }, timeoutMs)
      if (!check()) this.wakers.add(check)
    })
  }

  /** The last `n` lines, for a report. */
  tail(n = 15): string {
    return this.lines.slice(-n).map((l) => `[${this.name}] ${l.text}`).join("\n")
  }

  kill(signal: NodeJS.Signals = "SIGKILL"): number {
    this.proc.kill(signal)
    return performance.now()
  }

  async [Symbol.asyncDispose](): Promise<void> {
    if (this.running) this.proc.kill("SIGKILL")
    await this.ended
  }
}

const start = (name: string, command: string[], env: Record<string, string | undefined>): Proc => {
  // Nothing of ours leaks in from the test's own environment: each scenario says what it sets.
  const base = Object.fromEntries(Object.entries(process.env).filter(([k]) => !/^(MONARCH_|CONTROLLER_ADDR$|RANK$|WORLD_SIZE$|LOCAL_RANK$|MASTER_|STORE_|TORCHELASTIC_)/.test(k)))
  return new Proc(name, Bun.spawn(command, { env: { ...base, ...env }, stdin: "ignore", stdout: "pipe", stderr: "pipe" }))
}

/**
 * The job token of the attach scenarios: workers and controllers get it in their environment
 * (MONARCH_TOKEN), since attach never puts it in the store.
 */
export const FAULT_TOKEN = "faults-job-token-0123456789"

export interface StoreAddress {
  readonly host: string
  readonly port: number
}

/** `world` workers meeting through `store`, with the environment torchrun gives plus `env`. */
export const spawnWorkers = (world: number, store: StoreAddress, env: Record<string, string>): Proc[] =>
  Array.from({ length: world }, (_, rank) =>
    start(`worker ${rank}`, [BUN, WORKER], {
      RANK: String(rank), WORLD_SIZE: String(world), LOCAL_RANK: String(rank), LOCAL_WORLD_SIZE: String(world),
      STORE_HOSTNAME: store.host, STORE_PORT: String(store.port),
      MONARCH_FUNCTION_PATH: ROOT, MONARCH_LOG: "info", MONARCH_TOKEN: FAULT_TOKEN,
      ...env,
    }))

/** A store server in a process of its own, once it listens. */
export const spawnStore = async (): Promise<{ proc: Proc; address: StoreAddress }> => {
  const proc = start("store", [BUN, new URL("./store_child.ts", import.meta.url).pathname], {})
  const ready = await proc.line(/^listening \d+$/, 15_000)
  if (!ready) {
    await proc[Symbol.asyncDispose]()
    throw new Error(`the store process did not start:\n${proc.tail()}`)
  }
  return { proc, address: { host: "127.0.0.1", port: Number(ready.text.split(" ")[1]) } }
}

/**
 * A controller program in a process of its own that attaches to `world` workers through
 * `store`, runs one all-reduce over them and prints `ready <sum>`, then idles until killed;
 * with `backlog`, it then queues that many commands of `holdMs` each and prints `queued <n>`.
 */
export const spawnController = (world: number, store: StoreAddress, backlog?: { readonly commands: number; readonly holdMs: number }): Proc =>
  start("controller", [BUN, new URL("./controller_child.ts", import.meta.url).pathname, store.host, String(store.port), String(world),
    ...(backlog ? [`${backlog.commands},${backlog.holdMs}`] : [])], { MONARCH_TOKEN: FAULT_TOKEN })

/** Kills and reaps every process still running. */
export const stopAll = async (procs: ReadonlyArray<Proc | undefined>): Promise<void> => {
  await Promise.all(procs.map((p) => p?.[Symbol.asyncDispose]()))
}
