// Collectives inside user functions (FunctionContext.group) on real workers over Gloo: a
// tp-sharded linear against the built-in path and torch, each of the group's operations, members
// that disagree, a poisoned input on one member, and a member killed inside the call.
import { afterAll, beforeAll, describe, expect, test } from "bun:test"
import { Effect, ManagedRuntime } from "effect"
import { compile, Controller, fromHost, HostTensor, RemoteError, WorkerLost, type ControllerApi, type Mesh, type RemoteTensor } from "../../src/controller/index.ts"
import { PYTHON, torchMissing } from "../torch.ts"
import { testUnless } from "../skip.ts"

const ROOT = new URL("../..", import.meta.url).pathname
const FNS = "tests/comm/groupfns"
/** Long enough that a member waiting out the comm timeout shows, however loaded the machine. */
const COMM_TIMEOUT_MS = 30_000

let rt: ManagedRuntime.ManagedRuntime<Controller, unknown>
let mesh: Mesh
const run = <A, E>(e: Effect.Effect<A, E, Controller>) => rt.runPromise(e)
const values = (h: unknown): number[] => [...(h as HostTensor).toArray() as Float32Array]

beforeAll(async () => {
  rt = ManagedRuntime.make(Controller.local({ world: 4, functionPath: [ROOT], env: { MONARCH_COMM_TIMEOUT_MS: String(COMM_TIMEOUT_MS) }, onWorkerLine: () => {}, onProblem: () => {} }))
  const ctl = await rt.runPromise(Effect.service(Controller))
  mesh = await run(ctl.mesh({ dp: 2, tp: 2 }))
}, 90_000)
afterAll(() => rt?.dispose())

/** A seeded generator of floats in [-1, 1). */
const uniform = (seed: number) => {
  let s = seed >>> 0
  return () => {
    s = (Math.imul(s, 1664525) + 1013904223) >>> 0
    return s / 2 ** 31 - 1
  }
}
const host = (shape: number[], data: Float32Array) => new HostTensor("f32", shape, new Uint8Array(data.buffer))
const f32 = (shape: ReadonlyArray<number>) => ({ dtype: "f32" as const, shape: [...shape] })

/** torch's x @ w (f32), for each case. */
const torchMatmul = (cases: ReadonlyArray<{ x: number[]; w: number[]; n: number; k: number; m: number }>): number[][] => {
  const script = "import json,sys,torch\nfor c in json.load(sys.stdin):\n  x=torch.tensor(c['x'],dtype=torch.float32).reshape(c['n'],c['k']); w=torch.tensor(c['w'],dtype=torch.float32).reshape(c['k'],c['m'])\n  print(json.dumps((x@w).flatten().tolist()))\n"
  const r = Bun.spawnSync([PYTHON, "-c", script], { stdin: new TextEncoder().encode(JSON.stringify(cases)), env: { ...process.env, OMP_NUM_THREADS: "1" } })
  if (r.exitCode !== 0) throw new Error(r.stderr.toString())
  return r.stdout.toString().trim().split("\n").map((l) => JSON.parse(l) as number[])
}

