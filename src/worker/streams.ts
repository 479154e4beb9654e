/** Streams: the stream a command names. */
import { Stream } from "../../ffi/stream.ts"
import type { Ref } from "../protocol/values.ts"
import { getAs, type RefEnv } from "./refs.ts"

/** The stream `ref` names; throws UnknownRef, WrongRefType or the stored poison. */
export const streamOf = (env: RefEnv, ref: Ref): Stream => getAs(env, ref, Stream, "a stream")
