/**
 * Ragged collectives and sends, through a direct protocol client: two real
 * workers, each given its own input (and, where a case says so, its own factory) for one
 * Reduce or SendTensor. A rank whose input is not what its factory declares fails the command
 * with InputMismatch naming both and joins with the factory's zeros, so its peer's result is
 * exactly the collective over those zeros; ranks whose factories disagree both fail with the
 * shim's CommError ("members disagree") before anything moves. Either way no worker dies and
 * the mesh's group then all-reduces correctly. Each case throws, naming what did not hold.
 */
import type { Reduce } from "../../src/protocol/messages.ts"
import { NDSlice } from "../../src/protocol/ndslice.ts"
import type { DType } from "../../src/protocol/values.ts"
import { call, createStream, factory, fetch, mesh, numbers, reduce, ref, send } from "../worker/build.ts"
import { startWorkers, type Harness } from "../worker/harness.ts"

export const TRANSPORTS = {
  "shared memory": { MONARCH_COMM_SHM: "1" },
  TCP: { MONARCH_COMM_SHM: "0" },
} as const
export type Transport = keyof typeof TRANSPORTS

const MESH = 2
/** What each rank's input holds: 2 on rank 0, 3 on rank 1 (so zeros are told apart in every reduction). */
const valueOf = (rank: number) => rank + 2
/** Past the TCP exchange and the shared-memory path's single round. */
const LARGE = (1 << 20) + 3

export class Rig {
  private ident = 0
  private refs = 100
  private constructor(readonly h: Harness, readonly transport: Transport) {}

  static async start(transport: Transport): Promise<Rig> {
    const h = await startWorkers({ world: 2, env: TRANSPORTS[transport] })
    h.send("all", createStream)
    h.send("all", mesh(MESH, ["x"], [2]))
    return new Rig(h, transport)
  }

  nextIdent(): number {
    return this.ident++
  }

  fresh(): number {
    return this.refs++
  }

  /** A fresh ref holding valueOf(rank) in `spec(rank)` on each rank. */
  input(spec: (rank: number) => Spec): number {
    const t = this.fresh(), i = this.nextIdent()
    for (const r of [0, 1]) {
      const { shape, dtype } = spec(r)
      this.h.send(r, call(i, [t], "ops.full", [shape, valueOf(r)], { kwargs: { dtype } }))
    }
    return t
  }

  async fetchFrom(rank: number, id: number): Promise<number[]> {
    this.h.send(rank, fetch(this.nextIdent(), ref(id)))
    return numbers((await this.h.next(rank, "FetchResult")).value)
  }

  /** The failure `rank` reported for `ident`, waiting for it. */
  async failureOf(rank: number, ident: number): Promise<{ type: string; message: string }> {
    for (;;) {
      const m = await this.h.next(rank, "RemoteFunctionFailed")
      if (m.ident === ident) return { type: m.error.type, message: m.error.message }
      if (m.ident > ident) throw new Error(`rank ${rank} reported no failure of command ${ident}, but one of ${m.ident}: ${m.error.message}`)
    }
  }

  /** The group still works: a sum of [4] f32 over the mesh gives 2 + 3 on both ranks. */
  async expectGroupUsable(after: string): Promise<void> {
    const t = this.input(() => ({ shape: [4], dtype: "f32" })), out = this.fresh()
    this.h.send("all", reduce(this.nextIdent(), out, t, MESH, ["x"], "sum", factory([4])))
    for (const r of [0, 1]) {
      const got = await this.fetchFrom(r, out)
      if (got.join() !== "5,5,5,5") throw new Error(`after ${after}, rank ${r}'s next all_reduce gave [${got}], expected [5,5,5,5]`)
    }
  }

  expectAlive(after: string): void {
    if (this.h.exits.length > 0) throw new Error(`after ${after} a worker exited: ${JSON.stringify(this.h.exits)}\n${this.h.lines.slice(-20).join("\n")}`)
  }

  close(): Promise<void> {
    return this.h.close()
  }
}

interface Spec {
  readonly shape: ReadonlyArray<number>
  readonly dtype: DType
}

/** A command over one input per rank: a Reduce (the mesh's x dim) or a send from rank 1 to rank 0. */
interface Command {
  readonly name: string
  /** The factory both ranks are told when they agree. */
  readonly declared: Spec
  readonly issue: (rig: Rig, ident: number, result: number, tensor: number, factoryOf: (rank: number) => Spec) => void
  /** Rank 0's result when rank 1 joins with zeros (a value; rank 0's own input holds 2). */
  readonly withZeros: ReadonlyArray<number>
}

const OPS = ["sum", "prod", "min", "max", "avg"] as const
const withZeros = (op: (typeof OPS)[number], n: number): number[] =>
  new Array(n).fill({ sum: 2, prod: 0, min: 0, max: 2, avg: 1 }[op])

const reduceCommand = (name: string, reduction: Reduce["reduction"], declared: Spec, result: ReadonlyArray<number>, opts: { scatter?: boolean; inplace?: boolean } = {}): Command => ({
  name,
  declared,
  withZeros: result,
  issue: (rig, ident, out, t, factoryOf) => {
    for (const r of [0, 1]) {
      const f = factoryOf(r)
      rig.h.send(r, reduce(ident, out, t, MESH, ["x"], reduction, factory([...f.shape], f.dtype), opts))
    }
  },
})

const sendCommand: Command = {
  name: "send from rank 1 to rank 0",
  declared: { shape: [4], dtype: "f32" },
  withZeros: [0, 0, 0, 0],
  issue: (rig, ident, out, t, factoryOf) => {
    for (const r of [0, 1]) {
      const f = factoryOf(r)
      rig.h.send(r, send(ident, out, new NDSlice(1, [1], [1]), new NDSlice(0, [1], [1]), t, factory([...f.shape], f.dtype)))
    }
  },
}

