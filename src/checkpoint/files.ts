/**
 * A worker's checkpoint files: every path the controller names is confined to the worker's
 * checkpoint root (MONARCH_CHECKPOINT_DIR); a rank's shards are written as one safetensors file
 * in the background and made durable (fsync of the file, then of its directory); a version is
 * published atomically (manifest written and synced, the temporary directory renamed into
 * place, then LATEST replaced by rename, each directory synced), one commit at a time per
 * directory; and reads check the file against its header before any byte is used.
 */
import { closeSync, existsSync, fstatSync, fsyncSync, mkdirSync, openSync, readdirSync, readSync, realpathSync, renameSync, rmSync, statSync, writeSync } from "node:fs"
import { open } from "node:fs/promises"
import { basename, dirname, isAbsolute, join, relative, resolve, sep } from "node:path"
import type { HostTensor } from "../protocol/values.ts"
import { CheckpointCorrupt, CheckpointPathError, digest, encodeHeader, LATEST, latestVersion, MANIFEST, parseHeader, parseManifest, type Manifest, type SafetensorsHeader } from "./format.ts"

/**
 * `path` (relative to `root`) as an absolute path inside root, or a CheckpointPathError: no
 * absolute paths, no `..` out, and no symlink on the way that leads out (checked on the part
 * that exists).
 */
export const confine = (root: string | undefined, path: string): string => {
  if (root === undefined) throw new CheckpointPathError({ message: "this worker has no checkpoint root: set MONARCH_CHECKPOINT_DIR (Controller.local's `checkpoints`)" })
  if (isAbsolute(path)) throw new CheckpointPathError({ message: `checkpoint path "${path}" is absolute; name it relative to the checkpoint root` })
  mkdirSync(root, { recursive: true })
  const base = realpathSync(root)
  const full = resolve(base, path)
  const inside = (p: string) => p === base || p.startsWith(base + sep)
  if (!inside(full) || relative(base, full).split(sep).includes("..")) throw new CheckpointPathError({ message: `checkpoint path "${path}" leads out of the checkpoint root ${base}` })
  // The deepest part that exists, resolved: a symlink inside the root must not point out of it.
  let existing = full
  while (!existsSync(existing)) existing = resolve(existing, "..")
  if (!inside(realpathSync(existing))) throw new CheckpointPathError({ message: `checkpoint path "${path}" passes a symlink that leads out of the checkpoint root ${base}` })
  return full
}

/** fsync of a directory: a rename or a new file in it is durable only after this. */
export const syncDir = (dir: string): void => {
  const fd = openSync(dir, "r")
  try {
    fsyncSync(fd)
  } finally {
    closeSync(fd)
  }
}

/** One rank's file: its tensors as host snapshots, under their names. */
export interface ShardFile {
  readonly path: string
  readonly tensors: ReadonlyArray<{ readonly name: string; readonly host: HostTensor }>
}

/**
 * Writes a rank's file in the background (libuv's threads; the command loop goes on): the
 * header and every tensor's bytes in one gathered write (writev, repeated for what a partial
 * write left), then fsync. Resolves with the bytes written and the header's digest.
 */
export const writeShardFile = async (f: ShardFile): Promise<{ readonly bytes: number; readonly header: string }> => {
  const { bytes: header } = encodeHeader(f.tensors.map((t) => ({ name: t.name, dtype: t.host.dtype, shape: t.host.shape })))
  let chunks: Uint8Array[] = [header, ...f.tensors.map((t) => t.host.data)].filter((c) => c.byteLength > 0)
  const total = chunks.reduce((a, c) => a + c.byteLength, 0)
  const fh = await open(f.path, "w")
  try {
    let at = 0
    while (chunks.length > 0) {
      let n = (await fh.writev(chunks, at)).bytesWritten
      at += n
      while (chunks.length > 0 && n >= chunks[0]!.byteLength) n -= chunks.shift()!.byteLength
      if (n > 0) chunks = [chunks[0]!.subarray(n), ...chunks.slice(1)]
    }
    await fh.sync()
    return { bytes: total, header: digest(header) }
  } finally {
    await fh.close()
  }
}

/** A file opened for reading, its header checked against its size. */
export class SafetensorsReader implements Disposable {
  private readonly fd: number
  readonly header: SafetensorsHeader

