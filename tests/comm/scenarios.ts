/**
 * What one worker process of the communicator tests does: each scenario runs collectives on
 * real communicators and reports every check as a JSON line on stdout, for the test that
 * spawned the workers to assert on.
 */
import { Effect } from "effect"
import { Comm } from "../../ffi/comm.ts"
import { ShimError, type Native, type ShimReason } from "../../ffi/native.ts"
import type { CommOpName } from "../../ffi/symbols.ts"
import { Tensor } from "../../ffi/tensor.ts"
import { DTYPES, HostTensor, type DType } from "../../src/protocol/values.ts"
import type { StoreApi } from "../../src/store/api.ts"
import { CommError } from "../../src/comm/errors.ts"
import { encode, inputBytes, inputs, reduced, reducedBytes, type Scalar } from "./reference.ts"

/** A line a worker prints: a check's outcome, or an event the test waits for. */
export type WorkerLine =
  | { readonly check: string; readonly ok: boolean; readonly detail?: string; readonly ms?: number }
  | { readonly event: string; readonly [key: string]: unknown }

export interface Worker {
  readonly native: Native
  readonly rank: number
  readonly size: number
  readonly timeoutMs: number
  readonly store: StoreApi
  /** A connected communicator over members (global ranks, in group order), agreed on by key. */
  open(key: string, members: ReadonlyArray<number>): Promise<Comm>
}

export const emit = (line: WorkerLine): void => {
  process.stdout.write(`${JSON.stringify(line)}\n`)
}

const OPS: ReadonlyArray<CommOpName> = ["sum", "prod", "min", "max", "avg"]
const range = (n: number) => Array.from({ length: n }, (_, i) => i)

const firstDifference = (a: Uint8Array, b: Uint8Array): string => {
  if (a.length !== b.length) return `${a.length} bytes, expected ${b.length}`
  const i = a.findIndex((x, j) => x !== b[j])
  return `byte ${i}: ${a.subarray(i, i + 8).join(",")} expected ${b.subarray(i, i + 8).join(",")}`
}

const checkBytes = (check: string, actual: Uint8Array, expected: Uint8Array): void => {
  const ok = Buffer.from(actual.buffer, actual.byteOffset, actual.byteLength).equals(expected)
  emit(ok ? { check, ok } : { check, ok, detail: firstDifference(actual, expected) })
}

/** Runs f, which must fail with a ShimError of the given reason. */
const checkFails = (check: string, reason: ShimReason, f: () => void): void => {
  try {
    f()
    emit({ check, ok: false, detail: `succeeded, expected ${reason}` })
  } catch (e) {
    const ok = e instanceof ShimError && e.reason === reason
    emit(ok ? { check, ok } : { check, ok, detail: `threw ${e instanceof ShimError ? `${e.reason}: ` : ""}${String(e)}` })
  }
}

const concat = (parts: ReadonlyArray<Uint8Array>): Uint8Array => {
  const out = new Uint8Array(parts.reduce((n, p) => n + p.length, 0))
  let at = 0
  for (const p of parts) { out.set(p, at); at += p.length }
  return out
}

class Tensors {
  constructor(private readonly native: Native) {}
  upload(dtype: DType, shape: ReadonlyArray<number>, values: ReadonlyArray<Scalar>): Tensor {
    return this.uploadBytes(dtype, shape, encode(dtype, values))
  }
  uploadBytes(dtype: DType, shape: ReadonlyArray<number>, bytes: Uint8Array): Tensor {
    return Tensor.fromHost(this.native, new HostTensor(dtype, shape, bytes))
  }
  empty(dtype: DType, shape: ReadonlyArray<number>): Tensor {
    return Tensor.empty(this.native, dtype, shape)
  }
}

const bytesOf = (t: Tensor): Uint8Array => t.toHost().data

