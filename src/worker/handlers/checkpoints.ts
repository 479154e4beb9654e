/**
 * The checkpoint commands: SaveShards (snapshot to host now, write this rank's file in the
 * background, answer once it is durable), CommitCheckpoint (publish a version atomically),
 * ReadCheckpoint (a manifest or a file's header), LoadShards (define tensors from blocks of
 * files) and DropCheckpoint (remove a failed save's temporary directory). Every path is
 * confined to the worker's checkpoint root (src/checkpoint/files.ts).
 */
import { mkdirSync } from "node:fs"
import { join } from "node:path"
import { Tensor } from "../../../ffi/tensor.ts"
import { blockRuns, CheckpointCorrupt, versionProblem } from "../../checkpoint/format.ts"
import { confine, drop, prune, publish, readManifest, SafetensorsReader, underCommitLock, writeShardFile } from "../../checkpoint/files.ts"
import type { CommitCheckpoint, DropCheckpoint, LoadShards, ReadCheckpoint, SaveShards, Value } from "../../protocol/messages.ts"
import { HostTensor, ITEM_SIZE } from "../../protocol/values.ts"
import { sameShape } from "../../ops/meta.ts"
import { WrongRefType } from "../errors.ts"
import { holdHostCopy } from "../memory.ts"
import { tryDefine, type Session } from "../session.ts"
import { streamOf } from "../streams.ts"

/** A checkpoint command's malformed argument (one the message's field kinds cannot state). */
const malformed = (what: string) => new WrongRefType({ message: what })

const isUints = (v: unknown): v is number[] => Array.isArray(v) && v.every((x) => Number.isSafeInteger(x) && (x as number) >= 0)

/**
 * The hash a manifest records of a tensor's bytes: wyhash chained over HASH_CHUNK-byte chunks
 * (each chunk's hash seeds the next), written `c1m:<decimal>`. A load hashes each chunk right
 * after reading it, while it is in cache, instead of a second pass over the whole tensor; the
 * chain is as sensitive as one wyhash over all the bytes: a flipped bit changes its chunk's
 * 64-bit hash and so every seed after it (it goes unnoticed with odds of about 2^-64).
 * A manifest written before records one wyhash of all the bytes (a bare decimal), checked so.
 */
export const HASH_CHUNK = 1 << 20
const CHAINED = "c1m:"

/** Chained wyhash, fed in order: chunks of exactly HASH_CHUNK bytes but the last. */
class ChunkHash {
  private h = 0n
  update(chunk: Uint8Array): void {
    this.h = Bun.hash.wyhash(chunk, this.h)
  }
  get value(): string {
    return `${CHAINED}${this.h}`
  }
}

export const hashBytes = (data: Uint8Array): string => {
  const h = new ChunkHash()
  for (let at = 0; at < data.byteLength; at += HASH_CHUNK) h.update(data.subarray(at, Math.min(at + HASH_CHUNK, data.byteLength)))
  return h.value
}

/** Whether `data` has the recorded `hash` (chained, or a bare wyhash of all of it). */
const holdsHash = (data: Uint8Array, hash: string): boolean =>
  hash.startsWith(CHAINED) ? hashBytes(data) === hash : Bun.hash.wyhash(data, 0n).toString() === hash

