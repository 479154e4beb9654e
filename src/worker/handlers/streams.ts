/** CreateStream: the device's default stream, or a new one. */
import { Effect } from "effect"
import { Stream } from "../../../ffi/stream.ts"
import type { CreateStream } from "../../protocol/messages.ts"
import { reject, type Session } from "../session.ts"

export const createStream = (s: Session) => (m: CreateStream) => Effect.sync(() => {
  try {
    s.env.define(m.result, m.default ? Stream.default(s.native) : Stream.create(s.native))
  } catch (e) {
    reject(s, `CreateStream ${m.result.id}: ${(e as Error).message}`)
  }
})
