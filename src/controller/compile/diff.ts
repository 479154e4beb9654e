/**
 * How two traces of one step differ: a structural difference (another command, ranks, ref,
 * dtype or shape) or the numbers that changed, at their paths in the messages. What verify,
 * the repeat check and the search for replay parameters compare.
 */
import { NDSlice } from "../../protocol/ndslice.ts"
import { HostTensor, Ref, TensorFactory } from "../../protocol/values.ts"
import { RemoteTensor } from "../tensor.ts"
import { isPlain } from "./signature.ts"
import { Recorder, type RecordedCommand } from "./recorder.ts"

export type Path = ReadonlyArray<string | number>

/** How two traces of the same step differ: a structural difference, or numbers at paths. */
interface Difference {
  structural: string | undefined
  readonly numbers: Array<{ readonly command: number; readonly path: Path; readonly a: number; readonly b: number }>
}

/** A ref as both traces can compare it: the trace's own by order of definition, arguments by position, the rest by id. */
const canonical = (trace: Recorder, args: ReadonlyArray<RemoteTensor>): ((id: number) => string) => {
  const own = new Map([...trace.defined].map((id, i) => [id, `made ${i}`]))
  const arg = new Map<number, string>()
  args.forEach((t, i) => arg.has(t.ref.id) || arg.set(t.ref.id, `tensor argument ${i}`))
  return (id) => own.get(id) ?? arg.get(id) ?? `ref ${id}`
}

export const describeCommand = (c: RecordedCommand): string => `${c.label}${c.site?.format() ? ` issued at ${c.site.format()}` : ""}`

export const compareTraces = (a: Recorder, aArgs: ReadonlyArray<RemoteTensor>, b: Recorder, bArgs: ReadonlyArray<RemoteTensor>): Difference => {
  const d: Difference = { structural: undefined, numbers: [] }
  const ca = canonical(a, aArgs), cb = canonical(b, bArgs)
  const n = Math.max(a.commands.length, b.commands.length)
  for (let k = 0; k < n && d.structural === undefined; k++) {
    const x = a.commands[k], y = b.commands[k]
    if (x === undefined || y === undefined) {
      d.structural = x === undefined ? `command ${k}: none, then ${describeCommand(y!)}` : `command ${k}: ${describeCommand(x)}, then none`
      break
    }
    const why = (what: string) => (d.structural = `command ${k}: ${describeCommand(x)}, then ${describeCommand(y)}: ${what}`)
    if (x.ranks.join() !== y.ranks.join()) why(`ranks [${x.ranks}] then [${y.ranks}]`)
    const walk = (u: unknown, v: unknown, path: Path, borrow: boolean): void => {
      if (d.structural !== undefined) return
      if (typeof u === "number" && typeof v === "number") {
        if (borrow) return void (ca(u) !== cb(v) && why(`${path.join(".")}: another borrow`))
        if (!Object.is(u, v)) d.numbers.push({ command: k, path, a: u, b: v })
        return
      }
      if (u instanceof Ref && v instanceof Ref) return void (ca(u.id) !== cb(v.id) && why(`${path.join(".")}: ${ca(u.id)}, then ${cb(v.id)}`))
      if (u instanceof TensorFactory && v instanceof TensorFactory)
        return void ((u.dtype !== v.dtype || u.shape.join() !== v.shape.join()) && why(`${path.join(".")}: ${u.dtype}[${u.shape}], then ${v.dtype}[${v.shape}]`))
      if (u instanceof NDSlice && v instanceof NDSlice) return void (String(u) !== String(v) && why(`${path.join(".")}: ${u}, then ${v}`))
      if (u instanceof HostTensor && v instanceof HostTensor)
        return void ((u.dtype !== v.dtype || u.shape.join() !== v.shape.join() || Buffer.compare(u.data, v.data) !== 0) && why(`${path.join(".")}: another host tensor`))
      if (u instanceof Uint8Array && v instanceof Uint8Array) return void (Buffer.compare(u, v) !== 0 && why(`${path.join(".")}: other bytes`))
      if (Array.isArray(u) && Array.isArray(v)) {
        if (u.length !== v.length) return void why(`${path.join(".")}: ${u.length} items, then ${v.length}`)
        return u.forEach((w, i) => walk(w, v[i], [...path, i], false))
      }
      if (typeof u === "object" && u !== null && typeof v === "object" && v !== null && isPlain(u) && isPlain(v)) {
        const ku = Object.keys(u), kv = Object.keys(v)
        if (ku.join() !== kv.join()) return void why(`${path.join(".")}: keys ${ku.join(", ")}, then ${kv.join(", ")}`)
        return ku.forEach((key) => walk((u as Record<string, unknown>)[key], (v as Record<string, unknown>)[key], [...path, key], key === "borrow" && (x.message._tag.startsWith("Borrow"))))
      }
      if (!Object.is(u, v)) why(`${path.join(".")}: ${String(u)}, then ${String(v)}`)
    }
    walk(x.message, y.message, [], false)
  }
  if (d.structural === undefined) {
    // Dtypes and shapes the controller knows come from the trace: a replay cannot change them.
    const ha = a.handles, hb = b.handles
    const shape = (t: RemoteTensor | undefined) => (t?.meta ? `${t.meta.dtype}[${t.meta.shape}]` : "unknown")
    const at = ha.findIndex((t, i) => shape(t) !== shape(hb[i]))
    if (ha.length !== hb.length || at >= 0) d.structural = `the tensors it makes have other dtypes or shapes (${shape(ha[at])}, then ${shape(hb[at])})`
  }
  return d
}