export const saveShards = (s: Session) => (m: SaveShards) =>
  tryDefine(s, m.ident, [], () => {
    const stream = streamOf(s.env, m.stream)
    const mine: number[] = []
    m.writers.forEach((w, i) => {
      if (!isUints(w)) throw malformed(`SaveShards: writers[${i}] is not a list of ranks`)
      if (w.includes(s.rank)) mine.push(i)
    })
    if (mine.length === 0) return void s.send({ _tag: "FetchResult", ident: m.ident, value: { file: null, bytes: 0, header: null, hashes: [], ms: 0 } })
    const dir = confine(s.checkpointRoot, m.dir)
    const sources = mine.map((i) => {
      const t = s.env.get(m.tensors[i]!)
      if (!(t instanceof Tensor)) throw malformed(`SaveShards: ${m.names[i]} is not a tensor`)
      return { name: m.names[i]!, tensor: t }
    })
    mkdirSync(dir, { recursive: true })
    // The snapshot counts against the memory limit until its file is written.
    const bytes = sources.reduce((a, t) => a + t.tensor.nbytes, 0)
    const release = holdHostCopy(s.native, bytes, `save snapshot of ${bytes} bytes`)
    let tensors: Array<{ readonly name: string; readonly host: HostTensor }>
    try {
      // The snapshot: copies now, in command order, so later commands (an optimizer step) cannot
      // change what is saved; into recycled memory (fresh pages cost faults), given back once written.
      tensors = sources.map((t) => {
        const data = s.hostBuffers.take(t.tensor.nbytes)
        t.tensor.copyOut(data, stream)
        return { name: t.name, host: new HostTensor(t.tensor.dtype, t.tensor.shape, data) }
      })
    } catch (e) {
      release()
      throw e
    }
    const file = `rank-${s.rank}.safetensors`
    const started = performance.now()
    const write = writeShardFile({ path: join(dir, file), tensors }).then(
      ({ bytes, header }): Value => ({ file, bytes, header, hashes: tensors.map((t) => hashBytes(t.host.data)), ms: performance.now() - started }),
      (e): Value => ({ error: `rank ${s.rank} writing ${join(m.dir, file)}: ${e instanceof Error ? e.message : String(e)}` }),
    ).then((value) => {
      release()
      for (const t of tensors) s.hostBuffers.give(t.host.data)
      s.send({ _tag: "FetchResult", ident: m.ident, value })
    })
    s.writing.add(write)
    void write.finally(() => s.writing.delete(write))
  })

export const commitCheckpoint = (s: Session) => (m: CommitCheckpoint) =>
  tryDefine(s, m.ident, [], () => {
    const problem = versionProblem(m.version)
    if (problem !== undefined) throw malformed(`CommitCheckpoint: ${problem}`)
    if (m.keep < 1) throw malformed(`CommitCheckpoint: keep ${m.keep} keeps no version`)
    const dir = confine(s.checkpointRoot, m.dir), tmp = confine(s.checkpointRoot, m.tmp)
    underCommitLock(dir, () => {
      publish(dir, tmp, m.version, m.manifest)
      // Durable and named by LATEST: the program may go on while older versions are removed.
      s.send({ _tag: "FetchResult", ident: m.ident, value: null })
      prune(dir, m.version, m.keep)
    })
  })

export const dropCheckpoint = (s: Session) => (m: DropCheckpoint) =>
  tryDefine(s, m.ident, [], () => {
    drop(confine(s.checkpointRoot, m.tmp))
    s.send({ _tag: "FetchResult", ident: m.ident, value: null })
  })

export const readCheckpoint = (s: Session) => (m: ReadCheckpoint) =>
  tryDefine(s, m.ident, [], () => {
    const path = confine(s.checkpointRoot, m.path)
    if (m.path.endsWith(".safetensors")) {
      using reader = new SafetensorsReader(path, m.path)
      const tensors = Object.fromEntries([...reader.header.tensors].map(([k, t]) => [k, { dtype: t.dtype, shape: [...t.shape] }]))
      return void s.send({ _tag: "FetchResult", ident: m.ident, value: { header: JSON.stringify({ tensors, metadata: reader.header.metadata }) } })
    }
    if (m.version !== null && versionProblem(m.version) !== undefined) throw malformed(`ReadCheckpoint: ${versionProblem(m.version)}`)
    const { version, text } = readManifest(path, m.version)
    s.send({ _tag: "FetchResult", ident: m.ident, value: { version, manifest: text } })
  })

/** One rank's source of one result: which block of which tensor of which file. */
const sourceOf = (s: Session, sources: Value, i: number) => {
  const entry = Array.isArray(sources) ? sources.find((e) => Array.isArray(e) && e[0] === s.rank) : undefined
  if (!Array.isArray(entry)) throw malformed(`LoadShards: result ${i} has no source for rank ${s.rank}`)
  const [, file, key, offsets, shape, hash, saved = null] = entry as unknown[]
  const isSaved = (v: unknown): v is [string, string] => Array.isArray(v) && v.length === 2 && typeof v[0] === "string" && typeof v[1] === "string"
  if (typeof file !== "string" || typeof key !== "string" || !isUints(offsets) || !isUints(shape) || offsets.length !== shape.length || !(hash === null || typeof hash === "string")
    || !(saved === null || (isSaved(saved) && typeof hash === "string")))
    throw malformed(`LoadShards: result ${i}'s source for rank ${s.rank} is not [rank, file, key, offsets, shape, hash, [dtype, header digest] or nil]`)
  return { file, key, offsets, shape, hash, saved: saved as [string, string] | null }
}

