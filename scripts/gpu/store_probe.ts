/**
 * Settles the open points of torch 2.x's TCPStore dialect that one machine can settle, against the
 * torch that TORCH_PYTHON (default python3) imports; scripts/gpu/check.sh runs it with torch 2.11:
 *   1  the 2.x enum tail: raw opcodes 17 (LIST_KEYS?), 18 (BARRIER?) and 19 sent to a libuv and a
 *      legacy TCPStore server (and to our own server, for comparison), and what torch's own
 *      Store API sends for list_keys / barrier
 *   2  the handshake: the order of a torch client's first requests (captured) and its PING nonce;
 *      our client's VALIDATE+PING probe against each server kind
 *   3  the NCCL uniqueId key chain: init_process_group("nccl", world 1) + all_reduce, captured
 *   4  whether TORCH_DIST_INIT_BARRIER gates new_group's store barrier too (gloo, world 1, with
 *      and without the variable, captured)
 *   5  whether torchrun starts workers in a new session and sets CUDA_VISIBLE_DEVICES
 * "Captured" means through a relay that decodes every client request (src/store/wire.ts, plus
 * the 2.x tail opcodes) in front of a real torch server. Under torch 1.x the probe still runs
 * what it can, so its code is exercised; those rows say "not 2.x".
 *
 *   bun run scripts/gpu/store_probe.ts [--out DIR]   (DIR: $OUT, else /tmp/monarch-gpu-logs)
 *
 * Prints the findings table; writes DIR/store_findings.md, DIR/store_findings.json and
 * DIR/store_capture.txt (every captured request). Exits 1 when a probe failed outright.
 */
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { Effect } from "effect"
import { makeClient } from "../../src/store/client.ts"
import { startServer } from "../../src/store/server.ts"
import { VALIDATION_MAGIC } from "../../src/store/wire.ts"
import { bytes, RawPeer, run, str, u32, u64 } from "../../tests/store/helpers.ts"
import { type Captured, startRelay } from "./relay.ts"

const PYTHON = process.env.TORCH_PYTHON ?? "python3"
const SCRIPT = new URL("./store_probe.py", import.meta.url).pathname
const CHILD_TIMEOUT_MS = 45_000
const REPLY_MS = 1500

/** "ours": what our own server does, for comparison; "not 2.x": the torch found is 1.x. */
export type Status = "settled" | "ours" | "not 2.x" | "skipped" | "error"

export interface Finding {
  readonly point: number
  readonly question: string
  readonly answer: string
  readonly status: Status
}

/** Every line of evidence, written to store_capture.txt. */
const evidence: string[] = []
const note = (section: string, lines: ReadonlyArray<string>) => evidence.push(`== ${section}`, ...lines, "")

const errorText = (e: unknown) => (e instanceof Error ? e.message : String(e)).split("\n")[0]!

// ---- python children ------------------------------------------------------------------------

const childEnv = (extra: Record<string, string | undefined>) => {
  const env: Record<string, string | undefined> = { ...process.env, PYTHONUNBUFFERED: "1", OMP_NUM_THREADS: "1", ...extra }
  for (const [k, v] of Object.entries(env)) if (v === undefined) delete env[k]
  return env as Record<string, string>
}

/** Runs PYTHON with `args` to the end (killed after CHILD_TIMEOUT_MS). */
const python = async (args: ReadonlyArray<string>, env: Record<string, string | undefined> = {}) => {
  const proc = Bun.spawn([PYTHON, ...args], { env: childEnv(env), stdin: "ignore", stdout: "pipe", stderr: "pipe" })
  const timer = setTimeout(() => proc.kill("SIGKILL"), CHILD_TIMEOUT_MS)
  const [stdout, stderr, code] = await Promise.all([proc.stdout.text(), proc.stderr.text(), proc.exited])
  clearTimeout(timer)
  return { pid: proc.pid, code, stdout, stderr }
}

/** The last JSON line a child printed, or an error naming its exit and stderr tail. */
const lastJson = (r: { code: number; stdout: string; stderr: string }): any => {
  const line = r.stdout.trim().split("\n").at(-1) ?? ""
  try {
    return JSON.parse(line)
  } catch {
    return { error: `exit ${r.code}: ${r.stderr.trim().split("\n").slice(-2).join(" | ").slice(0, 300)}` }
  }
}

