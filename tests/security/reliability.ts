/**
 * The security area's rows for RELIABILITY.md (the reliability contract): the closed-door
 * checks of closedDoor.ts, which the bun tests in this directory assert on, as rows. They are
 * the same in both modes; long mode repeats the intruders ten times over.
 */
import { startController } from "../fuzz/controllerRig.ts"
import { mib, rssChange } from "../fuzz/proc.ts"
import type { Mode, ReliabilityRow } from "../reliability.ts"
import {
  checkConfiguredBind, checkFunctionsOnWorker, checkHiddenRoots, checkIntruders, checkListenerClaim, checkLoopback, checkReaderClaim, checkSilentConnections, checkStoreClaim,
  checkWorkersServe, functionNames, HIDDEN_NAMES, makeFunctionTree, PROGRAM_MODULE, resolveAll, type IntruderResult, type ResolveResult,
} from "./closedDoor.ts"
import { isLoopback, type ListeningSocket } from "./sockets.ts"
import { checkFetchCoordinates, checkForeignHandles, GOOD_COORDINATES, type CoordinatesResult, type ForeignResult } from "./handles.ts"
import { checkAttachRefusals, checkAttachToken, type AttachTokenResult } from "./attachToken.ts"
import { checkIdents, checkRecordingFlood, type FloodResult as RecordingFloodResult, type IdentsResult } from "./bounds.ts"
import { checkImpostor, tokenDerivatives, TRIES, type ImpostorResult } from "./impostor.ts"
import { MAX_HELLO_BYTES, MAX_PENDING_CONNECTIONS } from "../../src/controller/listener.ts"
import { MAX_BUFFERED_BYTES, MAX_STORED_BYTES } from "../../src/store/server.ts"
import {
  checkPendingFlood, checkPreAuthClaims, checkStoreAmplification, checkStoreBuffers, checkStoreFill, checkStoreLimits,
  type AmplificationResult, type ClaimsResult, type FloodResult, type StoreBufferResult, type StoreFillResult,
} from "./preAuth.ts"

const AREA = "security"
/** RSS growth allowed where nothing may be allocated (64 MiB of bytes follow each claim). */
export const QUIET_KIB = 16 * 1024
/** RSS growth allowed beyond a bound before authentication (buffers and the runtime's own). */
export const PRE_AUTH_SLACK_KIB = 32 * 1024

const row = (check: string, tries: number, held: number, detail: string): ReliabilityRow => ({ area: AREA, check, tries, held, detail })

const attempt = async (check: string, tries: number, body: () => Promise<ReliabilityRow[]>): Promise<ReliabilityRow[]> => {
  try {
    return await body()
  } catch (e) {
    return [row(check, tries, 0, `failed: ${(e instanceof Error ? e.message : String(e)).split("\n")[0]}`)]
  }
}

