// The launcher's command line (src/launch.ts) as a user runs it: a real launcher process
// starting real child processes (tests/launch/child.ts), observed through its output, its
// exit status and signals.
import { describe, expect, test } from "bun:test"
import type { Subprocess } from "bun"
import { existsSync, mkdtempSync, readFileSync, rmSync, statSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { Controller } from "../../src/controller/index.ts"
import { allReduce, ATTACH_TOKEN, withController } from "../attaching.ts"
import { freePort, isAlive } from "../processes.ts"
import { OutputLines } from "../../rig/outputLines.ts"

const BUN = process.execPath
const LAUNCH = new URL("../../src/launch.ts", import.meta.url).pathname
const CHILD = new URL("./child.ts", import.meta.url).pathname
const WORKER = new URL("../../src/worker.ts", import.meta.url).pathname

/** A running launcher and everything it prints, line by line. */
class Launcher {
  readonly status: Promise<number>
  private readonly output: OutputLines

  constructor(readonly proc: Subprocess<"ignore", "pipe", "pipe">) {
    this.output = new OutputLines(proc.stdout, proc.stderr)
    this.status = this.output.drained.then(() => proc.exited)
  }

  static start(own: string[], command: string[], env: Record<string, string> = {}): Launcher {
    const proc = Bun.spawn([BUN, "run", LAUNCH, ...own, "--", ...command], {
      env: { ...process.env, ...env }, stdin: "ignore", stdout: "pipe", stderr: "pipe",
    })
    return new Launcher(proc)
  }

  get stdout(): string[] {
    return this.output.stdout
  }

  get stderr(): string[] {
    return this.output.stderr
  }

  /** Resolves once every line in `wanted` has appeared on stdout. */
  waitForLines(wanted: string[], timeoutMs: number): Promise<void> {
    return this.output.when(
      () => (wanted.every((w) => this.stdout.includes(w)) ? true : undefined),
      timeoutMs,
      () => `timed out waiting for ${JSON.stringify(wanted)}; stdout so far: ${JSON.stringify(this.stdout)}`,
    ).then(() => {})
  }
}

const child = (mode: string) => [CHILD, mode]

/** Lines of stdout from `rank`, without the "[rank] " prefix. */
const fromRank = (lines: string[], rank: number) =>
  lines.filter((l) => l.startsWith(`[${rank}] `)).map((l) => l.slice(`[${rank}] `.length))

describe("launch: environment", () => {
  test("every process gets its rank, the world, the store and one token", async () => {
    const l = Launcher.start(["--nproc", "3"], child("env"), { EXTRA: "passed through" })
    expect(await l.status).toBe(0)
    const envs = [0, 1, 2].map((r) => {
      const lines = fromRank(l.stdout, r)
      expect(lines).toHaveLength(1)
      return JSON.parse(lines[0]!) as Record<string, string | null>
    })
    const port = Number(envs[0]!.STORE_PORT)
    expect(port).toBeGreaterThan(0)
    const token = envs[0]!.MONARCH_TOKEN!
    expect(token).toMatch(/^[0-9a-f]{32}$/)
    envs.forEach((env, r) =>
      expect(env).toEqual({
        RANK: String(r), WORLD_SIZE: "3", LOCAL_RANK: String(r), LOCAL_WORLD_SIZE: "3",
        STORE_HOSTNAME: "127.0.0.1", STORE_PORT: String(port), MASTER_ADDR: "127.0.0.1", MASTER_PORT: String(port),
        MONARCH_TOKEN: token, EXTRA: "passed through",
      }))
  }, 20_000)

  test("--store-port, --host and a MONARCH_TOKEN of the caller's are used", async () => {
    const port = await freePort()
    const l = Launcher.start(["--nproc", "2", "--store-port", String(port), "--host", "127.0.0.1"], child("env"), { MONARCH_TOKEN: "caller-token" })
    expect(await l.status).toBe(0)
    for (const r of [0, 1]) {
      const env = JSON.parse(fromRank(l.stdout, r)[0]!)
      expect(env).toMatchObject({ STORE_PORT: String(port), MASTER_PORT: String(port), MONARCH_TOKEN: "caller-token", RANK: String(r) })
    }
  }, 20_000)

  test("given no token, it writes the one it made to a file only its user reads, says where on stderr, and removes it at the end", async () => {
    const { MONARCH_TOKEN: _, MONARCH_TOKEN_FILE: __, ...env } = process.env
    const proc = Bun.spawn([BUN, "run", LAUNCH, "--nproc", "2", "--", ...child("env-wait")], { env, stdin: "ignore", stdout: "pipe", stderr: "pipe" })
    const l = new Launcher(proc)
    const deadline = performance.now() + 15_000
    while ((fromRank(l.stdout, 0).length === 0 || fromRank(l.stdout, 1).length === 0 || !l.stderr.some((x) => x.startsWith("launch: store at"))) && performance.now() < deadline) await Bun.sleep(20)
    const said = l.stderr.find((x) => x.startsWith("launch: store at"))
    const file = /the job's token is in (\S+) \(a controller attaches with MONARCH_TOKEN_FILE=\1;/.exec(said ?? "")?.[1]
    expect(file, `stderr: ${l.stderr.join("\n")}`).toBeDefined()
    const token = JSON.parse(fromRank(l.stdout, 0)[0]!).MONARCH_TOKEN
    expect(token).toMatch(/^[0-9a-f]{32}$/)
    expect(JSON.parse(fromRank(l.stdout, 1)[0]!).MONARCH_TOKEN).toBe(token)
    expect(readFileSync(file!, "utf8").trim()).toBe(token)
    expect(statSync(file!).mode & 0o777).toBe(0o600)
    proc.kill("SIGTERM")
    await l.status
    expect(existsSync(file!)).toBe(false)
  }, 30_000)

  test("two jobs at once get different stores and tokens", async () => {
    const [a, b] = [Launcher.start(["--nproc", "1"], child("env")), Launcher.start(["--nproc", "1"], child("env"))]
    expect([await a.status, await b.status]).toEqual([0, 0])
    const [ea, eb] = [JSON.parse(fromRank(a.stdout, 0)[0]!), JSON.parse(fromRank(b.stdout, 0)[0]!)]
    expect(ea.STORE_PORT).not.toBe(eb.STORE_PORT)
    expect(ea.MONARCH_TOKEN).not.toBe(eb.MONARCH_TOKEN)
  }, 20_000)
})

describe("launch: output", () => {
  test("each line is prefixed with its rank, on the stream it was written to, partial last lines included", async () => {
    const l = Launcher.start(["--nproc", "2"], child("lines"))
    expect(await l.status).toBe(0)
    for (const r of [0, 1]) {
      expect(fromRank(l.stdout, r).sort()).toEqual([`line 1 of ${r}`, `line 3 of ${r}`])
      expect(fromRank(l.stderr, r)).toEqual([`line 2 of ${r}`])
    }
  }, 20_000)
})

describe("launch: failures", () => {
  test("a rank that exits 3 stops the others, and the launcher exits 3 quickly", async () => {
    const t0 = performance.now()
    const l = Launcher.start(["--nproc", "3"], child("fail"))
    const status = await l.status
    const took = performance.now() - t0
    expect(status).toBe(3)
    // The sleepers would run for a minute; the launcher must not wait for them.
    expect(took).toBeLessThan(10_000)
    expect(l.stderr.join("\n")).toContain("rank 1 exited with status 3")
    const pids = [0, 1, 2].map((r) => Number(fromRank(l.stdout, r)[0]!.replace("pid ", "")))
    for (const pid of pids) expect(isAlive(pid)).toBe(false)
  }, 20_000)

  test("a program that cannot start fails the launch with a message", async () => {
    const l = Launcher.start(["--nproc", "2"], ["/nonexistent/program"])
    expect(await l.status).toBe(1)
    expect(l.stderr.join("\n")).toContain("/nonexistent/program")
  }, 20_000)

  test("bad arguments print the usage and exit 2", async () => {
    const l = Launcher.start(["--nproc", "2"], [])
    expect(await l.status).toBe(2)
    expect(l.stderr.join("\n")).toContain("usage:")
    const zero = Launcher.start(["--nproc", "0"], child("env"))
    expect(await zero.status).toBe(1)
    expect(zero.stderr.join("\n")).toContain("--nproc must be at least 1")
  }, 20_000)
})

describe("launch: signals", () => {
  for (const [sig, number] of [["SIGTERM", 15], ["SIGINT", 2]] as const)
    test(`${sig} to the launcher reaches every process`, async () => {
      const l = Launcher.start(["--nproc", "2"], child("signal"))
      await l.waitForLines(["[0] ready", "[1] ready"], 15_000)
      l.proc.kill(sig)
      expect(await l.status).toBe(128 + number)
      expect(l.stdout).toContain(`[0] got ${sig}`)
      expect(l.stdout).toContain(`[1] got ${sig}`)
    }, 20_000)
})

describe("launch: store", () => {
  test("the launcher's store is reachable by the processes: one sets a key, the others get it", async () => {
    const l = Launcher.start(["--nproc", "3"], child("store"))
    expect(await l.status).toBe(0)
    const setter = fromRank(l.stdout, 0)[0]!
    expect(setter).toMatch(/^set by \d+$/)
    const pid = setter.replace("set by ", "")
    expect(fromRank(l.stdout, 1)).toEqual([`got hello from ${pid}`])
    expect(fromRank(l.stdout, 2)).toEqual([`got hello from ${pid}`])
  }, 20_000)
})

describe("launch: with Controller.attach", () => {
  test("src/launch.ts runs src/worker.ts; a controller attaches through its store, sharing the caller's MONARCH_TOKEN", async () => {
    const port = await freePort()
    const l = Launcher.start(["--nproc", "2", "--store-port", String(port)], [WORKER], { MONARCH_TOKEN: ATTACH_TOKEN, MONARCH_LOG: "warn" })
    try {
      const sums = await withController(Controller.attach({ world: 2, store: { host: "127.0.0.1", port }, startTimeoutMs: 20_000 }), allReduce)
      expect(sums).toEqual([[10, 10, 10], [10, 10, 10]])
      expect(await l.status).toBe(0)
    } finally {
      l.proc.kill("SIGKILL")
    }
  }, 30_000)
})

describe("launch: a traced job under Controller.attach", () => {
  test("workers given MONARCH_TRACE_DIR record their timeline; attach({ trace }) merges it when it ends", async () => {
    const port = await freePort()
    const dir = mkdtempSync(join(tmpdir(), "monarch-attach-trace-"))
    const l = Launcher.start(["--nproc", "2", "--store-port", String(port)], [WORKER], { MONARCH_TOKEN: ATTACH_TOKEN, MONARCH_LOG: "warn", MONARCH_TRACE_DIR: dir })
    try {
      const path = join(dir, "job.json")
      await withController(Controller.attach({ world: 2, store: { host: "127.0.0.1", port }, startTimeoutMs: 20_000, trace: { path, dir } }), allReduce)
      const spans = (JSON.parse(readFileSync(path, "utf8")) as { traceEvents: Array<{ ph: string; pid: number; cat?: string }> }).traceEvents.filter((e) => e.ph === "X")
      for (const rank of [0, 1]) expect(spans.filter((s) => s.pid === rank && s.cat === "collective").length).toBe(1)
      expect(existsSync(join(dir, "job.html"))).toBe(true)
      expect(await l.status).toBe(0)
    } finally {
      l.proc.kill("SIGKILL")
      rmSync(dir, { recursive: true, force: true })
    }
  }, 30_000)
})