/** `store_probe.py stores`: torch servers and client calls, one JSON line per command. */
class Stores {
  private lines: string[] = []
  private wake: (() => void) | null = null
  /** The end of its stderr, drained so that torch's logging never blocks it. */
  private stderr = ""
  /** Commands run one at a time: the answers come back in order on one stream. */
  private queue: Promise<unknown> = Promise.resolve()
  private readonly proc: Bun.Subprocess<"pipe", "pipe", "pipe">

  constructor() {
    this.proc = Bun.spawn([PYTHON, SCRIPT, "stores"], { env: childEnv({}), stdin: "pipe", stdout: "pipe", stderr: "pipe" })
    const timer = setTimeout(() => this.proc.kill("SIGKILL"), 2 * CHILD_TIMEOUT_MS)
    void this.proc.exited.then(() => clearTimeout(timer))
    void this.pump()
    void this.drainStderr()
  }

  private async drainStderr() {
    const decoder = new TextDecoder()
    for await (const chunk of this.proc.stderr) this.stderr = (this.stderr + decoder.decode(chunk, { stream: true })).slice(-4000)
  }

  private async pump() {
    let pending = ""
    const decoder = new TextDecoder()
    for await (const chunk of this.proc.stdout) {
      const parts = (pending + decoder.decode(chunk, { stream: true })).split("\n")
      pending = parts.pop()!
      this.lines.push(...parts.filter((l) => l.trim().startsWith("{")))
      this.wake?.()
    }
    this.wake?.()
  }

  /** The next JSON line; fails when the process ends or `ms` pass first. */
  async next(ms = CHILD_TIMEOUT_MS): Promise<any> {
    const deadline = performance.now() + ms
    while (this.lines.length === 0) {
      if (this.proc.exitCode !== null || this.proc.signalCode !== null) {
        throw new Error(`stores exited (${this.proc.exitCode ?? this.proc.signalCode}): ${this.stderr.trim().split("\n").at(-1)}`)
      }
      if (performance.now() > deadline) throw new Error(`stores: no answer within ${ms} ms`)
      await new Promise<void>((resolve) => {
        this.wake = resolve
        setTimeout(resolve, 100)
      })
    }
    return JSON.parse(this.lines.shift()!)
  }

  call(cmd: unknown): Promise<any> {
    const answer = this.queue.then(() => {
      this.proc.stdin.write(`${JSON.stringify(cmd)}\n`)
      this.proc.stdin.flush()
      return this.next()
    })
    this.queue = answer.catch(() => undefined)
    return answer
  }

  async serve(kind: "default" | "libuv" | "legacy"): Promise<number> {
    const r = await this.call({ op: "serve", kind })
    if (r.error) throw new Error(`serve ${kind}: ${r.error}`)
    note(`a torch TCPStore server (${kind})`, [JSON.stringify(r)])
    return r.port
  }

  async stop() {
    this.proc.stdin.end()
    await this.proc.exited
  }
}

// ---- point 1: the enum tail, raw -----------------------------------------------------------------

/** A validated 2.x connection (VALIDATE + PING in one write); the echo is checked. */
const validated = async (port: number) => {
  const peer = await RawPeer.connect(port)
  const nonce = 0x5eed1234
  peer.send(bytes(0, u32(VALIDATION_MAGIC), 13, u32(nonce)))
  const echo = new DataView(new Uint8Array(await peer.read(4)).buffer).getUint32(0, true)
  if (echo !== nonce) throw new Error(`PING echoed ${echo}, sent ${nonce}`)
  return peer
}

const le64 = (b: ReadonlyArray<number>) => Number(new DataView(new Uint8Array(b).buffer).getBigInt64(0, true))

/** What the server did with the request just sent: its reply as `read` parses it, or a close, or silence. */
const outcome = async (peer: RawPeer, read: () => Promise<string>): Promise<string> => {
  try {
    return await read()
  } catch {
    const got = peer.pending()
    if (await peer.closedWithin(0)) return `closed the connection${got.length ? ` after ${got.length} B` : ""}`
    return `no reply within ${REPLY_MS} ms${got.length ? ` (${got.length} B: ${got.slice(0, 16).join(" ")})` : ""}`
  }
}