/** Every collective on the world communicator, every dtype, sizes 0, 1, odd and large. */
const collectives = async (w: Worker): Promise<void> => {
  const { rank, size } = w
  const all = range(size)
  const comm = await w.open("world", all)
  const t = new Tensors(w.native)

  for (const dtype of DTYPES)
    for (const op of OPS)
      for (const n of [0, 1, 7, 1031]) {
        const check = `all_reduce ${dtype} ${op} n=${n}`
        const seed = n % 5
        using input = t.upload(dtype, [n], inputs(dtype, op, rank, n, seed))
        using out = t.empty(dtype, [n])
        if (dtype === "bool" && op === "avg") { checkFails(check, "Unsupported", () => comm.allReduce(out, input, op)); continue }
        comm.allReduce(out, input, op)
        checkBytes(check, bytesOf(out), encode(dtype, reduced(dtype, op, all, n, seed)))
      }

  // In place, and one tensor of several ring segments (Gloo splits at 1 MiB).
  for (const [dtype, op, shape] of [["f32", "sum", [1031]], ["i64", "max", [3, 5]], ["bf16", "avg", [257]], ["u8", "prod", [9]], ["f32", "sum", [3, 100_001]]] as const) {
    const n = shape.reduce((a, b) => a * b, 1)
    using x = t.upload(dtype, shape, inputs(dtype, op, rank, n, 2))
    comm.allReduce(x, x, op)
    checkBytes(`all_reduce in place ${dtype} ${op} [${shape}]`, bytesOf(x), encode(dtype, reduced(dtype, op, all, n, 2)))
  }

  for (const dtype of DTYPES)
    for (const shape of [[0], [1], [5], [1031], [2, 3]]) {
      const n = shape.reduce((a, b) => a * b, 1)
      using input = t.upload(dtype, shape, inputs(dtype, "none", rank, n, 3))
      using out = t.empty(dtype, [size, ...shape])
      comm.allGather(out, input)
      checkBytes(`all_gather ${dtype} [${shape}]`, bytesOf(out), concat(all.map((r) => encode(dtype, inputs(dtype, "none", r, n, 3)))))
    }

  for (const dtype of DTYPES)
    for (const op of OPS)
      for (const m of [0, 1, 5, 257]) {
        const check = `reduce_scatter ${dtype} ${op} m=${m}`
        using input = t.upload(dtype, [size * m], inputs(dtype, op, rank, size * m, 4))
        using out = t.empty(dtype, [m])
        if (dtype === "bool" && op === "avg") { checkFails(check, "Unsupported", () => comm.reduceScatter(out, input, op)); continue }
        comm.reduceScatter(out, input, op)
        checkBytes(check, bytesOf(out), encode(dtype, reduced(dtype, op, all, size * m, 4).slice(rank * m, (rank + 1) * m)))
      }

  for (const dtype of DTYPES)
    for (const chunk of [0, 1, 3, 257]) {
      const n = size * chunk
      using input = t.upload(dtype, [n], inputs(dtype, "none", rank, n, 5))
      using out = t.empty(dtype, [n])
      comm.allToAll(out, input)
      const expected = all.map((r) => encode(dtype, inputs(dtype, "none", r, n, 5).slice(rank * chunk, (rank + 1) * chunk)))
      checkBytes(`all_to_all ${dtype} chunk=${chunk}`, bytesOf(out), concat(expected))
    }

  for (const root of all)
    for (const dtype of DTYPES)
      for (const n of [0, 1, 1031]) {
        using x = t.upload(dtype, [n], inputs(dtype, "none", rank, n, 6))
        comm.broadcast(x, root)
        checkBytes(`broadcast ${dtype} n=${n} root=${root}`, bytesOf(x), encode(dtype, inputs(dtype, "none", root, n, 6)))
      }

  // Ranks enter the barrier at staggered times; none may leave before the last has entered.
  Bun.sleepSync(rank * 150)
  const entered = Date.now()
  comm.barrier()
  emit({ event: "barrier", entered, left: Date.now() })
  comm.destroy()
}

