/**
 * Checkpoints of a state tree on a mesh (parameters, optimizer moments, the step, each rank's
 * generator state): `save` writes each rank's shards as a safetensors file, in parallel and in
 * the background (the program goes on once the tensors are copied to host), then publishes the
 * version with a manifest (which rank holds which block of which tensor, read from each
 * tensor's placement) atomically; `load` restores it onto a mesh of the same shape. `exportFile`
 * gathers whole tensors into one safetensors file (what torch loads), and `importFile` starts a
 * mesh from such a file, re-sharded by the placements given.
 *
 * Paths, one rule: a checkpoint directory, and `load`'s, `importFile`'s and `exportFile`'s files,
 * are relative to the checkpoint root (MONARCH_CHECKPOINT_DIR, the controller's `checkpoints`),
 * and never leave it. The workers read and write under their root; `exportFile` writes on the
 * controller's host under the root as this process sees it (or at an absolute path there).
 */
import { Data, Effect, Fiber } from "effect"
import { randomBytes } from "node:crypto"
import { mkdirSync } from "node:fs"
import { dirname, isAbsolute, join, relative, resolve } from "node:path"
import { blockRuns, encodeHeader, MANIFEST_FORMAT, parseManifest, sealManifest, TENSOR_KEY, versionProblem, type FileRecord, type Manifest, type ShardRecord, type TensorRecord } from "../checkpoint/format.ts"
import { tmpName, writeFileDurably } from "../checkpoint/files.ts"
import type { Value } from "../protocol/messages.ts"
import { ITEM_SIZE, type HostTensor } from "../protocol/values.ts"
import { refuse } from "./errors.ts"
import { ControllerError, type Failure } from "./errors.ts"
import type { RemoteStream } from "./handles.ts"
import { RemoteTensor } from "./tensor.ts"
import type { Mesh } from "./mesh.ts"
import { blockOf, replicate, shard, type PlacementSpec } from "./placement.ts"

/** A save or load the workers could not carry out (a write failed, a file is corrupt or missing): the worker's words. */
export class CheckpointError extends Data.TaggedError("CheckpointError")<{ readonly message: string }> {}

/** A tensor whose value differs on every rank and is saved from each (a generator's state), not a block of one tensor. */
export class PerRank {
  constructor(readonly tensor: RemoteTensor) {}
}
export const perRank = (t: RemoteTensor): PerRank => new PerRank(t)

/**
 * A state tree: tensors (or PerRank ones), and numbers, strings, booleans, null, in arrays and
 * plain objects (an interface's objects too: what a leaf may be is checked when it is saved).
 */
export type State = RemoteTensor | PerRank | number | string | boolean | null | ReadonlyArray<State> | { readonly [key: string]: State } | object

export interface SaveOptions {
  /** The version's name (default `step-<step>` when the tree has a numeric `step`, else `save`), made unique with a suffix. */
  readonly version?: string
  /** Versions kept in the directory, the newest first (default 2). */
  readonly keep?: number
  readonly stream?: RemoteStream
}

/** One rank's part of a save: its file's bytes and how long writing and syncing it took. */
export interface RankWrite {
  readonly rank: number
  readonly bytes: number
  readonly ms: number
}

export interface Saved {
  readonly dir: string
  readonly version: string
  readonly bytes: number
  readonly writes: ReadonlyArray<RankWrite>
}

/** A save under way: the tensors are copied; `durable` succeeds once every file is synced and the version published. */
export interface PendingSave {
  readonly version: string
  readonly durable: Effect.Effect<Saved, CheckpointError | Failure>
}

/** A tensor of the tree and where it sits. */
interface Leaf {
  readonly name: string
  readonly tensor: RemoteTensor
  readonly perRank: boolean
}

/**
 * The tree as JSON with each tensor replaced by `{ $tensor: name }`, and the tensors, named by
 * their path (`undefined`: the root): the keys and indices joined by `.`, as torch names a
 * state dict's entries. Two paths that give one name (`{ "a.b": t1, a: { b: t2 } }`) are
 * refused, so a name is one tensor.
 */