export const run = async (mode: Mode): Promise<ReliabilityRow[]> => {
  const rows: ReliabilityRow[] = []
  const tree = makeFunctionTree()
  try {
    const rig = await startController(1, [tree.root])
    try {
      rows.push(...await attempt("listeners bind loopback", 2, async () => {
        const r = checkLoopback(rig)
        const checked = [r.controller, r.store, ...r.workers.flat()]
        const configured = await checkConfiguredBind()
        const wide = [configured.controller, configured.store].filter((s) => s?.address === "0.0.0.0").length
        const named = (s: ListeningSocket | undefined) => (s === undefined ? "not found" : `${s.address}:${s.port}`)
        return [
          row("listeners bind loopback (controller, launcher's store, worker)", checked.length, checked.filter((s) => s !== undefined && isLoopback(s.address)).length,
            `controller ${named(r.controller)}, store ${named(r.store)}; the worker listens on ${r.workers.flat().length === 0 ? "nothing" : r.workers.flat().map(named).join(", ")} (read from /proc)`),
          row("listeners bind all interfaces only when configured to", 2, wide, `host "0.0.0.0" given: controller ${configured.controller?.address}, store ${configured.store?.address}`),
        ]
      }))

      const rounds = mode === "long" ? 10 : 1
      rows.push(...await attempt("connections without the job token", 14 * rounds, async () => {
        const results: IntruderResult[] = []
        for (let i = 0; i < rounds; i++) results.push(...await checkIntruders(rig))
        const held = results.filter((r) => r.closed && r.reported)
        const served = await checkWorkersServe(rig)
        const kinds = [...new Set(results.map((r) => r.name))]
        return [
          row("connections without the job token are refused and reported", results.length, held.length,
            `${kinds.length} kinds (${kinds.join("; ")}); closed within ${Math.max(...results.map((r) => r.ms)).toFixed(0)} ms at most${held.length < results.length ? `; not refused: ${results.filter((r) => !r.closed || !r.reported).map((r) => r.name).join("; ")}` : ""}`),
          row("the real worker with the token still works after them", 1, served ? 1 : 0, served ? "a call and a fetch on it succeeded" : "it did not serve"),
        ]
      }))

      rows.push(...await attempt("connections that never finish the handshake", 4, async () => {
        const timeoutMs = 300
        const r = await checkSilentConnections(timeoutMs)
        const closed = r.silent.filter((s) => s.closed).length
        return [row("connections that never finish the handshake are closed after the hello timeout", r.silent.length, r.reported === r.silent.length && r.helloKept ? closed : 0,
          `${r.silent.map((s) => s.name.replace(/^a connection that /, "")).join("; ")}: closed after ${r.silent.map((s) => s.ms.toFixed(0)).join(", ")} ms with a ${timeoutMs} ms timeout (default 10 s), ${r.reported} reported; a worker that passed the handshake kept: ${r.helloKept}`)]
      }))

      rows.push(...await attempt("functions outside the allowed roots", 15, async () => {
        const names = functionNames(tree)
        const refused = [...await resolveAll([tree.root], names.refused.map(([n]) => n)), ...await resolveAll([tree.rootLink], names.refused.map(([n]) => n))]
        const allowed = [...await resolveAll([tree.root], names.allowed), ...await resolveAll([tree.rootLink], names.allowed)]
        const onWorker = await checkFunctionsOnWorker(rig, tree)
        const hiddenRoots = await checkHiddenRoots(tree)
        const imported = tree.imported()
        const refusedOk = refused.filter((r) => !r.resolved && r.tag === "FunctionNotFound").length
        const workerOk = onWorker.refused.filter((r) => !r.resolved && /FunctionNotFound/.test(r.message)).length
        const byName = (rs: ReadonlyArray<ResolveResult>, name: string) => rs.filter((r) => r.name === name)
        const unexported = [...byName(refused, "no-export:run"), ...byName(onWorker.refused, "no-export:run"), onWorker.program]
        const unexportedOk = unexported.filter((r) => !r.resolved && /does not export .*it was not imported/.test(r.message)).length
        const hidden = [...HIDDEN_NAMES.flatMap((n) => [...byName(refused, n), ...byName(onWorker.refused, n)]), ...hiddenRoots]
        const hiddenOk = hidden.filter((r) => !r.resolved && /node_modules and dot folders are never searched|roots not used, being in node_modules or a dot folder/.test(r.message)).length
        return [
          row("functions outside the allowed roots are refused (FunctionTable)", refused.length, imported.length > 0 ? 0 : refusedOk,
            `absolute paths, .. escapes, file and directory symlinks leading out, a sibling extending the root's name, node: and bare names; root given directly and through a symlink; ${allowed.filter((r) => r.resolved).length}/${allowed.length} names inside resolved; nothing outside imported: ${imported.length === 0}`),
          row("functions outside the allowed roots are refused (real worker)", onWorker.refused.length, imported.length > 0 ? 0 : workerOk,
            `each a RemoteError naming FunctionNotFound; an allowed module ran: ${onWorker.allowedRan}`),
          row("a module without the named export is refused before it runs", unexported.length, imported.includes("no-export") || !onWorker.servedAfter ? 0 : unexportedOk,
            `read with Bun.Transpiler.scan: no-export:run (2 roots, a real worker) and ${PROGRAM_MODULE} on a real worker (it used to print usage and exit 2): its worker served after it: ${onWorker.servedAfter}; marks left by imports: [${imported}]`),
          row("node_modules and dot folders are never roots or searched", hidden.length, imported.length > 0 ? 0 : hiddenOk,
            `${HIDDEN_NAMES.join(", ")} (2 roots and a real worker), and a root inside node_modules and one in a dot folder; marks left by imports: [${imported}]`),
        ]
      }))
    } finally {
      await rig.close()
    }
  } finally {
    tree.remove()
  }

  rows.push(...await attempt("oversized frames", 3, async () => {
    const reader = await checkReaderClaim(0xffff_ffff)
    const listener = await checkListenerClaim()
    const store = await checkStoreClaim()
    const quiet = (before: number, after: number) => after - before < QUIET_KIB
    return [
      row("a 4 GiB frame claim + 64 MiB into FrameReader", 1, reader.refused && reader.allocations.length === 0 && quiet(reader.rssBeforeKiB, reader.rssAfterKiB) ? 1 : 0,
        `refused from the prefix ("${reader.problem}"), ${reader.allocations.length} allocations, ${rssChange(reader.rssBeforeKiB, reader.rssAfterKiB)}`),
      row("a 4 GiB frame claim + 64 MiB to the controller listener", 1, listener.closed && listener.refused && listener.allocations.every((n) => n < 1 << 20) && quiet(listener.rssBeforeKiB, listener.rssAfterKiB) ? 1 : 0,
        `connection closed and reported, largest allocation ${Math.max(0, ...listener.allocations)} B, ${rssChange(listener.rssBeforeKiB, listener.rssAfterKiB)}`),
      row("a 2^40-byte key claim + 64 MiB to the store", 1, store.closed && quiet(store.rssBeforeKiB, store.rssAfterKiB) ? 1 : 0,
        `connection closed, RSS +${mib(store.rssAfterKiB - store.rssBeforeKiB)} MiB (refusal itself: tests/store/wire.test.ts, server.test.ts)`),
    ]
  }))

  const rounds = mode === "long" ? 5 : 1
  rows.push(...await attempt("memory before authentication", 7 * rounds, async () => {
    const claims: ClaimsResult[] = [], floods: FloodResult[] = [], fills: StoreFillResult[] = [], buffers: Array<StoreBufferResult & { kind: string }> = []
    const limits: Array<Awaited<ReturnType<typeof checkStoreLimits>>> = []
    for (let i = 0; i < rounds; i++) {
      claims.push(await checkPreAuthClaims(4))
      floods.push(await checkPendingFlood())
      fills.push(await checkStoreFill(256))
      for (const kind of ["partial", "unread"] as const) buffers.push({ ...await checkStoreBuffers(kind), kind })
      limits.push(await checkStoreLimits())
    }
    const grew = (r: { rssBeforeKiB: number; rssAfterKiB: number }) => r.rssAfterKiB - r.rssBeforeKiB
    const most = (xs: ReadonlyArray<number>) => mib(Math.max(...xs))
    return [
      row("before its handshake ends, a connection's frames are capped (4 connections claiming 512 MiB + 16 MiB each)", claims.length * 4,
        claims.reduce((n, r) => n + (r.largeAllocations.length === 0 && grew(r) < PRE_AUTH_SLACK_KIB ? Math.min(r.closed, r.refused) : 0), 0),
        `refused from the prefix at ${MAX_HELLO_BYTES} bytes, closed and reported; allocations of 1 MiB or more: ${claims.reduce((n, r) => n + r.largeAllocations.length, 0)}; RSS grew ${most(claims.map(grew))} MiB at most`),
      row(`connections without a hello are bounded (${MAX_PENDING_CONNECTIONS + 36} opened, limit ${MAX_PENDING_CONNECTIONS})`, floods.length,
        floods.filter((r) => r.open === r.limit && r.newestKept && r.helloAdmitted).length,
        `${floods.map((r) => r.open).join(", ")} left open, the newest; the oldest closed and reported (${floods.map((r) => r.evictions).join(", ")}); a worker saying hello then was admitted: ${floods.every((r) => r.helloAdmitted)}`),
      row("the store's values are bounded (a stranger SETs 256 MiB in 4 MiB values)", fills.length,
        fills.filter((r) => r.closed > 0 && r.said.includes("the store is full") && grew(r) < MAX_STORED_BYTES / 1024 + PRE_AUTH_SLACK_KIB && r.servesAfter).length,
        `refused past ${mib(MAX_STORED_BYTES / 1024)} MiB ("the store is full"), the connection closed; store process RSS grew ${most(fills.map(grew))} MiB at most (unbounded before: 870 MiB was seen); a key stored before still read`),
      row("what the store's connections hold is bounded (8 half-sent 32 MiB MULTI_SETs; 64 unread GETs of 4 MiB)", buffers.length,
        buffers.filter((r) => r.closed && r.said.includes("ServerOptions.maxBufferedBytes") && grew(r) < MAX_BUFFERED_BYTES / 1024 + PRE_AUTH_SLACK_KIB).length,
        `the connection that passes ${mib(MAX_BUFFERED_BYTES / 1024)} MiB is closed; store process RSS grew ${buffers.map((r) => `${mib(grew(r))} MiB (${r.kind})`).join(", ")}`),
      row("the store refuses an APPEND past the value limit, a flood of empty values, connections past the limit", limits.length * 3,
        limits.reduce((n, r) => n + (r.appendClosed ? 1 : 0) + (r.emptyStored <= r.emptyBound ? 1 : 0) + (r.extraClosed === r.extraConnections ? 1 : 0), 0),
        `with limits of 1 KiB a value, 64 KiB stored, 8 connections: ${limits.map((r) => `${r.emptyStored} of 2000 empty values stored (bound ${r.emptyBound}), ${r.extraClosed}/${r.extraConnections} extra connections closed`).join("; ")}`),
    ]
  }))

  rows.push(...await attempt("attach-mode token", 3 * rounds, async () => {
    const runs: AttachTokenResult[] = []
    for (let i = 0; i < rounds; i++) runs.push(await checkAttachToken())
    const refusals = await checkAttachRefusals()
    return [
      row("attach: the token never crosses the store (every byte through a recording proxy)", runs.length, runs.filter((r) => r.storeBytes > 0 && !r.tokenInStore && r.found === undefined).length,
        `${runs.map((r) => r.storeBytes).join(", ")} bytes seen between the store and the controller, 2 workers and a stranger; the token in them: ${runs.some((r) => r.tokenInStore)}; monarch/token found: ${runs.some((r) => r.found !== undefined)}`),
      row("attach: a stranger trying the handshake as rank 0 before the workers is refused; the real workers attach", runs.length,
        runs.filter((r) => r.impostorClosed && r.impostorReported && !r.impostorAdmitted && r.served && r.exits.every((x) => x === 0)).length,
        `refused and reported as not proving the token; then an all-reduce on the 2 real workers (MONARCH_TOKEN) and exits ${runs.map((r) => r.exits.join("/")).join(", ")}`),
      row("attach without a token, with a short one, and a worker without one are refused at start", 3,
        [refusals.none.includes("MONARCH_TOKEN"), refusals.short.includes("at least 16"), refusals.worker.includes("MONARCH_TOKEN")].filter(Boolean).length,
        `"${refusals.none.split(":")[0]}"; "${refusals.short}"; worker: "${refusals.worker.split(":")[0]}"`),
    ]
  }))

  rows.push(...await attempt("an impostor named in the store", (TRIES.length + 1) * rounds, async () => {
    const runs: ImpostorResult[] = []
    for (let i = 0; i < rounds; i++) runs.push(await checkImpostor())
    const searched = tokenDerivatives("x").length
    return [
      row("attach: an impostor named in the store as the controller gets no token bytes (a forged, a relayed and a replayed proof)", runs.length * TRIES.length,
        runs.reduce((n, r) => n + (r.found.length === 0 && r.workerSent.every((t) => t === "WorkerChallenge") ? Math.min(r.tries.length, TRIES.length) : 0), 0),
        `token bytes seen: ${runs.some((r) => r.found.length > 0) ? runs.flatMap((r) => r.found).join(", ") : "none"} (${runs.map((r) => r.bytesSeen).join(", ")} bytes from the worker, searched for the token and ${searched - 1} fixed functions of it); the worker sent only ${[...new Set(runs.flatMap((r) => r.workerSent))].join(", ")}; it said so on stderr ${runs.map((r) => r.warnings).join(", ")} times`),
      row("attach: the impostor's relay gets only the controller's proof, its reflected hello is refused; the worker then attaches to the real controller", runs.length,
        runs.filter((r) => r.relayGot.join() === "ControllerProof" && r.relayRefused && r.served && r.exit === 0).length,
        `relay got [${[...new Set(runs.flatMap((r) => r.relayGot))].join(", ")}] from the controller, reflected hello refused: ${runs.every((r) => r.relayRefused)}; then a call and a fetch on the worker, exits ${runs.map((r) => r.exit).join(", ")}`),
    ]
  }))

  rows.push(...await attempt("MULTI_GET amplification", 2 * rounds, async () => {
    const runs: AmplificationResult[] = []
    for (let i = 0; i < rounds; i++) for (const times of [64, 256]) runs.push(await checkStoreAmplification(times))
    const grew = (r: AmplificationResult) => r.peakAfterKiB - r.peakBeforeKiB
    return [row("the store refuses a MULTI_GET whose reply would pass its bound before building it (an 8 MiB value named 64 and 256 times)", runs.length,
      runs.filter((r) => r.closed && r.said.includes("a reply of") && grew(r) < MAX_BUFFERED_BYTES / 1024 + PRE_AUTH_SLACK_KIB && r.servesAfter).length,
      `requests of ${[...new Set(runs.map((r) => r.requestBytes))].join(", ")} bytes asking for ${[...new Set(runs.map((r) => mib(r.replyBytes / 1024)))].join(" and ")} MiB; store process peak RSS grew ${runs.map((r) => mib(grew(r))).join(", ")} MiB (bound ${mib(MAX_BUFFERED_BYTES / 1024)} MiB; 493 MiB for 64 names before); the value still read after`)]
  }))

  rows.push(...await attempt("idents a worker could not answer", 8 * rounds, async () => {
    const runs: IdentsResult[] = []
    for (let i = 0; i < rounds; i++) runs.push(await checkIdents())
    const tries = runs.flatMap((r) => [...r.refused.map((x) => x.reply !== undefined && /ident|idents/.test(x.reply)), r.poisonedFetchAnswered, ...r.largestAnswered.map((x) => x.answered)])
    return [row("a worker refuses idents whose Status it could not send (past 2^53 - 2; a CallRecording ending past 2^53 - 1) and goes on", tries.length, tries.filter(Boolean).length,
      `${runs[0]!.refused.map((x) => x.name).join(", ")} refused with a ProtocolError; then a poisoned value's fetch answered by Status: ${runs.every((r) => r.poisonedFetchAnswered)}; ${runs[0]!.largestAnswered.map((x) => x.name).join(", ")} answered; last Status ${runs.map((r) => r.lastStatus).join(", ")}`)]
  }))

  rows.push(...await attempt("recordings on a worker", rounds, async () => {
    const runs: RecordingFloodResult[] = []
    for (let i = 0; i < rounds; i++) runs.push(await checkRecordingFlood())
    const grew = (r: RecordingFloodResult) => r.rssAfterKiB - r.rssBeforeKiB
    return [row("a worker's recordings are bounded (1,000 DefineRecordings of 1,000 commands, MONARCH_MAX_RECORDED_COMMANDS=100000)", runs.length,
      runs.filter((r) => r.refused.length === r.defines - r.limit / r.each && r.refused.every((m) => m.includes("MONARCH_MAX_RECORDED_COMMANDS")) && grew(r) < 192 * 1024 && r.servesAfter).length,
      `${runs.map((r) => r.refused.length).join(", ")} refused naming the bound; worker RSS grew ${runs.map((r) => mib(grew(r))).join(", ")} MiB for 100,000 commands kept (741 MiB for the 1,000,000 before); it served after`)]
  }))

  rows.push(...await attempt("another controller's handles", 14 * rounds, async () => {
    const runs: ForeignResult[] = []
    for (let i = 0; i < rounds; i++) runs.push(await checkForeignHandles())
    const refusals = runs.flatMap((r) => r.refusals)
    const intact = runs.every((r) => r.first.every((v) => v === 7) && r.second.every((v) => v === 1000))
    return [row("another controller's tensor, stream or mesh is refused in every use (two controllers in one process)", refusals.length,
      intact ? refusals.filter((f) => f.tag === "ControllerError" && f.message.includes("belongs to another controller")).length : 0,
      `same ref ids (${runs[0]!.ids.join(" and ")}); argument, nested argument, mutates, a call's stream, fetch, fetchAll, a fetch's stream, reduce, a reduce's stream, ctl.send, mesh.send both ways, borrow of the tensor and onto the stream; each ControllerError; both controllers' values intact after (7s, 1000s): ${intact}`)]
  }))

  rows.push(...await attempt("fetch coordinates", 8 * rounds, async () => {
    const runs: CoordinatesResult[] = []
    for (let i = 0; i < rounds; i++) runs.push(await checkFetchCoordinates())
    const refusals = runs.flatMap((r) => r.refusals)
    const goodOk = runs.every((r) => r.good.map((v) => v[0]).join() === GOOD_COORDINATES.map(([, rank]) => rank + 1).join())
    return [row("fetch at a dim the mesh lacks, out of range, or not coordinates is refused naming its dims", refusals.length,
      goodOk ? refusals.filter((f) => f.tag === "ControllerError" && /dp, tp|dp 0\.\.1|dp=2, tp=2/.test(f.message)).length : 0,
      `${runs[0]!.refusals.map((f) => f.name).join("; ")}; e.g. "${runs[0]!.refusals[0]!.message}"; ${GOOD_COORDINATES.length} good coordinates fetched the right rank: ${goodOk}`)]
  }))
  return rows
}
