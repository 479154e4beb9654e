/**
 * A replay: one call of a recording takes one ident per recorded command (its failures routed
 * to the parts that depend on the failed command), adds the parts to the dependency graph,
 * sends one CallRecording per worker, and returns the step's value with this call's handles.
 */
import { Effect } from "effect"
import { Ref } from "../../protocol/values.ts"
import type { Core } from "../core.ts"
import { ControllerError, RemoteError } from "../errors.ts"
import { Node } from "../graph.ts"
import { samePlacement } from "../placement.ts"
import { Storage } from "../storage.ts"
import { RemoteTensor } from "../tensor.ts"
import type { Recording } from "./build.ts"
import { type Flat, isPlain } from "./signature.ts"

/**
 * One call: idents, the graph's parts, one CallRecording per worker, and the step's value with
 * this call's handles; refused, sending nothing, when a tensor the step captured was released.
 */
export const call = <R>(core: Core, name: string, recording: Recording<R>, flat: Flat): Effect.Effect<R, ControllerError> => {
  const gone = recording.captured.find((c) => c.tensor.released)
  if (gone !== undefined)
    return Effect.fail(new ControllerError({ reason: "not-replayable", message: `compile(${name}): ${gone.tensor}, a tensor the step captured (read by ${gone.by}), was released, and a replay reads it: give the step that tensor as an argument, or compile it again` }))
  const actuals = recording.formals.map((f) => ("arg" in f ? flat.tensors[f.arg]!.ref : new Ref(f.ref)))
  const fresh = new Map<RemoteTensor, RemoteTensor>()
  // Each storage of the trace, as this call has it: an argument's, a captured tensor's, or one the call makes.
  const storages = new Map<Storage, Storage>()
  recording.args.forEach((a, k) => storages.set(a.storage, flat.tensors[k]!.storage))
  for (const c of recording.captured) storages.set(c.tensor.storage, c.tensor.storage)
  const results = recording.outputs.map((o) => {
    if ("formal" in o) return actuals[o.formal]!
    const t = o.made, ref = core.newRef(), made = new RemoteTensor(t.mesh, ref, t.meta, t.stream)
    samePlacement(t, made)
    // A result lies where the trace's did (the signature fixes the arguments' layouts): a view of an argument, say.
    let storage = storages.get(t.storage)
    if (storage === undefined) storages.set(t.storage, (storage = new Storage(t.storage.numel)))
    made.storage = storage
    made.offset = t.offset
    made.strides = t.strides
    fresh.set(t, made)
    return ref
  })
  const commands = recording.trace.commands
  const nodes: Node[] = []
  const first = core.takeIdents(recording.ranks, commands.length, (rank, offset, error) => {
    const c = commands[offset]!
    const failure = new RemoteError({
      ident: first + offset, rank, function: c.label, type: error.type, reason: error.message, kind: error.reason, frames: error.frames, site: c.site?.format(),
    })
    for (const p of recording.cover[offset]!) core.graph.fail(nodes[p]!, failure, rank)
  })
  for (const p of recording.parts) nodes.push(core.graph.add(first + p.command, p.ranks, p.formals.map((f) => actuals[f]!.id), [], p.label, p.site, p.exchange))
  recording.parts.forEach((p, i) => core.graph.define(p.outputs.map((o) => results[o]!.id), nodes[i]!))
  if (commands.length > 0) core.post(recording.ranks, { _tag: "CallRecording", ident: first, recording: recording.id, results, actuals, params: recording.params.map((i) => flat.params[i]!) })
  for (const w of recording.written) ("arg" in w ? flat.tensors[w.arg]!.storage : w).version++
  recording.calls++
  core.recordings.touch(recording.id)
  return Effect.succeed(rebuild(recording.value, fresh, recording.args, flat.tensors) as R)
}

/** The step's value with the trace's tensors replaced by this call's: new results, or the arguments they were. */
const rebuild = (v: unknown, fresh: ReadonlyMap<RemoteTensor, RemoteTensor>, traceArgs: ReadonlyArray<RemoteTensor>, args: ReadonlyArray<RemoteTensor>): unknown => {
  if (v instanceof RemoteTensor) {
    const made = fresh.get(v)
    if (made) return made
    const i = traceArgs.indexOf(v)
    return i >= 0 ? args[i] : v
  }
  if (Array.isArray(v)) return v.map((x) => rebuild(x, fresh, traceArgs, args))
  if (typeof v === "object" && v !== null && isPlain(v))
    return Object.fromEntries(Object.entries(v).map(([k, x]) => [k, rebuild(x, fresh, traceArgs, args)]))
  return v
}