const flatten = (state: State, path: string | undefined, leaves: Leaf[]): unknown => {
  const where = path ?? "the state"
  if (state instanceof RemoteTensor || state instanceof PerRank) {
    const tensor = state instanceof PerRank ? state.tensor : state
    if (!tensor.meta) throw refuse("unknown-meta", `cannot save ${tensor} (${where}): its dtype and shape are unknown`)
    if (leaves.some((l) => l.tensor === tensor)) throw refuse("checkpoint", `${tensor} is in the state twice (${where})`)
    if (leaves.some((l) => l.name === (path ?? ""))) throw refuse("checkpoint", `two tensors of the state are named "${path}" (a key with a dot, and keys or indices joined by dots); rename one`)
    leaves.push({ name: path ?? "", tensor, perRank: state instanceof PerRank })
    return { [TENSOR_KEY]: path ?? "" }
  }
  if (state === null || typeof state === "string" || typeof state === "boolean") return state
  if (typeof state === "number") {
    if (!Number.isFinite(state)) throw refuse("checkpoint", `${where} is ${state}, which JSON cannot hold`)
    return state
  }
  const child = (part: string) => (path === undefined ? part : `${path}.${part}`)
  if (Array.isArray(state)) return state.map((s, i) => flatten(s, child(`${i}`), leaves))
  if (typeof state === "object" && Object.getPrototypeOf(state) === Object.prototype)
    return Object.fromEntries(Object.entries(state).map(([k, s]) => {
      if (k === TENSOR_KEY) throw refuse("checkpoint", `${where} has the key "${TENSOR_KEY}", which a checkpoint's tree keeps for its tensors`)
      return [k, flatten(s as State, child(k), leaves)]
    }))
  throw refuse("checkpoint", `${where} is a ${typeof state}; a state holds tensors, numbers, strings, booleans and null, in arrays and objects`)
}

const nonce = () => randomBytes(4).toString("hex")

const defaultVersion = (state: State): string => {
  const step = typeof state === "object" && state !== null && !Array.isArray(state) && !(state instanceof RemoteTensor) && !(state instanceof PerRank) ? (state as Record<string, State>).step : undefined
  return typeof step === "number" && Number.isSafeInteger(step) ? `step-${String(step).padStart(8, "0")}` : "save"
}

/** A worker's `{ error }` answer as a CheckpointError; anything else passes. */
const answered = (v: Value): Effect.Effect<Value, CheckpointError> =>
  typeof v === "object" && v !== null && !Array.isArray(v) && typeof (v as Record<string, Value>).error === "string"
    ? Effect.fail(new CheckpointError({ message: (v as Record<string, string>).error! }))
    : Effect.succeed(v)

/** A failure reported by a checkpoint command on a worker (a refused path, a corrupt file) as a CheckpointError naming it; the rest pass. */
const asCheckpointError = <A>(e: Effect.Effect<A, Failure | CheckpointError>): Effect.Effect<A, Failure | CheckpointError> =>
  Effect.mapError(e, (r) => (r._tag === "RemoteError" && ["CheckpointCorrupt", "CheckpointPathError", "WrongRefType"].includes(r.type) ? new CheckpointError({ message: `${r.type}: ${r.reason}` }) : r))

/** The saved placement of a tensor and, per rank, the block it holds. */
const layoutOf = (mesh: Mesh, leaf: Leaf) => {
  const local = leaf.tensor.meta!.shape
  if (leaf.perRank) return { placement: { kind: "per-rank" as const }, shape: local, blocks: mesh.ranks.map((rank) => ({ rank, offsets: local.map(() => 0), first: true })) }
  const p = leaf.tensor.placement
  let shape: ReadonlyArray<number> = local
  const blocks = mesh.ranks.map((rank) => {
    const b = blockOf(p, mesh, rank, local)
    shape = b.shape
    return { rank, offsets: b.offsets, first: b.first }
  })
  const dims = Object.fromEntries(mesh.names.map((n) => {
    const d = p[n]!
    return [n, d.kind === "shard" ? d.dim : "replicate" as const]
  }))
  return { placement: { kind: "per-dim" as const, dims }, shape, blocks }
}

/**
 * Saves `state` (its tensors on `mesh`) as a new version in `dir` (relative to the workers'
 * checkpoint root). Returns once the tensors are copied to host on every rank (commands after
 * it may change them); the files are written in the background, and `durable` says when the
 * version is on disk and named by `dir/LATEST`.
 */