/**
 * Opcodes 17, 18 and 19 on a 2.x server of `kind`, each on its own connection, sent through a
 * relay so the evidence shows them decoded. `ours` (src/store/server.ts) is the reference row.
 */
const enumTail = async (kind: string, port: number, ours = false): Promise<Finding[]> => {
  const relay = startRelay(port)
  const list = await validated(relay.port)
  list.send(bytes(1, str("/probe_list"), str("1"), 17))
  const listed = await outcome(list, async () => {
    const n = le64(await list.read(8, REPLY_MS))
    const keys: string[] = []
    for (let i = 0; i < n && i < 64; i++) keys.push(new TextDecoder().decode(new Uint8Array(await list.read(le64(await list.read(8, REPLY_MS)), REPLY_MS))))
    return `replied ${n} keys: ${JSON.stringify(keys.sort())}`
  })
  list.end()

  const barrier = await validated(relay.port)
  barrier.send(bytes(18, str("/probe_barrier"), u64(1)))
  const barred = await outcome(barrier, async () => {
    const code = (await barrier.read(1, REPLY_MS))[0]
    barrier.send(bytes(4, str("/probe_barrier"), u64(0)))
    return `replied ${code}${code === 0 ? " (STOP_WAITING)" : ""}; ADD of its key then gave ${le64(await barrier.read(8, REPLY_MS))}`
  })
  barrier.end()

  const past = await validated(relay.port)
  past.send(bytes(19))
  const beyond = await outcome(past, async () => `replied ${(await past.read(1, REPLY_MS)).join(" ")}`)
  past.end()

  const alive = await run(Effect.flatMap(makeClient({ port, timeout: 3000 }), (c) => c.numKeys)).then(
    (n) => `still serving (${n} key${n === 1 ? "" : "s"})`,
    (e) => `NOT serving: ${errorText(e)}`,
  )
  relay.stop()
  note(`point 1: raw opcodes against ${ours ? "our server" : `torch's ${kind} server`}`, [
    `17 after SET /probe_list: ${listed}`, `18 /probe_barrier world 1: ${barred}`, `19: ${beyond}`, `afterwards: ${alive}`,
    ...relay.requests.map((r) => `#${r.seq} c${r.conn} ${r.text}`),
  ])
  const exists = (s: string) => (s.startsWith("replied") ? "yes" : "no")
  const status: Status = ours ? "ours" : "settled"
  return [
    { point: 1, question: `opcode 17 = LIST_KEYS (${kind})`, answer: `${exists(listed)}: ${listed}`, status },
    { point: 1, question: `opcode 18 = BARRIER (${kind})`, answer: `${exists(barred)}: ${barred}`, status },
    { point: 1, question: `opcode 19 (past the end, ${kind})`, answer: `${beyond}; server ${alive}`, status },
  ]
}

// ---- points 1 and 2: torch's client, captured; our probe --------------------------------------------

const torchClient = async (stores: Stores, port: number, twoX: boolean): Promise<Finding[]> => {
  const relay = startRelay(port)
  try {
    const api = await stores.call({ op: "client", port: relay.port })
    note("points 1-2: a torch client through the relay", [JSON.stringify(api), ...relay.requests.map((r) => `#${r.seq} c${r.conn} ${r.text}`)])
    if (api.error) return [{ point: 2, question: "torch client handshake", answer: `client failed: ${api.error}`, status: "error" }]
    const status: Status = twoX ? "settled" : "not 2.x"
    const first = relay.requests.slice(0, 3).map((r) => r.text.replace(/ \(\d+ B\)$/, ""))
    const ping = relay.requests.find((r) => r.op === "ping")
    const nonce = ping === undefined ? "no PING" : ping.text === `PING ${api.pid}` ? "nonce = client pid" : `nonce ${ping.text.slice(5)} != pid ${api.pid}`
    const tail = relay.requests.filter((r) => ["listKeys", "barrier", "undecodable"].includes(r.op)).map((r) => r.text)
    const has = (m: string) => (api.methods as string[]).includes(m)
    const apiAnswer = [
      has("list_keys") ? `list_keys() -> ${api.list_keys_error ?? JSON.stringify(api.list_keys)}` : "no list_keys()",
      has("barrier") ? `barrier(): ${api.barrier_error ?? api.barrier}` : "no barrier()",
      `wire: ${tail.length ? tail.join(", ") : "no tail opcode"}`,
    ].join("; ")
    return [
      { point: 1, question: "Store API list_keys / barrier", answer: apiAnswer, status },
      { point: 2, question: "torch client's first requests", answer: `${first.join(", ")}; ${nonce}`, status },
    ]
  } finally {
    relay.stop()
  }
}

