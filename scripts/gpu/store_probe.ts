/**
 * Settles the open points of ../shared/tcpstore.md §7 that one machine can settle, against the
 * torch that TORCH_PYTHON (default python3) imports; scripts/gpu/check.sh runs it with torch 2.11:
 *   1  the 2.x enum tail: raw opcodes 17 (LIST_KEYS?), 18 (BARRIER?) and 19 sent to a libuv and a
 *      legacy TCPStore server, and what torch's own Store API sends for list_keys / barrier
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
import type { Socket } from "bun"
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { Effect } from "effect"
import { makeClient } from "../../src/store/client.ts"
import {
  ByteBuffer,
  CLIENT_LIMITS,
  type Cursor,
  type Dialect,
  INCOMPLETE,
  parseRequest,
  type Request,
  VALIDATION_MAGIC,
  WireViolation,
} from "../../src/store/wire.ts"
import { bytes, RawPeer, run, str, u32, u64 } from "../../tests/store/helpers.ts"

const PYTHON = process.env.TORCH_PYTHON ?? "python3"
const SCRIPT = new URL("./store_probe.py", import.meta.url).pathname
const CHILD_TIMEOUT_MS = 45_000
const REPLY_MS = 1500

export type Status = "settled" | "not 2.x" | "skipped" | "error"

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
  return { code, stdout, stderr }
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

  /** Commands run one at a time: the answers come back in order on one stream. */
  private queue: Promise<unknown> = Promise.resolve()

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
    return r.port
  }

  async stop() {
    this.proc.stdin.end()
    await this.proc.exited
  }
}

// ---- the capturing relay -----------------------------------------------------------------------

/** One decoded client request, numbered across every relay in arrival order. */
interface Captured {
  readonly seq: number
  readonly conn: number
  readonly op: string
  readonly key?: string
  /** The value's length, for SET / APPEND / COMPARE_SET (desired). */
  readonly valueBytes?: number
  readonly text: string
}

let seq = 0

/** A key or value as text: printable ASCII kept, the rest escaped. */
const show = (b: Uint8Array, max = 160) => {
  let s = ""
  for (const x of b.subarray(0, max)) s += x >= 0x20 && x < 0x7f ? String.fromCharCode(x) : `\\x${x.toString(16).padStart(2, "0")}`
  return b.byteLength > max ? `${s}...` : s
}

const describe = (r: Request): Omit<Captured, "seq" | "conn"> => {
  switch (r.op) {
    case "validate":
      return { op: r.op, text: `VALIDATE 0x${r.magic.toString(16)}` }
    case "ping":
      return { op: r.op, text: `PING ${r.nonce}` }
    case "set":
    case "append":
      return { op: r.op, key: show(r.key), valueBytes: r.value.byteLength, text: `${r.op.toUpperCase()} ${show(r.key)} = ${show(r.value, 24)} (${r.value.byteLength} B)` }
    case "compareSet":
      return { op: r.op, key: show(r.key), valueBytes: r.desired.byteLength, text: `COMPARE_SET ${show(r.key)}` }
    case "add":
      return { op: r.op, key: show(r.key), text: `ADD ${show(r.key)} ${r.delta}` }
    case "get":
    case "deleteKey":
    case "watchKey":
      return { op: r.op, key: show(r.key), text: `${r.op.toUpperCase()} ${show(r.key)}` }
    case "check":
    case "wait":
    case "multiGet":
      return { op: r.op, key: r.keys.map((k) => show(k)).join(","), text: `${r.op.toUpperCase()} [${r.keys.map((k) => show(k)).join(", ")}]` }
    case "multiSet":
      return { op: r.op, key: r.entries.map(([k]) => show(k)).join(","), text: `MULTI_SET ${r.entries.length} keys` }
    case "getNumKeys":
    case "cancelWait":
      return { op: r.op, text: r.op.toUpperCase() }
  }
}

/** The 2.x opcodes past wire.ts's table, laid out as tcpstore.md §1.3 has them. */
const parseTail = (c: Cursor, code: number): Omit<Captured, "seq" | "conn"> | null => {
  switch (code) {
    case 14: {
      const key = show(c.key())
      return { op: "queuePush", key, valueBytes: c.value().byteLength, text: `QUEUE_PUSH(14) ${key}` }
    }
    case 15:
    case 16: {
      const key = show(c.key())
      return { op: code === 15 ? "queuePop" : "queueLen", key, text: `${code === 15 ? "QUEUE_POP" : "QUEUE_LEN"}(${code}) ${key}` }
    }
    case 17:
      return { op: "listKeys", text: "LIST_KEYS(17)" }
    case 18: {
      const key = show(c.key())
      return { op: "barrier", key, text: `BARRIER(18) ${key} world ${c.i64()}` }
    }
  }
  return null
}