export const save = (mesh: Mesh, state: State, dir: string, opts: SaveOptions = {}): Effect.Effect<PendingSave, ControllerError> =>
  Effect.suspend(() => {
    const core = mesh.core, site = core.site()
    const keep = opts.keep ?? 2
    if (!Number.isSafeInteger(keep) || keep < 1) throw refuse("argument", `keep ${keep} is not a count of versions (an integer, 1 or more)`)
    const leaves: Leaf[] = []
    const tree = flatten(state, undefined, leaves)
    for (const l of leaves) if (l.tensor.mesh !== mesh) throw refuse("mesh", `${l.name || "the state"} is on ${l.tensor.mesh}, not on ${mesh}`)
    const base = opts.version ?? defaultVersion(state)
    const problem = versionProblem(base)
    if (problem !== undefined) throw refuse("checkpoint", problem)
    const version = `${base}-${nonce()}`
    const tmp = join(dir, tmpName(version))
    const layouts = leaves.map((l) => layoutOf(mesh, l))
    const writers = layouts.map((lay) => lay.blocks.filter((b) => b.first).map((b) => b.rank))
    const stream = opts.stream ?? mesh.defaultStream
    const inputs = leaves.map((l) => l.tensor.ref.id)
    const written = core.sink.fetch(mesh.ranks, inputs, `save ${dir}/${version}`, site, (ident) => ({
      _tag: "SaveShards", ident, dir: tmp, tensors: leaves.map((l) => l.tensor.ref), names: leaves.map((l) => l.name), writers, stream: stream.ref,
    }), undefined, true)
    const commit = (answers: ReadonlyArray<Value>) => Effect.gen(function* () {
      const results = yield* Effect.forEach(answers, answered)
      const byRank = new Map(mesh.ranks.map((r, i) => [r, results[i] as { file: string | null; bytes: number; header: string | null; hashes: string[]; ms: number }]))
      const files: Record<string, FileRecord> = {}
      for (const [rank, a] of byRank) if (a.file !== null) files[a.file] = { rank, bytes: a.bytes, header: a.header! }
      const tensors: Record<string, TensorRecord> = {}
      leaves.forEach((l, i) => {
        const lay = layouts[i]!
        const shards: ShardRecord[] = []
        const holders: Record<string, number> = {}
        const local = l.tensor.meta!.shape
        for (const b of lay.blocks.filter((b) => b.first)) {
          const answer = byRank.get(b.rank)!
          // A rank's hashes follow the order of the tensors it writes.
          const k = writers.slice(0, i + 1).filter((w) => w.includes(b.rank)).length - 1
          shards.push({ file: answer.file!, rank: b.rank, offsets: b.offsets, shape: local, hash: answer.hashes[k]! })
        }
        for (const b of lay.blocks) holders[b.rank] = lay.placement.kind === "per-rank" ? shards.findIndex((s) => s.rank === b.rank) : shards.findIndex((s) => s.offsets.every((o, d) => o === b.offsets[d]))
        tensors[l.name] = { dtype: l.tensor.meta!.dtype, shape: lay.shape, placement: lay.placement, shards, holders }
      })
      const manifest: Manifest = {
        format: MANIFEST_FORMAT, version, mesh: { names: mesh.names, sizes: mesh.layout.sizes, ranks: mesh.ranks }, tree, tensors, files, savedAt: new Date().toISOString(),
      }
      yield* core.sink.fetch([mesh.ranks[0]!], [], `commit ${dir}/${version}`, site, (ident) => ({
        _tag: "CommitCheckpoint", ident, dir, tmp, version, manifest: sealManifest(manifest), keep,
      }))
      const writes = mesh.ranks.map((rank) => ({ rank, bytes: byRank.get(rank)!.bytes, ms: byRank.get(rank)!.ms }))
      return { dir, version, bytes: writes.reduce((a, w) => a + w.bytes, 0), writes } satisfies Saved
    })
    // A failed save removes its temporary directory (best effort: the failure is what is reported).
    const dropTmp = core.sink.fetch([mesh.ranks[0]!], [], `drop ${tmp}`, site, (ident) => ({ _tag: "DropCheckpoint", ident, tmp })).pipe(Effect.ignore)
    // Forked now, so the SaveShards command is issued at this point of the program (runFork
    // runs the fiber up to its first wait at once) and the commit follows without the program.
    const fiber = Effect.runFork(asCheckpointError(written.pipe(Effect.flatMap(commit))).pipe(Effect.tapError(() => dropTmp)))
    return Effect.succeed({ version, durable: Fiber.join(fiber) })
  }).pipe(Effect.catchDefect((e) => Effect.fail(e instanceof ControllerError ? e : refuse("thrown", String(e)))))

