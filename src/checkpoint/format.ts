/**
 * What a checkpoint is on disk, with no file I/O: the safetensors layout (an 8-byte
 * little-endian header length, a JSON header of dtype, shape and data_offsets per tensor,
 * then the raw little-endian bytes, exactly as the Python `safetensors` package writes and
 * reads it), the manifest of a sharded checkpoint, and the tagged error for a file that is not
 * what it claims. The worker writes and reads the files (src/checkpoint/files.ts); the
 * controller writes the manifest's contents and reads it back.
 */
import { Data } from "effect"
import { createHash } from "node:crypto"
import { DTYPES, ITEM_SIZE, type DType } from "../protocol/values.ts"

/** A checkpoint file or manifest that is truncated, corrupt or not a checkpoint: names the file and what is wrong. */
export class CheckpointCorrupt extends Data.TaggedError("CheckpointCorrupt")<{ readonly file: string; readonly message: string }> {}

/** A checkpoint path the worker refuses (outside its checkpoint root), or a checkpoint that is not there. */
export class CheckpointPathError extends Data.TaggedError("CheckpointPathError")<{ readonly message: string }> {}

/** safetensors' dtype names (as in the Rust crate and torch's mapping). */
export const SAFETENSORS_DTYPE: Readonly<Record<DType, string>> = {
  f32: "F32", f64: "F64", f16: "F16", bf16: "BF16", i32: "I32", i64: "I64", u8: "U8", bool: "BOOL",
}
const FROM_SAFETENSORS = new Map(DTYPES.map((d) => [SAFETENSORS_DTYPE[d], d]))

/** One tensor in a safetensors file: its dtype, shape and byte range in the data part. */
export interface TensorEntry {
  readonly dtype: DType
  readonly shape: ReadonlyArray<number>
  /** [begin, end) in the bytes after the header. */
  readonly offsets: readonly [number, number]
}

export interface SafetensorsHeader {
  /** Where the data part starts in the file: 8 + the header's length. */
  readonly dataStart: number
  readonly tensors: ReadonlyMap<string, TensorEntry>
  readonly metadata: Readonly<Record<string, string>>
}

/** The header's JSON is capped, as the Rust crate does (100 MB), so a bad length cannot make a reader allocate gigabytes. */
export const MAX_HEADER_BYTES = 100_000_000

const numel = (shape: ReadonlyArray<number>): number => shape.reduce((a, b) => a * b, 1)

/**
 * The header of a file holding `tensors` (name, dtype, shape) in that order, packed with no
 * holes, padded with spaces to 8 bytes as the Python package does; returns it (length prefix
 * included) and each tensor's byte range.
 */
export const encodeHeader = (
  tensors: ReadonlyArray<{ readonly name: string; readonly dtype: DType; readonly shape: ReadonlyArray<number> }>,
  metadata: Readonly<Record<string, string>> = {},
): { readonly bytes: Uint8Array; readonly entries: ReadonlyArray<TensorEntry> } => {
  const json: Record<string, unknown> = Object.keys(metadata).length > 0 ? { __metadata__: metadata } : {}
  const entries: TensorEntry[] = []
  let at = 0
  for (const t of tensors) {
    const end = at + numel(t.shape) * ITEM_SIZE[t.dtype]
    const entry: TensorEntry = { dtype: t.dtype, shape: [...t.shape], offsets: [at, end] }
    entries.push(entry)
    json[t.name] = { dtype: SAFETENSORS_DTYPE[t.dtype], shape: entry.shape, data_offsets: entry.offsets }
    at = end
  }
  const text = new TextEncoder().encode(JSON.stringify(json))
  const padded = Math.ceil(text.length / 8) * 8
  const bytes = new Uint8Array(8 + padded).fill(0x20, 8)
  new DataView(bytes.buffer).setBigUint64(0, BigInt(padded), true)
  bytes.set(text, 8)
  return { bytes, entries }
}

/**
 * Reads a header from the first bytes of a file (`prefix`: at least 8 bytes, then as many of
 * the header as were read) of `fileSize` bytes, checking everything a reader relies on: the
 * length within the file, the JSON, each entry's dtype and shape, its range matching its size,
 * the ranges covering the data part with no holes or overlaps (the format's rule), and the file
 * not truncated. Returns the header, or how many bytes it needs when `prefix` is short.
 */
