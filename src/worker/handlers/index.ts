/**
 * The handler table: one function per WorkerMessage, typed by `_tag`, so a new message does
 * not compile until it has a handler. Dispatch is a lookup in it.
 */
import { Effect } from "effect"
import { WORKER_MESSAGES, type WorkerMessage } from "../../protocol/messages.ts"
import { nowMicros, type TraceWriter } from "../../trace/writer.ts"
import { settleFor } from "../inflight.ts"
import { reject, type Session } from "../session.ts"
import { borrowCreate, borrowDrop, borrowFirstUse, borrowLastUse } from "./borrows.ts"
import { callFunction, fetchValue } from "./calls.ts"
import { commitCheckpoint, dropCheckpoint, loadShards, readCheckpoint, saveShards } from "./checkpoints.ts"
import { createDeviceMesh, reduce, sendTensor } from "./collectives.ts"
import { commandGroup, controllerProof, deleteRefs, exit, peerLost, requestStatus, withheld } from "./control.ts"
import { callRecording, defineRecording, deleteRecording } from "./recordings.ts"
import { segmentFree, sharedSegment, uploadSegment } from "./shared.ts"
import { createStream } from "./streams.ts"

export type Handlers = {
  readonly [K in WorkerMessage["_tag"]]: (m: Extract<WorkerMessage, { _tag: K }>) => Effect.Effect<void>
}

/** One line per command for debug logs. */
const logLine = (m: WorkerMessage): string =>
  m._tag === "CommandGroup" ? `CommandGroup of ${m.commands.length}` : "ident" in m ? `${m._tag} ${m.ident}` : m._tag

/**
 * The handlers of one session, and `dispatch` over them (logging each command when `debug`,
 * recording each on the timeline when `trace`).
 * A handler that throws where it should not is a bug; dispatch turns it into a ProtocolError
 * reply and a log line, so the worker and everything it holds survive it.
 */
export const makeDispatch = (s: Session, debug = false, trace?: TraceWriter): ((m: WorkerMessage) => Effect.Effect<void>) => {
  // One defect guard per message kind, made once: building it per command (the closure and the
  // combinator's own dispatch) was a tenth of a one-element op's dispatch.
  const guard = (tag: WorkerMessage["_tag"]) => Effect.catchDefect((e: unknown) => {
    reject(s, `${tag}: internal error: ${e instanceof Error ? e.message : String(e)}`)
    return Effect.logError(`${tag} failed unexpectedly`, e)
  })
  const guards = Object.fromEntries(Object.keys(WORKER_MESSAGES).map((tag) => [tag, guard(tag as WorkerMessage["_tag"])])) as Record<string, (e: Effect.Effect<void>) => Effect.Effect<void>>
  const handle = (m: WorkerMessage): Effect.Effect<void> =>
    guards[m._tag]!((handlers[m._tag] as (m: WorkerMessage) => Effect.Effect<void>)(m))
  // A command first waits for the collectives in flight it reads or writes (inflight.ts).
  const run = (m: WorkerMessage): Effect.Effect<void> => {
    const wait = settleFor(s.inflight, s.env, m)
    return wait === undefined ? handle(m) : Effect.andThen(wait, Effect.suspend(() => handle(m)))
  }
  const logged = debug ? (m: WorkerMessage) => Effect.andThen(Effect.logDebug(logLine(m)), run(m)) : run
  // Tracing wraps each command (a group's too) only when on: the plain path stays as it was.
  // `run` turns defects into replies, so the end is always reached.
  if (trace !== undefined) {
    s.inflight.onSettled = (p) => trace.comm(p.name, p.ident, p.work.began, p.work.ended)
    s.inflight.onWaited = (p, from, to) => trace.waited(p.name, p.ident, p.stream, from, to)
  }
  const dispatch = trace === undefined ? logged : (m: WorkerMessage) => Effect.suspend(() => {
    const start = nowMicros()
    return Effect.map(logged(m), () => trace.record(m, start))
  })
  const handlers: Handlers = {
    CreateDeviceMesh: createDeviceMesh(s),
    CreateStream: createStream(s),
    CallFunction: callFunction(s),
    FetchValue: fetchValue(s),
    RequestStatus: requestStatus(s),
    Exit: exit(s),
    CommandGroup: commandGroup(s, dispatch, !debug && trace === undefined),
    DeleteRefs: deleteRefs(s),
    BorrowCreate: borrowCreate(s),
    BorrowFirstUse: borrowFirstUse(s),
    BorrowLastUse: borrowLastUse(s),
    BorrowDrop: borrowDrop(s),
    Reduce: reduce(s),
    SendTensor: sendTensor(s),
    DefineRecording: defineRecording(s),
    CallRecording: callRecording(s, dispatch, !debug && trace === undefined),
    DeleteRecording: deleteRecording(s),
    PeerLost: peerLost(s),
    Withheld: withheld(s),
    SaveShards: saveShards(s),
    CommitCheckpoint: commitCheckpoint(s),
    ReadCheckpoint: readCheckpoint(s),
    LoadShards: loadShards(s),
    ControllerProof: controllerProof(s),
    DropCheckpoint: dropCheckpoint(s),
    SharedSegment: sharedSegment(s),
    SegmentFree: segmentFree(s),
    UploadSegment: uploadSegment(s),
  }
  return dispatch
}
