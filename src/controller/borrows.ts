/**
 * The borrow lifecycle on the controller's side: using a tensor on another stream for a
 * scope. BorrowCreate at the start, BorrowFirstUse once, before the first command that reads
 * the alias, BorrowLastUse (when it was used) and BorrowDrop when the scope closes.
 */
import { Effect, type Scope } from "effect"
import type { Core } from "./core.ts"
import type { RemoteStream } from "./handles.ts"
import { RemoteTensor } from "./tensor.ts"

/** A borrow's alias as the controller tracks it. */
export interface BorrowState {
  readonly id: number
  readonly ranks: ReadonlyArray<number>
  /** BorrowFirstUse was issued. */
  used: boolean
  /** The scope closed: the alias is deleted on the workers. */
  dropped: boolean
}

/** An alias of `t` on stream `to` for the scope. */
export const borrow = (core: Core, t: RemoteTensor, to: RemoteStream): Effect.Effect<RemoteTensor, never, Scope.Scope> =>
  Effect.acquireRelease(
    Effect.sync(() => {
      const alias = core.newRef()
      const state: BorrowState = { id: alias.id, ranks: t.mesh.ranks, used: false, dropped: false }
      core.graph.alias(alias.id, t.ref.id)
      core.sink.post(t.mesh.ranks, { _tag: "BorrowCreate", result: alias, tensor: t.ref, from: t.stream.ref, to: to.ref, alreadyBorrowed: false })
      return new RemoteTensor(t.mesh, alias, t.meta, to, state).viewOf(t)
    }),
    (alias) => Effect.sync(() => {
      const b = alias.borrow!
      b.dropped = true
      if (b.used) core.sink.post(b.ranks, { _tag: "BorrowLastUse", borrow: b.id })
      core.sink.post(b.ranks, { _tag: "BorrowDrop", borrow: b.id })
      core.sink.release(b.ranks, [b.id])
    }),
  )

/** A borrow's first use waits on the stream it came from, once, before the command that reads it. */
export const firstUses = (core: Core, borrows: ReadonlyArray<BorrowState>): void => {
  for (const b of borrows) {
    b.used = true
    core.sink.post(b.ranks, { _tag: "BorrowFirstUse", borrow: b.id })
  }
}