export const parseHeader = (file: string, prefix: Uint8Array, fileSize: number): SafetensorsHeader | { readonly need: number } => {
  const bad = (why: string) => new CheckpointCorrupt({ file, message: `${file}: ${why}` })
  if (fileSize < 8 || prefix.length < 8) throw bad(`${fileSize} bytes, too short for a safetensors file (an 8-byte header length comes first)`)
  const length = new DataView(prefix.buffer, prefix.byteOffset, 8).getBigUint64(0, true)
  if (length > BigInt(MAX_HEADER_BYTES)) throw bad(`header length ${length} is over the ${MAX_HEADER_BYTES}-byte maximum: not a safetensors file, or corrupt`)
  const dataStart = 8 + Number(length)
  if (dataStart > fileSize) throw bad(`header length ${length} runs past the end of the file (${fileSize} bytes): truncated`)
  if (prefix.length < dataStart) return { need: dataStart }
  let json: unknown
  try {
    json = JSON.parse(new TextDecoder("utf-8", { fatal: true }).decode(prefix.subarray(8, dataStart)))
  } catch (e) {
    throw bad(`the header is not JSON (${e instanceof Error ? e.message : String(e)})`)
  }
  if (typeof json !== "object" || json === null || Array.isArray(json)) throw bad("the header is not a JSON object")
  const tensors = new Map<string, TensorEntry>()
  let metadata: Record<string, string> = {}
  for (const [name, v] of Object.entries(json)) {
    if (name === "__metadata__") {
      if (typeof v !== "object" || v === null || Object.values(v).some((x) => typeof x !== "string")) throw bad("__metadata__ is not an object of strings")
      metadata = v as Record<string, string>
      continue
    }
    const e = v as { dtype?: unknown; shape?: unknown; data_offsets?: unknown }
    const dtype = typeof e?.dtype === "string" ? FROM_SAFETENSORS.get(e.dtype) : undefined
    if (dtype === undefined) throw bad(`tensor "${name}": dtype ${JSON.stringify(e?.dtype)} is not one of ${[...FROM_SAFETENSORS.keys()].join(", ")}`)
    if (!Array.isArray(e.shape) || !e.shape.every((d) => Number.isSafeInteger(d) && d >= 0)) throw bad(`tensor "${name}": shape ${JSON.stringify(e.shape)} is not a list of sizes`)
    const o = e.data_offsets
    if (!Array.isArray(o) || o.length !== 2 || !o.every((x) => Number.isSafeInteger(x) && x >= 0) || o[0] > o[1]) throw bad(`tensor "${name}": data_offsets ${JSON.stringify(o)} is not [begin, end]`)
    const size = numel(e.shape) * ITEM_SIZE[dtype]
    if (o[1] - o[0] !== size) throw bad(`tensor "${name}": data_offsets [${o}] hold ${o[1] - o[0]} bytes, but ${dtype}[${e.shape}] needs ${size}`)
    tensors.set(name, { dtype, shape: e.shape, offsets: [o[0], o[1]] })
  }
  const ranges = [...tensors.entries()].sort((a, b) => a[1].offsets[0] - b[1].offsets[0] || a[1].offsets[1] - b[1].offsets[1])
  let end = 0
  for (const [name, t] of ranges) {
    if (t.offsets[0] !== end) throw bad(`tensor "${name}" starts at ${t.offsets[0]}, but the data before it ends at ${end} (a hole or an overlap)`)
    end = t.offsets[1]
  }
  if (dataStart + end > fileSize) throw bad(`the tensors need ${dataStart + end} bytes, the file has ${fileSize}: truncated`)
  if (dataStart + end < fileSize) throw bad(`${fileSize - dataStart - end} bytes after the last tensor's data: not what was written`)
  return { dataStart, tensors, metadata }
}

/**
 * The byte runs of a block of a row-major tensor: the block at `offsets` of shape `shape`
 * inside a tensor of shape `whole`, as [start, length] pairs (in elements) of contiguous
 * stretches, in order. A whole tensor is one run; a shard of dim d is one run per index of the
 * dims before d.
 */
export const blockRuns = (whole: ReadonlyArray<number>, offsets: ReadonlyArray<number>, shape: ReadonlyArray<number>): Array<readonly [number, number]> => {
  // The innermost dims the block covers whole, together with the first partial one, make one run.
  let inner = whole.length
  while (inner > 0 && offsets[inner - 1] === 0 && shape[inner - 1] === whole[inner - 1]) inner--
  const run = (inner === 0 ? 1 : shape[inner - 1]!) * whole.slice(inner).reduce((a, b) => a * b, 1)
  const strides = whole.map((_, i) => whole.slice(i + 1).reduce((a, b) => a * b, 1))
  const outer = Math.max(inner - 1, 0)
  const runs: Array<readonly [number, number]> = []
  if (numel(shape) === 0) return runs
  const index = new Array<number>(outer).fill(0)
  for (;;) {
    let start = 0
    for (let i = 0; i < whole.length; i++) start += ((i < outer ? index[i]! : 0) + offsets[i]!) * strides[i]!
    runs.push([start, run])
    let d = outer - 1
    for (; d >= 0; d--) {
      if (++index[d]! < shape[d]!) break
      index[d] = 0
    }
    if (d < 0) return runs
  }
}

