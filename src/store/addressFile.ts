/**
 * The store's address in a file (MONARCH_STORE_FILE): under torchrun's c10d rendezvous the
 * store is hosted by worker rank 0 on a port torchrun picked, so that worker writes where it is
 * (host, port and the workers' key prefix, as one JSON line), and `Controller.attach({ store:
 * { file } })` reads it there instead of from a log.
 */
import { Data, Effect } from "effect"
import { readFileSync, renameSync, writeFileSync } from "node:fs"

export interface StoreAddress {
  readonly host: string
  readonly port: number
  /** The workers' key prefix in that store (torchrun's agent prefix included). */
  readonly prefix: string
}

export class StoreFileError extends Data.TaggedError("StoreFileError")<{ readonly message: string }> {}

/** Writes the file whole (a reader never sees half of it). */
export const writeStoreFile = (path: string, address: StoreAddress): Effect.Effect<void, StoreFileError> =>
  Effect.try({
    try: () => {
      const partial = `${path}.${process.pid}.partial`
      writeFileSync(partial, `${JSON.stringify(address)}\n`)
      renameSync(partial, path)
    },
    catch: (e) => new StoreFileError({ message: `cannot write the store's address to ${path}: ${(e as Error).message}` }),
  })

const parse = (path: string, text: string): StoreAddress => {
  const v = JSON.parse(text) as Partial<StoreAddress>
  if (typeof v.host !== "string" || !Number.isInteger(v.port) || typeof v.prefix !== "string")
    throw new Error(`${path} does not hold a store address ({"host", "port", "prefix"}): ${text.trim()}`)
  return { host: v.host, port: v.port!, prefix: v.prefix }
}

/** Reads the file, waiting for it to appear until `timeoutMs` has passed. */
export const readStoreFile = (path: string, timeoutMs: number): Effect.Effect<StoreAddress, StoreFileError> =>
  Effect.gen(function* () {
    const deadline = Date.now() + timeoutMs
    while (true) {
      let text: string | undefined
      try {
        text = readFileSync(path, "utf8")
      } catch (e) {
        if ((e as NodeJS.ErrnoException).code !== "ENOENT") return yield* new StoreFileError({ message: `cannot read ${path}: ${(e as Error).message}` })
      }
      if (text !== undefined)
        return yield* Effect.try({ try: () => parse(path, text), catch: (e) => new StoreFileError({ message: (e as Error).message }) })
      if (Date.now() > deadline) return yield* new StoreFileError({ message: `no store address in ${path} after ${timeoutMs} ms (worker rank 0 writes it once the store is up; is MONARCH_STORE_FILE=${path} set for the workers?)` })
      yield* Effect.sleep("50 millis")
    }
  })