/** A checkpoint restored: its version, and the state tree with new tensors (a PerRank where one was saved). */
export interface Loaded {
  readonly version: string
  readonly state: State
  readonly manifest: Manifest
}

/** The manifest of the version LATEST names in `dir` (or `version`), read by the mesh's first rank. */
export const readCheckpoint = (mesh: Mesh, dir: string, version?: string): Effect.Effect<{ version: string; manifest: Manifest }, CheckpointError | Failure> =>
  asCheckpointError(mesh.core.sink.fetch([mesh.ranks[0]!], [], `read ${dir}`, mesh.core.site(), (ident) => ({ _tag: "ReadCheckpoint", ident, path: dir, version: version ?? null }))).pipe(
    Effect.map((values) => {
      const v = values[0] as { version: string; manifest: string }
      return { version: v.version, manifest: parseManifest(join(dir, v.version, "manifest.json"), v.manifest) }
    }),
    Effect.catchDefect((e) => Effect.fail(new CheckpointError({ message: e instanceof Error ? e.message : String(e) }))),
  )

/**
 * Issues LoadShards for new tensors of `metas` and waits until every rank has read them (so a
 * bad file fails here, naming it); on failure the tensors are released, the caller never gets them.
 */
const loadTensors = (mesh: Mesh, specs: ReadonlyArray<{ readonly tensor: RemoteTensor; readonly sources: Value }>, label: string) =>
  Effect.suspend(() => {
    const core = mesh.core, site = core.site()
    core.sink.command(mesh.ranks, label, [], specs.map((s) => s.tensor.ref.id), site, (ident) => ({
      _tag: "LoadShards", ident, results: specs.map((s) => s.tensor.ref), sources: specs.map((s) => s.sources), stream: mesh.defaultStream.ref,
    }))
    return asCheckpointError(core.sink.fetch(mesh.ranks, specs.map((s) => s.tensor.ref.id), label, site, (ident) => ({
      _tag: "FetchValue", ident, mutates: [], function: null, object: null, stream: mesh.defaultStream.ref,
    }))).pipe(Effect.onError(() => Effect.sync(() => { for (const s of specs) s.tensor.release() })))
  })

/**
 * Restores the version LATEST names in `dir` (or `version`) onto `mesh`, which must have the
 * shape it was saved from: each rank reads the block it held, checked against the saved hash.
 */