const ourProbe = async (kind: string, port: number, twoX: boolean): Promise<Finding> => {
  const answer = await run(
    Effect.gen(function* () {
      const c = yield* makeClient({ port, timeout: 3000 })
      if (c.dialect === "1.13") return "dialect 1.13 (probe dropped, reconnected)"
      yield* c.ping
      return "dialect 2.x; nonce echoed on the probe and on a later PING"
    }),
  ).catch((e) => `failed: ${errorText(e)}`)
  return { point: 2, question: `our VALIDATE+PING probe (${kind})`, answer, status: answer.startsWith("failed") ? "error" : twoX ? "settled" : "not 2.x" }
}

// ---- points 3 and 4: process groups, captured ----------------------------------------------------------

/** Runs `store_probe.py pg backend` as rank 0 of 1 under env:// with the agent store at the relay. */
const processGroup = async (stores: Stores, backend: "nccl" | "gloo", barrierVar: string | undefined) => {
  const relay = startRelay(await stores.serve("default"))
  try {
    const r = await python([SCRIPT, "pg", backend], {
      MASTER_ADDR: "127.0.0.1",
      MASTER_PORT: String(relay.port),
      RANK: "0",
      LOCAL_RANK: "0",
      WORLD_SIZE: "1",
      TORCHELASTIC_USE_AGENT_STORE: "True",
      TORCHELASTIC_RESTART_COUNT: "0",
      TORCH_DIST_INIT_BARRIER: barrierVar,
      GLOO_SOCKET_IFNAME: "lo",
    })
    const out = lastJson(r)
    note(`pg ${backend}, TORCH_DIST_INIT_BARRIER=${barrierVar ?? "(unset)"}`, [
      JSON.stringify(out),
      ...relay.requests.map((q) => `#${q.seq} c${q.conn} ${q.text}`),
      ...(out.error ? r.stderr.trim().split("\n").slice(-8) : []),
    ])
    return { out, requests: relay.requests }
  } finally {
    relay.stop()
  }
}

const NCCL_KEY = "//worker/attempt_0/default_pg/0//cuda//0"

const ncclKeys = async (stores: Stores, twoX: boolean): Promise<Finding[]> => {
  const { out, requests } = await processGroup(stores, "nccl", undefined)
  const question = "NCCL uniqueId key (world 1, agent store)"
  if (out.skipped) return [{ point: 3, question, answer: `skipped: ${out.skipped}`, status: "skipped" }]
  if (out.error) return [{ point: 3, question, answer: `failed: ${out.error}`, status: "error" }]
  const ids = requests.filter((r) => r.op === "set" && r.valueBytes === 128).map((r) => r.key!)
  const cuda = [...new Set(requests.filter((r) => /cuda|nccl/i.test(r.key ?? "")).map((r) => `${r.op} ${r.key}`))]
  const answer = ids.length === 0
    ? `no 128 B SET seen; requests on cuda/nccl keys: ${cuda.length ? cuda.join(", ") : "none"}`
    : `${ids.includes(NCCL_KEY) ? "yes" : "no"}: ${ids.join(", ")}${ids.includes(NCCL_KEY) ? "" : ` (expected ${NCCL_KEY})`}`
  return [{ point: 3, question, answer: `${answer}; all_reduce ${JSON.stringify(out.all_reduce)}`, status: twoX ? "settled" : "not 2.x" }]
}