/** A 2 x 2 mesh (rank = 2 * row + col): communicators over each dim, alive at once. */
const mesh = async (w: Worker): Promise<void> => {
  const row = Math.floor(w.rank / 2), col = w.rank % 2
  const rowMembers = [2 * row, 2 * row + 1], colMembers = [col, col + 2]
  const t = new Tensors(w.native)
  const world = await w.open("world", [0, 1, 2, 3])
  const rows = await w.open(`row${row}`, rowMembers)
  const cols = await w.open(`col${col}`, colMembers)

  const allReduce = (name: string, comm: Comm, members: number[], dtype: DType, op: CommOpName) => {
    using input = t.upload(dtype, [13], inputs(dtype, op, w.rank, 13, 1))
    using out = t.empty(dtype, [13])
    comm.allReduce(out, input, op)
    checkBytes(`${name} all_reduce ${dtype} ${op}`, bytesOf(out), encode(dtype, reduced(dtype, op, members, 13, 1)))
  }
  allReduce("row", rows, rowMembers, "i32", "sum")
  allReduce("col", cols, colMembers, "i64", "max")
  allReduce("world", world, [0, 1, 2, 3], "f32", "sum")
  allReduce("col", cols, colMembers, "f16", "avg")
  allReduce("row", rows, rowMembers, "bf16", "prod")

  {
    using input = t.upload("u8", [5], inputs("u8", "none", w.rank, 5, 2))
    using out = t.empty("u8", [2, 5])
    rows.allGather(out, input)
    checkBytes("row all_gather u8", bytesOf(out), concat(rowMembers.map((r) => encode("u8", inputs("u8", "none", r, 5, 2)))))
  }
  {
    using x = t.upload("f64", [4], inputs("f64", "none", w.rank, 4, 3))
    cols.broadcast(x, 1)
    checkBytes("col broadcast f64 root=1", bytesOf(x), encode("f64", inputs("f64", "none", colMembers[1]!, 4, 3)))
  }
  {
    // Within the column group, the peer is group rank 1 - (this member's group rank).
    const peer = 1 - row
    using send = t.upload("i32", [6], inputs("i32", "none", w.rank, 6, 4))
    using recv = t.empty("i32", [6])
    cols.p2p([{ kind: "send", peer, tensor: send }, { kind: "recv", peer, tensor: recv }])
    checkBytes("col p2p exchange i32", bytesOf(recv), encode("i32", inputs("i32", "none", colMembers[peer]!, 6, 4)))
  }

  rows.destroy()
  cols.destroy()
  // A group made again after its first communicator is gone.
  const again = await w.open(`row${row}/again`, rowMembers)
  allReduce("row again", again, rowMembers, "f64", "min")
  again.destroy()
  allReduce("world after groups", world, [0, 1, 2, 3], "u8", "sum")
  world.destroy()
}

/**
 * All-reduce of large odd sizes, for the shared-memory path's 4 MiB rounds: counts just past
 * its one-round limit (64 KiB), and ones whose last round holds a few elements, split unevenly
 * between members (or not at all, for some). Each case has its own seed, so a round that
 * read a stage or result left from an earlier call would not match.
 */
const largeOdd = async (w: Worker): Promise<void> => {
  const all = range(w.size)
  const comm = await w.open("world", all)
  const t = new Tensors(w.native)
  let seed = 0
  for (const [dtype, op] of [["i32", "sum"], ["f64", "avg"]] as const)
    for (const n of [16_384, 16_385, 65_537, 1_048_579, 3 * 2 ** 20 + 1])
      for (const inPlace of [false, true]) {
        const check = `all_reduce ${dtype} ${op} n=${n}${inPlace ? " in place" : ""}`
        const expected = reducedBytes(dtype, op, all, n, ++seed)
        const mine = inputBytes(dtype, op, w.rank, n, seed)
        using input = t.uploadBytes(dtype, [n], mine)
        if (inPlace) {
          comm.allReduce(input, input, op)
          checkBytes(check, bytesOf(input), expected)
        } else {
          using out = t.empty(dtype, [n])
          comm.allReduce(out, input, op)
          checkBytes(check, bytesOf(out), expected)
          checkBytes(`${check}: input untouched`, bytesOf(input), mine)
        }
      }
  // An odd chunk per member: the whole input is 3 x 349525 elements on 3 members.
  const m = 349_525
  for (const [dtype, op] of [["i32", "sum"], ["f64", "max"]] as const) {
    using input = t.uploadBytes(dtype, [w.size * m], inputBytes(dtype, op, w.rank, w.size * m, ++seed))
    using out = t.empty(dtype, [m])
    comm.reduceScatter(out, input, op)
    checkBytes(`reduce_scatter ${dtype} ${op} m=${m}`, bytesOf(out), reducedBytes(dtype, op, all, m, seed, w.rank * m))
  }
  comm.destroy()
}

/**
 * All-reduce and reduce-scatter at each side of every size where a path changes how it works:
 * TCP's one-hop exchange (at most 256 KiB from all members together, in 64-byte units per
 * member) and Gloo's ring beyond it, whose segments split at 1 MiB; shared memory's single
 * round (at most 64 KiB) and its 4 MiB rounds. In place and not, narrow and wide dtypes.
 */
