/**
 * Fuzzing a live worker: one real worker process (tests/worker/harness.ts) gets mutated and
 * random frames on its controller link. Each frame is first decoded here with the same codec:
 * one that does not decode must be answered by a ProtocolError carrying exactly the problem
 * the codec names; one that does (a mutation can yield a valid command) is sent only when it
 * cannot end or stall the worker (see holdBack), and is counted apart. Afterwards the worker
 * must be alive, a value defined before the run must be intact, a new command must run, and
 * its RSS (after a warm-up, measured after a full GC) must be within 10% of where it started.
 */
import { decodeWorkerMessage } from "../../src/protocol/codec.ts"
import { OWNED_FRAME_BYTES } from "../../src/protocol/framing.ts"
import type { ControllerMessage, Value, WorkerMessage } from "../../src/protocol/messages.ts"
import { HostTensor, Ref } from "../../src/protocol/values.ts"
import { inferOutputs, opNamed } from "../../src/ops/registry.ts"
import { FIXTURES, startWorkers } from "../worker/harness.ts"
import { FUZZ_STREAM, fuzzFrames, workerSeeds } from "./mutate.ts"
import { isAlive, rssKiB } from "./proc.ts"

const FUZZ_FIXTURES = new URL("./fixtures", import.meta.url).pathname

/** A value defined before the run that no sent frame may touch; it must survive. */
const SENTINEL = new Ref(7777)
const SENTINEL_VALUES = [42, 42, 42]
const PROTECTED = new Set([FUZZ_STREAM.id, SENTINEL.id])
/** Valid commands whose numbers could ask for more elements than this are held back. */
const MAX_ELEMENTS = 1 << 20
/** Idents of the run's own fetches, far from any a mutated seed carries. */
const OWN_IDENTS = 900_000_000
/** Frames between two round trips (bounds what is queued on either side). */
const BATCH = 500

/** Refs a command (re)defines or deletes. */
const definedIds = (m: WorkerMessage): number[] => {
  switch (m._tag) {
    case "CreateStream": case "CreateDeviceMesh": case "BorrowCreate": case "Reduce": case "SendTensor": return [m.result.id]
    case "CallFunction": return [...m.results, ...m.mutates].map((r) => r.id)
    case "LoadShards": return m.results.map((r) => r.id)
    case "FetchValue": return m.mutates.map((r) => r.id)
    case "DeleteRefs": return [...m.refs]
    case "CommandGroup": return m.commands.flatMap(definedIds)
    default: return []
  }
}

/** Borrows a command creates. */
const borrowsCreated = (m: WorkerMessage): number[] =>
  m._tag === "BorrowCreate" ? [m.result.id] : m._tag === "CommandGroup" ? m.commands.flatMap(borrowsCreated) : []

/** Every ref id and borrow id a command names, anywhere in it. */
const namedIds = (v: unknown, out: number[] = []): number[] => {
  if (v instanceof Ref) out.push(v.id)
  else if (Array.isArray(v)) for (const x of v) namedIds(x, out)
  else if (v !== null && typeof v === "object" && !(v instanceof HostTensor) && !(v instanceof Uint8Array) && Object.getPrototypeOf(v) === Object.prototype) {
    const o = v as Record<string, unknown>
    if (o._tag === "DeleteRefs") out.push(...(o.refs as number[]))
    if (typeof o.borrow === "number") out.push(o.borrow)
    for (const k in o) namedIds(o[k], out)
  }
  return out
}

/** The product of the magnitudes above 1 of the numbers in a value tree (Infinity for a bigint). */
const magnitude = (v: unknown): number => {
  if (typeof v === "number") return Math.abs(v) > 1 || !Number.isFinite(v) ? Math.abs(v) || Infinity : 1
  if (typeof v === "bigint") return Infinity
  if (Array.isArray(v)) return v.reduce((p: number, x) => p * magnitude(x), 1)
  if (v !== null && typeof v === "object" && Object.getPrototypeOf(v) === Object.prototype) return Object.values(v).reduce((p: number, x) => p * magnitude(x), 1)
  return 1
}

const hasRefOrTensor = (v: unknown): boolean =>
  v instanceof Ref || v instanceof HostTensor || (Array.isArray(v) ? v.some(hasRefOrTensor) : v !== null && typeof v === "object" && !(v instanceof Uint8Array) && Object.values(v).some(hasRefOrTensor))

/** Elements a built-in would allocate for these plain arguments (0 when it would refuse them). */
const builtinElements = (fn: string, args: ReadonlyArray<unknown>, kwargs: Readonly<Record<string, unknown>>): number => {
  const op = fn.startsWith("ops.") ? opNamed(fn.slice(4)) : undefined
  if (op === undefined || hasRefOrTensor(args)) return 0
  try {
    return inferOutputs(op, args, kwargs, true).reduce((n, meta) => n + meta!.shape.reduce((a, b) => a * b, 1), 0)
  } catch {
    return 0
  }
}

