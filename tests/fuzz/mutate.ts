/**
 * The frame fuzzer: valid messages of every kind (seeds) and structure-aware mutations of
 * them (bit flips, inserted and deleted bytes, swapped type bytes, changed lengths,
 * truncation, fields spliced in from other messages, changed ext types and payloads, deep
 * nesting, dropped and repeated fields, boundary integers, other message codes), plus random
 * bytes. Deterministic for a given seed, so a failure can be replayed.
 */
import { encodeMessage } from "../../src/protocol/codec.ts"
import type { ControllerMessage, Message, WorkerMessage } from "../../src/protocol/messages.ts"
import { NDSlice } from "../../src/protocol/ndslice.ts"
import { ErrorPayload, HostTensor, Ref, TensorFactory, type DType } from "../../src/protocol/values.ts"
import { allNodes, parseMsgpack, type MsgNode } from "./msgpack.ts"

/** mulberry32: small, fast and good enough to pick mutations. */
export class Rng {
  private state: number
  constructor(seed: number) {
    this.state = seed >>> 0
  }
  next(): number {
    let t = (this.state = (this.state + 0x6d2b79f5) >>> 0)
    t = Math.imul(t ^ (t >>> 15), t | 1)
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61)
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296
  }
  int(n: number): number {
    return Math.floor(this.next() * n)
  }
  pick<T>(items: ReadonlyArray<T>): T {
    return items[this.int(items.length)]!
  }
  chance(p: number): boolean {
    return this.next() < p
  }
  bytes(n: number): Uint8Array {
    return Uint8Array.from({ length: n }, () => this.int(256))
  }
}

export interface Seed {
  readonly name: string
  readonly bytes: Uint8Array
  /** Relative frequency among the seeds (large ones are picked less often). */
  readonly weight: number
}

// ---- seeds --------------------------------------------------------------------------------

const ITEM: Record<DType, number> = { f32: 4, f64: 8, f16: 2, bf16: 2, i32: 4, i64: 8, u8: 1, bool: 1 }
const tensor = (dtype: DType, shape: number[], fill = 1): HostTensor => {
  const n = shape.reduce((a, b) => a * b, 1)
  return new HostTensor(dtype, shape, new Uint8Array(n * ITEM[dtype]).fill(fill))
}

/** The stream every fuzz run creates first; valid mutations may read it but never redefine it. */
export const FUZZ_STREAM = new Ref(1)
const r = (id: number) => new Ref(id)
const S = FUZZ_STREAM