describe("a tp-sharded linear whose function all-reduces over tp", () => {
  testUnless(torchMissing())("equals the built-in reduce bit for bit and torch within f32 rounding, random shapes", async () => {
    const seed = Number(process.env.SEED ?? Date.now() % 100_000)
    const next = uniform(seed), int = (lo: number, hi: number) => lo + Math.floor(((next() + 1) / 2) * (hi - lo + 1))
    const cases = Array.from({ length: 4 }, () => {
      const n = int(1, 5), k = 2 * int(1, 6), m = int(1, 7)
      return { n, k, m, x: Array.from({ length: n * k }, next).map(Math.fround), w: Array.from({ length: k * m }, next).map(Math.fround) }
    })
    const reference = torchMatmul(cases)
    for (const [i, c] of cases.entries()) {
      const where = `seed ${seed} (SEED=${seed} reruns it), case ${i}: x [${c.n}, ${c.k}], w [${c.k}, ${c.m}]`
      const x = fromHost(mesh, host([c.n, c.k], Float32Array.from(c.x))), w = fromHost(mesh, host([c.k, c.m], Float32Array.from(c.w)))
      const y = await run(mesh.call(`${FNS}:tpLinear`, [x, w], {}, { dims: "tp", results: [f32([c.n, c.m])] }))
      const partial = await run(mesh.call(`${FNS}:tpPartial`, [x, w, 2], {}, { results: [f32([c.n, c.m])] }))
      const builtin = await run(mesh.reduce(partial, "tp", "sum"))
      const [ours, theirs] = await Promise.all([run(mesh.fetchAll(y)), run(mesh.fetchAll(builtin))])
      for (let r = 0; r < 4; r++) {
        expect(values(ours[r]), `${where}: rank ${r} against the built-in reduce`).toEqual(values(theirs[r]))
        values(ours[r]).forEach((v, j) => expect(Math.abs(v - reference[i]![j]!), `${where}: rank ${r} element ${j} against torch`).toBeLessThanOrEqual(1e-5 * (1 + Math.abs(reference[i]![j]!))))
      }
    }
  }, 60_000)
})

describe("each of the group's operations, over tp (member r gives t * (r + 1))", () => {
  const t = [1, 2, 3, 4, 5, 6]
  const own = (r: number) => t.map((v) => v * (r + 1))
  const cases: ReadonlyArray<{ kind: string; arg?: unknown; shape?: number[]; result: number[]; expect: (tpRank: number) => number[] }> = [
    { kind: "allReduce", arg: "sum", result: [6], expect: () => t.map((v) => 3 * v) },
    { kind: "allReduce", arg: "avg", result: [6], expect: () => t.map((v) => 1.5 * v) },
    { kind: "allReduce", arg: "max", result: [6], expect: () => own(1) },
    { kind: "allReduce", arg: "min", result: [6], expect: () => own(0) },
    { kind: "allReduce", arg: "prod", result: [6], expect: () => t.map((v) => 2 * v * v) },
    { kind: "allGather", result: [2, 6], expect: () => [...own(0), ...own(1)] },
    { kind: "reduceScatter", arg: "sum", shape: [2, 3], result: [3], expect: (r) => t.slice(3 * r, 3 * r + 3).map((v) => 3 * v) },
    { kind: "broadcast", arg: 1, result: [6], expect: () => own(1) },
    { kind: "sendRecv", result: [6], expect: (r) => own(1 - r) },
    { kind: "sendThenRecv", result: [6], expect: (r) => (r === 1 ? own(0) : t.map(() => 0)) },
  ]
  for (const c of cases) {
    test(`${c.kind}${c.arg === undefined ? "" : ` (${c.arg})`}`, async () => {
      const input = fromHost(mesh, host(c.shape ?? [6], Float32Array.from(t)))
      const out = await run(mesh.call(`${FNS}:groupOp`, [c.kind, input, c.arg ?? null], {}, { dims: ["tp"], results: [f32(c.result)] }))
      const got = await run(mesh.fetchAll(out))
      // Ranks 0, 1 and 2, 3 are the two tp groups; tp rank = rank % 2.
      got.forEach((h, r) => expect(values(h), `rank ${r}`).toEqual(c.expect(r % 2)))
    }, 30_000)
  }
})

