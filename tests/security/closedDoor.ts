/**
 * The closed door, as checks that return what they saw (the bun tests assert on it, and
 * reliability.ts turns it into rows): every listener on loopback unless configured
 * otherwise; the controller link admits only a worker that proves the job's token; user
 * functions load only from the allowed roots; a length prefix over the maximum is refused
 * before anything is allocated for it (the frame reader, the controller listener, the store).
 */
import { Cause, Effect, Exit, Result, Scope } from "effect"
import { mkdirSync, mkdtempSync, readdirSync, rmSync, symlinkSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { listen } from "../../src/controller/listener.ts"
import { proof } from "../../src/net/handshake.ts"
import type { WireError } from "../../src/protocol/errors.ts"
import { FrameReader } from "../../src/protocol/framing.ts"
import type { HostTensor } from "../../src/protocol/values.ts"
import { startServer } from "../../src/store/server.ts"
import { FunctionTable } from "../../src/worker/functions.ts"
import { eventually, type ControllerRig } from "../fuzz/controllerRig.ts"
import { watchAllocations } from "../fuzz/frameLength.ts"
import { rssKiB } from "../fuzz/proc.ts"
import { framed, RawPeer, frame, lengthPrefix, workerHandshake } from "../fuzz/rawPeer.ts"
import { isLoopback, listeningSockets, type ListeningSocket } from "./sockets.ts"

const REPO = new URL("../..", import.meta.url).pathname

const portOf = (address: string) => Number(address.slice(address.lastIndexOf(":") + 1))

// ---- listeners on loopback ------------------------------------------------------------------

export interface LoopbackReport {
  /** The controller listener and the launcher's store, as found in /proc. */
  readonly controller: ListeningSocket | undefined
  readonly store: ListeningSocket | undefined
  /** Every listener of each worker process (none expected). */
  readonly workers: ReadonlyArray<ReadonlyArray<ListeningSocket>>
  /** Listeners of the rig's processes that are not on loopback. */
  readonly exposed: ReadonlyArray<string>
}

export const checkLoopback = (rig: ControllerRig): LoopbackReport => {
  const own = listeningSockets()
  const workers = rig.pids.map((pid) => listeningSockets(pid))
  const controller = own.find((s) => s.port === portOf(rig.address))
  const store = own.find((s) => s.port === rig.storePort)
  const exposed = [controller, store, ...workers.flat()].filter((s): s is ListeningSocket => s !== undefined && !isLoopback(s.address)).map((s) => `${s.address}:${s.port}`)
  return { controller, store, workers, exposed }
}

/** A controller listener and a store told to bind all interfaces: what /proc shows for them. */
export const checkConfiguredBind = async (): Promise<{ readonly controller: ListeningSocket | undefined; readonly store: ListeningSocket | undefined }> => {
  const scope = Effect.runSync(Scope.make())
  const store = startServer({ host: "0.0.0.0" })
  try {
    const l = await Effect.runPromise(Scope.provide(scope)(listen({
      token: "t", host: "0.0.0.0", onWorker: () => {}, onMessage: () => {}, onDisconnect: () => {}, onProblem: () => {},
    })))
    const own = listeningSockets()
    return { controller: own.find((s) => s.port === portOf(l.address)), store: own.find((s) => s.port === store.port) }
  } finally {
    store.stop()
    await Effect.runPromise(Scope.close(scope, Exit.void))
  }
}

// ---- the token --------------------------------------------------------------------------------

export interface IntruderResult {
  readonly name: string
  /** The controller closed the connection. */
  readonly closed: boolean
  readonly ms: number
  /** What the controller reported (onProblem), or "" when nothing was. */
  readonly problem: string
  /** What it had to say, and whether it did. */
  readonly expected: string
  readonly reported: boolean
}

/**
 * Connections that must not be admitted: what each does on a fresh connection (bytes, or its
 * side of the handshake), and what the controller must say.
 */
export const intruders = (token: string, world: number): Array<{ readonly name: string; readonly act: (peer: RawPeer) => Promise<unknown>; readonly says: string }> => {
  const send = (bytes: Uint8Array) => async (peer: RawPeer) => peer.write(bytes)
  const handshake = (over: { rank?: number; world?: number; token?: string; helloRank?: number }) => async (peer: RawPeer) => {
    const rank = over.rank ?? 0, size = over.world ?? world
    if (over.helloRank === undefined) return workerHandshake(peer, { token: over.token ?? token, rank, world: size })
    // Its own challenge answered, a hello for another rank, proved over that rank.
    const r = await workerHandshake(peer, { token, rank, world: size, hello: false })
    if (r.transcript === undefined) return
    const claimed = { ...r.transcript, rank: over.helloRank }
    peer.write(framed({ _tag: "WorkerHello", rank: over.helloRank, world: size, pid: 1, proof: proof(token, "worker", claimed), device: "cpu" }))
  }
  const wrongLast = token.slice(0, -1) + (token.endsWith("0") ? "1" : "0")
  const wrongToken = "refused a connection whose WorkerHello did not prove it holds the job token"
  const invalidFirst = "refused a connection that sent an invalid frame before its handshake ended: "
  const taken = "refused a second or out-of-range worker claiming rank"
  return [
    { name: "a Status before any WorkerChallenge", act: send(framed({ _tag: "Status", firstUncompletedIdent: 0 })), says: "refused a connection whose first message was Status, not a WorkerChallenge" },
    { name: "a command (Exit) instead of a WorkerChallenge", act: send(framed({ _tag: "Exit" })), says: `${invalidFirst}Exit (code 6) is not accepted by the controller` },
    { name: "a WorkerHello without a challenge first", act: send(framed({ _tag: "WorkerHello", rank: 0, world, pid: 1, proof: new Uint8Array(32), device: "cpu" })), says: "refused a connection whose first message was WorkerHello, not a WorkerChallenge" },
    { name: "a WorkerHello proved with a wrong token", act: handshake({ token: "not-the-token" }), says: wrongToken },
    { name: "a WorkerHello proved with an empty token", act: handshake({ token: "" }), says: wrongToken },
    { name: "a WorkerHello proved with a token that differs in its last character", act: handshake({ token: wrongLast }), says: wrongToken },
    { name: "a WorkerHello proved with the token's first half", act: handshake({ token: token.slice(0, token.length >> 1) }), says: wrongToken },
    { name: "a WorkerHello for another rank than its challenge's", act: handshake({ rank: world + 5, helloRank: 0 }), says: `whose WorkerHello (rank 0 of ${world}) is not its challenge's (rank ${world + 5} of ${world})` },
    { name: "garbage in a frame", act: send(frame(new Uint8Array([0xc1, 0xff, 0x00, 0x13, 0x37]))), says: invalidFirst },
    { name: "an HTTP request", act: send(new TextEncoder().encode("GET / HTTP/1.1\r\nHost: localhost\r\n\r\n")), says: `${invalidFirst}frame of 1195725856 bytes is over the` },
    { name: "a 4 GiB length prefix", act: send(lengthPrefix(0xffff_ffff)), says: `${invalidFirst}frame of 4294967295 bytes is over the` },
    { name: "the right token for a rank already connected", act: handshake({ rank: 0 }), says: `${taken} 0 of ${world}` },
    { name: "the right token for a rank outside the world", act: handshake({ rank: world + 3 }), says: `${taken} ${world + 3} of ${world}` },
    { name: "the right token with the wrong world size", act: handshake({ rank: 0, world: world + 1 }), says: `worker rank 0 has WORLD_SIZE=${world + 1}, but this controller was started for world ${world}` },
  ]
}

/** Runs each intruder on a fresh connection and waits (up to 2 s) for the controller to close it. */
export const checkIntruders = async (rig: ControllerRig): Promise<IntruderResult[]> => {
  const out: IntruderResult[] = []
  for (const { name, act, says } of intruders(rig.token, rig.pids.length)) {
    const before = rig.problems.length
    const peer = await RawPeer.connect(rig.address)
    const t0 = performance.now()
    await act(peer)
    const closed = await peer.until(() => peer.closed, 2000)
    const ms = performance.now() - t0
    await eventually(() => rig.problems.length > before, 1000)
    const problem = rig.problems.slice(before).join("; ")
    out.push({ name, closed, ms, problem, expected: says, reported: problem.includes(says) })
    peer.end()
  }
  return out
}

export interface SilentResult {
  readonly name: string
  readonly closed: boolean
  readonly ms: number
}

/**
 * A listener (in this process) with a `timeoutMs` hello timeout, and connections that never
 * finish the handshake: silent, a torn length prefix, a frame missing its last byte, a
 * challenge never followed by a hello. Each must be closed and reported after about
 * `timeoutMs`; a worker that passed the handshake in time must still be connected afterwards.
 */
export const checkSilentConnections = async (timeoutMs: number): Promise<{
  readonly silent: ReadonlyArray<SilentResult>
  /** How many times the listener reported "refused a connection that did not finish the handshake within <timeoutMs> ms". */
  readonly reported: number
  readonly helloKept: boolean
}> => {
  const problems: string[] = []
  const scope = Effect.runSync(Scope.make())
  try {
    const l = await Effect.runPromise(Scope.provide(scope)(listen({
      token: "t", helloTimeoutMs: timeoutMs, onWorker: () => {}, onMessage: () => {}, onDisconnect: () => {}, onProblem: (p) => void problems.push(p),
    })))
    const challenge = framed({ _tag: "WorkerChallenge", rank: 0, world: 1, nonce: new Uint8Array(32) })
    const cases: Array<[string, Uint8Array]> = [
      ["a connection that sends nothing", new Uint8Array(0)],
      ["a connection that sends 3 bytes of a length prefix", lengthPrefix(100).subarray(0, 3)],
      ["a connection that sends a WorkerChallenge but its last byte", challenge.subarray(0, challenge.length - 1)],
      ["a connection that sends a WorkerChallenge and never its WorkerHello", challenge],
    ]
    const worker = await RawPeer.connect(l.address)
    await workerHandshake(worker, { token: "t", rank: 0, world: 1 })
    const peers = await Promise.all(cases.map(async ([name, bytes]) => {
      const peer = await RawPeer.connect(l.address)
      if (bytes.length > 0) peer.write(bytes)
      return { name, peer, t0: performance.now() }
    }))
    const silent = await Promise.all(peers.map(async ({ name, peer, t0 }) => {
      const closed = await peer.until(() => peer.closed, timeoutMs + 2000)
      return { name, closed, ms: performance.now() - t0 }
    }))
    const helloKept = !worker.closed
    for (const p of peers) p.peer.end()
    worker.end()
    const reported = problems.filter((p) => p === `refused a connection that did not finish the handshake within ${timeoutMs} ms`).length
    return { silent, reported, helloKept }
  } finally {
    await Effect.runPromise(Scope.close(scope, Exit.void))
  }
}

/** The real workers still work: a call on every rank and a fetch from each. */
export const checkWorkersServe = async (rig: ControllerRig): Promise<boolean> => {
  const mesh = await rig.run(rig.ctl.mesh({ all: rig.pids.length }))
  const t = await rig.run(mesh.call("ops.full", [[2], 6]))
  const all = await rig.run(mesh.fetchAll(t))
  return all.every((v) => [...(v as HostTensor).toArray()].join() === "6,6")
}

// ---- function roots ---------------------------------------------------------------------------

/**
 * A tree for the function-root checks:
 *   base/root/ok.ts, root/sub/inner.ts       allowed modules
 *   base/root/link-in.ts -> ok.ts            a symlink that stays inside
 *   base/root/link-out.ts -> ../outside/evil.ts, base/root/dir-out -> ../outside
 *   base/outside/evil.ts                     importing it leaves base/imported-evil behind
 *   base/root-evil/evil.ts                   a sibling whose name extends the root's
 *   base/root/no-export.ts                   exports something else; importing it leaves a mark
 *   base/root/node_modules/pkg/index.ts, base/root/.hidden/m.ts     inside a root, never searched
 *   base/root/shown.ts -> .hidden/m.ts       a symlink into a dot folder
 *   base/node_modules/pkg/m.ts, base/.dotroot/m.ts                  roots that are never used
 *   base/rootlink -> root                    a root given through a symlink
 * Every module but ok.ts and sub/inner.ts leaves base/imported-<name> behind when imported.
 */
export interface FunctionTree {
  readonly base: string
  readonly root: string
  readonly rootLink: string
  readonly outside: string
  /** Roots inside node_modules and a dot folder, each holding m.ts (export run). */
  readonly hiddenRoots: ReadonlyArray<string>
  /** True once any module that must not load was imported. */
  readonly evilImported: () => boolean
  /** The marks left by imported modules, by name ("evil", "no-export", ...). */
  readonly imported: () => ReadonlyArray<string>
  readonly remove: () => void
}

export const makeFunctionTree = (): FunctionTree => {
  const base = mkdtempSync(join(tmpdir(), "monarch-roots-"))
  const root = join(base, "root"), outside = join(base, "outside"), sibling = join(base, "root-evil")
  const hiddenRoots = [join(base, "node_modules", "pkg"), join(base, ".dotroot")]
  const inRoot = [join(root, "node_modules", "pkg"), join(root, ".hidden")]
  for (const d of [root, join(root, "sub"), outside, sibling, ...hiddenRoots, ...inRoot]) mkdirSync(d, { recursive: true })
  const ok = `import { op } from ${JSON.stringify(join(REPO, "src/worker/ops.ts"))}
export const seven = (ctx) => op(ctx, "full", [[2], 7])
export const double = (_ctx, x) => 2 * x
`
  // Its top level leaves a mark: importing it at all is what must not happen.
  const marking = (mark: string, exports = "export const run = () => 1\n") => `import { writeFileSync } from "node:fs"
writeFileSync(${JSON.stringify(join(base, `imported-${mark}`))}, "imported " + import.meta.path)
${exports}`
  writeFileSync(join(root, "ok.ts"), ok)
  writeFileSync(join(root, "sub", "inner.ts"), "export const f = () => 1\n")
  writeFileSync(join(outside, "evil.ts"), marking("evil"))
  writeFileSync(join(sibling, "evil.ts"), marking("evil"))
  writeFileSync(join(root, "no-export.ts"), marking("no-export", "export const other = () => 1\n"))
  writeFileSync(join(inRoot[0]!, "index.ts"), marking("node_modules"))
  writeFileSync(join(inRoot[1]!, "m.ts"), marking("dot-folder"))
  for (const r of hiddenRoots) writeFileSync(join(r, "m.ts"), marking("hidden-root"))
  symlinkSync(join(root, "ok.ts"), join(root, "link-in.ts"))
  symlinkSync(join(outside, "evil.ts"), join(root, "link-out.ts"))
  symlinkSync(join(inRoot[1]!, "m.ts"), join(root, "shown.ts"))
  symlinkSync(outside, join(root, "dir-out"))
  symlinkSync(root, join(base, "rootlink"))
  const imported = () => readdirSync(base).filter((f) => f.startsWith("imported-")).map((f) => f.slice("imported-".length))
  return {
    base, root, rootLink: join(base, "rootlink"), outside, hiddenRoots,
    evilImported: () => imported().length > 0,
    imported,
    remove: () => rmSync(base, { recursive: true, force: true }),
  }
}

/** Names of the tree's modules in node_modules and a dot folder (one through a symlink). */
export const HIDDEN_NAMES = ["node_modules/pkg/index:run", ".hidden/m:run", "shown:run"]

/** Names that must resolve, and names that must not (with why). */
export const functionNames = (tree: FunctionTree): { readonly allowed: ReadonlyArray<string>; readonly refused: ReadonlyArray<[string, string]> } => ({
  allowed: ["ok:double", "ok.ts:double", "sub/inner:f", "link-in:double", "sub/../ok:double"],
  refused: [
    [`${join(tree.outside, "evil")}:run`, "an absolute path"],
    [`${join(tree.root, "ok")}:double`, "an absolute path, even inside the root"],
    ["../outside/evil:run", "a .. escape"],
    ["sub/../../outside/evil:run", "a .. escape through a subdirectory"],
    ["link-out:run", "a symlink to a file outside"],
    ["dir-out/evil:run", "a directory symlink to outside"],
    ["../root-evil/evil:run", "a sibling whose name extends the root's"],
    ["node:fs:readFileSync", "a node: builtin"],
    ["effect:pipe", "a bare package name"],
    ["ok\0:double", "a NUL byte"],
    ["ok", "no export named"],
    ["no-export:run", "a module without the export (its top level must not run)"],
    [HIDDEN_NAMES[0]!, "a module inside node_modules"],
    [HIDDEN_NAMES[1]!, "a module in a dot folder"],
    [HIDDEN_NAMES[2]!, "a symlink into a dot folder"],
  ],
})

export interface ResolveResult {
  readonly name: string
  readonly resolved: boolean
  /** The failure's tag (FunctionNotFound, RemoteError, ...; "defect" when something threw) and message. */
  readonly tag: string
  readonly message: string
}

/** Resolves each name with a FunctionTable over `roots`; never throws. */
export const resolveAll = async (roots: ReadonlyArray<string>, names: ReadonlyArray<string>): Promise<ResolveResult[]> => {
  const table = new FunctionTable(roots)
  const out: ResolveResult[] = []
  for (const name of names) {
    const exit = await Effect.runPromiseExit(table.resolve(name))
    if (Exit.isSuccess(exit)) out.push({ name, resolved: typeof exit.value === "function", tag: "", message: "" })
    else {
      const error = Cause.squash(exit.cause) as { _tag?: string; message?: string }
      out.push({ name, resolved: false, tag: Cause.hasDies(exit.cause) ? "defect" : String(error._tag), message: String(error.message) })
    }
  }
  return out
}

/**
 * A module of this repository that is a program, not functions: importing it runs its command
 * line (usage on stderr, exit 2). Named with an export it lacks, it must be refused unrun.
 */
export const PROGRAM_MODULE = "src/launch:x"

/**
 * Through a real worker (whose roots include the repository): an allowed module runs, refused
 * names fail as RemoteErrors, and naming the launcher's command line (PROGRAM_MODULE) fails
 * without running it, the worker serving on.
 */
export const checkFunctionsOnWorker = async (rig: ControllerRig, tree: FunctionTree): Promise<{
  readonly allowedRan: boolean
  readonly refused: ReadonlyArray<ResolveResult>
  readonly program: ResolveResult
  readonly servedAfter: boolean
}> => {
  const mesh = await rig.run(rig.ctl.mesh({ all: rig.pids.length }))
  const results = { results: [{ dtype: "f32" as const, shape: [2] }] }
  const ok = await rig.run(mesh.call("ok:seven", [], {}, results))
  const allowedRan = [...((await rig.run(mesh.fetch(ok))) as HostTensor).toArray()].join() === "7,7"
  const attempt = async (name: string): Promise<ResolveResult> => {
    const t = await rig.run(mesh.call(name, [], {}, results))
    const fetched = await rig.run(Effect.result(mesh.fetch(t)))
    return Result.isSuccess(fetched)
      ? { name, resolved: true, tag: "", message: "" }
      : { name, resolved: false, tag: fetched.failure._tag, message: fetched.failure.message }
  }
  const refused: ResolveResult[] = []
  for (const [name] of functionNames(tree).refused.filter(([n]) => !n.includes("\0"))) refused.push(await attempt(name))
  const program = await attempt(PROGRAM_MODULE)
  const servedAfter = await checkWorkersServe(rig)
  return { allowedRan, refused, program, servedAfter }
}

/** FunctionTables over roots inside node_modules and a dot folder: nothing resolves, nothing is imported. */
export const checkHiddenRoots = async (tree: FunctionTree): Promise<ReadonlyArray<ResolveResult>> =>
  Promise.all(tree.hiddenRoots.map(async (root) => (await resolveAll([root], ["m:run"]))[0]!))

// ---- oversized frames -------------------------------------------------------------------------

/** 64 MiB of bytes, touched, so that sending them later does not move this process's RSS. */
const filler = (): Uint8Array => new Uint8Array(64 * 1024 * 1024).fill(0x5a)

/** RSS in KiB once garbage is collected. */
export const settledRss = async (): Promise<number> => {
  Bun.gc(true)
  await Bun.sleep(50)
  return rssKiB(process.pid)
}

export interface OversizedResult {
  readonly refused: boolean
  readonly problem: string
  /** Allocations FrameReader asked for while the claim and the bytes after it arrived. */
  readonly allocations: ReadonlyArray<number>
  readonly rssBeforeKiB: number
  readonly rssAfterKiB: number
}

/**
 * A FrameReader (what both ends of the controller link use) fed a `claim`-byte length prefix
 * and then 64 MiB of bytes, with `maxFrameBytes` as given (the default when undefined).
 */
export const checkReaderClaim = async (claim: number, maxFrameBytes?: number): Promise<OversizedResult> => {
  const bytes = filler()
  const reader = new FrameReader(() => {}, maxFrameBytes === undefined ? {} : { maxFrameBytes })
  const rssBeforeKiB = await settledRss()
  let error: WireError | undefined
  const watch = watchAllocations()
  try {
    error = reader.push(lengthPrefix(claim))
    for (let at = 0; at < bytes.length && error === undefined; at += 1 << 20) error = reader.push(bytes.subarray(at, at + (1 << 20)))
  } finally {
    watch.restore()
  }
  const sizes = watch.sizes
  const rssAfterKiB = await settledRss()
  return { refused: error?.fatal === true, problem: error?.message ?? "", allocations: sizes, rssBeforeKiB, rssAfterKiB }
}

/** The controller listener (in this process) sent a 4 GiB claim and 64 MiB as a connection's first bytes. */
export const checkListenerClaim = async (): Promise<OversizedResult & { readonly closed: boolean }> => {
  const problems: string[] = []
  const scope = Effect.runSync(Scope.make())
  try {
    const l = await Effect.runPromise(Scope.provide(scope)(listen({
      token: "t", onWorker: () => {}, onMessage: () => {}, onDisconnect: () => {}, onProblem: (p) => void problems.push(p),
    })))
    const bytes = filler()
    const peer = await RawPeer.connect(l.address)
    const rssBeforeKiB = await settledRss()
    const watch = watchAllocations()
    let closed: boolean
    try {
      peer.write(lengthPrefix(0xffff_ffff))
      peer.write(bytes)
      closed = await peer.until(() => peer.closed, 5000)
    } finally {
      watch.restore()
    }
    const sizes = watch.sizes
    const rssAfterKiB = await settledRss()
    await eventually(() => problems.length > 0, 1000)
    return { refused: problems.some((p) => p.includes("over the")), problem: problems.join("; "), allocations: sizes, rssBeforeKiB, rssAfterKiB, closed }
  } finally {
    await Effect.runPromise(Scope.close(scope, Exit.void))
  }
}

/**
 * The store server (in this process) sent a torch 1.13 SET whose key claims 2^40 bytes, then
 * 64 MiB. Complements tests/store/wire.test.ts ("a key length over the limit is refused from
 * its 8 length bytes alone") and tests/store/server.test.ts ("1.13 key length 2^40 closes only
 * that client") with the memory figure.
 */
export const checkStoreClaim = async (): Promise<{ readonly closed: boolean; readonly rssBeforeKiB: number; readonly rssAfterKiB: number }> => {
  const server = startServer()
  try {
    const bytes = filler()
    const peer = await RawPeer.connect(`127.0.0.1:${server.port}`)
    const rssBeforeKiB = await settledRss()
    const claim = new Uint8Array(9)
    new DataView(claim.buffer).setBigUint64(1, 2n ** 40n, true) // opcode 0 (SET), then the key length
    peer.write(claim)
    peer.write(bytes)
    const closed = await peer.until(() => peer.closed, 5000)
    const rssAfterKiB = await settledRss()
    return { closed, rssBeforeKiB, rssAfterKiB }
  } finally {
    server.stop()
  }
}
