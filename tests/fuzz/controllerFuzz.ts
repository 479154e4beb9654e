/**
 * Fuzzing the controller's reader: a real controller (Controller.local, two real workers)
 * whose rank 1 is sent Exit, so its slot is free; a fake worker (a raw socket) takes the slot
 * through the handshake with the job token, then sends mutated and random frames, written
 * in torn pieces. Every frame that does not decode must come back as exactly one onProblem
 * naming the codec's problem, the fake's link must stay open (a bad frame is not fatal), and
 * rank 0 must keep serving: a value defined before is intact and a new command runs.
 * Finally an oversized length prefix must close the fake's link, again with rank 0 unharmed.
 */
import { encodeMessage, decodeControllerMessage } from "../../src/protocol/codec.ts"
import { OWNED_FRAME_BYTES } from "../../src/protocol/framing.ts"
import type { ControllerMessage } from "../../src/protocol/messages.ts"
import type { HostTensor } from "../../src/protocol/values.ts"
import { eventually, startController } from "./controllerRig.ts"
import { Rng, controllerSeeds, fuzzFrames } from "./mutate.ts"
import { isAlive } from "./proc.ts"
import { RawPeer, frame, lengthPrefix, workerHandshake } from "./rawPeer.ts"

/** The ident of the last frame's FetchResult: its "unknown ident" problem marks the end. */
const MARKER = 987_654_321
const BATCH = 500

const encoded = (m: ControllerMessage): Uint8Array => {
  const r = encodeMessage(m)
  if (r._tag === "Failure") throw new Error(r.failure.message)
  return r.success
}

export interface ControllerFuzzResult {
  readonly sent: number
  readonly invalid: number
  /** Invalid frames reported through onProblem with exactly the codec's problem. */
  readonly reported: number
  readonly unreported: ReadonlyArray<string>
  /** Valid frames, by tag (they reach the core as that rank's messages). */
  readonly valid: Readonly<Record<string, number>>
  /** Problems the valid frames drew (FetchResult for an unknown ident, a ProtocolError reply, ...). */
  readonly otherProblems: number
  readonly admitted: boolean
  /** The fake's link was still open after the fuzz frames. */
  readonly stayedOpen: boolean
  /** Rank 0 after the fuzz: the value defined before, and a new command. */
  readonly keptValue: boolean
  readonly newCommand: boolean
  /** An oversized length prefix closed the fake's link with a problem reported; rank 0 still served. */
  readonly oversizedClosed: boolean
  readonly oversizedProblem: string
  readonly servedAfterOversized: boolean
  readonly rank0Alive: boolean
  readonly seconds: number
}

const values = (v: unknown) => [...(v as HostTensor).toArray()].map(Number)

export const fuzzControllerReader = async (o: { readonly frames: number; readonly seed: number }): Promise<ControllerFuzzResult> => {
  const started = performance.now()
  const rig = await startController(2)
  try {
    const { ctl, run, problems } = rig
    const mesh = await run(ctl.mesh({ x: 2 }))
    const rank0 = await run(mesh.slice({ x: 0 }))
    const kept = await run(rank0.call("ops.full", [[3], 5]))
    if (values(await run(rank0.fetch(kept))).join() !== "5,5,5") throw new Error("rank 0 did not define the value")

    // Free rank 1's slot: the worker exits (it is not restartable) and its link closes.
    ctl.core.post([1], { _tag: "Exit" })
    if (!(await eventually(() => ctl.core.connected === 1 && !isAlive(rig.pids[1]!) && ctl.core.graph.isLost(1), 10_000))) throw new Error("rank 1 did not leave")

    const fake = await RawPeer.connect(rig.address)
    await workerHandshake(fake, { token: rig.token, rank: 1, world: 2 })
    const admitted = await eventually(() => ctl.core.connected === 2, 5000)

    const before = problems.length
    const rng = new Rng(o.seed ^ 0x5eed)
    const pieces = { maxPiece: 3000, random: () => rng.next() }
    const expected = new Map<string, number>()
    /** How the first frame with each problem was made, to replay a failure. */
    const madeBy = new Map<string, string>()
    const valid: Record<string, number> = {}
    let sent = 0, invalid = 0
    for (const f of fuzzFrames(o.frames, o.seed, controllerSeeds())) {
      const decoded = decodeControllerMessage(f.body, f.body.length >= OWNED_FRAME_BYTES ? "owned" : "borrowed")
      if (decoded._tag === "Failure") {
        invalid++
        const problem = `rank 1 sent an invalid frame: ${decoded.failure.message}`
        expected.set(problem, (expected.get(problem) ?? 0) + 1)
        if (!madeBy.has(problem)) madeBy.set(problem, f.how)
      } else valid[decoded.success._tag] = (valid[decoded.success._tag] ?? 0) + 1
      fake.write(frame(f.body), pieces)
      if (++sent % BATCH === 0) await eventually(() => fake.pending === 0 || fake.closed, 30_000)
    }
    fake.write(frame(encoded({ _tag: "FetchResult", ident: MARKER, value: null })))
    const markerProblem = `rank 1 sent a FetchResult for unknown ident ${MARKER}`
    await eventually(() => problems.includes(markerProblem) || fake.closed, 60_000)

    let reported = 0, otherProblems = 0
    for (const p of problems.slice(before)) {
      const left = expected.get(p) ?? 0
      if (left > 0) {
        expected.set(p, left - 1)
        reported++
      } else if (p !== markerProblem) otherProblems++
    }
    const unreported = [...expected].filter(([, n]) => n > 0).map(([p, n]) => `${n} x ${p} (first from ${madeBy.get(p)})`).slice(0, 5)
    const stayedOpen = !fake.closed

    const keptValue = values(await run(rank0.fetch(kept))).join() === "5,5,5"
    const fresh = await run(rank0.call("ops.arange", [3]))
    const newCommand = values(await run(rank0.fetch(fresh))).join() === "0,1,2"

    // The length prefix cannot be trusted any more: the link is closed, nothing allocated.
    const beforeOversized = problems.length
    fake.write(lengthPrefix(0xffff_ffff))
    const oversizedClosed = (await fake.until(() => fake.closed, 5000)) && (await eventually(() => ctl.core.connected === 1, 5000))
    const oversizedProblem = problems.slice(beforeOversized).find((p) => p.includes("over the")) ?? ""
    const after = await run(rank0.call("ops.full", [[2], 9]))
    const servedAfterOversized = values(await run(rank0.fetch(after))).join() === "9,9"

    return {
      sent, invalid, reported, unreported, valid, otherProblems, admitted, stayedOpen, keptValue, newCommand,
      oversizedClosed, oversizedProblem, servedAfterOversized, rank0Alive: isAlive(rig.pids[0]!),
      seconds: (performance.now() - started) / 1000,
    }
  } finally {
    await rig.close()
  }
}