describe("the group's operations on a strided view (member r's input's even elements, t * (r + 1))", () => {
  const t = [1, 2, 3, 4, 5, 6]
  const own = (r: number) => t.map((v) => v * (r + 1))
  /** own(r) with its even elements replaced by f's. */
  const evens = (r: number, f: (i: number) => number) => own(r).map((v, i) => (i % 2 === 0 ? f(i) : v))
  const cases: ReadonlyArray<{ kind: string; result: number[]; expect: (tpRank: number) => number[] }> = [
    { kind: "allReduceInPlace", result: [6], expect: (r) => evens(r, (i) => 3 * t[i]!) },
    { kind: "broadcastInPlace", result: [6], expect: (r) => evens(r, (i) => own(1)[i]!) },
    { kind: "allGather", result: [2, 3], expect: () => [...own(0).filter((_, i) => i % 2 === 0), ...own(1).filter((_, i) => i % 2 === 0)] },
    { kind: "sendRecv", result: [6], expect: (r) => (r === 1 ? own(1).map((v, i) => (i % 2 === 1 ? own(0)[i - 1]! : v)) : own(0)) },
  ]
  for (const c of cases) {
    test(c.kind, async () => {
      const input = fromHost(mesh, host([6], Float32Array.from(t)))
      const out = await run(mesh.call(`${FNS}:viewGroupOp`, [c.kind, input], {}, { dims: ["tp"], results: [f32(c.result)] }))
      const got = await run(mesh.fetchAll(out))
      got.forEach((h, r) => expect(values(h), `rank ${r}`).toEqual(c.expect(r % 2)))
    }, 30_000)
  }

  test("an in-place all_reduce of an expanded view is refused as torch refuses the write; the group goes on", async () => {
    const input = fromHost(mesh, host([6], Float32Array.from(t)))
    const bad = await run(mesh.call(`${FNS}:viewGroupOp`, ["expandedInPlace", input], {}, { dims: ["tp"], results: [f32([6])] }))
    for (let r = 0; r < 4; r++) {
      const f = await outcome(bad, r)
      expect(f, `rank ${r}`).toBeInstanceOf(RemoteError)
      expect((f as RemoteError).message, `rank ${r}`).toContain("more than one element of the written-to tensor refers to a single memory location")
    }
    const out = await run(mesh.call(`${FNS}:viewGroupOp`, ["allReduceInPlace", input], {}, { dims: ["tp"], results: [f32([6])] }))
    const got = await run(mesh.fetchAll(out))
    got.forEach((h, r) => expect(values(h), `rank ${r}`).toEqual(own(r % 2).map((v, i) => (i % 2 === 0 ? 3 * t[i]! : v))))
  }, 60_000)
})

describe("a built-in collective of a strided view (x.t())", () => {
  const t = [1, 2, 3, 4, 5, 6]
  test("reduce gives the sum of the views' elements; in place it writes the sum through the view, into x", async () => {
    const x = fromHost(mesh, host([2, 3], Float32Array.from(t)))
    const summed = await run(mesh.reduce(x.t(), "tp", "sum"))
    for (const h of await run(mesh.fetchAll(summed))) expect(values(h)).toEqual([1, 4, 2, 5, 3, 6].map((v) => 2 * v))
    const v = x.t()
    await run(mesh.reduce(v, "tp", "sum", { inplace: true }))
    for (const h of await run(mesh.fetchAll(x))) expect(values(h)).toEqual(t.map((e) => 2 * e))
  }, 30_000)
})

describe("a call over two dims", () => {
  test("gets each dim's group and the group over both: a sum along tp then dp is the sum over the mesh; a gather over both is in mesh order", async () => {
    const t = [1, 2, 3]
    const input = fromHost(mesh, host([3], Float32Array.from(t)))
    const [sum, gathered] = await run(mesh.callMany(`${FNS}:twoDims`, [input], {}, { dims: ["dp", "tp"], results: [f32([3]), f32([4, 3])] }))
    const [sums, gathers] = await Promise.all([run(mesh.fetchAll(sum!)), run(mesh.fetchAll(gathered!))])
    for (let r = 0; r < 4; r++) {
      expect(values(sums[r]), `rank ${r}`).toEqual(t.map((v) => 10 * v))
      expect(values(gathers[r]), `rank ${r}`).toEqual([1, 2, 3, 4].flatMap((k) => t.map((v) => k * v)))
    }
  }, 30_000)
})

