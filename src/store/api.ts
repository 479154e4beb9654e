/**
 * What a store offers its users, independent of where it lives: the TCP client (client.ts)
 * implements it, a prefix store (prefix.ts) wraps one, and the `Store` service (service.ts)
 * carries one. Keys are text (sent as UTF-8); values are bytes, or text sent as UTF-8.
 */
import type { Duration, Effect } from "effect"
import type { StoreError, StoreTimeout } from "./errors.ts"

export type StoreValue = Uint8Array | string

export interface StoreApi {
  readonly set: (key: string, value: StoreValue) => Effect.Effect<void, StoreError>
  /** Blocks until the key exists (WAIT, then GET); `timeout` overrides the store's default. */
  readonly get: (key: string, timeout?: Duration.Input) => Effect.Effect<Uint8Array, StoreError | StoreTimeout>
  /** Adds to a counter kept as decimal text (a missing key counts as 0); returns the new value. */
  readonly add: (key: string, delta: number) => Effect.Effect<number, StoreError>
  /**
   * Sets `desired` if the current value equals `expected` (a missing key matches an empty
   * `expected`). Returns the value now stored, so the caller won iff it equals `desired`; for a
   * missing key and a non-empty `expected` it stores nothing and returns `expected`, as torch does.
   */
  readonly compareSet: (key: string, expected: StoreValue, desired: StoreValue) => Effect.Effect<Uint8Array, StoreError>
  /** Whether every key exists, without blocking. */
  readonly check: (keys: ReadonlyArray<string>) => Effect.Effect<boolean, StoreError>
  /** Blocks until every key exists; `timeout` overrides the store's default. */
  readonly wait: (keys: ReadonlyArray<string>, timeout?: Duration.Input) => Effect.Effect<void, StoreError | StoreTimeout>
  /** Every key in the whole store, whatever its prefix (as torch's PrefixStore reports). */
  readonly numKeys: Effect.Effect<number, StoreError>
  /** Whether the key existed. */
  readonly deleteKey: (key: string) => Effect.Effect<boolean, StoreError>
  /** Appends to a value, creating it if missing (torch 2.x servers only). */
  readonly append: (key: string, value: StoreValue) => Effect.Effect<void, StoreError>
  /** Blocks until every key exists, then reads them all. */
  readonly multiGet: (
    keys: ReadonlyArray<string>,
    timeout?: Duration.Input,
  ) => Effect.Effect<Array<Uint8Array>, StoreError | StoreTimeout>
  readonly multiSet: (entries: ReadonlyArray<readonly [key: string, value: StoreValue]>) => Effect.Effect<void, StoreError>
}