/** Commands a controller sends, one or more of each kind; refs from 100 up, idents from 1000. */
const workerMessages = (): Array<[string, WorkerMessage, number]> => [
  ["CreateStream", { _tag: "CreateStream", result: r(101), default: false }, 3],
  ["CreateDeviceMesh 1d", { _tag: "CreateDeviceMesh", result: r(102), names: ["x"], ranks: NDSlice.contiguous([1]) }, 2],
  ["CreateDeviceMesh 2d", { _tag: "CreateDeviceMesh", result: r(110), names: ["a", "b"], ranks: new NDSlice(0, [1, 1], [1, 1]) }, 2],
  ["CallFunction ops.ones", { _tag: "CallFunction", ident: 1000, results: [r(103)], mutates: [], function: "ops.ones", args: [[2, 3]], kwargs: {}, stream: S }, 4],
  ["CallFunction ops.add tensor", { _tag: "CallFunction", ident: 1001, results: [r(104)], mutates: [], function: "ops.add", args: [r(103), tensor("f32", [2, 3])], kwargs: {}, stream: S }, 4],
  ["CallFunction ops.full kwargs", { _tag: "CallFunction", ident: 1002, results: [r(105)], mutates: [], function: "ops.full", args: [[4], 2.5], kwargs: { dtype: "f64" }, stream: S }, 3],
  ["CallFunction fns:twoResults", { _tag: "CallFunction", ident: 1003, results: [r(106), r(107)], mutates: [], function: "fns:twoResults", args: [r(103)], kwargs: {}, stream: S }, 3],
  ["CallFunction in place", { _tag: "CallFunction", ident: 1004, results: [], mutates: [r(103)], function: "ops.add_", args: [r(103), 1], kwargs: {}, stream: S }, 2],
  ["CallFunction nested values", {
    _tag: "CallFunction", ident: 1005, results: [], mutates: [], function: "ops.noop",
    args: [{ a: [1, -2, "s", true, null, new Uint8Array([1, 2, 3]), 2n ** 40n, 1.5] }, [[r(103)], { deep: { er: [r(104)] } }]],
    kwargs: { k: "v", n: -7 }, stream: S,
  }, 3],
  ["CallFunction every dtype", {
    _tag: "CallFunction", ident: 1006, results: [], mutates: [], function: "ops.noop",
    args: [tensor("f64", [2]), tensor("f16", [3]), tensor("bf16", [1, 2]), tensor("i32", [2]), tensor("i64", [1]), tensor("u8", [5]), tensor("bool", [2], 1), tensor("f32", []), tensor("f32", [0, 4])],
    kwargs: {}, stream: S,
  }, 3],
  ["CallFunction large tensor", { _tag: "CallFunction", ident: 1007, results: [r(108)], mutates: [], function: "ops.clone", args: [tensor("f32", [20_000], 0)], kwargs: {}, stream: S }, 0.2],
  ["FetchValue", { _tag: "FetchValue", ident: 1008, mutates: [], function: null, object: r(104), stream: S }, 3],
  ["FetchValue with function", { _tag: "FetchValue", ident: 1009, mutates: [], function: "ops.sum", object: r(103), stream: S }, 3],
  ["FetchValue nested", { _tag: "FetchValue", ident: 1010, mutates: [r(105)], function: null, object: { x: r(103), y: [1, 2, { z: null }] }, stream: S }, 2],
  ["RequestStatus", { _tag: "RequestStatus", ident: 1011 }, 2],
  ["Exit", { _tag: "Exit" }, 1],
  ["CommandGroup", {
    _tag: "CommandGroup", commands: [
      { _tag: "CreateStream", result: r(109), default: false },
      { _tag: "CallFunction", ident: 1012, results: [r(111)], mutates: [], function: "ops.zeros", args: [[3]], kwargs: {}, stream: S },
      { _tag: "FetchValue", ident: 1013, mutates: [], function: null, object: r(111), stream: S },
      { _tag: "DeleteRefs", refs: [109, 111] },
    ],
  }, 4],
  ["CommandGroup nested", {
    _tag: "CommandGroup", commands: [
      { _tag: "CommandGroup", commands: [{ _tag: "RequestStatus", ident: 1014 }, { _tag: "BorrowDrop", borrow: 112 }] },
      { _tag: "Exit" },
    ],
  }, 2],
  ["DeleteRefs", { _tag: "DeleteRefs", refs: [104, 105, 106] }, 2],
  ["BorrowCreate", { _tag: "BorrowCreate", result: r(112), tensor: r(103), from: S, to: r(101), alreadyBorrowed: false }, 2],
  ["BorrowFirstUse", { _tag: "BorrowFirstUse", borrow: 112 }, 1],
  ["BorrowLastUse", { _tag: "BorrowLastUse", borrow: 112 }, 1],
  ["BorrowDrop", { _tag: "BorrowDrop", borrow: 112 }, 1],
  ["Reduce", {
    _tag: "Reduce", ident: 1015, result: r(113), tensor: r(103), factory: new TensorFactory([2, 3], "f32", "cpu"), mesh: r(102), stream: S,
    dims: ["x"], reduction: "sum", scatter: false, inplace: false,
  }, 3],
  ["SendTensor", {
    _tag: "SendTensor", ident: 1016, result: r(114), fromRanks: NDSlice.contiguous([1]), toRanks: NDSlice.contiguous([1]), tensor: r(103),
    factory: new TensorFactory([2, 3], "f32", "cpu"), stream: S,
  }, 3],
]