describe("a compiled step", () => {
  test("replays a group call in order with the step's other work, once traced", async () => {
    const step = compile((x: RemoteTensor) => Effect.gen(function* () {
      const summed = yield* mesh.call(`${FNS}:groupOp`, ["allReduce", x.add(1), "sum"], {}, { dims: "tp", results: [x.meta!] })
      return { out: summed.mul(2) }
    }), { name: "group call" })
    const x = fromHost(mesh, host([2], Float32Array.from([1, 2])))
    for (let i = 0; i < 3; i++) {
      const { out } = await run(step(x))
      // ((x + 1) * 1 + (x + 1) * 2) * 2 on every member.
      for (let r = 0; r < 4; r++) expect(await outcome(out, r), `replay ${i}, rank ${r}`).toEqual([12, 18])
    }
    expect(step.traces).toBe(1)
  }, 60_000)
})

/** The failure a fetch of `t` on rank r gives (RemoteError), or its values. */
const outcome = async (t: RemoteTensor, r: number): Promise<unknown> => {
  const result = await rt.runPromise(Effect.result(mesh.fetch(t, r)))
  return result._tag === "Success" ? values(result.success) : result.failure
}

describe("failures", () => {
  for (const how of ["shape", "op"] as const) {
    test(`members disagreeing on the ${how} fail at once with CommError "members disagree" on every member; the group goes on`, async () => {
      const input = fromHost(mesh, host([4], Float32Array.from([1, 2, 3, 4])))
      const started = performance.now()
      const bad = await run(mesh.call(`${FNS}:disagreeing`, [how, input], {}, { dims: "tp", results: 1 }))
      for (let r = 0; r < 4; r++) {
        const f = await outcome(bad, r)
        expect(f, `rank ${r}`).toBeInstanceOf(RemoteError)
        expect((f as RemoteError).type, `rank ${r}`).toBe("CommError")
        expect((f as RemoteError).message, `rank ${r}`).toContain("members disagree")
      }
      expect(performance.now() - started, "every member failed at once").toBeLessThan(COMM_TIMEOUT_MS / 3)
      const good = await run(mesh.call(`${FNS}:groupOp`, ["allReduce", input, "sum"], {}, { dims: "tp", results: [f32([4])] }))
      for (let r = 0; r < 4; r++) expect(await outcome(good, r)).toEqual([3, 6, 9, 12])
    }, 60_000)
  }

  test("a function that catches its group's failure still fails its call on every member", async () => {
    const input = fromHost(mesh, host([2], Float32Array.from([1, 2])))
    const out = await run(mesh.call(`${FNS}:swallowing`, [input], {}, { dims: "tp", results: 1 }))
    for (let r = 0; r < 4; r++) expect(((await outcome(out, r)) as RemoteError).message, `rank ${r}`).toContain("members disagree")
  }, 30_000)

  test("a function asking for a group its call did not declare is refused, naming both", async () => {
    const input = fromHost(mesh, host([2], Float32Array.from([1, 2])))
    const out = await run(mesh.call(`${FNS}:wrongGroup`, [input], {}, { dims: "tp", results: 1 }))
    const f = (await outcome(out, 0)) as RemoteError
    expect(f.type).toBe("CommError")
    expect(f.message).toContain("asked for the group over [dp]; its call declared [tp]")
    const both = await run(mesh.call(`${FNS}:wrongGroup`, [input], {}, { dims: ["tp", "dp"], results: 1 }))
    expect(await outcome(both, 0), "dp alone is one of the declared dims: its sum of [1, 2] over dp").toEqual([2, 4])
  }, 30_000)

  test("the controller refuses a group on a built-in, an unknown dim, or a repeated one", async () => {
    const input = fromHost(mesh, host([2], Float32Array.from([1, 2])))
    expect((await rt.runPromise(Effect.flip(mesh.call("ops.clone", [input], {}, { dims: "tp" })))).message).toContain("only a user function takes a group")
    expect((await rt.runPromise(Effect.flip(mesh.call(`${FNS}:groupOp`, [], {}, { dims: "pp" })))).message).toContain("has no dim pp")
    expect((await rt.runPromise(Effect.flip(mesh.call(`${FNS}:groupOp`, [], {}, { dims: ["tp", "tp"] })))).message).toContain("distinct dims")
  })

  test("a function that throws on one member before its group's call: the member's end meets the other's call, both fail at once with the thrower's error, the group goes on", async () => {
    const t = fromHost(mesh, host([2], Float32Array.from([1, 2])))
    const started = performance.now()
    const bad = await run(mesh.call(`${FNS}:throwThenSum`, [1, t], {}, { dims: "tp", results: [f32([2])] }))
    const [r0, r1, r2, r3] = await Promise.all([0, 1, 2, 3].map((r) => outcome(bad, r)))
    expect(performance.now() - started, "rank 0 did not wait in its sum for rank 1").toBeLessThan(COMM_TIMEOUT_MS / 3)
    for (const f of [r0, r1]) expect((f as RemoteError).message).toContain("deliberate failure on rank 1")
    expect([r2, r3]).toEqual([[2, 4], [2, 4]])
    const good = await run(mesh.call(`${FNS}:groupOp`, ["allReduce", t, "sum"], {}, { dims: "tp", results: [f32([2])] }))
    for (let r = 0; r < 4; r++) expect(await outcome(good, r), `rank ${r}`).toEqual([3, 6])
  }, 60_000)

  test("a poisoned input on one member: no member of its group runs the function or waits for it; both fail with that poison, the other group computes", async () => {
    const base = fromHost(mesh, host([2], Float32Array.from([1, 2])))
    // Rank 1's copy is poisoned (its function threw); the others are good.
    const poisoned = await run(mesh.call("tests/controller/fixtures:failOnRank", [1, base], {}, { results: [f32([2])] }))
    const started = performance.now()
    const out = await run(mesh.call(`${FNS}:groupOp`, ["allReduce", poisoned, "sum"], {}, { dims: "tp", results: [f32([2])] }))
    const [r0, r1, r2, r3] = await Promise.all([0, 1, 2, 3].map((r) => outcome(out, r)))
    expect(performance.now() - started, "rank 0 did not wait in its collective for rank 1").toBeLessThan(COMM_TIMEOUT_MS / 3)
    for (const f of [r0, r1]) expect((f as RemoteError).message).toContain("deliberate failure on rank 1")
    expect(r2).toEqual([3, 6])
    expect(r3).toEqual([3, 6])
    // The group's communicator is whole: the next call all-reduces.
    const again = await run(mesh.call(`${FNS}:groupOp`, ["allReduce", base, "sum"], {}, { dims: "tp", results: [f32([2])] }))
    for (let r = 0; r < 4; r++) expect(await outcome(again, r)).toEqual([3, 6])
  }, 60_000)
})