/** Decodes one connection's client-to-server bytes as they arrive. */
class Decoder {
  private readonly input = new ByteBuffer()
  private dialect: Dialect | null = null
  private stopped = false

  constructor(
    private readonly conn: number,
    private readonly sink: (c: Captured) => void,
  ) {}

  push(chunk: Uint8Array) {
    if (this.stopped) return
    this.input.append(chunk)
    if (this.dialect === null && !this.sniff()) return
    for (;;) {
      let c = this.input.cursor(CLIENT_LIMITS)
      if (c.pos === c.end) return
      let decoded: Omit<Captured, "seq" | "conn"> | null
      try {
        decoded = describe(parseRequest(c, this.dialect!))
      } catch (e) {
        if (e === INCOMPLETE) return
        if (!(e instanceof WireViolation)) throw e
        c = this.input.cursor(CLIENT_LIMITS)
        try {
          decoded = this.dialect === "2.x" ? parseTail(c, c.u8()) : null
        } catch (e2) {
          if (e2 === INCOMPLETE) return
          decoded = null
        }
        if (decoded === null) {
          this.stopped = true
          const rest = this.input.buf.subarray(this.input.start, Math.min(this.input.end, this.input.start + 32))
          decoded = { op: "undecodable", text: `UNDECODABLE ${[...rest].map((x) => x.toString(16).padStart(2, "0")).join(" ")}` }
        }
      }
      this.input.consumeTo(c.pos)
      this.sink({ seq: seq++, conn: this.conn, ...decoded })
      if (this.stopped) return
    }
  }

  /** A 2.x client opens with VALIDATE (00 CE F7 85 3C); anything else speaks 1.13 (tcpstore.md §1.6). */
  private sniff(): boolean {
    const { buf, start, end } = this.input
    if (end - start >= 1 && buf[start] !== 0) this.dialect = "1.13"
    else if (end - start >= 5) this.dialect = new DataView(buf.buffer, start + 1, 4).getUint32(0, true) === VALIDATION_MAGIC ? "2.x" : "1.13"
    return this.dialect !== null
  }
}

/** One direction of a relayed connection: writes wait for the socket and for drains. */
class Leg {
  socket: Socket<unknown> | null = null
  private pending: Uint8Array[] = []

  write(b: Uint8Array) {
    this.pending.push(b.slice())
    this.flush()
  }

  flush() {
    while (this.socket !== null && this.pending.length > 0) {
      const b = this.pending[0]!
      const n = this.socket.write(b)
      if (n < b.byteLength) {
        this.pending[0] = b.subarray(Math.max(n, 0))
        return
      }
      this.pending.shift()
    }
  }
}

interface Relay {
  readonly port: number
  /** Every client request seen so far, in arrival order. */
  readonly requests: Captured[]
  readonly stop: () => void
}

