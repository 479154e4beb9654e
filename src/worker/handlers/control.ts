/** The control messages: RequestStatus, Exit, CommandGroup and DeleteRefs. */
import { Effect } from "effect"
import type { CommandGroup, DeleteRefs, Exit, RequestStatus, WorkerMessage } from "../../protocol/messages.ts"
import { ioTurn, reject, sendStatus, stopped, type Session } from "../session.ts"

export const requestStatus = (s: Session) => (m: RequestStatus) => Effect.sync(() => {
  s.firstUncompletedIdent = Math.max(s.firstUncompletedIdent, m.ident + 1)
  sendStatus(s)
})

export const exit = (s: Session) => (_: Exit) => Effect.sync(() => {
  s.exiting = true
})

/** Runs the group's commands in order through `dispatch`, stopping at an Exit or a closed link. */
export const commandGroup = (s: Session, dispatch: (m: WorkerMessage) => Effect.Effect<void>) => (m: CommandGroup) =>
  Effect.gen(function* () {
    for (const command of m.commands) {
      yield* dispatch(command)
      const turn = ioTurn(s)
      if (turn) yield* turn
      if (stopped(s)) return
    }
  })

export const deleteRefs = (s: Session) => (m: DeleteRefs) => Effect.sync(() => {
  const unknown = m.refs.filter((id) => !s.env.delete(id))
  if (unknown.length > 0) reject(s, `DeleteRefs: unknown refs [${unknown.join(", ")}]`)
})