describe("a member killed inside the call", () => {
  let lostRt: ManagedRuntime.ManagedRuntime<Controller, unknown>
  let ctl: ControllerApi
  beforeAll(async () => {
    lostRt = ManagedRuntime.make(Controller.local({ world: 2, functionPath: [ROOT], onWorkerLine: () => {}, onProblem: () => {} }))
    ctl = await lostRt.runPromise(Effect.service(Controller))
  }, 90_000)
  afterAll(() => lostRt?.dispose())

  test("fails the call on the surviving member with WorkerLost naming the killed rank", async () => {
    const tp = await lostRt.runPromise(ctl.mesh({ tp: 2 }))
    const victim = Number(await lostRt.runPromise(tp.fetch(null, 1, { fn: `${FNS}:pid` })))
    const t = fromHost(tp, host([2], Float32Array.from([1, 2])))
    const out = await lostRt.runPromise(tp.call(`${FNS}:blockThenSum`, [1, 10_000, t], {}, { dims: "tp", results: [f32([2])] }))
    const pending = lostRt.runPromise(Effect.flip(tp.fetch(out, 0)))
    await Bun.sleep(300)
    process.kill(victim, "SIGKILL")
    const lost = await pending
    expect(lost).toBeInstanceOf(WorkerLost)
    expect(lost).toMatchObject({ rank: 1 })
  }, 60_000)
})