/** What workers send back; the controller's reader must check these. */
const controllerMessages = (): Array<[string, ControllerMessage, number]> => [
  ["WorkerHello", { _tag: "WorkerHello", rank: 1, world: 2, pid: 4242, proof: new Uint8Array(32).fill(3), device: "cpu" }, 2],
  ["Status", { _tag: "Status", firstUncompletedIdent: 17 }, 3],
  ["FetchResult tensor", { _tag: "FetchResult", ident: 1008, value: tensor("f32", [2, 3]) }, 4],
  ["FetchResult nested", { _tag: "FetchResult", ident: 1009, value: { a: [1, "x", null, new Uint8Array(4)], t: tensor("i64", [2]), b: 2n ** 40n } }, 3],
  ["FetchResult large tensor", { _tag: "FetchResult", ident: 1010, value: tensor("f64", [10_000], 0) }, 0.2],
  ["RemoteFunctionFailed", {
    _tag: "RemoteFunctionFailed", ident: 1001,
    error: new ErrorPayload("TypeError", "this function always fails", [{ file: "fns.ts", line: 17, function: "alwaysFails" }, { file: "calls.ts", line: 40, function: "invoke" }]),
  }, 4],
  ["Restarted", { _tag: "Restarted", restarts: 1 }, 1],
  ["ProtocolError", { _tag: "ProtocolError", message: "CallFunction.results[2]: expected Ref, got string" }, 2],
]

const encodeSeed = ([name, m, weight]: [string, Message, number]): Seed => {
  const encoded = encodeMessage(m)
  if (encoded._tag === "Failure") throw new Error(`seed ${name} does not encode: ${encoded.failure.message}`)
  return { name, bytes: encoded.success, weight }
}

/** Seeds for frames sent to a worker: its own commands, and a few meant for the controller. */
export const workerSeeds = (): Seed[] => [...workerMessages(), ...controllerMessages().map(([n, m]) => [n, m, 0.5] as [string, Message, number])].map(encodeSeed)

/** Seeds for frames sent to the controller: worker reports, and a few commands (wrong direction). */
export const controllerSeeds = (): Seed[] => [...controllerMessages(), ...workerMessages().map(([n, m]) => [n, m, 0.3] as [string, Message, number])].map(encodeSeed)

// ---- mutations ----------------------------------------------------------------------------

const concat = (...parts: ReadonlyArray<Uint8Array | ReadonlyArray<number>>): Uint8Array => {
  const out = new Uint8Array(parts.reduce((n, p) => n + p.length, 0))
  let at = 0
  for (const p of parts) { out.set(p, at); at += p.length }
  return out
}

/** `b` with bytes [from, to) replaced by `insert`. */
const splice = (b: Uint8Array, from: number, to: number, insert: ArrayLike<number> = []): Uint8Array =>
  concat(b.subarray(0, from), Array.from(insert), b.subarray(to))

const putBE = (b: Uint8Array, at: number, width: number, n: number): void => {
  for (let i = width - 1; i >= 0; i--) { b[at + i] = n % 256; n = Math.floor(n / 256) }
}

/** Type bytes worth trying: one of each format family, and the reserved 0xc1. */
const TYPE_BYTES = [
  0x00, 0x7f, 0x80, 0x81, 0x8f, 0x90, 0x91, 0x9f, 0xa0, 0xa3, 0xbf, 0xc0, 0xc1, 0xc2, 0xc3, 0xc4, 0xc5, 0xc6, 0xc7, 0xc8, 0xc9,
  0xca, 0xcb, 0xcc, 0xcd, 0xce, 0xcf, 0xd0, 0xd1, 0xd2, 0xd3, 0xd4, 0xd5, 0xd6, 0xd7, 0xd8, 0xd9, 0xda, 0xdb, 0xdc, 0xdd, 0xde, 0xdf, 0xe0, 0xff,
]

/** Encoded integers and floats at the edges: signs, widths, the safe-integer limit, NaN. */
const BOUNDARY_VALUES: ReadonlyArray<ReadonlyArray<number>> = [
  [0x00], [0xff], [0x7f], [0xcc, 0xff], [0xcd, 0xff, 0xff], [0xce, 0xff, 0xff, 0xff, 0xff], [0xce, 0x80, 0, 0, 0],
  [0xcf, 0x00, 0x20, 0, 0, 0, 0, 0, 0], [0xcf, 0x00, 0x1f, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff], [0xcf, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff],
  [0xd3, 0x80, 0, 0, 0, 0, 0, 0, 0], [0xd0, 0x80], [0xd2, 0xff, 0xff, 0xff, 0xfe],
  [0xcb, 0x7f, 0xf8, 0, 0, 0, 0, 0, 0], [0xcb, 0x7f, 0xf0, 0, 0, 0, 0, 0, 0], [0xcb, 0x3f, 0xf8, 0, 0, 0, 0, 0, 0], [0xca, 0x3f, 0xc0, 0, 0],
  [0xc0], [0xc2], [0xa0], [0x90], [0x80], [0xc4, 0x00],
]