/** The manifest file of a sharded checkpoint, next to the ranks' files. */
export const MANIFEST = "manifest.json"
/** The file naming a checkpoint directory's newest complete version. */
export const LATEST = "LATEST"
export const MANIFEST_FORMAT = "monarch-bun checkpoint 2"

/** SHA-256 of bytes or text, hex: what covers a manifest and each file's header. */
export const digest = (data: Uint8Array | string): string => createHash("sha256").update(data).digest("hex")

/** One saved piece of a tensor: the file and key it is in and where it sits in the whole tensor. */
export interface ShardRecord {
  /** The file (in the version's directory) and the rank that wrote it. */
  readonly file: string
  readonly rank: number
  readonly offsets: ReadonlyArray<number>
  readonly shape: ReadonlyArray<number>
  /** Its bytes' wyhash chained over 1 MiB chunks, `c1m:<decimal>` (a bare decimal: one wyhash of all, from before): a flipped bit is refused on load. */
  readonly hash: string
}

/** One rank's file of a version: its size and the digest of its header (length prefix and JSON). */
export interface FileRecord {
  readonly rank: number
  readonly bytes: number
  readonly header: string
}

/** How a tensor's values on the mesh make it up: per mesh dim, `replicate` or the tensor dim it is sharded on; or one value per rank (e.g. a generator's state). */
export type SavedPlacement = { readonly kind: "per-dim"; readonly dims: Readonly<Record<string, "replicate" | number>> } | { readonly kind: "per-rank" }

export interface TensorRecord {
  readonly dtype: DType
  /** The whole (logical) tensor's shape; for a per-rank tensor, one rank's. */
  readonly shape: ReadonlyArray<number>
  readonly placement: SavedPlacement
  readonly shards: ReadonlyArray<ShardRecord>
  /** Which shard each rank of the mesh holds (index into `shards`), by global rank. */
  readonly holders: Readonly<Record<string, number>>
}

export interface Manifest {
  readonly format: typeof MANIFEST_FORMAT
  readonly version: string
  /** The mesh it was saved from: dim names and sizes in order, and its ranks. */
  readonly mesh: { readonly names: ReadonlyArray<string>; readonly sizes: ReadonlyArray<number>; readonly ranks: ReadonlyArray<number> }
  /** The state tree with every tensor replaced by `{ "$tensor": name }` (numbers, strings, ... as they were). */
  readonly tree: unknown
  readonly tensors: Readonly<Record<string, TensorRecord>>
  /** Every file of the version by name: a commit checks each is there, whole, before publishing. */
  readonly files: Readonly<Record<string, FileRecord>>
  readonly savedAt: string
}

/** The key that marks a tensor in a manifest's tree. */
export const TENSOR_KEY = "$tensor"

/** A manifest's text: its fields, then `hash`, the digest of the fields' JSON, so any change to the text is refused on load. */
export const sealManifest = (m: Manifest): string => {
  const body = JSON.stringify(m)
  return `${body.slice(0, -1)},"hash":"${digest(body)}"}`
}

const isUints = (v: unknown): v is number[] => Array.isArray(v) && v.every((x) => Number.isSafeInteger(x) && (x as number) >= 0)
const isStrings = (v: unknown): v is string[] => Array.isArray(v) && v.every((x) => typeof x === "string")
const isObject = (v: unknown): v is Record<string, unknown> => typeof v === "object" && v !== null && !Array.isArray(v)

/**
 * A manifest's text, checked: its hash first (a flipped bit anywhere is refused as that), then
 * everything a loader relies on (the mesh, every file, every shard inside its tensor and hashed,
 * every rank's holder, every tensor the tree names); refused naming the file and what is wrong.
 */
