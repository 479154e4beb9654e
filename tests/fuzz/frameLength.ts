/**
 * Fuzzing the length prefix. In process: random and boundary claims against FrameReader, the
 * splitter both ends of the controller link use; a claim over the maximum must fail fatally
 * before any memory is allocated for it, one within it must yield exactly its body. Against a
 * real worker (with a raw socket standing in for its controller): an oversized claim followed
 * by 64 MiB must be answered by a ProtocolError and a closed link; a non-restartable worker
 * then exits with status 3 (link lost: no Exit came), a restartable one reconnects, serves again, and its RSS stays
 * within 10% of where it was.
 */
import { Effect, Exit, Scope } from "effect"
import { decodeControllerMessage, encodeMessage } from "../../src/protocol/codec.ts"
import { DEFAULT_MAX_FRAME_BYTES, FrameReader, OWNED_FRAME_BYTES } from "../../src/protocol/framing.ts"
import type { ControllerMessage, WorkerMessage } from "../../src/protocol/messages.ts"
import { HostTensor, Ref } from "../../src/protocol/values.ts"
import { launch, type ProcessExit } from "../../src/launcher/index.ts"
import { eventually } from "./controllerRig.ts"
import { Rng } from "./mutate.ts"
import { rssKiB } from "./proc.ts"
import { controllerHandshake, RawPeer, frame, lengthPrefix } from "./rawPeer.ts"

const WORKER = new URL("../../src/worker.ts", import.meta.url).pathname
const FUZZ_FIXTURES = new URL("./fixtures", import.meta.url).pathname
const SMALL_MAX = 1024 * 1024

/**
 * Wraps Bun.allocUnsafe (where FrameReader gets memory for large bodies) so that the sizes
 * asked for are recorded, until restore().
 */
export const watchAllocations = (): { readonly sizes: number[]; readonly restore: () => void } => {
  const original = Bun.allocUnsafe
  const sizes: number[] = []
  const bun = Bun as { allocUnsafe: typeof Bun.allocUnsafe }
  bun.allocUnsafe = (n: number) => {
    sizes.push(n)
    return original(n)
  }
  return { sizes, restore: () => void (bun.allocUnsafe = original) }
}

export interface LengthFuzzResult {
  readonly tries: number
  readonly held: number
  readonly over: number
  readonly within: number
  /** The largest allocation seen for a claim over the maximum (0 when none). */
  readonly allocatedForOver: number
  readonly failures: ReadonlyArray<string>
}

/** `tries` random claims, each on a fresh FrameReader (maximum 1 MiB or the 1 GiB default). */
export const fuzzFrameLengths = (tries: number, seed: number): LengthFuzzResult => {
  const rng = new Rng(seed)
  const source = rng.bytes(SMALL_MAX)
  let held = 0, over = 0, within = 0, allocatedForOver = 0
  const failures: string[] = []
  for (let i = 0; i < tries; i++) {
    const max = rng.chance(0.5) ? SMALL_MAX : DEFAULT_MAX_FRAME_BYTES
    const isOver = rng.chance(0.5)
    const claim = isOver
      ? rng.pick([max + 1, 2 ** 31, 2 ** 32 - 1, 0x4745_5420 /* "GET " */, max + 1 + rng.int(2 ** 32 - 1 - max)])
      : rng.pick([0, 1, OWNED_FRAME_BYTES - 1, OWNED_FRAME_BYTES, rng.int(4096), rng.int(SMALL_MAX), ...(max === SMALL_MAX ? [max] : [])])
    const stream = new Uint8Array(4 + (isOver ? 64 : claim))
    stream.set(lengthPrefix(claim))
    stream.set(source.subarray(0, stream.length - 4), 4)
    const frames: Uint8Array[] = []
    const reader = new FrameReader((body) => void frames.push(body.slice()), { maxFrameBytes: max })
    const errors: Array<string | undefined> = []
    const watch = watchAllocations()
    try {
      for (let at = 0; at < stream.length; ) {
        const n = 1 + rng.int(rng.chance(0.3) ? 8 : 70_000)
        errors.push(reader.push(stream.subarray(at, at + n))?.message)
        at += n
      }
      // Once fatal, always fatal: the stream cannot be split again.
      errors.push(reader.push(frame(new Uint8Array([0x91, 0x05])))?.message)
    } finally {
      watch.restore()
    }
    const sizes = watch.sizes
    const fatal = errors.find((e) => e !== undefined)
    let ok: boolean
    if (isOver) {
      over++
      allocatedForOver = Math.max(allocatedForOver, ...sizes, 0)
      ok = fatal !== undefined && fatal.includes(`frame of ${claim} bytes is over the ${max}-byte maximum`) && errors.at(-1) === fatal && frames.length === 0 && sizes.length === 0
    } else {
      within++
      const body = frames[0]
      ok = fatal === undefined && frames.length === 2 && body!.length === claim && Buffer.from(body!).equals(source.subarray(0, claim))
        && sizes.every((n) => n === claim) && sizes.length === (claim >= OWNED_FRAME_BYTES ? 1 : 0)
    }
    if (ok) held++
    else if (failures.length < 5) failures.push(`claim ${claim} (max ${max}): error ${fatal}, ${frames.length} frames, allocations [${sizes}]`)
  }
  return { tries, held, over, within, allocatedForOver, failures }
}

