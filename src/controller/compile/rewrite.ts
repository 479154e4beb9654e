/** Rewriting a trace's messages into a recording's: refs renamed to formals, replay parameters put in at their paths. */
import { Ref } from "../../protocol/values.ts"
import type { Path } from "./diff.ts"
import { isPlain } from "./signature.ts"

/** `v` with each Ref that `names` renames replaced (plain arrays and objects walked; other values kept). */
export const renameRefs = (v: unknown, names: ReadonlyMap<number, Ref>): unknown => {
  if (v instanceof Ref) return names.get(v.id) ?? v
  if (Array.isArray(v)) return v.map((x) => renameRefs(x, names))
  if (typeof v === "object" && v !== null && isPlain(v))
    return Object.fromEntries(Object.entries(v).map(([k, x]) => [k, renameRefs(x, names)]))
  return v
}

/** `message` with the value at `path` replaced. */
export const replaceAt = (v: unknown, path: Path, by: unknown): unknown => {
  if (path.length === 0) return by
  const [head, ...rest] = path
  if (Array.isArray(v)) return v.map((x, i) => (i === head ? replaceAt(x, rest, by) : x))
  const o = v as Record<string, unknown>
  return { ...o, [head!]: replaceAt(o[head!], rest, by) }
}
