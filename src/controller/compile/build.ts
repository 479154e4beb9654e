/**
 * Building a recording from a trace: its formals (refs read before the trace defines them),
 * outputs (the tensors returned, then the formals redefined), the parts the dependency graph
 * tracks (each command that defines outputs, with the formals its value depends on), the
 * captured tensors, and per rank the DefineRecording it gets.
 */
import type { WorkerMessage } from "../../protocol/messages.ts"
import type { Core } from "../core.ts"
import type { Exchange } from "../graph.ts"
import { CallSite } from "../sites.ts"
import type { Storage } from "../storage.ts"
import { RemoteTensor } from "../tensor.ts"
import { type Path, describeCommand } from "./diff.ts"
import type { ObjectRead } from "./reader.ts"
import { renameRefs, replaceAt } from "./rewrite.ts"
import { type Flat, isPlain } from "./signature.ts"
import { Recorder, type Recorded } from "./recorder.ts"

/** Where a formal's actual comes from at each call. */
type Source = { readonly arg: number } | { readonly ref: number }

/** An output: a new tensor (the trace's handle gives its mesh, stream and metadata) or a formal the step redefines. */
type Output = { readonly made: RemoteTensor } | { readonly formal: number }

/** The results one command of the recording defines, as the graph sees them. */
interface Part {
  readonly command: number
  readonly ranks: ReadonlyArray<number>
  /** Formals its value depends on. */
  readonly formals: ReadonlyArray<number>
  readonly outputs: ReadonlyArray<number>
  readonly exchange: Exchange | undefined
  readonly label: string
  readonly site: CallSite | undefined
}

export interface Recording<R> {
  readonly id: number
  /** The controller it is defined through (a compiled step may be called under several). */
  readonly core: Core
  readonly trace: Recorder
  /** The trace's arguments' tensors (for verify's comparison). */
  readonly args: ReadonlyArray<RemoteTensor>
  readonly ranks: ReadonlyArray<number>
  readonly formals: ReadonlyArray<Source>
  /** Per param of the recording: which replay parameter of the arguments it is. */
  readonly params: ReadonlyArray<number>
  /** What the step read of the objects it was given by identity: a call fits when each reads the same again. */
  readonly reads: ReadonlyArray<ObjectRead>
  /** The tensors the step read but was not given, each with the first command that read it: a call refuses one released. */
  readonly captured: ReadonlyArray<{ readonly tensor: RemoteTensor; readonly by: string }>
  /** Per param: the commands and paths it goes to (for verify). */
  readonly paramAt: ReadonlyArray<ReadonlyArray<{ readonly command: number; readonly path: Path }>>
  readonly outputs: ReadonlyArray<Output>
  readonly parts: ReadonlyArray<Part>
  /** Per command: the parts whose value depends on it. */
  readonly cover: ReadonlyArray<ReadonlyArray<number>>
  readonly value: R
  /** The memory each call writes in place (its version moves): an argument's, or a captured tensor's. */
  readonly written: ReadonlyArray<{ readonly arg: number } | Storage>
  /** Calls so far. */
  calls: number
  /** When it was last called, in the compiled step's calls (which one to replace first). */
  usedAt: number
}

let nextRecording = 1

/** Per rank, the DefineRecording it gets (ranks with the same commands share one message, encoded once). */
const definitions = (id: number, trace: Recorder, commands: ReadonlyArray<WorkerMessage>, ranks: ReadonlyArray<number>, formals: ReadonlyArray<number>, params: ReadonlyArray<number>, results: ReadonlyArray<number>) => {
  const byCommands = new Map<string, { ranks: number[]; message: WorkerMessage }>()
  for (const r of ranks) {
    const mine = trace.commands.flatMap((c, k) => (c.ranks.includes(r) ? [k] : []))
    const key = mine.join()
    let d = byCommands.get(key)
    if (d === undefined) {
      byCommands.set(key, (d = { ranks: [], message: { _tag: "DefineRecording", recording: id, idents: trace.commands.length, formals, params, results, commands: mine.map((k) => commands[k]!) } }))
    }
    d.ranks.push(r)
  }
  return [...byCommands.values()]
}

/** The exchange of several commands at once: a rank depends on the union of its peers in each. */
const unionExchange = (exchanges: ReadonlyArray<Exchange>): Exchange | undefined => {
  if (exchanges.length === 0) return undefined
  if (exchanges.length === 1) return exchanges[0]
  const peers = new Map<number, ReadonlyArray<number>>()
  return {
    peers: (r) => {
      let p = peers.get(r)
      if (p === undefined) peers.set(r, (p = [...new Set(exchanges.flatMap((e) => e.peers(r)))]))
      return p
    },
    reads: (r) => exchanges.some((e) => e.reads(r)),
  }
}

/** Where a replay parameter goes in the commands. */
export type Positions = ReadonlyArray<{ readonly command: number; readonly path: Path }>