/** Which phases (init, new_group) touched a store_based_barrier key, cut by the ADD probe/* markers. */
const barrierPhases = (requests: ReadonlyArray<Captured>) => {
  const at = (marker: string) => requests.find((r) => r.op === "add" && r.key?.endsWith(`probe/${marker}`))?.seq ?? Infinity
  const afterInit = at("after_init"), before = at("before_new_group"), after = at("after_new_group")
  const barrier = requests.filter((r) => r.key?.includes("store_based_barrier_key"))
  const inPhase = (lo: number, hi: number) => {
    const seen = barrier.filter((r) => r.seq > lo && r.seq < hi)
    return seen.length === 0 ? "no" : `yes (${[...new Set(seen.map((r) => r.op))].join("/")} ${[...new Set(seen.map((r) => r.key))].join(", ")})`
  }
  return { init: inPhase(-1, afterInit), newGroup: inPhase(before, after) }
}

const initBarrier = async (stores: Stores, twoX: boolean): Promise<Finding[]> => {
  const runs = await Promise.all([undefined, "1"].map(async (v) => ({ v, ...(await processGroup(stores, "gloo", v)) })))
  return runs.map(({ v, out, requests }) => {
    const question = `store barriers, gloo, TORCH_DIST_INIT_BARRIER ${v === undefined ? "unset" : `=${v}`}`
    if (out.error) return { point: 4, question, answer: `failed: ${out.error}`, status: "error" as const }
    const p = barrierPhases(requests)
    return { point: 4, question, answer: `init: ${p.init}; new_group: ${p.newGroup}`, status: twoX ? ("settled" as const) : ("not 2.x" as const) }
  })
}

// ---- point 5: torchrun ----------------------------------------------------------------------------

/** The session id of a process, from /proc/<pid>/stat (Bun has no getsid). */
const sessionOf = (pid: number) => Number(readFileSync(`/proc/${pid}/stat`, "utf8").replace(/^.*\) /s, "").split(" ")[3])

const freePort = () => {
  const l = Bun.listen({ hostname: "127.0.0.1", port: 0, socket: { data() {} } })
  const port = l.port
  l.stop(true)
  return port
}

const torchrun = async (twoX: boolean): Promise<Finding[]> => {
  const dir = mkdtempSync(join(tmpdir(), "store-probe-"))
  try {
    // Debian's 1.13 cannot parse the default --redirects/--tee (tests/torchrun), hence 1 and 2.
    const r = await python(
      ["-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port", String(freePort()), "--monitor_interval", "0.2",
        "--redirects", "1", "--tee", "2", "--log_dir", join(dir, "logs"), "--no_python", PYTHON, SCRIPT, "env", dir],
      { CUDA_VISIBLE_DEVICES: undefined },
    )
    const ranks = readdirSync(dir).filter((f) => /^rank\d+\.json$/.test(f)).sort().map((f) => JSON.parse(readFileSync(join(dir, f), "utf8")))
    // torchrun was started in our session, so a worker outside it was put in a new one.
    const ours = sessionOf(process.pid)
    note("point 5: torchrun --nproc_per_node 2 --no_python (CUDA_VISIBLE_DEVICES unset in the agent)", [
      `exit ${r.code}; torchrun pid ${r.pid}; our session ${ours}`, ...ranks.map((x) => JSON.stringify(x)),
      ...(r.code === 0 ? [] : r.stderr.trim().split("\n").slice(-8)),
    ])
    if (ranks.length !== 2) return [{ point: 5, question: "torchrun workers", answer: `exit ${r.code}, ${ranks.length} workers reported`, status: "error" }]
    const status: Status = twoX ? "settled" : "not 2.x"
    const parent = ranks.every((x) => x.agent_pid === r.pid) ? "parent: torchrun itself" : `parents ${ranks.map((x) => x.agent_pid).join(", ")}, torchrun was ${r.pid}`
    const own = ranks.filter((x) => x.sid === x.pid && x.sid !== ours).length
    const session = own === ranks.length
      ? "yes: each worker leads its own session"
      : own === 0
        ? ranks.every((x) => x.sid === ours) ? "no: workers stay in torchrun's session" : "no new session of their own, but not torchrun's either"
        : `mixed: ${own} of ${ranks.length} in their own session`
    const group = ranks.every((x) => x.pgid === x.pid) ? "own process group" : ranks.every((x) => x.pgid === x.agent_pgid) ? "agent's process group" : "other process group"
    const cvd = ranks.every((x) => x.CUDA_VISIBLE_DEVICES === null)
      ? "not set"
      : `set: ${ranks.map((x) => `rank ${x.rank} = ${JSON.stringify(x.CUDA_VISIBLE_DEVICES)}`).join(", ")}`
    return [
      { point: 5, question: "torchrun: workers in a new session", answer: `${session}; ${group}; ${parent}`, status },
      { point: 5, question: "torchrun: CUDA_VISIBLE_DEVICES (unset in agent)", answer: cvd, status },
    ]
  } finally {
    rmSync(dir, { recursive: true, force: true })
  }
}