export const load = (mesh: Mesh, dir: string, opts: { readonly version?: string } = {}): Effect.Effect<Loaded, CheckpointError | Failure> =>
  Effect.gen(function* () {
    const { version, manifest } = yield* readCheckpoint(mesh, dir, opts.version)
    const saved = manifest.mesh
    if (saved.names.join(",") !== mesh.names.join(",") || saved.sizes.join(",") !== mesh.layout.sizes.join(","))
      return yield* new CheckpointError({ message: `${dir}/${version} was saved from a mesh of dims ${saved.names.map((n, i) => `${n}=${saved.sizes[i]}`).join(", ")}; ${mesh} has another shape` })
    // Every rank's source first, so a manifest refused here has made no tensor handle.
    const reads = Object.entries(manifest.tensors).map(([name, rec]) => {
      // Rank i of this mesh reads what rank i of the saved mesh held.
      const sources = mesh.ranks.map((rank, i): Value => {
        const held = rec.shards[rec.holders[saved.ranks[i]!]!]
        if (held === undefined) throw new CheckpointError({ message: `${dir}/${version}/manifest.json: no shard of ${name} for rank ${saved.ranks[i]}` })
        return [rank, join(dir, version, held.file), name, held.shape.map(() => 0), [...held.shape], held.hash, [rec.dtype, manifest.files[held.file]!.header]]
      })
      return { name, rec, sources }
    })
    const byName = new Map<string, RemoteTensor>()
    const specs = reads.map(({ name, rec, sources }) => {
      const tensor = new RemoteTensor(mesh, mesh.core.newRef(), { dtype: rec.dtype, shape: rec.shards[0]!.shape }, mesh.defaultStream)
      if (rec.placement.kind === "per-dim") tensor.placement = Object.fromEntries(Object.entries(rec.placement.dims).map(([m, d]) => [m, d === "replicate" ? replicate : shard(d)]))
      byName.set(name, tensor)
      return { tensor, sources }
    })
    yield* loadTensors(mesh, specs, `load ${dir}/${version}`)
    const perRankNames = new Set(Object.entries(manifest.tensors).filter(([, r]) => r.placement.kind === "per-rank").map(([n]) => n))
    const rebuild = (v: unknown): State => {
      if (Array.isArray(v)) return v.map(rebuild)
      if (typeof v === "object" && v !== null) {
        const name = (v as Record<string, unknown>)[TENSOR_KEY]
        if (typeof name === "string") return perRankNames.has(name) ? perRank(byName.get(name)!) : byName.get(name)!
        return Object.fromEntries(Object.entries(v).map(([k, x]) => [k, rebuild(x)]))
      }
      return v as State
    }
    return { version, state: rebuild(manifest.tree), manifest }
  }).pipe(Effect.catchDefect((e) => Effect.fail(e instanceof CheckpointError ? e : new CheckpointError({ message: e instanceof Error ? e.message : String(e) }))))

/** The tensors of a tree by their path (as saved), PerRank ones unwrapped. */
export const tensorsOf = (state: State): ReadonlyMap<string, RemoteTensor> => {
  const leaves: Leaf[] = []
  flatten(state, undefined, leaves)
  return new Map(leaves.map((l) => [l.name, l.tensor]))
}

/**
 * Copies a loaded tree's tensors into the same paths of `into` (in place, `copy_`), so a model's
 * parameters and an optimizer's moments keep their handles; each loaded tensor copied is
 * released (one at a path `into` lacks stays the caller's to release).
 */
export const restoreInto = (into: State, loaded: State): Effect.Effect<void, ControllerError> =>
  Effect.gen(function* () {
    const target = tensorsOf(into), source = tensorsOf(loaded)
    const missing = [...target.keys()].filter((k) => !source.has(k))
    if (missing.length > 0) return yield* refuse("checkpoint", `the checkpoint has no ${missing.join(", ")}`)
    for (const [name, t] of target) {
      const s = source.get(name)!
      yield* t.mesh.run("ops.copy_", [t, s], {}, { mutates: [t] })
      s.release()
    }
  })

/**
 * Where exportFile writes `path` on the controller's host: under the checkpoint root, where
 * importFile reads it back (a relative path leading out of the root is refused, as the workers
 * refuse one); an absolute path as it is.
 */
const exportPath = (mesh: Mesh, path: string): string => {
  if (isAbsolute(path)) return path
  const root = mesh.core.options.checkpointRoot
  if (root === undefined) throw refuse("checkpoint", `exportFile(${path}): a relative path is under the checkpoint root, and this controller has none (give it \`checkpoints\` or MONARCH_CHECKPOINT_DIR), or give an absolute path`)
  const target = resolve(root, path)
  const rel = relative(root, target)
  if (rel === "" || rel === ".." || rel.startsWith("../")) throw refuse("checkpoint", `exportFile(${path}): the path leads out of the checkpoint root ${root}`)
  return target
}

/**
 * Writes the tree's tensors, gathered whole (each block fetched from the rank that saves it),
 * into one safetensors file at `path` (under the checkpoint root, see exportPath) on the
 * controller's host (durably: a temporary file, fsync, rename, fsync of the folder); per-rank
 * tensors are left out. Names are the tree's paths; `python/monarch_safetensors.py` loads it in torch.
 */