export const loadShards = (s: Session) => (m: LoadShards) =>
  tryDefine(s, m.ident, m.results, () => {
    const stream = streamOf(s.env, m.stream)
    const readers = new Map<string, SafetensorsReader>()
    const made: Tensor[] = []
    try {
      m.results.forEach((_, i) => {
        const src = sourceOf(s, m.sources[i]!, i)
        let reader = readers.get(src.file)
        if (reader === undefined) {
          readers.set(src.file, (reader = new SafetensorsReader(confine(s.checkpointRoot, src.file), src.file)))
          if (src.saved !== null && reader.headerDigest() !== src.saved[1]) throw new CheckpointCorrupt({ file: src.file, message: `${src.file}: its header is not the one that was saved (its digest differs): changed or corrupt` })
        }
        const entry = reader.header.tensors.get(src.key)
        const bad = (why: string) => new CheckpointCorrupt({ file: src.file, message: `${src.file}: tensor "${src.key}" ${why}` })
        if (entry === undefined) throw bad("is not in the file")
        // A saved block is the whole entry, of the manifest's dtype and shape.
        if (src.saved !== null && (entry.dtype !== src.saved[0] || !sameShape(entry.shape, src.shape)))
          throw bad(`is ${entry.dtype}[${entry.shape}] in the file, but the manifest saved it as ${src.saved[0]}[${src.shape}]`)
        if (src.shape.length !== entry.shape.length || src.shape.some((d, k) => src.offsets[k]! + d > entry.shape[k]!))
          throw bad(`is ${entry.dtype}[${entry.shape}]; the block at [${src.offsets}] of shape [${src.shape}] is not inside it`)
        const item = ITEM_SIZE[entry.dtype]
        const tensor = Tensor.empty(s.native, entry.dtype, src.shape)
        made.push(tensor)
        // On cpu the file's bytes go straight into the new tensor's memory (no work is queued on
        // it yet); on cuda into host memory, copied in once checked, held through holdHostCopy
        // like a save's snapshot (which counts host copies against the limit on cpu only).
        const inPlace = tensor.hostBytes()
        const release = inPlace === undefined ? holdHostCopy(s.native, tensor.nbytes, `load of ${tensor.nbytes} bytes through host memory`) : () => {}
        try {
          const data = inPlace ?? new Uint8Array(tensor.nbytes)
          const runs = blockRuns(entry.shape, src.offsets, src.shape)
          const base = reader.header.dataStart + entry.offsets[0]
          let held: boolean | undefined
          if (runs.length === 1 && src.hash?.startsWith(CHAINED)) {
            // One run (a saved block is always one): read it chunk by chunk, hashing each as it lands.
            const h = new ChunkHash(), start = base + runs[0]![0] * item
            for (let at = 0; at < data.byteLength; at += HASH_CHUNK) {
              const n = Math.min(HASH_CHUNK, data.byteLength - at)
              h.update(reader.read(start + at, n, data, at).subarray(at, at + n))
            }
            held = h.value === src.hash
          } else {
            let at = 0
            for (const [start, length] of runs) {
              reader.read(base + start * item, length * item, data, at)
              at += length * item
            }
            if (src.hash !== null) held = holdsHash(data, src.hash)
          }
          if (held === false) throw bad("does not hold the bytes that were saved (its hash differs): corrupt")
          if (inPlace === undefined) tensor.copyIn(data, stream)
        } finally {
          release()
        }
      })
    } catch (e) {
      for (const t of made) t.free()
      throw e
    } finally {
      for (const r of readers.values()) r[Symbol.dispose]()
    }
    made.forEach((t, i) => s.env.define(m.results[i]!, t))
  })