// ---- against a real worker ------------------------------------------------------------------

export interface WorkerLengthResult {
  readonly tries: number
  /** Tries where the worker answered with a ProtocolError naming the claim and closed the link. */
  readonly refused: number
  /** Non-restartable: how the process ended. Restartable: undefined. */
  readonly exit: ProcessExit | undefined
  /** Restartable: tries after which the worker reconnected and ran a command. */
  readonly servedAgain: number
  /** After the first session; after the last (restartable only, else undefined). */
  readonly rssBeforeKiB: number
  readonly rssAfterKiB: number | undefined
  /** The ProtocolError the worker answered with (the last one). */
  readonly problem: string
}

const encoded = (m: WorkerMessage): Uint8Array => {
  const r = encodeMessage(m)
  if (r._tag === "Failure") throw new Error(r.failure.message)
  return r.success
}

const decoded = (body: Uint8Array): ControllerMessage => {
  const r = decodeControllerMessage(body)
  if (r._tag === "Failure") throw new Error(r.failure.message)
  return r.success
}

/**
 * One worker whose controller is a raw socket: `tries` times, an oversized claim followed by
 * 64 MiB of bytes. Restartable workers reconnect after each; a non-restartable one must exit.
 */
export const oversizedToWorker = async (o: { readonly restartable: boolean; readonly tries: number; readonly seed: number }): Promise<WorkerLengthResult> => {
  const rng = new Rng(o.seed)
  const trailing = rng.bytes(64 * 1024 * 1024)
  const peers: RawPeer[] = []
  const server = RawPeer.listen((p) => peers.push(p))
  const scope = Effect.runSync(Scope.make())
  const exits: ProcessExit[] = []
  const lines: string[] = []
  try {
    const job = await Effect.runPromise(Scope.provide(scope)(launch({
      nproc: 1,
      command: [WORKER],
      env: { CONTROLLER_ADDR: server.address, MONARCH_TOKEN: "raw", MONARCH_RESTARTABLE: o.restartable ? "1" : "0", MONARCH_FUNCTION_PATH: FUZZ_FIXTURES },
      onLine: (_rank, line) => void lines.push(line),
      graceMs: 1000,
    })))
    job.onExit((e) => void exits.push(e))
    const pid = job.pids[0]!
    const STREAM = new Ref(1)
    let ident = 0

    /** Waits for connection `n` and its handshake, then runs a command on it; true when it answered. */
    const session = async (n: number): Promise<boolean> => {
      if (!(await eventually(() => peers.length > n || exits.length > 0, 20_000)) || peers.length <= n) return false
      const peer = peers[n]!
      if ((await controllerHandshake(peer, "raw")) === undefined) return false
      const want = ident++
      peer.write(frame(encoded({ _tag: "CommandGroup", commands: [
        { _tag: "CreateStream", result: STREAM, default: true },
        { _tag: "CallFunction", ident: want, results: [new Ref(2)], mutates: [], function: "ops.full", args: [[2], 3], kwargs: {}, stream: STREAM },
        { _tag: "FetchValue", ident: ident++, mutates: [], function: null, object: new Ref(2), stream: STREAM },
        { _tag: "FetchValue", ident: ident++, mutates: [], function: "fuzzgc:collect", object: null, stream: STREAM },
      ] })))
      const answered = () => peer.bodies.slice(2).map(decoded).filter((m) => m._tag === "FetchResult")
      if (!(await peer.until(() => answered().length === 2, 10_000))) return false
      const value = answered()[0]!.value
      return value instanceof HostTensor && [...value.toArray()].join() === "3,3"
    }
    const settledRss = async () => {
      let least = Infinity
      for (let i = 0; i < 3; i++) {
        await Bun.sleep(200)
        least = Math.min(least, rssKiB(pid))
      }
      return least
    }

    if (!(await session(0))) throw new Error(`the worker never served its first controller\n${lines.slice(-20).join("\n")}`)
    const rssBeforeKiB = await settledRss()
    let refused = 0, servedAgain = 0, problem = ""
    for (let t = 0; t < o.tries; t++) {
      const peer = peers[t]!
      const claim = DEFAULT_MAX_FRAME_BYTES + 1 + rng.int(2 ** 32 - 1 - DEFAULT_MAX_FRAME_BYTES)
      const from = peer.bodies.length
      peer.write(lengthPrefix(claim))
      peer.write(trailing)
      const closed = await peer.until(() => peer.closed, 5000)
      const reply = peer.bodies.slice(from).map(decoded).find((m) => m._tag === "ProtocolError")
      if (closed && reply?._tag === "ProtocolError" && reply.message.includes(`frame of ${claim} bytes is over the`)) {
        refused++
        problem = reply.message
      }
      if (!o.restartable) break
      if (await session(t + 1)) servedAgain++
    }
    if (!o.restartable) await eventually(() => exits.length > 0, 10_000)
    const rssAfterKiB = o.restartable ? await settledRss() : undefined
    return { tries: o.restartable ? o.tries : 1, refused, exit: exits[0], servedAgain, rssBeforeKiB, rssAfterKiB, problem }
  } finally {
    await Effect.runPromise(Scope.close(scope, Exit.void))
    server.stop()
  }
}
