/**
 * Moving a tensor's bytes between the controller and a worker (2 CPU workers, dp=2), against
 * the peers that bound it, all in the same run and taking turns, so load from elsewhere falls on
 * each alike:
 *
 *   node_modules/.bin/bun run bench/fetch.ts [--mib N] [--runs N]
 *
 * Rows (GB/s, medians over the runs): a one-thread copy between two pre-touched buffers
 * (`Uint8Array.set`); the same copy into fresh memory (what any fetch pays to hand the user bytes
 * of its own: the page faults); Bun's loopback socket into a preallocated buffer (in this
 * process); a /dev/shm file written and read back into a preallocated buffer (what a per-fetch
 * shared-memory segment costs); then ours: a fetch of an f32 tensor of N MiB from rank 0, an
 * upload of an N MiB host tensor to both ranks (fromHost, replicated), and the same batch split
 * over dp (fromHost with dp: shard(0), each rank sent its half). Ratios of ours to the peers.
 */
import { Effect } from "effect"
import { closeSync, constants, openSync, readSync, unlinkSync, writeSync } from "node:fs"
import { parseArgs } from "node:util"
import { Controller, fromHost, HostTensor, opsOn, shard, type Mesh } from "../src/controller/index.ts"

const { values: args } = parseArgs({ options: { mib: { type: "string", default: "256" }, runs: { type: "string", default: "5" } } })
const MIB = Number(args.mib), RUNS = Number(args.runs), BYTES = MIB << 20
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor((xs.length - 1) / 2)]!
const gbps = (bytes: number, ms: number) => bytes / ms / 1e6
const timed = (f: () => void): number => {
  const t = performance.now()
  f()
  return performance.now() - t
}

const source = new Uint8Array(BYTES).fill(3), target = new Uint8Array(BYTES).fill(4)

/** `BYTES` through a loopback TCP socket of this process into `target`; ms from the first write to the last byte. */
const socketPeer = async (): Promise<number> => {
  const done = Promise.withResolvers<number>()
  let got = 0, start = 0
  const server = Bun.listen({
    hostname: "127.0.0.1", port: 0,
    socket: {
      binaryType: "uint8array",
      data(_s, chunk: Uint8Array) {
        target.set(chunk, got)
        got += chunk.byteLength
        if (got === BYTES) done.resolve(performance.now() - start)
      },
    },
  })
  let at = 0
  const pump = (s: { write(b: Uint8Array): number }) => {
    while (at < BYTES) {
      const n = s.write(source.subarray(at, Math.min(at + (4 << 20), BYTES)))
      at += Math.max(n, 0)
      if (n <= 0) return
    }
  }
  const client = await Bun.connect({ hostname: "127.0.0.1", port: server.port, socket: { open(s) { start = performance.now(); pump(s) }, drain: pump, data() {} } })
  const ms = await done.promise
  client.end()
  server.stop(true)
  return ms
}

/** `BYTES` written to a fresh /dev/shm file (O_EXCL, 0600) and read back into `target`; ms. */
const shmPeer = (): number => timed(() => {
  const path = `/dev/shm/monarch-bench-${process.pid}-${Math.random().toString(16).slice(2)}`
  const fd = openSync(path, constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL | constants.O_NOFOLLOW, 0o600)
  for (let at = 0; at < BYTES;) at += writeSync(fd, source, at, BYTES - at)
  closeSync(fd)
  const read = openSync(path, constants.O_RDONLY | constants.O_NOFOLLOW)
  unlinkSync(path)
  for (let at = 0; at < BYTES;) at += readSync(read, target, at, BYTES - at, null)
  closeSync(read)
})

const program = Effect.gen(function* () {
  const mesh: Mesh = yield* (yield* Controller).mesh({ dp: 2 })
  const on = opsOn(mesh)
  const t = on.full([BYTES / 4], 1.5)
  const host = new HostTensor("f32", [2, BYTES / 8], source)
  yield* mesh.fetch(t)
  const rows = { memcpy: [] as number[], fresh: [] as number[], socket: [] as number[], shm: [] as number[], fetch: [] as number[], fetchSocket: [] as number[], upload: [] as number[], sharded: [] as number[] }
  for (let run = 0; run < RUNS; run++) {
    rows.memcpy.push(gbps(BYTES, timed(() => target.set(source))))
    rows.fresh.push(gbps(BYTES, timed(() => Bun.allocUnsafe(BYTES).set(source))))
    rows.socket.push(gbps(BYTES, yield* Effect.promise(socketPeer)))
    rows.shm.push(gbps(BYTES, shmPeer()))
    let start = performance.now()
    yield* mesh.fetch(t)
    rows.fetch.push(gbps(BYTES, performance.now() - start))
    start = performance.now()
    yield* mesh.fetch([t])
    rows.fetchSocket.push(gbps(BYTES, performance.now() - start))
    start = performance.now()
    const up = fromHost(mesh, host)
    yield* mesh.fetch(up.sum(), 1)
    rows.upload.push(gbps(2 * BYTES, performance.now() - start))
    up.release()
    start = performance.now()
    const half = fromHost(mesh, host, { dp: shard(0) })
    yield* mesh.fetch(half.sum(), 1)
    rows.sharded.push(gbps(BYTES, performance.now() - start))
    half.release()
  }
  const m = Object.fromEntries(Object.entries(rows).map(([k, v]) => [k, median(v)])) as Record<keyof typeof rows, number>
  const x = (a: number, b: number) => `${(a / b).toFixed(2)}x`
  console.log(`${MIB} MiB, 2 CPU workers (dp=2), ${RUNS} runs, medians; peers in this process, same runs\n`)
  console.log("| case | GB/s | / memcpy | / socket |\n|---|---:|---:|---:|")
  const row = (name: string, v: number) => console.log(`| ${name} | ${v.toFixed(2)} | ${x(v, m.memcpy)} | ${x(v, m.socket)} |`)
  row("peer: memcpy between pre-touched buffers (Uint8Array.set)", m.memcpy)
  row("peer: the same copy into fresh memory (Bun.allocUnsafe + set)", m.fresh)
  row("peer: Bun loopback TCP socket into a preallocated buffer", m.socket)
  row("peer: /dev/shm file written, then read into a preallocated buffer", m.shm)
  row("ours: fetch of one f32 tensor from rank 0 (through the link's shared-memory segment)", m.fetch)
  row("ours: the same tensor fetched as a one-element list (by the socket)", m.fetchSocket)
  row("ours: fromHost to both ranks (replicated; both links' bytes)", m.upload)
  row("ours: fromHost with dp: shard(0) (each rank its half; the batch's bytes)", m.sharded)
})

await Effect.runPromise(program.pipe(Effect.provide(Controller.local({ world: 2, onWorkerLine: () => {} }))))