/** A TCP relay on a free port in front of `backendPort`, decoding what clients send. */
const startRelay = (backendPort: number): Relay => {
  const requests: Captured[] = []
  let conns = 0
  const listener = Bun.listen<{ up: Leg; down: Leg; decoder: Decoder; backend: Socket<unknown> | null }>({
    hostname: "127.0.0.1",
    port: 0,
    socket: {
      binaryType: "uint8array",
      open(client) {
        const state = { up: new Leg(), down: new Leg(), decoder: new Decoder(conns++, (c) => requests.push(c)), backend: null as Socket<unknown> | null }
        client.data = state
        state.down.socket = client as Socket<unknown>
        Bun.connect({
          hostname: "127.0.0.1",
          port: backendPort,
          socket: {
            binaryType: "uint8array",
            open(s) {
              state.backend = s as Socket<unknown>
              state.up.socket = s as Socket<unknown>
              state.up.flush()
            },
            data(_s, chunk) {
              state.down.write(chunk)
            },
            drain() {
              state.up.flush()
            },
            close() {
              client.end()
            },
          },
        }).catch(() => client.end())
      },
      data(client, chunk) {
        client.data.decoder.push(chunk)
        client.data.up.write(chunk)
      },
      drain(client) {
        client.data.down.flush()
      },
      close(client) {
        client.data.backend?.end()
      },
    },
  })
  return { port: listener.port, requests, stop: () => listener.stop(true) }
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

/** What the server does with `request` (already validated); `read` parses a reply. */
const outcome = async (peer: RawPeer, read: () => Promise<string>): Promise<string> => {
  try {
    return await read()
  } catch {
    const got = peer.pending()
    if (await peer.closedWithin(0)) return `closed the connection${got.length ? ` after ${got.length} B` : ""}`
    return `no reply within ${REPLY_MS} ms${got.length ? ` (${got.length} B: ${got.slice(0, 16).join(" ")})` : ""}`
  }
}

/** Opcodes 17, 18 and 19 on a 2.x server of `kind`, each on its own connection. */
const enumTail = async (kind: string, port: number): Promise<Finding[]> => {
  const list = await validated(port)
  list.send(bytes(1, str("/probe_list"), str("1"), 17))
  const listed = await outcome(list, async () => {
    const n = le64(await list.read(8, REPLY_MS))
    const keys: string[] = []
    for (let i = 0; i < n && i < 64; i++) keys.push(new TextDecoder().decode(new Uint8Array(await list.read(le64(await list.read(8, REPLY_MS)), REPLY_MS))))
    return `replied ${n} keys: ${JSON.stringify(keys.sort())}`
  })
  list.end()

  const barrier = await validated(port)
  barrier.send(bytes(18, str("/probe_barrier"), u64(1)))
  const barred = await outcome(barrier, async () => {
    const code = (await barrier.read(1, REPLY_MS))[0]
    barrier.send(bytes(4, str("/probe_barrier"), u64(0)))
    return `replied ${code}${code === 0 ? " (STOP_WAITING)" : ""}; ADD of its key then gave ${le64(await barrier.read(8, REPLY_MS))}`
  })
  barrier.end()

  const past = await validated(port)
  past.send(bytes(19))
  const beyond = await outcome(past, async () => `replied ${(await past.read(1, REPLY_MS)).join(" ")}`)
  past.end()

  const alive = await run(Effect.flatMap(makeClient({ port, timeout: 3000 }), (c) => c.numKeys)).then(
    (n) => `still serving (${n} keys)`,
    (e) => `NOT serving: ${errorText(e)}`,
  )
  note(`point 1: raw opcodes, ${kind} server`, [`17 after SET /probe_list: ${listed}`, `18 /probe_barrier world 1: ${barred}`, `19: ${beyond}`, `afterwards: ${alive}`])
  const exists = (s: string) => (s.startsWith("replied") ? "yes" : "no")
  return [
    { point: 1, question: `opcode 17 = LIST_KEYS (${kind})`, answer: `${exists(listed)}: ${listed}`, status: "settled" },
    { point: 1, question: `opcode 18 = BARRIER (${kind})`, answer: `${exists(barred)}: ${barred}`, status: "settled" },
    { point: 1, question: `opcode 19 (past the end, ${kind})`, answer: `${beyond}; server ${alive}`, status: "settled" },
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
  const answer = ids.length === 0
    ? "no 128 B SET seen"
    : `${ids.includes(NCCL_KEY) ? "yes" : "no"}: ${ids.join(", ")}${ids.includes(NCCL_KEY) ? "" : ` (expected ${NCCL_KEY})`}`
  return [{ point: 3, question, answer: `${answer}; all_reduce ${JSON.stringify(out.all_reduce)}`, status: twoX ? "settled" : "not 2.x" }]
}

/** Which phases (init, new_group) touched a store_based_barrier key, cut by the ADD probe/* markers. */
const barrierPhases = (requests: ReadonlyArray<Captured>) => {
  const at = (marker: string) => requests.find((r) => r.op === "add" && r.key?.endsWith(`probe/${marker}`))?.seq ?? Infinity
  const afterInit = at("after_init"), before = at("before_new_group"), after = at("after_new_group")
  const barrier = requests.filter((r) => r.key?.includes("store_based_barrier_key"))
  const inPhase = (lo: number, hi: number) => [...new Set(barrier.filter((r) => r.seq > lo && r.seq < hi).map((r) => `${r.op} ${r.key}`))]
  return { init: inPhase(-1, afterInit), newGroup: inPhase(before, after) }
}

const initBarrier = async (stores: Stores, twoX: boolean): Promise<Finding[]> => {
  const runs = await Promise.all([undefined, "1"].map(async (v) => ({ v, ...(await processGroup(stores, "gloo", v)) })))
  return runs.map(({ v, out, requests }) => {
    const question = `store barriers, gloo, TORCH_DIST_INIT_BARRIER ${v === undefined ? "unset" : `=${v}`}`
    if (out.error) return { point: 4, question, answer: `failed: ${out.error}`, status: "error" as const }
    const p = barrierPhases(requests)
    const said = (keys: string[]) => (keys.length ? `yes (${keys.join(", ")})` : "no")
    return { point: 4, question, answer: `init: ${said(p.init)}; new_group: ${said(p.newGroup)}`, status: twoX ? ("settled" as const) : ("not 2.x" as const) }
  })
}

// ---- point 5: torchrun ----------------------------------------------------------------------------

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
    note("point 5: torchrun --nproc_per_node 2 --no_python (CUDA_VISIBLE_DEVICES unset in the agent)", [
      `exit ${r.code}`, ...ranks.map((x) => JSON.stringify(x)), ...(r.code === 0 ? [] : r.stderr.trim().split("\n").slice(-8)),
    ])
    if (ranks.length !== 2) return [{ point: 5, question: "torchrun workers", answer: `exit ${r.code}, ${ranks.length} workers reported`, status: "error" }]
    const status: Status = twoX ? "settled" : "not 2.x"
    const own = ranks.filter((x) => x.sid === x.pid && x.sid !== x.agent_sid).length
    const session = own === ranks.length
      ? `yes: each worker leads its own session (agent sid ${ranks[0].agent_sid})`
      : own === 0
        ? ranks.every((x) => x.sid === x.agent_sid) ? "no: workers share the agent's session" : "no new session, but not the agent's either"
        : `mixed: ${own} of ${ranks.length} in their own session`
    const group = ranks.every((x) => x.pgid === x.pid) ? "own process group" : ranks.every((x) => x.pgid === x.agent_pgid) ? "agent's process group" : "other process group"
    const cvd = ranks.every((x) => x.CUDA_VISIBLE_DEVICES === null)
      ? "not set"
      : `set: ${ranks.map((x) => `rank ${x.rank} = ${JSON.stringify(x.CUDA_VISIBLE_DEVICES)}`).join(", ")}`
    return [
      { point: 5, question: "torchrun: workers in a new session", answer: `${session}; ${group}`, status },
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
  try {
    const kinds = twoX ? (["libuv", "legacy"] as const) : (["default"] as const)
    const servers = await Promise.all(kinds.map(async (kind) => ({ kind, port: await stores.serve(kind) })))
    const stages = [
      guarded(5, "torchrun", () => torchrun(twoX)),
      guarded(3, "NCCL key", () => ncclKeys(stores, twoX)),
      guarded(4, "init barrier", () => initBarrier(stores, twoX)),
      guarded(1, "enum tail", async () =>
        twoX
          ? (await Promise.all(servers.map((s) => enumTail(s.kind, s.port)))).flat()
          : [{ point: 1, question: "opcodes 17 / 18", answer: `not 2.x: torch ${version} has no such opcodes`, status: "not 2.x" as const }]),
      guarded(2, "handshake", async () => [
        ...(await torchClient(stores, servers[0]!.port, twoX)),
        ...(await Promise.all(servers.map((s) => ourProbe(s.kind, s.port, twoX)))),
      ]),
    ]
    return [{ point: 0, question: "torch under test", answer: `${version} (${PYTHON})`, status: twoX ? "settled" : "not 2.x" }, ...(await Promise.all(stages)).flat()]
  } finally {
    await stores.stop()
  }
}

const table = (rows: ReadonlyArray<Finding>) => {
  const cells = [["point", "question", "answer", "status"], ...rows.map((r) => [String(r.point), r.question, r.answer, r.status])]
  const widths = [0, 1, 3].map((i) => Math.max(...cells.map((c) => c[i]!.length)))
  const line = (c: ReadonlyArray<string>) => `| ${c[0]!.padEnd(widths[0]!)} | ${c[1]!.padEnd(widths[1]!)} | ${c[2]} | ${c[3]!.padEnd(widths[2]!)} |`
  return [line(cells[0]!), `|${"-".repeat(widths[0]! + 2)}|${"-".repeat(widths[1]! + 2)}|---|${"-".repeat(widths[2]! + 2)}|`, ...cells.slice(1).map(line)].join("\n")
}

const args = process.argv.slice(2)
const outDir = args.includes("--out") ? args[args.indexOf("--out") + 1]! : (process.env.OUT ?? "/tmp/monarch-gpu-logs")
const t0 = performance.now()
const rows = (await findings()).sort((a, b) => a.point - b.point)
const report = `store findings (tcpstore.md §7), ${((performance.now() - t0) / 1000).toFixed(1)} s\n${table(rows)}`
console.log(report)
mkdirSync(outDir, { recursive: true })
writeFileSync(join(outDir, "store_findings.md"), `${report}\n`)
writeFileSync(join(outDir, "store_findings.json"), JSON.stringify(rows, null, 2))
writeFileSync(join(outDir, "store_capture.txt"), evidence.join("\n"))
console.log(`evidence: ${join(outDir, "store_capture.txt")}`)
process.exit(rows.some((r) => r.status === "error") ? 1 : 0)