  constructor(readonly path: string, readonly name: string) {
    try {
      this.fd = openSync(path, "r")
    } catch (e) {
      throw new CheckpointPathError({ message: `${name}: cannot be opened (${e instanceof Error ? e.message : String(e)})` })
    }
    try {
      const size = fstatSync(this.fd).size
      let prefix = this.read(0, Math.min(size, 4096))
      let parsed = parseHeader(name, prefix, size)
      if ("need" in parsed) {
        prefix = this.read(0, parsed.need)
        parsed = parseHeader(name, prefix, size)
      }
      if ("need" in parsed) throw new CheckpointCorrupt({ file: name, message: `${name}: the header could not be read` })
      this.header = parsed
    } catch (e) {
      closeSync(this.fd)
      throw e
    }
  }

  /** The digest of the header as it is in the file (length prefix and JSON), as a save recorded it. */
  headerDigest(): string {
    return digest(this.read(0, this.header.dataStart))
  }

  /** `length` bytes from `position` of the file. */
  read(position: number, length: number, into = new Uint8Array(length), at = 0): Uint8Array {
    let done = 0
    while (done < length) {
      const n = readSync(this.fd, into, at + done, length - done, position + done)
      if (n === 0) throw new CheckpointCorrupt({ file: this.name, message: `${this.name}: ended at byte ${position + done} while reading: truncated` })
      done += n
    }
    return into
  }

  [Symbol.dispose](): void {
    closeSync(this.fd)
  }
}

/** Writes `chunks` to `path` and fsyncs it. */
const writeSynced = (path: string, chunks: ReadonlyArray<Uint8Array>): void => {
  const fd = openSync(path, "w")
  try {
    let at = 0
    for (const bytes of chunks) {
      let done = 0
      while (done < bytes.length) done += writeSync(fd, bytes, done, bytes.length - done, at + done)
      at += bytes.length
    }
    fsyncSync(fd)
  } finally {
    closeSync(fd)
  }
}

const writeDurably = (path: string, text: string): void => writeSynced(path, [new TextEncoder().encode(text)])

/** Replaces `path` with `chunks` atomically and durably: a temporary file beside it, fsync, rename, fsync of the folder. */
export const writeFileDurably = (path: string, chunks: ReadonlyArray<Uint8Array>): void => {
  const tmp = `${path}.tmp-${process.pid}`
  try {
    writeSynced(tmp, chunks)
    renameSync(tmp, path)
  } catch (e) {
    // A failed write (a full disk, a target that cannot be replaced) leaves no partial file behind.
    rmSync(tmp, { force: true })
    throw e
  }
  syncDir(dirname(path))
}

/**
 * Publishes a version whose files are all durable in `tmp` (a version with no tensor has no
 * file, and its tmp is made here): checks that every file the manifest names is there with the
 * size its rank wrote, writes and syncs the manifest, syncs tmp, renames it to
 * `<dir>/<version>`, syncs dir, replaces LATEST by rename and syncs dir again. A crash anywhere
 * leaves LATEST naming the previous complete version.
 */
export const publish = (dir: string, tmp: string, version: string, manifest: string): void => {
  const files = parseManifest(join(tmp, MANIFEST), manifest).files
  mkdirSync(tmp, { recursive: true })
  for (const [name, f] of Object.entries(files)) {
    const size = existsSync(join(tmp, name)) ? statSync(join(tmp, name)).size : undefined
    if (size !== f.bytes) throw new CheckpointPathError({ message: `version ${version} is incomplete: ${name} ${size === undefined ? "is missing" : `has ${size} bytes, its rank wrote ${f.bytes}`}; not published` })
  }
  writeDurably(join(tmp, MANIFEST), manifest)
  syncDir(tmp)
  const final = join(dir, version)
  if (existsSync(final)) throw new CheckpointPathError({ message: `version ${final} exists already` })
  renameSync(tmp, final)
  syncDir(dir)
  writeDurably(join(dir, `${LATEST}.tmp`), `${version}\n`)
  renameSync(join(dir, `${LATEST}.tmp`), join(dir, LATEST))
  syncDir(dir)
}