const thresholds = async (w: Worker): Promise<void> => {
  const all = range(w.size)
  const comm = await w.open("world", all)
  const t = new Tensors(w.native)
  const exchangeBytes = Math.floor(256 * 1024 / Math.max(1, w.size - 1) / 64) * 64
  let seed = 0
  const allReduce = (dtype: DType, op: CommOpName, n: number, inPlace: boolean) => {
    const expected = reducedBytes(dtype, op, all, n, ++seed)
    using input = t.uploadBytes(dtype, [n], inputBytes(dtype, op, w.rank, n, seed))
    using out = inPlace ? null : t.empty(dtype, [n])
    comm.allReduce(out ?? input, input, op)
    checkBytes(`all_reduce ${dtype} ${op} n=${n}${inPlace ? " in place" : ""}`, bytesOf(out ?? input), expected)
  }
  // 4 MiB: one whole shared round, then one more holding a single element; several ring segments.
  for (const n of [1 << 20, (1 << 20) + 1]) for (const inPlace of [false, true]) allReduce("f32", "sum", n, inPlace)
  for (const [dtype, op, width] of [["f32", "sum", 4], ["i64", "max", 8], ["bf16", "prod", 2], ["u8", "min", 1]] as const) {
    for (const bytes of [exchangeBytes, 64 * 1024])
      for (const n of [bytes / width, bytes / width + 1])
        for (const inPlace of [false, true]) allReduce(dtype, op, n, inPlace)
    // The whole input just within, and just past, the exchange.
    const within = Math.floor(exchangeBytes / width / w.size)
    for (const m of [within, within + 1]) {
      using input = t.uploadBytes(dtype, [w.size * m], inputBytes(dtype, op, w.rank, w.size * m, ++seed))
      using out = t.empty(dtype, [m])
      comm.reduceScatter(out, input, op)
      checkBytes(`reduce_scatter ${dtype} ${op} m=${m}`, bytesOf(out), reducedBytes(dtype, op, all, m, seed, w.rank * m))
    }
  }
  comm.destroy()
}

/** Batched sends and receives: a ring, pairs, repeated calls, several tensors to one peer. */
const p2p = async (w: Worker): Promise<void> => {
  const { rank, size } = w
  const comm = await w.open("world", range(size))
  const t = new Tensors(w.native)
  const next = (rank + 1) % size, prev = (rank + size - 1) % size

  // Repeated ring rounds with changing dtypes and sizes (0 included): each send to `next`
  // lands in the matching receive at `next`, round after round.
  const rounds: ReadonlyArray<readonly [DType, number]> = [["f32", 1031], ["i64", 3], ["bf16", 0], ["bool", 17], ["u8", 1], ["f64", 4099]]
  for (const [round, [dtype, n]] of rounds.entries()) {
    using send = t.upload(dtype, [n], inputs(dtype, "none", rank, n, round))
    using recv = t.empty(dtype, [n])
    comm.p2p([{ kind: "send", peer: next, tensor: send }, { kind: "recv", peer: prev, tensor: recv }])
    checkBytes(`ring round ${round} ${dtype} n=${n}`, bytesOf(recv), encode(dtype, inputs(dtype, "none", prev, n, round)))
  }

  // Pairs (2k, 2k+1) exchange in one call; the even side lists its receive first.
  const partner = rank ^ 1
  if (partner < size) {
    using send = t.upload("f16", [9], inputs("f16", "none", rank, 9, 7))
    using recv = t.empty("f16", [9])
    const ops = [{ kind: "send", peer: partner, tensor: send }, { kind: "recv", peer: partner, tensor: recv }] as const
    comm.p2p(rank % 2 === 0 ? [ops[1], ops[0]] : ops)
    checkBytes("pair exchange f16", bytesOf(recv), encode("f16", inputs("f16", "none", partner, 9, 7)))
  }

  // Two tensors of different sizes to the same peer in one call arrive in order.
  {
    using a = t.upload("i32", [3], inputs("i32", "none", rank, 3, 8))
    using b = t.upload("i32", [11], inputs("i32", "none", rank, 11, 9))
    using ra = t.empty("i32", [3])
    using rb = t.empty("i32", [11])
    comm.p2p([
      { kind: "recv", peer: prev, tensor: ra },
      { kind: "send", peer: next, tensor: a },
      { kind: "send", peer: next, tensor: b },
      { kind: "recv", peer: prev, tensor: rb },
    ])
    checkBytes("two to one peer, first", bytesOf(ra), encode("i32", inputs("i32", "none", prev, 3, 8)))
    checkBytes("two to one peer, second", bytesOf(rb), encode("i32", inputs("i32", "none", prev, 11, 9)))
  }

  // Collectives still line up after point-to-point traffic.
  using x = t.upload("i32", [5], inputs("i32", "sum", rank, 5, 1))
  comm.allReduce(x, x, "sum")
  checkBytes("all_reduce after p2p", bytesOf(x), encode("i32", reduced("i32", "sum", range(size), 5, 1)))
  comm.destroy()
}

