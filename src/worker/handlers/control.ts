/** The control messages: RequestStatus, Exit, CommandGroup, DeleteRefs, PeerLost, Withheld, and a ControllerProof out of place. */
import { Effect } from "effect"
import type { CommandGroup, ControllerProof, DeleteRefs, Exit, PeerLost, RequestStatus, Withheld, WorkerMessage } from "../../protocol/messages.ts"
import { DependentOnError } from "../errors.ts"
import { ioTurn, reject, sendStatus, stopped, type Session } from "../session.ts"
import { settleFor } from "../inflight.ts"
import { callNow } from "./calls.ts"

export const requestStatus = (s: Session) => (m: RequestStatus) => Effect.sync(() => {
  s.firstUncompletedIdent = Math.max(s.firstUncompletedIdent, m.ident + 1)
  sendStatus(s)
})

/** Ends the session once the checkpoint files being written in the background are durable (their answers go out first). */
export const exit = (s: Session) => (_: Exit) => {
  s.exiting = true
  return s.writing.size === 0 ? Effect.void : Effect.promise(() => Promise.allSettled([...s.writing]))
}

/**
 * Runs the group's commands in order, stopping at an Exit or a closed link. `plain`: dispatch
 * neither logs nor traces each command, so a CallFunction runs straight through (callNow: no
 * Effect per command unless it waits for a collective in flight or has a rest to wait for; its
 * failures poison and report as they do through dispatch); otherwise, and for every other command, through `dispatch`.
 */
export const commandGroup = (s: Session, dispatch: (m: WorkerMessage) => Effect.Effect<void>, plain: boolean) => (m: CommandGroup) =>
  Effect.gen(function* () {
    const commands = m.commands
    for (let k = 0; k < commands.length; k++) {
      const command = commands[k]!
      s.batch = commands
      s.at = k
      if (plain && command._tag === "CallFunction") {
        // As dispatch does: first the collectives in flight this command reads or writes.
        const wait = settleFor(s.inflight, s.env, command)
        if (wait) yield* wait
        const rest = callNow(s, command)
        if (rest) yield* rest
      } else yield* dispatch(command)
      // Each command: one long command must not hide a closed link behind the next fifteen.
      const turn = ioTurn(s)
      if (turn) yield* turn
      if (stopped(s)) return
    }
  }).pipe(Effect.ensuring(Effect.sync(() => void (s.batch = undefined))))

export const deleteRefs = (s: Session) => (m: DeleteRefs) => Effect.sync(() => {
  const unknown = m.refs.filter((id) => !s.env.delete(id))
  if (unknown.length > 0) reject(s, `DeleteRefs: unknown refs [${unknown.join(", ")}]`)
})

/** The handshake's answer, once it is over (link.ts takes the one that belongs to it). */
export const controllerProof = (s: Session) => (_m: ControllerProof) =>
  Effect.sync(() => reject(s, "ControllerProof: the handshake is over; refused"))

/** The link acts on a PeerLost as it arrives (link.ts); one in a group is acted on in its turn. */
export const peerLost = (s: Session) => (m: PeerLost) => Effect.sync(() => s.comms.peerLost(m.rank))

/** A command the controller withheld: what it would have defined is poisoned, as its failure there. */
export const withheld = (s: Session) => (m: Withheld) => Effect.sync(() => {
  const poison = new DependentOnError({ ident: m.ident })
  for (const r of m.refs) s.env.define(r, poison)
  if (s.firstUncompletedIdent <= m.ident) s.firstUncompletedIdent = m.ident + 1
})
