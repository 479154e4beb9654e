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
 * upload of an N MiB host tensor to rank 0 (through the upload segment, and by the socket from a
 * second controller whose links take no shared memory, its bytes read straight into the tensor),
 * to both ranks (fromHost, replicated), and the same batch split over dp (fromHost with dp:
 * shard(0), each rank its half; through the segment and by the socket). An upload is timed to a
 * fetch of one of its elements. Ratios of ours to the peers.
 */
import { Effect, Layer, ManagedRuntime } from "effect"
import { closeSync, constants, openSync, readSync, unlinkSync, writeSync } from "node:fs"
import { parseArgs } from "node:util"
import { Controller, fromHost, HostTensor, opsOn, shard, type Mesh, type RemoteTensor } from "../src/controller/index.ts"
import { listen, Transport } from "../src/controller/listener.ts"
import { Launcher } from "../src/launcher/index.ts"

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

/** ms from issuing `upload` to a fetch of one of its elements from `rank` (so the upload has been applied there). */
const uploadMs = (mesh: Mesh, rank: number, upload: () => RemoteTensor) => Effect.gen(function* () {
  const start = performance.now()
  const t = upload()
  yield* mesh.fetch(t.narrow(0, 0, 1).narrow(1, 0, 1), rank)
  const ms = performance.now() - start
  t.release()
  return ms
})

const local = ManagedRuntime.make(Controller.local({ world: 2, onWorkerLine: () => {} }))
const socketOnly = ManagedRuntime.make(Controller.layerLocal({ world: 2, onWorkerLine: () => {} }).pipe(Layer.provide(Layer.mergeAll(Launcher.layer, Layer.succeed(Transport, {
  listen: (o: Parameters<typeof listen>[0]) => listen({ ...o, sharedMemory: false }),
})))))

const program = (sockets: Mesh) => Effect.gen(function* () {
  const mesh: Mesh = yield* (yield* Controller).mesh({ dp: 2 })
  const first = yield* mesh.slice({ dp: 0 }), firstBySocket = yield* Effect.promise(() => socketOnly.runPromise(sockets.slice({ dp: 0 })))
  const bySocket = <A>(e: Effect.Effect<A, unknown, Controller>) => Effect.promise(() => socketOnly.runPromise(e))
  const on = opsOn(mesh)
  const t = on.full([BYTES / 4], 1.5)
  const host = new HostTensor("f32", [2, BYTES / 8], source)
  yield* mesh.fetch(t)
  // A first upload of each kind, so the segment is there and the workers' memory touched once.
  yield* uploadMs(first, 0, () => fromHost(first, host))
  yield* bySocket(uploadMs(firstBySocket, 0, () => fromHost(firstBySocket, host)))
  const rows = { memcpy: [] as number[], fresh: [] as number[], socket: [] as number[], shm: [] as number[], fetch: [] as number[], fetchSocket: [] as number[], uploadShared: [] as number[], uploadSocket: [] as number[], upload: [] as number[], sharded: [] as number[], shardedSocket: [] as number[] }
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
    rows.uploadShared.push(gbps(BYTES, yield* uploadMs(first, 0, () => fromHost(first, host))))
    rows.uploadSocket.push(gbps(BYTES, yield* bySocket(uploadMs(firstBySocket, 0, () => fromHost(firstBySocket, host)))))
    rows.upload.push(gbps(2 * BYTES, yield* uploadMs(mesh, 1, () => fromHost(mesh, host))))
    rows.sharded.push(gbps(BYTES, yield* uploadMs(mesh, 1, () => fromHost(mesh, host, { dp: shard(0) }))))
    rows.shardedSocket.push(gbps(BYTES, yield* bySocket(uploadMs(sockets, 1, () => fromHost(sockets, host, { dp: shard(0) })))))
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
  row("ours: upload of one f32 tensor to rank 0 (fromHost; through the upload segment)", m.uploadShared)
  row("ours: the same upload by the socket (shared memory off; read straight into the tensor)", m.uploadSocket)
  row("ours: fromHost to both ranks (replicated, through the segment; both ranks' bytes)", m.upload)
  row("ours: fromHost with dp: shard(0) (each rank its half, through the segment; the batch's bytes)", m.sharded)
  row("ours: the same sharded batch by the socket (the batch's bytes)", m.shardedSocket)
})

const sockets = await socketOnly.runPromise(Effect.flatMap(Effect.service(Controller), (ctl) => ctl.mesh({ dp: 2 })))
await local.runPromise(program(sockets))
await socketOnly.dispose()
await local.dispose()
