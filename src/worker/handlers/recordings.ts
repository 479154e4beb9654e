/**
 * Recordings: a step the controller recorded once (compile) and calls with one message.
 * DefineRecording keeps its commands; CallRecording binds the formals to the call's actuals
 * (poisoned ones stay poisoned) and the params to its numbers, runs each command as it would
 * run outside a recording, with ident `ident + k`, so that failures poison and are reported
 * exactly as they would be there, binds the call's results to what the commands defined, and
 * then forgets every ref of the recording, freeing its temporaries (on cpu the outputs of its
 * prepared calls that nothing else reads are kept for its next call instead: prepared.ts's
 * keep). DeleteRecording forgets the recording itself.
 */
import { Effect } from "effect"
import { RECORDABLE, type CallFunction, type CallRecording, type DefineRecording, type DeleteRecording, type WorkerMessage } from "../../protocol/messages.ts"
import { Ref } from "../../protocol/values.ts"
import { settleFor } from "../inflight.ts"
import { freeSpares, keep, prepare, runPrepared } from "../prepared.ts"
import { ioTurn, reject, stopped, type Session } from "../session.ts"
import { callNow } from "./calls.ts"

/** How many commands of a call run between looks at the clock for the event loop's turn (ioTurn). */
const IO_CHECK = 16

/** The refs a command defines. */
const defines = (c: WorkerMessage): ReadonlyArray<Ref> => {
  switch (c._tag) {
    case "CallFunction": return c.results
    case "Reduce": case "SendTensor": case "BorrowCreate": return [c.result]
    default: return []
  }
}

export const defineRecording = (s: Session) => (m: DefineRecording) => Effect.sync(() => {
  const bad = m.commands.find((c) => !(RECORDABLE as ReadonlyArray<string>).includes(c._tag) || ("ident" in c && c.ident >= m.idents))
  if (bad !== undefined)
    return reject(s, `DefineRecording ${m.recording}: a recording holds ${RECORDABLE.join(", ")} with idents below ${m.idents}, not ${bad._tag}${"ident" in bad ? ` ${bad.ident}` : ""}`)
  // The bounds, counting what this one would replace (a DefineRecording of an id held replaces it).
  const { recordings, commands } = s.recordingLimits
  const replaced = s.recordings.get(m.recording)
  if (replaced === undefined && s.recordings.size >= recordings)
    return reject(s, `DefineRecording ${m.recording}: this worker holds ${s.recordings.size} recordings, its most (MONARCH_MAX_RECORDINGS=${recordings}); delete one first`)
  let held = m.commands.length - (replaced?.define.commands.length ?? 0)
  for (const r of s.recordings.values()) held += r.define.commands.length
  if (held > commands)
    return reject(s, `DefineRecording ${m.recording}: its ${m.commands.length} commands would take this worker's recordings to ${held} commands, past its most (MONARCH_MAX_RECORDED_COMMANDS=${commands}); delete some first`)
  const scratch = new Set<number>([...m.formals, ...m.params, ...m.results])
  for (const c of m.commands) for (const r of defines(c)) scratch.add(r.id)
  if (replaced !== undefined) freeSpares(replaced.prepared)
  s.recordings.set(m.recording, { define: m, scratch: [...scratch], prepared: [] })
})

/**
 * `plain`: dispatch neither logs nor traces each command, so calls run straight through (no
 * Effect per command; a built-in prepared on its first run, prepared.ts, then only its kernel);
 * otherwise each command goes through `dispatch`.
 */
export const callRecording = (s: Session, dispatch: (m: WorkerMessage) => Effect.Effect<void>, plain: boolean) => (m: CallRecording) =>
  Effect.gen(function* () {
    const recording = s.recordings.get(m.recording)
    if (recording === undefined) return reject(s, `CallRecording ${m.ident}: unknown recording ${m.recording}`)
    const { define, scratch, prepared } = recording
    if (m.actuals.length !== define.formals.length || m.params.length !== define.params.length || m.results.length !== define.results.length)
      return reject(s, `CallRecording ${m.ident}: ${m.actuals.length} actuals, ${m.params.length} params and ${m.results.length} results for recording ${m.recording}'s ${define.formals.length}, ${define.params.length} and ${define.results.length}`)
    // Its last command's Status is ident + idents: a call it could not send is refused.
    if (m.ident + define.idents > Number.MAX_SAFE_INTEGER)
      return reject(s, `CallRecording ${m.ident}: recording ${m.recording} takes ${define.idents} idents, which would end past ${Number.MAX_SAFE_INTEGER}: the Status after it could not be sent`)
    // An unknown actual leaves its formal undefined: the commands reading it fail as they would.
    for (let i = 0; i < m.actuals.length; i++) s.env.alias(define.formals[i]!, m.actuals[i]!.id)
    for (let i = 0; i < m.params.length; i++) s.env.define(new Ref(define.params[i]!), m.params[i])
    try {
      for (let k = 0; k < define.commands.length; k++) {
        const c = define.commands[k]!
        s.batch = define.commands
        s.at = k
        if (plain && c._tag === "CallFunction") {
          // As dispatch does: first the collectives in flight this command reads or writes.
          const wait = settleFor(s.inflight, s.env, c)
          if (wait) yield* wait
          let p = prepared[k]
          if (p === undefined) p = prepared[k] = prepare(s, c)
          const done = p === null ? false : runPrepared(s, p, c, m.ident + c.ident)
          const rest = done === false ? callNow(s, c, m.ident + c.ident) : done
          if (rest) yield* rest
        } else yield* dispatch("ident" in c ? { ...c, ident: m.ident + c.ident } as WorkerMessage : c)
        // Every IO_CHECK commands: the clock read is a tenth of a prepared one-element op.
        if (k % IO_CHECK !== IO_CHECK - 1 && k !== define.commands.length - 1) continue
        const turn = ioTurn(s)
        if (turn) yield* turn
        if (stopped(s)) return
      }
      for (let i = 0; i < m.results.length; i++) s.env.alias(m.results[i]!.id, define.results[i]!)
      s.firstUncompletedIdent = Math.max(s.firstUncompletedIdent, m.ident + define.idents)
    } finally {
      s.batch = undefined
      for (let k = 0; k < prepared.length; k++) {
        const p = prepared[k]
        if (p) keep(s, p, define.commands[k] as CallFunction)
      }
      for (const id of scratch) s.env.delete(id)
    }
  })

/** Calls run in command order, so none is running: the recording is only forgotten. */
export const deleteRecording = (s: Session) => (m: DeleteRecording) => Effect.sync(() => {
  const recording = s.recordings.get(m.recording)
  if (recording === undefined) return reject(s, `DeleteRecording: unknown recording ${m.recording}`)
  freeSpares(recording.prepared)
  s.recordings.delete(m.recording)
})