/** A length worth claiming instead of `current`: off by one, empty, doubled, the largest `max` allows. */
const otherLength = (rng: Rng, current: number, max: number): number =>
  Math.min(max, Math.max(0, rng.pick([current + 1, current - 1, 0, max, Math.floor(max / 2) + 1, current * 2 + 1, current + 8, 0x7fff_ffff])))

const readBE = (b: Uint8Array, at: number, width: number): number => {
  let n = 0
  for (let i = 0; i < width; i++) n = n * 256 + b[at + i]!
  return n
}

/** The message codes, their neighbours, and codes no message has. */
const CODES = [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 63, 64, 65, 66, 67, 68, 69, 70, 127]

const seedStructure = new WeakMap<Seed, MsgNode[]>()
/** A seed's nodes, parsed once. */
const structureOf = (s: Seed): MsgNode[] => {
  let nodes = seedStructure.get(s)
  if (nodes === undefined) seedStructure.set(s, (nodes = allNodes(parseMsgpack(s.bytes))))
  return nodes
}

type Mutator = (rng: Rng, b: Uint8Array, nodes: ReadonlyArray<MsgNode>, others: ReadonlyArray<Seed>) => Uint8Array | undefined

const ofKind = (nodes: ReadonlyArray<MsgNode>, ...kinds: MsgNode["kind"][]) => nodes.filter((n) => kinds.includes(n.kind))

export const MUTATORS: Readonly<Record<string, Mutator>> = {
  bitFlip: (rng, b) => {
    const out = b.slice()
    for (let i = 1 + rng.int(4); i > 0 && out.length > 0; i--) out[rng.int(out.length)]! ^= 1 << rng.int(8)
    return out
  },
  setByte: (rng, b) => {
    if (b.length === 0) return undefined
    const out = b.slice()
    out[rng.int(out.length)] = rng.pick([0x00, 0x01, 0x7f, 0x80, 0xff, 0xc0, 0xc1, 0xc9, 0xdd, 0xdf, rng.int(256)])
    return out
  },
  insertBytes: (rng, b) => {
    const at = rng.int(b.length + 1)
    return splice(b, at, at, rng.bytes(1 + rng.int(8)))
  },
  deleteBytes: (rng, b) => {
    if (b.length < 2) return undefined
    const at = rng.int(b.length), n = 1 + rng.int(Math.min(8, b.length - at))
    return splice(b, at, at + n)
  },
  truncate: (rng, b) => (b.length < 2 ? undefined : b.slice(0, rng.int(b.length))),
  swapTypeByte: (rng, b, nodes) => {
    const n = rng.pick(nodes), out = b.slice()
    out[n.start] = rng.pick(TYPE_BYTES)
    return out
  },
  changeLength: (rng, b, nodes) => {
    const sized = ofKind(nodes, "str", "bin", "array", "map", "ext")
    if (sized.length === 0) return undefined
    const n = rng.pick(sized), out = b.slice()
    if (n.lengthBytes === 0) {
      if (n.kind === "ext") return undefined // fixext: the size is the type byte itself
      const base = n.kind === "map" ? 0x80 : n.kind === "array" ? 0x90 : 0xa0
      out[n.start] = base + otherLength(rng, b[n.start]! - base, n.kind === "str" ? 31 : 15)
      return out
    }
    putBE(out, n.lengthAt, n.lengthBytes, otherLength(rng, readBE(b, n.lengthAt, n.lengthBytes), 256 ** n.lengthBytes - 1))
    return out
  },
  spliceField: (rng, b, nodes, others) => {
    const donor = rng.pick(others)
    const into = rng.pick(nodes.slice(1)), from = rng.pick(structureOf(donor).slice(1))
    if (!into || !from) return undefined
    return splice(b, into.start, into.end, donor.bytes.subarray(from.start, from.end))
  },
  changeExtType: (rng, b, nodes) => {
    const exts = ofKind(nodes, "ext")
    if (exts.length === 0) return undefined
    const out = b.slice()
    out[rng.pick(exts).extTypeAt] = rng.pick([0, 1, 2, 3, 4, 5, 6, 0x7f, 0x80, 0xff, rng.int(256)])
    return out
  },
  extPayload: (rng, b, nodes) => {
    const exts = ofKind(nodes, "ext").filter((n) => n.end > n.payloadAt)
    if (exts.length === 0) return undefined
    const n = rng.pick(exts), out = b.slice()
    // Header bytes (dtype, ndim, pad, the first dims) more often than element bytes.
    const span = Math.min(n.end - n.payloadAt, rng.chance(0.7) ? 12 : n.end - n.payloadAt)
    for (let i = 1 + rng.int(3); i > 0; i--) out[n.payloadAt + rng.int(span)] = rng.pick([0, 1, 2, 7, 8, 9, 0x7f, 0x80, 0xff, rng.int(256)])
    return out
  },
  deepNest: (rng, b, nodes) => {
    const n = rng.pick(nodes.slice(1))
    if (!n) return undefined
    const depth = rng.pick([30, 31, 32, 33, 34, 40, 200, 5000])
    const wrap = rng.chance(0.5) ? [0x91] : [0x81, 0xa1, 0x61] // [x] or {"a": x}
    const open: number[] = []
    for (let i = 0; i < depth; i++) open.push(...wrap)
    return splice(b, n.start, n.start, open)
  },
  dropItem: (rng, b, nodes) => {
    const arrays = ofKind(nodes, "array").filter((n) => n.children.length > 0 && n.lengthBytes === 0)
    if (arrays.length === 0) return undefined
    const a = rng.pick(arrays), victim = rng.pick(a.children)
    const out = splice(b, victim.start, victim.end)
    out[a.start]! -= 1
    return out
  },
  repeatItem: (rng, b, nodes) => {
    const arrays = ofKind(nodes, "array").filter((n) => n.children.length > 0 && n.children.length < 15 && n.lengthBytes === 0)
    if (arrays.length === 0) return undefined
    const a = rng.pick(arrays), item = rng.pick(a.children)
    const out = splice(b, item.end, item.end, b.subarray(item.start, item.end))
    out[a.start]! += 1
    return out
  },
  boundaryValue: (rng, b, nodes) => {
    const scalars = ofKind(nodes, "int", "float", "nil", "bool")
    if (scalars.length === 0) return undefined
    const n = rng.pick(scalars)
    return splice(b, n.start, n.end, rng.pick(BOUNDARY_VALUES))
  },
  otherCode: (rng, b, nodes) => {
    const root = nodes[0]!, code = root.children[0]
    if (root.kind !== "array" || !code) return undefined
    return splice(b, code.start, code.end, [rng.pick(CODES)])
  },
}

