// Shared by the store tests: running scoped Effects, a raw TCP peer that sends exact bytes and
// reads exact replies, and Python subprocesses. Debian's torch 1.13 lives at /usr/bin/python3;
// TORCH_PYTHON points the interop tests at another interpreter (a torch 2.x one, say).
import { Effect, type Scope } from "effect"

export const run = <A, E>(effect: Effect.Effect<A, E, Scope.Scope>): Promise<A> =>
  Effect.runPromise(Effect.scoped(effect))

export const text = (bytes: Uint8Array) => new TextDecoder().decode(bytes)

/** Little-endian byte builders for hand-written requests. */
export const u64 = (n: number | bigint) => {
  const b = new Uint8Array(8)
  new DataView(b.buffer).setBigUint64(0, BigInt(n), true)
  return [...b]
}
export const u32 = (n: number) => {
  const b = new Uint8Array(4)
  new DataView(b.buffer).setUint32(0, n, true)
  return [...b]
}
export const str = (s: string) => {
  const b = new TextEncoder().encode(s)
  return [...u64(b.byteLength), ...b]
}
export const bytes = (...parts: Array<number | ArrayLike<number>>) =>
  new Uint8Array(parts.flatMap((p) => (typeof p === "number" ? [p] : Array.from(p))))

/** A TCP peer that writes exactly what it is given and reads exact byte counts. */
export class RawPeer {
  private received: Array<number> = []
  private waiter: (() => void) | null = null
  closed = false
  private constructor() {}

  static async connect(port: number): Promise<RawPeer> {
    const peer = new RawPeer()
    const socket = await Bun.connect({
      hostname: "127.0.0.1",
      port,
      socket: {
        binaryType: "uint8array",
        data(_s, chunk) {
          peer.received.push(...chunk)
          peer.waiter?.()
        },
        close() {
          peer.closed = true
          peer.waiter?.()
        },
      },
    })
    peer.send = (b) => void socket.write(b)
    peer.end = () => socket.end()
    return peer
  }

  send: (b: Uint8Array) => void = () => {}
  end: () => void = () => {}

  /** Resolves when `cond` holds, or false after `ms`. */
  private until(cond: () => boolean, ms: number): Promise<boolean> {
    return new Promise((resolve) => {
      const check = () => {
        if (!cond()) return
        clearTimeout(timer)
        this.waiter = null
        resolve(true)
      }
      const timer = setTimeout(() => {
        this.waiter = null
        resolve(false)
      }, ms)
      this.waiter = check
      check()
    })
  }

  /** The next `n` bytes; throws if they do not arrive within `ms`. */
  async read(n: number, ms = 2000): Promise<Array<number>> {
    if (!(await this.until(() => this.received.length >= n, ms))) {
      throw new Error(`expected ${n} bytes, got ${this.received.length} (closed: ${this.closed})`)
    }
    return this.received.splice(0, n)
  }

  /** Everything received so far. */
  pending(): Array<number> {
    return [...this.received]
  }

  /** Whether the server closed the connection within `ms`. */
  closedWithin(ms: number): Promise<boolean> {
    return this.until(() => this.closed, ms)
  }
}

const PYTHON = process.env.TORCH_PYTHON ?? "/usr/bin/python3"

/** Whether torch imports, and its version; the reason when it does not. */
export const torchAvailable = (): { ok: true; version: string } | { ok: false; reason: string } => {
  const r = Bun.spawnSync([PYTHON, "-c", "import torch; print(torch.__version__)"], { stdout: "pipe", stderr: "pipe" })
  if (r.exitCode === 0) return { ok: true, version: r.stdout.toString().trim() }
  return { ok: false, reason: `${PYTHON} -c "import torch" failed: ${r.stderr.toString().trim().split("\n").pop()}` }
}

const pythonEnv = () => ({ ...process.env, PYTHONUNBUFFERED: "1", OMP_NUM_THREADS: "1" })

/** Runs a script from this folder to completion, killing it after `timeoutMs`. */
export const runPython = async (script: string, args: Array<string>, timeoutMs: number) => {
  const proc = Bun.spawn([PYTHON, `${import.meta.dir}/${script}`, ...args], {
    env: pythonEnv(),
    stdout: "pipe",
    stderr: "pipe",
  })
  const timer = setTimeout(() => proc.kill("SIGKILL"), timeoutMs)
  const [stdout, stderr, code] = await Promise.all([proc.stdout.text(), proc.stderr.text(), proc.exited])
  clearTimeout(timer)
  return { code, stdout, stderr }
}

/** A long-lived script that answers JSON lines on stdin with JSON lines on stdout. */
export class PythonPeer {
  private lines: Array<string> = []
  private buffered = ""
  private wake: (() => void) | null = null

  constructor(readonly proc: Bun.Subprocess<"pipe", "pipe", "inherit">) {
    void this.pumpStdout()
  }

  static start(script: string, args: Array<string>, timeoutMs: number): PythonPeer {
    const proc = Bun.spawn([PYTHON, `${import.meta.dir}/${script}`, ...args], {
      env: pythonEnv(),
      stdin: "pipe",
      stdout: "pipe",
      stderr: "inherit",
    })
    const timer = setTimeout(() => proc.kill("SIGKILL"), timeoutMs)
    void proc.exited.then(() => clearTimeout(timer))
    return new PythonPeer(proc)
  }

  private async pumpStdout() {
    const decoder = new TextDecoder()
    for await (const chunk of this.proc.stdout) {
      this.buffered += decoder.decode(chunk)
      const parts = this.buffered.split("\n")
      this.buffered = parts.pop()!
      this.lines.push(...parts)
      this.wake?.()
    }
    this.wake?.()
  }

  /** The next JSON line, or an error when the process ends first. */
  async next(): Promise<any> {
    while (this.lines.length === 0) {
      if (this.proc.exitCode !== null) throw new Error(`python exited with ${this.proc.exitCode}`)
      await new Promise<void>((resolve) => {
        this.wake = resolve
        setTimeout(resolve, 100)
      })
    }
    return JSON.parse(this.lines.shift()!)
  }

  async call(cmd: unknown): Promise<any> {
    this.proc.stdin.write(`${JSON.stringify(cmd)}\n`)
    this.proc.stdin.flush()
    return this.next()
  }

  async stop() {
    this.proc.stdin.end()
    await this.proc.exited
  }
}