/**
 * Why a valid (mutated) command is not sent, or undefined when it is. Held back: Exit (it ends
 * a non-restartable worker; restartable, it wipes the state the run checks); Reduce and
 * SendTensor (a mutated mesh or rank set can name ranks this one-worker world lacks, and the
 * worker then rightly waits for them until the comm timeout); anything that redefines or
 * deletes the stream or names the sentinel; and calls whose numbers could ask for a huge
 * tensor (a valid request the worker would try to honour, which is not what this measures).
 */
export const holdBack = (m: WorkerMessage): string | undefined => {
  switch (m._tag) {
    case "Exit": return "Exit"
    case "Reduce": case "SendTensor": return "collective"
    case "CommandGroup":
      for (const c of m.commands) {
        const why = holdBack(c)
        if (why !== undefined) return why
      }
      return undefined
  }
  if (definedIds(m).some((id) => PROTECTED.has(id)) || namedIds(m).includes(SENTINEL.id)) return "protected ref"
  if (m._tag === "CallFunction" || m._tag === "FetchValue") {
    const [args, kwargs] = m._tag === "CallFunction" ? [m.args, m.kwargs] : [[m.object], {}]
    if (magnitude(args) * magnitude(kwargs) > MAX_ELEMENTS) return "large numbers"
    if (m.function !== null && builtinElements(m.function, args, kwargs) > MAX_ELEMENTS) return "large numbers"
  }
  return undefined
}

export interface PhaseResult {
  /** Frames sent to the worker. */
  readonly sent: number
  readonly invalid: number
  /** Invalid frames answered by a ProtocolError with exactly the codec's message. */
  readonly answered: number
  /** Expected problems that got no reply (a few, for the report). */
  readonly unanswered: ReadonlyArray<string>
  /** Valid frames sent, by message tag. */
  readonly validSent: Readonly<Record<string, number>>
  /** Valid frames not sent, by reason. */
  readonly heldBack: Readonly<Record<string, number>>
  /** What the valid frames drew: ProtocolErrors from handlers, RemoteFunctionFailed, FetchResult. */
  readonly handlerRejects: number
  readonly remoteFailures: number
  readonly fetchResults: number
}

export interface WorkerFuzzResult {
  readonly warmup: PhaseResult
  readonly run: PhaseResult
  readonly alive: boolean
  readonly exits: number
  readonly sentinelKept: boolean
  readonly commandAfter: boolean
  readonly rssBeforeKiB: number
  readonly rssAfterKiB: number
  readonly seconds: number
}

const add = (counts: Record<string, number>, key: string) => void (counts[key] = (counts[key] ?? 0) + 1)
/** The sum of a tally. */
export const countOf = (counts: Readonly<Record<string, number>>): number => Object.values(counts).reduce((a, b) => a + b, 0)

const numbers = (v: Value): number[] | undefined => (v instanceof HostTensor ? [...v.toArray()].map(Number) : undefined)