export const build = <R>(core: Core, name: string, traced: Recorded<R>, flat: Flat, at: ReadonlyArray<Positions>): { recording: Recording<R>; defines: ReturnType<typeof definitions> } => {
  const { trace, value } = traced
  const commands = trace.commands
  // Formals: refs read before the trace defines them, in order of first read.
  const formalIds: number[] = [], formalIndex = new Map<number, number>()
  const definer = new Map<number, number>()
  const deps: Array<{ commands: number[]; formals: number[] }> = []
  commands.forEach((c, k) => {
    const dep = { commands: [] as number[], formals: [] as number[] }
    for (const id of c.inputs) {
      const by = definer.get(id)
      if (by !== undefined) dep.commands.push(by)
      else {
        let f = formalIndex.get(id)
        if (f === undefined) formalIndex.set(id, (f = formalIds.push(id) - 1))
        dep.formals.push(f)
      }
    }
    deps.push(dep)
    for (const id of c.defines) definer.set(id, k)
  })
  const argIndex = new Map<number, number>()
  flat.tensors.forEach((t, i) => argIndex.has(t.ref.id) || argIndex.set(t.ref.id, i))
  const formals: Source[] = formalIds.map((id) => (argIndex.has(id) ? { arg: argIndex.get(id)! } : { ref: id }))
  const captured = formalIds.flatMap((id) => {
    const tensor = argIndex.has(id) ? undefined : trace.tensorsRead.get(id)
    return tensor === undefined ? [] : [{ tensor, by: describeCommand(commands.find((c) => c.inputs.includes(id))!) }]
  })
  // Outputs: the tensors the step made and returned, then the formals it redefined.
  const outputs: Output[] = [], outputRefs: number[] = [], tracedRefs: number[] = []
  const returned = new Set<RemoteTensor>()
  const collect = (v: unknown): void => {
    if (v instanceof RemoteTensor) {
      if (trace.defined.has(v.ref.id) && !formalIndex.has(v.ref.id) && !returned.has(v)) returned.add(v), outputs.push({ made: v }), outputRefs.push(v.ref.id), tracedRefs.push(v.ref.id)
    } else if (Array.isArray(v)) v.forEach(collect)
    else if (typeof v === "object" && v !== null && isPlain(v)) Object.values(v).forEach(collect)
  }
  collect(value)
  // Inside the recording a formal is a ref of its own: the actual's ref is the program's, which the call must not forget.
  const placeholders = new Map(formalIds.map((id) => [id, core.newRef()]))
  formalIds.forEach((id, f) => {
    if (definer.has(id)) outputs.push({ formal: f }), outputRefs.push(placeholders.get(id)!.id), tracedRefs.push(id)
  })
  // One part per command that defines outputs: what its value depends on.
  const byCommand = new Map<number, number[]>()
  tracedRefs.forEach((id, o) => {
    const k = definer.get(id)!
    byCommand.set(k, [...(byCommand.get(k) ?? []), o])
  })
  const cover: number[][] = commands.map(() => [])
  const parts: Part[] = [...byCommand.entries()].sort(([a], [b]) => a - b).map(([k, outs], p) => {
    const seen = new Set<number>([k]), stack = [k], fs = new Set<number>()
    while (stack.length > 0) {
      const j = stack.pop()!
      cover[j]!.push(p)
      for (const f of deps[j]!.formals) fs.add(f)
      for (const i of deps[j]!.commands) if (!seen.has(i)) seen.add(i), stack.push(i)
    }
    const c = commands[k]!
    return {
      command: k, ranks: c.ranks, formals: [...fs], outputs: outs, label: `${name}: ${c.label}`, site: c.site,
      exchange: unionExchange([...seen].flatMap((j) => (commands[j]!.exchange ? [commands[j]!.exchange!] : []))),
    }
  })
  // Parameters: each replay parameter that goes into commands, as a ref of its own there.
  const params: number[] = [], paramIds: number[] = []
  const rewritten = commands.map((c) => renameRefs(c.message, placeholders) as WorkerMessage)
  at.forEach((positions, i) => {
    if (positions.length === 0) return
    const ref = core.newRef()
    params.push(i)
    paramIds.push(ref.id)
    for (const { command, path } of positions) rewritten[command] = replaceAt(rewritten[command], path, ref) as WorkerMessage
  })
  const id = nextRecording++
  const ranks = [...new Set(commands.flatMap((c) => c.ranks))].sort((a, b) => a - b)
  const recording: Recording<R> = {
    id, core, trace, args: flat.tensors, ranks, formals, params, reads: traced.reads, captured,
    paramAt: params.map((i) => at[i]!), outputs, parts, cover, value, calls: 0, usedAt: 0,
    written: [
      ...flat.tensors.flatMap((t, arg) => (trace.written.has(t.storage) ? [{ arg }] : [])),
      ...[...trace.written].filter((s) => !flat.tensors.some((t) => t.storage === s)),
    ],
  }
  return { recording, defines: definitions(id, trace, rewritten, ranks, formalIds.map((f) => placeholders.get(f)!.id), paramIds, outputRefs) }
}