// ---- main ------------------------------------------------------------------------------------------------

/** Runs one probe, turning a crash into an error row. */
const guarded = (point: number, question: string, probe: () => Promise<Finding[]>): Promise<Finding[]> =>
  probe().catch((e) => [{ point, question, answer: `probe crashed: ${errorText(e)}`, status: "error" as const }])

const findings = async (): Promise<Finding[]> => {
  const stores = new Stores()
  let hello: any
  try {
    hello = await stores.next()
  } catch (e) {
    await stores.stop()
    return [{ point: 0, question: `torch at ${PYTHON}`, answer: errorText(e), status: "error" }]
  }
  const version: string = hello.torch
  const twoX = !version.startsWith("1.")
  note("torch", [`${PYTHON}: torch ${version}`])
  const ourServer = startServer()
  try {
    const kinds = twoX ? (["libuv", "legacy"] as const) : (["default"] as const)
    const servers = await Promise.all(kinds.map(async (kind) => ({ kind, port: await stores.serve(kind) })))
    const stages = [
      guarded(5, "torchrun", () => torchrun(twoX)),
      guarded(3, "NCCL key", () => ncclKeys(stores, twoX)),
      guarded(4, "init barrier", () => initBarrier(stores, twoX)),
      guarded(1, "enum tail", async () => [
        ...(twoX
          ? (await Promise.all(servers.map((s) => enumTail(s.kind, s.port)))).flat()
          : [{ point: 1, question: "opcodes 17 / 18", answer: `not 2.x: torch ${version} has no such opcodes`, status: "not 2.x" as const }]),
        ...(await enumTail("ours", ourServer.port, true)),
      ]),
      guarded(2, "handshake", async () => [
        ...(await torchClient(stores, servers[0]!.port, twoX)),
        ...(await Promise.all(servers.map((s) => ourProbe(s.kind, s.port, twoX)))),
      ]),
    ]
    return [{ point: 0, question: "torch under test", answer: `${version} (${PYTHON})`, status: twoX ? "settled" : "not 2.x" }, ...(await Promise.all(stages)).flat()]
  } finally {
    ourServer.stop()
    await stores.stop()
  }
}

/** Markdown, the (long) answer last so that it does not push the other columns. */
const table = (rows: ReadonlyArray<Finding>) => {
  const cells = [["point", "question", "status", "answer"], ...rows.map((r) => [String(r.point), r.question, r.status, r.answer])]
  const widths = [0, 1, 2].map((i) => Math.max(...cells.map((c) => c[i]!.length)))
  const line = (c: ReadonlyArray<string>) => `| ${widths.map((w, i) => c[i]!.padEnd(w)).join(" | ")} | ${c[3]} |`
  return [line(cells[0]!), `|${widths.map((w) => "-".repeat(w + 2)).join("|")}|---|`, ...cells.slice(1).map(line)].join("\n")
}

const args = process.argv.slice(2)
const outDir = args.includes("--out") ? args[args.indexOf("--out") + 1]! : (process.env.OUT ?? "/tmp/monarch-gpu-logs")
const t0 = performance.now()
const rows = (await findings()).sort((a, b) => a.point - b.point)
const report = `store findings, ${((performance.now() - t0) / 1000).toFixed(1)} s\n${table(rows)}`
console.log(report)
mkdirSync(outDir, { recursive: true })
writeFileSync(join(outDir, "store_findings.md"), `${report}\n`)
writeFileSync(join(outDir, "store_findings.json"), JSON.stringify(rows, null, 2))
writeFileSync(join(outDir, "store_capture.txt"), evidence.join("\n"))
console.log(`evidence: ${join(outDir, "store_capture.txt")}`)
process.exit(rows.some((r) => r.status === "error") ? 1 : 0)