const MUTATOR_NAMES = Object.keys(MUTATORS)

/** One fuzzed frame body and how it was made. */
export interface FuzzFrame {
  readonly body: Uint8Array
  readonly how: string
}

const pickSeed = (rng: Rng, seeds: ReadonlyArray<Seed>, total: number): Seed => {
  let x = rng.next() * total
  for (const s of seeds) if ((x -= s.weight) < 0) return s
  return seeds[seeds.length - 1]!
}

/**
 * `count` fuzzed frame bodies: about 1 in 12 random bytes (0 to 64 of them), the rest a seed
 * with one to three stacked mutations. The first mutation sees the seed's structure; later
 * ones apply to the bytes left by the one before (its structure if it still parses).
 */
export function* fuzzFrames(count: number, seed: number, seeds: ReadonlyArray<Seed>): Generator<FuzzFrame> {
  const rng = new Rng(seed)
  const total = seeds.reduce((n, s) => n + s.weight, 0)
  for (let i = 0; i < count; i++) {
    if (rng.chance(1 / 12)) {
      yield { body: rng.bytes(rng.int(65)), how: "random bytes" }
      continue
    }
    const base = pickSeed(rng, seeds, total)
    let body = base.bytes
    const steps: string[] = []
    for (let k = 1 + rng.int(3); k > 0; k--) {
      let nodes: MsgNode[]
      try {
        nodes = body === base.bytes ? structureOf(base) : allNodes(parseMsgpack(body))
      } catch {
        nodes = []
      }
      const name = nodes.length > 0 ? rng.pick(MUTATOR_NAMES) : rng.pick(["bitFlip", "setByte", "insertBytes", "deleteBytes", "truncate"])
      const next = MUTATORS[name]!(rng, body, nodes, seeds)
      if (next === undefined) continue
      body = next
      steps.push(name)
    }
    yield { body, how: `${base.name}: ${steps.join(" + ") || "unchanged"}` }
  }
}