export const parseManifest = (file: string, text: string): Manifest => {
  const bad = (why: string) => new CheckpointCorrupt({ file, message: `${file}: ${why}` })
  let parsed: unknown
  try {
    parsed = JSON.parse(text)
  } catch (e) {
    throw bad(`not JSON (${e instanceof Error ? e.message : String(e)}): truncated or corrupt`)
  }
  if (!isObject(parsed)) throw bad("not a JSON object")
  if (parsed.format !== MANIFEST_FORMAT) throw bad(`format ${JSON.stringify(parsed.format)} is not "${MANIFEST_FORMAT}"`)
  const { hash, ...body } = parsed
  if (typeof hash !== "string") throw bad("has no hash")
  if (digest(JSON.stringify(body)) !== hash) throw bad("its contents do not match its hash: changed or corrupt")
  const m = body as unknown as Manifest
  if (typeof m.version !== "string" || versionProblem(m.version) !== undefined) throw bad(`version ${JSON.stringify(m.version)} is not a plain name`)
  const mesh = m.mesh as unknown
  if (!isObject(mesh) || !isStrings(mesh.names) || !isUints(mesh.sizes) || !isUints(mesh.ranks) || mesh.names.length !== mesh.sizes.length
    || mesh.ranks.length !== mesh.sizes.reduce((a, b) => a * b, 1) || new Set(mesh.ranks).size !== mesh.ranks.length)
    throw bad("its mesh is not names, sizes and as many distinct ranks as the sizes make")
  const ranks = new Set(mesh.ranks)
  if (!isObject(m.files)) throw bad("has no files")
  for (const [name, f] of Object.entries(m.files as Record<string, unknown>)) {
    if (!/^rank-\d+\.safetensors$/.test(name) || !isObject(f) || !Number.isSafeInteger(f.rank) || !ranks.has(f.rank as number) || !Number.isSafeInteger(f.bytes) || (f.bytes as number) < 8 || typeof f.header !== "string")
      throw bad(`file "${name}" is not a rank's file with its size and header digest`)
  }
  if (!isObject(m.tensors)) throw bad("has no tensors")
  for (const [name, t] of Object.entries(m.tensors as Record<string, unknown>)) {
    const wrong = (why: string) => bad(`tensor "${name}" ${why}`)
    if (!isObject(t) || !DTYPES.includes(t.dtype as DType) || !isUints(t.shape)) throw wrong("has no dtype or shape")
    const p = t.placement
    if (!isObject(p) || !(p.kind === "per-rank" || (p.kind === "per-dim" && isObject(p.dims) && Object.keys(p.dims).join() === mesh.names.join()
      && Object.values(p.dims).every((d) => d === "replicate" || (Number.isSafeInteger(d) && (d as number) >= 0 && (d as number) < (t.shape as number[]).length)))))
      throw wrong(`has placement ${JSON.stringify(p)}, not per-rank or per mesh dim of ${mesh.names.join(", ")}`)
    if (!Array.isArray(t.shards) || t.shards.length === 0) throw wrong("has no shards")
    t.shards.forEach((sh: unknown, k) => {
      if (!isObject(sh) || typeof sh.file !== "string" || !(sh.file in m.files) || !ranks.has(sh.rank as number) || !isUints(sh.offsets) || !isUints(sh.shape)
        || sh.offsets.length !== (t.shape as number[]).length || sh.shape.length !== sh.offsets.length)
        throw wrong(`shard ${k} is not a block of it in one of the version's files`)
      if (sh.shape.some((d, i) => (sh.offsets as number[])[i]! + d > (t.shape as number[])[i]!)) throw wrong(`shard ${k} at [${sh.offsets}] of shape [${sh.shape}] is not inside [${t.shape}]`)
      if (typeof sh.hash !== "string") throw wrong(`shard ${k} has no hash of its bytes`)
    })
    if (!isObject(t.holders) || !mesh.ranks.every((r) => Number.isSafeInteger((t.holders as Record<string, unknown>)[r]) && ((t.holders as Record<string, number>)[r]!) >= 0 && (t.holders as Record<string, number>)[r]! < (t.shards as unknown[]).length))
      throw wrong(`does not name a shard for every rank of the mesh (${mesh.ranks.join(", ")})`)
  }
  const named = (v: unknown): void => {
    if (Array.isArray(v)) return v.forEach(named)
    if (!isObject(v)) return
    const ref = v[TENSOR_KEY]
    if (ref === undefined) return Object.values(v).forEach(named)
    if (typeof ref !== "string" || !(ref in m.tensors)) throw bad(`the tree names tensor ${JSON.stringify(ref)}, which the manifest does not hold`)
  }
  named(m.tree)
  return m
}

/** The version a LATEST file's text names: a plain name in the same directory, or the checkpoint is corrupt (a LATEST leading elsewhere is refused). */
export const latestVersion = (file: string, text: string): string => {
  const v = text.trim()
  const problem = versionProblem(v)
  if (problem !== undefined) throw new CheckpointCorrupt({ file, message: `${file}: names ${JSON.stringify(v.slice(0, 200))}, not a version in its directory (${problem})` })
  return v
}

/** Why `name` cannot be a version (a directory's name: letters, digits, `-`, `_`, `.`, not starting with a dot), or undefined. */
export const versionProblem = (name: string): string | undefined =>
  /^[A-Za-z0-9_-][A-Za-z0-9_.-]{0,127}$/.test(name) ? undefined : `version "${name}" is not a plain name (letters, digits, - _ . and not starting with a dot)`