/** Runs one fuzz session against a fresh worker: warm-up frames, then `frames` measured ones. */
export const fuzzWorker = async (o: { readonly frames: number; readonly warmup: number; readonly seed: number }): Promise<WorkerFuzzResult> => {
  const started = performance.now()
  const h = await startWorkers({ world: 1, env: { MONARCH_FUNCTION_PATH: `${FIXTURES}:${FUZZ_FIXTURES}` } })
  try {
    const hello = h.received[0]![0] as Extract<ControllerMessage, { _tag: "WorkerHello" }>
    const pid = hello.pid
    let ownIdent = OWN_IDENTS

    /** The worker's next message matching `pred` after index `from`, polled. */
    const awaitMessage = async (pred: (m: ControllerMessage) => boolean, from: number, what: string, timeoutMs = 30_000): Promise<ControllerMessage> => {
      const deadline = performance.now() + timeoutMs
      for (let i = from; ; ) {
        const got = h.received[0]!
        for (; i < got.length; i++) if (pred(got[i]!)) return got[i]!
        if (h.exits.length > 0) throw new Error(`the worker exited while waiting for ${what}: ${JSON.stringify(h.exits)}\n${h.lines.slice(-20).join("\n")}`)
        if (performance.now() > deadline) throw new Error(`timed out waiting for ${what}\n${h.lines.slice(-20).join("\n")}`)
        await Bun.sleep(2)
      }
    }
    /** Fetches `object` (through `fn` when given) with an ident of our own and returns the value. */
    const fetch = async (object: Value, fn: string | null = null): Promise<Value> => {
      const ident = ownIdent++, from = h.received[0]!.length
      h.send(0, { _tag: "FetchValue", ident, mutates: [], function: fn, object, stream: FUZZ_STREAM })
      const reply = await awaitMessage((m) => (m._tag === "FetchResult" || m._tag === "RemoteFunctionFailed") && m.ident === ident, from, `the reply to fetch ${ident}`)
      if (reply._tag !== "FetchResult") throw new Error(`fetch ${ident} failed: ${JSON.stringify(reply)}`)
      return reply.value
    }
    const sentinelIntact = async () => JSON.stringify(numbers(await fetch(SENTINEL))) === JSON.stringify(SENTINEL_VALUES)
    /** The least of three readings, each after a full GC and a pause: transients only add. */
    const settledRss = async () => {
      let least = Infinity
      for (let i = 0; i < 3; i++) {
        await fetch(null, "fuzzgc:collect")
        await Bun.sleep(300)
        least = Math.min(least, rssKiB(pid))
      }
      return least
    }

    h.send(0, { _tag: "CreateStream", result: FUZZ_STREAM, default: true })
    h.send(0, { _tag: "CallFunction", ident: ownIdent++, results: [SENTINEL], mutates: [], function: "ops.full", args: [[3], 42], kwargs: {}, stream: FUZZ_STREAM })
    if (!(await sentinelIntact())) throw new Error("the sentinel was not defined")

    const phase = async (count: number, seed: number): Promise<PhaseResult> => {
      const from = h.received[0]!.length
      const expected = new Map<string, number>()
      /** How the first frame with each problem was made, to replay a failure. */
      const madeBy = new Map<string, string>()
      const validSent: Record<string, number> = {}, heldBack: Record<string, number> = {}
      const defined = new Set<number>(), borrows = new Set<number>()
      let sent = 0, invalid = 0, inBatch = 0
      for (const frame of fuzzFrames(count, seed, workerSeeds())) {
        const decoded = decodeWorkerMessage(frame.body, frame.body.length >= OWNED_FRAME_BYTES ? "owned" : "borrowed")
        if (decoded._tag === "Failure") {
          invalid++
          expected.set(decoded.failure.message, (expected.get(decoded.failure.message) ?? 0) + 1)
          if (!madeBy.has(decoded.failure.message)) madeBy.set(decoded.failure.message, frame.how)
        } else {
          const why = holdBack(decoded.success)
          if (why !== undefined) {
            add(heldBack, why)
            continue
          }
          add(validSent, decoded.success._tag)
          for (const id of definedIds(decoded.success)) defined.add(id)
          for (const id of borrowsCreated(decoded.success)) borrows.add(id)
        }
        h.links[0]!.sendRawForTestsOnly(frame.body)
        sent++
        if (++inBatch === BATCH) {
          inBatch = 0
          await fetch(SENTINEL)
        }
      }
      await fetch(SENTINEL)
      const replies = h.received[0]!.slice(from)
      let answered = 0, handlerRejects = 0
      for (const m of replies) {
        if (m._tag !== "ProtocolError") continue
        const left = expected.get(m.message) ?? 0
        if (left > 0) {
          expected.set(m.message, left - 1)
          answered++
        } else handlerRejects++
      }
      const unanswered = [...expected].filter(([, n]) => n > 0).map(([message, n]) => `${n} x ${message} (first from ${madeBy.get(message)})`).slice(0, 5)
      const own = (m: ControllerMessage) => "ident" in m && m.ident >= OWN_IDENTS
      const result: PhaseResult = {
        sent, invalid, answered, unanswered, validSent, heldBack, handlerRejects,
        remoteFailures: replies.filter((m) => m._tag === "RemoteFunctionFailed" && !own(m)).length,
        fetchResults: replies.filter((m) => m._tag === "FetchResult" && !own(m)).length,
      }
      // Forget what the valid frames defined, so the RSS figure compares like with like.
      for (const id of borrows) h.send(0, { _tag: "BorrowDrop", borrow: id })
      if (defined.size > 0) h.send(0, { _tag: "DeleteRefs", refs: [...defined].filter((id) => !PROTECTED.has(id)) })
      await fetch(SENTINEL)
      return result
    }

    const warmup = await phase(o.warmup, o.seed + 1)
    const rssBeforeKiB = await settledRss()
    const run = await phase(o.frames, o.seed)
    const rssAfterKiB = await settledRss()

    const sentinelKept = await sentinelIntact()
    const fresh = new Ref(7778)
    h.send(0, { _tag: "CallFunction", ident: ownIdent++, results: [fresh], mutates: [], function: "ops.arange", args: [4], kwargs: {}, stream: FUZZ_STREAM })
    const commandAfter = JSON.stringify(numbers(await fetch(fresh))) === "[0,1,2,3]"
    return {
      warmup, run, alive: isAlive(pid), exits: h.exits.length, sentinelKept, commandAfter, rssBeforeKiB, rssAfterKiB,
      seconds: (performance.now() - started) / 1000,
    }
  } finally {
    await h.close()
  }
}