/** Bad arguments are refused before any traffic, so the communicator stays usable. */
const errors = async (w: Worker): Promise<void> => {
  const { rank, size } = w
  const comm = await w.open("world", range(size))
  const t = new Tensors(w.native)
  using f4 = t.empty("f32", [4])
  using f6 = t.empty("f32", [6])
  using f3 = t.empty("f32", [3])
  using i4 = t.empty("i32", [4])
  checkFails("all_gather out of the wrong size", "Invalid", () => comm.allGather(f6, f4))
  checkFails("reduce_scatter in of the wrong size", "Invalid", () => comm.reduceScatter(f4, f6, "sum"))
  checkFails("all_to_all numel not divisible", "Invalid", () => comm.allToAll(f3, f3))
  checkFails("all_to_all sizes differ", "Invalid", () => comm.allToAll(f6, f4))
  checkFails("all_reduce dtypes differ", "Invalid", () => comm.allReduce(i4, f4, "sum"))
  checkFails("all_reduce sizes differ", "Invalid", () => comm.allReduce(f6, f4, "sum"))
  checkFails("broadcast root = size", "Invalid", () => comm.broadcast(f4, size))
  checkFails("broadcast root < 0", "Invalid", () => comm.broadcast(f4, -1))
  checkFails("p2p to self", "Invalid", () => comm.p2p([{ kind: "send", peer: rank, tensor: f4 }]))
  checkFails("p2p peer out of range", "Invalid", () => comm.p2p([{ kind: "recv", peer: size, tensor: f4 }]))
  checkFails("bool avg", "Unsupported", () => {
    using b = t.empty("bool", [4])
    comm.allReduce(b, b, "avg")
  })
  checkFails("connect twice", "Invalid", () => comm.connect(range(size).map(() => comm.address())))
  using x = t.upload("f32", [4], inputs("f32", "sum", rank, 4, 0))
  comm.allReduce(x, x, "sum")
  checkBytes("all_reduce after refused calls", bytesOf(x), encode("f32", reduced("f32", "sum", range(size), 4, 0)))
  comm.destroy()
}

/** How a call failed (reason "none" if it did not), and how long it took. */
const failureOf = (f: () => void) => {
  const start = performance.now()
  try {
    f()
    return { reason: "none", message: "", ms: performance.now() - start }
  } catch (e) {
    return { reason: e instanceof ShimError ? e.reason : "other", message: String(e), ms: performance.now() - start }
  }
}

/**
 * Every rank but the last enters a call that the last rank never joins; the test either
 * kills the last rank (`peer-dies`) or leaves it idle (`peer-silent`, `p2p-silent`). Each
 * waiting rank reports how its call failed, how long that took, and what a later call says.
 */
const abandoned = (enter: (comm: Comm, x: Tensor, w: Worker) => void, n = 1031) => async (w: Worker): Promise<void> => {
  const comm = await w.open("world", range(w.size))
  comm.barrier()
  emit({ event: "ready" })
  if (w.rank === w.size - 1) {
    Bun.sleepSync(60_000)
    return
  }
  using x = Tensor.fromHost(w.native, new HostTensor("f32", [n], encode("f32", inputs("f32", "sum", w.rank, n, 0))))
  const first = failureOf(() => enter(comm, x, w))
  const later = failureOf(() => comm.barrier())
  comm.destroy()
  emit({ event: "failed", first, later })
}