/** The directory a commit holds in a checkpoint directory while it publishes and prunes. */
const COMMIT_LOCK = ".commit-lock"
/** A lock older than this was left by a commit that died: a commit holds it for milliseconds. */
export const STALE_LOCK_MS = 10_000
const pause = new Int32Array(new SharedArrayBuffer(4))

/**
 * Runs `body` (a publish and its prune) holding `dir`'s commit lock (a directory made with
 * mkdir, atomic on every filesystem), so the commits of several meshes to one directory, each by
 * its own first rank, take turns: no prune removes a version another commit is about to name in
 * LATEST. Waits in 2 ms steps while another commit holds it; takes a lock left by one that died.
 */
export const underCommitLock = <A>(dir: string, body: () => A): A => {
  mkdirSync(dir, { recursive: true })
  const lock = join(dir, COMMIT_LOCK)
  for (;;) {
    try {
      mkdirSync(lock)
      break
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code !== "EEXIST") throw e
    }
    // The holder may remove the lock between the mkdir and the stat: then try again at once.
    const held = statSync(lock, { throwIfNoEntry: false })
    if (held === undefined) continue
    if (Date.now() - held.mtimeMs > STALE_LOCK_MS) rmSync(lock, { recursive: true, force: true })
    else Atomics.wait(pause, 0, 0, 2)
  }
  try {
    return body()
  } finally {
    rmSync(lock, { recursive: true, force: true })
  }
}

/** The name of a version's temporary directory: hidden, so neither a load nor a prune takes it for a version. */
export const tmpName = (version: string): string => `.tmp-${version}`

/**
 * Removes the committed versions beyond the newest `keep` (by the time their manifest was
 * written), never `version` (the one just published) nor the one LATEST names now (a commit of
 * another mesh may have moved it). Temporary directories are left alone: each belongs to a save
 * that is still writing it, until that save commits (renames it) or fails (drops it).
 */
export const prune = (dir: string, version: string, keep: number): void => {
  const latestFile = join(dir, LATEST)
  const latest = existsSync(latestFile) ? readTextSync(latestFile).trim() : version
  const versions = readdirSync(dir, { withFileTypes: true })
    .filter((e) => e.isDirectory() && !e.name.startsWith(".") && existsSync(join(dir, e.name, MANIFEST)))
    .map((e) => ({ name: e.name, at: statSync(join(dir, e.name, MANIFEST)).mtimeMs }))
    .sort((a, b) => b.at - a.at || (a.name < b.name ? 1 : -1))
  for (const v of versions.slice(keep)) if (v.name !== version && v.name !== latest) rmSync(join(dir, v.name), { recursive: true, force: true })
}

/** Removes the temporary directory of a save that failed (`tmp` must be one: a hidden `.tmp-` directory). */
export const drop = (tmp: string): void => {
  if (!basename(tmp).startsWith(".tmp-")) throw new CheckpointPathError({ message: `${tmp} is not a save's temporary directory` })
  rmSync(tmp, { recursive: true, force: true })
}

/** The version LATEST names in `dir` (or `version` itself), and its manifest, checked. */
export const readManifest = (dir: string, version: string | null): { readonly version: string; readonly manifest: Manifest; readonly text: string } => {
  let v = version
  if (v === null) {
    const latest = join(dir, LATEST)
    if (!existsSync(latest)) throw new CheckpointPathError({ message: `no checkpoint in ${dir}: it has no ${LATEST} file (no save has completed there)` })
    v = latestVersion(latest, readTextSync(latest))
  }
  const file = join(dir, v, MANIFEST)
  if (!existsSync(file)) throw new CheckpointPathError({ message: `checkpoint ${join(dir, v)} has no ${MANIFEST}` })
  const text = readTextSync(file)
  return { version: v, manifest: parseManifest(file, text), text }
}

const readTextSync = (path: string): string => {
  const fd = openSync(path, "r")
  try {
    const size = fstatSync(fd).size, bytes = new Uint8Array(size)
    let done = 0
    while (done < size) {
      const n = readSync(fd, bytes, done, size - done, done)
      if (n === 0) break
      done += n
    }
    return new TextDecoder().decode(bytes.subarray(0, done))
  } finally {
    closeSync(fd)
  }
}
