/**
 * Prefix stores, as torch's PrefixStore: key `k` becomes `prefix + "/" + k` in the store below,
 * so nested prefixes compose (`withPrefix("b", withPrefix("a", s))` maps k to "a/b/k") and the
 * TCP client's own "/" comes last ("/a/b/k" on the wire). numKeys counts the whole store.
 */
import type { StoreApi } from "./api.ts"

export const prefixStore = (prefix: string, store: StoreApi): StoreApi => {
  const k = (key: string) => `${prefix}/${key}`
  const ks = (keys: ReadonlyArray<string>) => keys.map(k)
  return {
    set: (key, value) => store.set(k(key), value),
    get: (key, timeout) => store.get(k(key), timeout),
    add: (key, delta) => store.add(k(key), delta),
    compareSet: (key, expected, desired) => store.compareSet(k(key), expected, desired),
    check: (keys) => store.check(ks(keys)),
    wait: (keys, timeout) => store.wait(ks(keys), timeout),
    numKeys: store.numKeys,
    deleteKey: (key) => store.deleteKey(k(key)),
    append: (key, value) => store.append(k(key), value),
    multiGet: (keys, timeout) => store.multiGet(ks(keys), timeout),
    multiSet: (entries) => store.multiSet(entries.map(([key, value]) => [k(key), value] as const)),
  }
}