export const exportFile = (mesh: Mesh, state: State, path: string): Effect.Effect<{ readonly bytes: number; readonly path: string }, Failure> =>
  Effect.gen(function* () {
    const target = yield* Effect.try({ try: () => exportPath(mesh, path), catch: (e) => (e instanceof ControllerError ? e : refuse("thrown", String(e))) })
    const leaves: Leaf[] = []
    const tree = yield* Effect.try({ try: () => flatten(state, undefined, leaves), catch: (e) => (e instanceof ControllerError ? e : refuse("thrown", String(e))) })
    const whole = leaves.filter((l) => !l.perRank)
    const datas: Uint8Array[] = []
    for (const l of whole) {
      const lay = layoutOf(mesh, l)
      const local = l.tensor.meta!.shape, item = ITEM_SIZE[l.tensor.meta!.dtype]
      const data = new Uint8Array(lay.shape.reduce((a, b) => a * b, 1) * item)
      for (const b of lay.blocks.filter((b) => b.first)) {
        const host = (yield* mesh.fetch(l.tensor, mesh.ranks.indexOf(b.rank))) as HostTensor
        let at = 0
        for (const [start, length] of blockRuns(lay.shape, b.offsets, local)) {
          data.set(host.data.subarray(at, at + length * item), start * item)
          at += length * item
        }
      }
      datas.push(data)
    }
    const { bytes: header } = encodeHeader(whole.map((l) => ({ name: l.name, dtype: l.tensor.meta!.dtype, shape: layoutOf(mesh, l).shape })), { format: "pt", monarch: JSON.stringify(tree) })
    yield* Effect.try({ try: () => (mkdirSync(dirname(target), { recursive: true }), writeFileDurably(target, [header, ...datas])), catch: (e) => refuse("checkpoint", `writing ${target}: ${e instanceof Error ? e.message : String(e)}`) })
    return { bytes: header.byteLength + datas.reduce((a, d) => a + d.byteLength, 0), path: target }
  })

/**
 * Defines the tensors of a safetensors file (relative to the workers' checkpoint root) on
 * `mesh`, each laid out by `placements[name]` (default replicated): a shard(d) over a mesh dim
 * of n ranks gives each rank its n-th of dim d, read from the file by that rank alone.
 */
export const importFile = (mesh: Mesh, file: string, placements: Readonly<Record<string, PlacementSpec>> = {}): Effect.Effect<ReadonlyMap<string, RemoteTensor>, CheckpointError | Failure> =>
  Effect.gen(function* () {
    const values = yield* asCheckpointError(mesh.core.sink.fetch([mesh.ranks[0]!], [], `read ${file}`, mesh.core.site(), (ident) => ({ _tag: "ReadCheckpoint", ident, path: file, version: null })))
    const header = JSON.parse((values[0] as { header: string }).header) as { tensors: Record<string, { dtype: TensorRecord["dtype"]; shape: number[] }> }
    const unknown = Object.keys(placements).filter((n) => !(n in header.tensors))
    if (unknown.length > 0) return yield* new CheckpointError({ message: `${file} has no tensor ${unknown.join(", ")} (it has ${Object.keys(header.tensors).join(", ")})` })
    // Every tensor's block shape first, so a placement refused here has made no tensor handle.
    const blocks = yield* Effect.try({
      try: () => Object.entries(header.tensors).map(([name, t]) => {
        const spec = placements[name] ?? {}
        const local = [...t.shape]
        for (const [m, d] of Object.entries(spec)) {
          if (d.kind !== "shard") continue
          const n = mesh.dims[m]
          if (n === undefined || local[d.dim] === undefined || local[d.dim]! % n !== 0) throw refuse("placement", `${name} ${t.dtype}[${t.shape}]: cannot shard dim ${d.dim} over ${m}${n === undefined ? " (no such mesh dim)" : ` of ${n} ranks`}`)
          local[d.dim] = local[d.dim]! / n
        }
        return { name, dtype: t.dtype, spec, local }
      }),
      catch: (e) => (e instanceof ControllerError ? e : refuse("thrown", String(e))),
    })
    const out = new Map<string, RemoteTensor>()
    const specs = blocks.map(({ name, dtype, spec, local }) => {
      const tensor = new RemoteTensor(mesh, mesh.core.newRef(), { dtype, shape: local }, mesh.defaultStream)
      tensor.placement = spec
      out.set(name, tensor)
      const sources = mesh.ranks.map((rank): Value => [rank, file, name, blockOf(tensor.placement, mesh, rank, local).offsets, local, null])
      return { tensor, sources }
    })
    yield* loadTensors(mesh, specs, `import ${file}`)
    return out
  })