/** The last rank publishes its address and exits before connecting; the others' open fails. */
const diesBeforeConnect = async (w: Worker): Promise<void> => {
  if (w.rank === w.size - 1) {
    const comm = Comm.create(w.native, w.rank, w.size, w.timeoutMs)
    await Effect.runPromise(w.store.set(`world/${w.rank}`, comm.address()))
    process.exit(0)
  }
  const start = performance.now()
  const first = await w.open("world", range(w.size)).then(
    () => ({ reason: "none", message: "", ms: performance.now() - start }),
    (e: unknown) => ({
      reason: e instanceof CommError && e.cause instanceof ShimError ? `CommError/${e.cause.reason}` : "other",
      message: String(e),
      ms: performance.now() - start,
    }),
  )
  emit({ event: "failed", first })
}

/**
 * Members that pass disagreeing tensors: the last member's differs in element count
 * (a little, or across a path's size threshold), dtype, reduce op or root, in every collective
 * and in a transfer. Every member the disagreement touches fails the call with Invalid naming
 * both sides, before anything moves (Gloo would abort the process on a size it did not expect),
 * within DISAGREEMENT_MS (the agreement, not the comm timeout, ends it), the others' transfers
 * complete, and the comm then all-reduces correctly.
 */
export const DISAGREEMENT_MS = 2000

