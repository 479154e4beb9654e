/**
 * Borrows: using a tensor on a stream other than the one that produced it, ordered by events
 * instead of host synchronisation. Create records where `from` is; the first use on `to`
 * waits for it; the last use records where `to` is; the drop makes `from` wait for that.
 */
import { Effect } from "effect"
import type { BorrowCreate, BorrowDrop, BorrowFirstUse, BorrowLastUse } from "../../protocol/messages.ts"
import { DependentOnError } from "../errors.ts"
import { reject, type Session } from "../session.ts"
import { Borrow, streamOf } from "../streams.ts"

/** Forgets a borrow's state, destroying its events. */
const forget = (s: Session, id: number): void => {
  s.borrows.get(id)?.destroy()
  s.borrows.delete(id)
}

export const borrowCreate = (s: Session) => (m: BorrowCreate) => Effect.sync(() => {
  forget(s, m.result.id)
  try {
    const from = streamOf(s.env, m.from), to = streamOf(s.env, m.to)
    s.env.define(m.result, s.env.get(m.tensor))
    if (!m.alreadyBorrowed) s.borrows.set(m.result.id, new Borrow(from, to))
  } catch (e) {
    // A poisoned tensor poisons the alias; a bad ref leaves it undefined (uses then fail).
    if (e instanceof DependentOnError) s.env.define(m.result, e)
    else reject(s, `BorrowCreate ${m.result.id}: ${(e as Error).message}`)
    if (!m.alreadyBorrowed) s.borrows.set(m.result.id, null)
  }
})

/** The borrow's state; an unknown id is rejected, a failed creation is null (steps are no-ops). */
const borrowOf = (s: Session, id: number, step: string): Borrow | null => {
  const b = s.borrows.get(id)
  if (b === undefined) reject(s, `${step}: unknown borrow ${id}`)
  return b ?? null
}

/**
 * A borrow step. One that cannot run (a stream of the borrow was deleted meanwhile) is
 * refused with a ProtocolError, like any other misuse of the protocol.
 */
const step = (s: Session, name: string, id: number, body: () => void) => Effect.sync(() => {
  try {
    body()
  } catch (e) {
    reject(s, `${name} ${id}: ${e instanceof Error ? e.message : String(e)}`)
  }
})

export const borrowFirstUse = (s: Session) => (m: BorrowFirstUse) => step(s, "BorrowFirstUse", m.borrow, () => {
  borrowOf(s, m.borrow, "BorrowFirstUse")?.firstUse()
})

export const borrowLastUse = (s: Session) => (m: BorrowLastUse) => step(s, "BorrowLastUse", m.borrow, () => {
  borrowOf(s, m.borrow, "BorrowLastUse")?.markLastUse()
})

export const borrowDrop = (s: Session) => (m: BorrowDrop) => step(s, "BorrowDrop", m.borrow, () => {
  const b = borrowOf(s, m.borrow, "BorrowDrop")
  s.borrows.delete(m.borrow)
  b?.drop(s.native)
})