const F4: Spec = { shape: [4], dtype: "f32" }
const F22: Spec = { shape: [2, 2], dtype: "f32" }

export const COMMANDS: ReadonlyArray<Command> = [
  ...OPS.map((op) => reduceCommand(`all_reduce ${op}`, op, F4, withZeros(op, 4))),
  ...OPS.map((op) => reduceCommand(`reduce_scatter ${op}`, op, F22, withZeros(op, 2), { scatter: true })),
  reduceCommand("all_reduce sum in place", "sum", F4, withZeros("sum", 4), { inplace: true }),
  reduceCommand("stack (all_gather)", "stack", F4, [2, 2, 2, 2, 0, 0, 0, 0]),
  reduceCommand("stack with scatter (all_to_all)", "stack", F4, [2, 2, 0, 0], { scatter: true }),
  sendCommand,
]

/** How rank 1 goes wrong: its input only (its factory is the declared one), or its factory and input both. */
interface Mismatch {
  readonly name: string
  readonly factoriesDiffer: boolean
  readonly of: (declared: Spec) => Spec
}

const otherDtype = (d: DType): DType => (d === "f32" ? "f64" : "f32")
const count = (s: Spec) => s.shape.reduce((a, b) => a * b, 1)

export const MISMATCHES: ReadonlyArray<Mismatch> = [
  { name: "a larger input", factoriesDiffer: false, of: (d) => ({ shape: [1000], dtype: d.dtype }) },
  { name: "a smaller input", factoriesDiffer: false, of: (d) => ({ shape: [2], dtype: d.dtype }) },
  { name: "the same count in another shape", factoriesDiffer: false, of: (d) => ({ shape: d.shape.length === 1 ? [2, count(d) / 2] : [count(d)], dtype: d.dtype }) },
  { name: "another dtype", factoriesDiffer: false, of: (d) => ({ shape: d.shape, dtype: otherDtype(d.dtype) }) },
  { name: "a 4 MiB input", factoriesDiffer: false, of: (d) => ({ shape: [LARGE], dtype: d.dtype }) },
  { name: "different factories (count)", factoriesDiffer: true, of: (d) => ({ shape: [...d.shape.slice(0, -1), d.shape.at(-1)! * 3], dtype: d.dtype }) },
  { name: "different factories (dtype)", factoriesDiffer: true, of: (d) => ({ shape: d.shape, dtype: otherDtype(d.dtype) }) },
  { name: "different factories (4 MiB)", factoriesDiffer: true, of: (d) => ({ shape: [...d.shape.slice(0, -1), d.shape.length === 1 ? LARGE : (LARGE + 1) / 2 * 2], dtype: d.dtype }) },
]

const describeSpec = (s: Spec) => `${s.dtype}[${s.shape}]`

export interface Case {
  readonly name: string
  /** Whether rank 1's factory differs too (else only its input does). */
  readonly factoriesDiffer: boolean
  readonly run: (rig: Rig) => Promise<void>
}

const runCase = async (rig: Rig, c: Command, m: Mismatch): Promise<void> => {
  const label = `${c.name} with ${m.name} on rank 1 (${rig.transport})`
  const wrong = m.of(c.declared)
  const inputSpec = (r: number) => (r === 1 ? wrong : c.declared)
  const factoryOf = (r: number) => (r === 1 && m.factoriesDiffer ? wrong : c.declared)
  const t = rig.input(inputSpec), out = rig.fresh(), ident = rig.nextIdent()
  c.issue(rig, ident, out, t, factoryOf)
  if (m.factoriesDiffer) {
    // Rank 1 may refuse its own factory outright (4 MiB + 3 does not split in two); it then
    // says so and rank 0 still hears of the disagreement.
    for (const r of [0, 1]) {
      const f = await rig.failureOf(r, ident)
      if (f.type !== "CommError" || !(f.message.includes("members disagree") || (r === 1 && /^(Reduce|shim_)/.test(f.message))))
        throw new Error(`${label}: rank ${r} reported ${f.type}: ${f.message}; expected CommError "members disagree"`)
    }
  } else {
    const f = await rig.failureOf(1, ident)
    const named = f.message.includes(describeSpec(wrong)) && f.message.includes(describeSpec(c.declared))
    if (f.type !== "InputMismatch" || !named)
      throw new Error(`${label}: rank 1 reported ${f.type}: ${f.message}; expected InputMismatch naming ${describeSpec(wrong)} and ${describeSpec(c.declared)}`)
    const got = await rig.fetchFrom(0, out)
    if (got.join() !== c.withZeros.join()) throw new Error(`${label}: rank 0 got [${got.slice(0, 12)}${got.length > 12 ? ", ..." : ""}], expected [${c.withZeros}] (rank 1 joining with zeros)`)
    const stray = rig.h.seen(0, "RemoteFunctionFailed").filter((x) => x.ident === ident)
    if (stray.length > 0) throw new Error(`${label}: rank 0 reported ${stray[0]!.error.message}`)
  }
  rig.expectAlive(label)
  await rig.expectGroupUsable(label)
  rig.expectAlive(label)
}

/** Every command with every mismatch. */
export const CASES: ReadonlyArray<Case> = COMMANDS.flatMap((c) => MISMATCHES.map((m) => ({ name: `${c.name} with ${m.name} on rank 1`, factoriesDiffer: m.factoriesDiffer, run: (rig: Rig) => runCase(rig, c, m) })))