const disagreeing = async (w: Worker): Promise<void> => {
  const { rank, size } = w
  const all = range(size)
  const comm = await w.open("world", all)
  const t = new Tensors(w.native)
  const odd = rank === size - 1
  const LARGE = (1 << 20) + 3 // past the exchange and the shared-memory path's single round
  let round = 0
  /** f fails on this member with the disagreement; then the comm still all-reduces right. */
  const expectDisagreement = (check: string, f: () => void, fails = true, own?: ShimReason): void => {
    let error: unknown
    const start = performance.now()
    try {
      f()
    } catch (e) {
      error = e
    }
    const ms = performance.now() - start
    const said = error instanceof ShimError ? `${error.reason}: ${error.message}` : String(error)
    const right = !fails ? error === undefined
      : own !== undefined && odd ? error instanceof ShimError && error.reason === own && !error.message.includes("members disagree")
      : error instanceof ShimError && error.reason === "Invalid" && error.message.includes("members disagree")
    const ok = right && ms < DISAGREEMENT_MS
    emit(ok ? { check, ok, ms } : { check, ok, ms, detail: `${error === undefined ? "succeeded" : said} after ${Math.round(ms)} ms` })
    const n = 3 + (round++ % 5)
    using x = t.upload("f32", [n], inputs("f32", "sum", rank, n, round))
    try {
      comm.allReduce(x, x, "sum")
      checkBytes(`${check}: then an all_reduce`, bytesOf(x), encode("f32", reduced("f32", "sum", all, n, round)))
    } catch (e) {
      emit({ check: `${check}: then an all_reduce`, ok: false, detail: String(e) })
    }
  }
  const counts = (small: number, other: number) => (odd ? other : small)

  for (const [what, n, dtype] of [["count", counts(5, 7), "f32"], ["count across paths", counts(5, LARGE), "f32"], ["dtype", 5, odd ? "f64" : "f32"]] as const)
    for (const op of OPS) {
      using input = t.upload(dtype, [n], inputs(dtype, op, rank, n, 1))
      using out = t.empty(dtype, [n])
      expectDisagreement(`all_reduce ${op}: ${what}`, () => comm.allReduce(out, input, op))
      using m = t.upload(dtype, [size * n], inputs(dtype, op, rank, size * n, 2))
      using part = t.empty(dtype, [n])
      expectDisagreement(`reduce_scatter ${op}: ${what}`, () => comm.reduceScatter(part, m, op))
    }
  {
    using x = t.upload("f32", [4], inputs("f32", "sum", rank, 4, 3))
    expectDisagreement("all_reduce: op", () => comm.allReduce(x, x, odd ? "max" : "sum"))
    using m = t.upload("f32", [size * 2], inputs("f32", "sum", rank, size * 2, 3))
    using part = t.empty("f32", [2])
    expectDisagreement("reduce_scatter: op", () => comm.reduceScatter(part, m, odd ? "min" : "sum"))
  }
  for (const [what, n, dtype] of [["count", counts(5, 7), "i32"], ["count, large", counts(5, LARGE), "i32"], ["dtype", 5, odd ? "i64" : "i32"], ["empty", counts(0, 5), "i32"]] as const) {
    using input = t.upload(dtype, [n], inputs(dtype, "none", rank, n, 4))
    using gathered = t.empty(dtype, [size, n])
    expectDisagreement(`all_gather: ${what}`, () => comm.allGather(gathered, input))
    using spread = t.upload(dtype, [size * n], inputs(dtype, "none", rank, size * n, 5))
    using back = t.empty(dtype, [size * n])
    expectDisagreement(`all_to_all: ${what}`, () => comm.allToAll(back, spread))
    using b = t.upload(dtype, [n], inputs(dtype, "none", rank, n, 6))
    expectDisagreement(`broadcast: ${what}`, () => comm.broadcast(b, 0))
  }
  {
    using b = t.upload("u8", [6], inputs("u8", "none", rank, 6, 7))
    expectDisagreement("broadcast: root", () => comm.broadcast(b, odd ? 1 : 0))
  }
  // The last member refuses the call on its own arguments, which the others cannot check:
  // it still tells them, so they fail it too instead of waiting for it.
  {
    using spread = t.upload("f32", [odd ? size * 2 + 1 : size * 2], inputs("f32", "none", rank, odd ? size * 2 + 1 : size * 2, 10))
    using back = t.empty("f32", [odd ? size * 2 + 1 : size * 2])
    expectDisagreement("all_to_all: a count that does not split, refused by the last member", () => comm.allToAll(back, spread), true, "Invalid")
    using m = t.upload("f32", [odd ? size * 2 + 1 : size * 2], inputs("f32", "sum", rank, odd ? size * 2 + 1 : size * 2, 11))
    using part = t.empty("f32", [2])
    expectDisagreement("reduce_scatter: an input not size x out, refused by the last member", () => comm.reduceScatter(part, m, "sum"), true, "Invalid")
    using flags = t.upload(odd ? "bool" : "u8", [3], inputs(odd ? "bool" : "u8", "sum", rank, 3, 12))
    expectDisagreement("all_reduce avg: bool on the last member, refused by it", () => comm.allReduce(flags, flags, "avg"), true, "Unsupported")
  }
  // A ring of transfers in which only the last member sends something else (to member 0), so
  // only that pair disagrees and the other transfers arrive.
  const next = (rank + 1) % size, prev = (rank + size - 1) % size
  for (const [what, sent, dtype] of [["count", counts(5, 9), "f32"], ["count, large", counts(5, LARGE), "f32"], ["dtype", 5, odd ? "f64" : "f32"], ["empty", counts(5, 0), "f32"]] as const) {
    using out = t.upload(dtype, [sent], inputs(dtype, "none", rank, sent, 8))
    using into = t.empty("f32", [5])
    const touched = odd || rank === 0
    expectDisagreement(`p2p: ${what}`, () => comm.p2p([{ kind: "send", peer: next, tensor: out }, { kind: "recv", peer: prev, tensor: into }]), touched)
    if (!touched) checkBytes(`p2p: ${what}: the agreeing transfer`, bytesOf(into), encode("f32", inputs("f32", "none", prev, 5, 8)))
  }
  // Nothing is left half-done: a large all-reduce and a barrier still work.
  using big = t.upload("f32", [LARGE], inputs("f32", "sum", rank, LARGE, 9))
  comm.allReduce(big, big, "sum")
  checkBytes("a large all_reduce after every disagreement", bytesOf(big), encode("f32", reduced("f32", "sum", all, LARGE, 9)))
  comm.barrier()
}

export const SCENARIOS: Readonly<Record<string, (w: Worker) => Promise<void>>> = {
  collectives,
  mesh,
  p2p,
  errors,
  "large-odd": largeOdd,
  thresholds,
  "peer-dies": abandoned((comm, x) => comm.allReduce(x, x, "sum")),
  // 4 MiB and a bit: several shared-memory rounds, or Gloo's ring rather than the exchange.
  "peer-dies-large": abandoned((comm, x) => comm.allReduce(x, x, "sum"), (1 << 20) + 3),
  "peer-silent": abandoned((comm, x) => comm.allReduce(x, x, "sum")),
  "p2p-silent": abandoned((comm, x, w) => comm.p2p([{ kind: "recv", peer: w.size - 1, tensor: x }])),
  "dies-before-connect": diesBeforeConnect,
  disagreeing,
}
