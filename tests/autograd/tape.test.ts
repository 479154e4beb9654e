// The autograd tape on a real worker: backward() accumulating into .grad, grad(), zeroGrad,
// detach, noGrad, a custom gradient, the gradient generator's order, refusals (in place on a
// tensor that requires grad, a second backward through a consumed graph), saved tensors kept
// past a release() until backward has read them and then deleted, the tape's temporaries
// released, and a failed command poisoning exactly the gradients that depend on it.
import { afterAll, beforeAll, describe, expect, spyOn, test } from "bun:test"
import { Effect, ManagedRuntime } from "effect"
import { Controller, customGrad, eager, grad, gradGenerator, noGrad, ops, opsOn, zeroGrad, type ControllerApi, type Mesh, type RemoteTensor } from "../../src/controller/index.ts"
import { describeUnless, testUnless } from "../skip.ts"
import { PYTHON, torchMissing } from "../torch.ts"
import { host } from "../worker/build.ts"

let rt: ManagedRuntime.ManagedRuntime<Controller, unknown>
let ctl: ControllerApi
let mesh: Mesh
beforeAll(async () => {
  rt = ManagedRuntime.make(Controller.local({ world: 1, functionPath: [new URL("../..", import.meta.url).pathname], onWorkerLine: () => {} }))
  ctl = await rt.runPromise(Effect.service(Controller))
  mesh = await rt.runPromise(ctl.mesh({ dp: 1 }))
}, 60_000)
afterAll(() => rt?.dispose())

const values = (t: RemoteTensor): Promise<number[]> => rt.runPromise(t.fetch()).then((h) => [...h.toArray()].map(Number))
/** An f64 tensor on the mesh with these values (sent with the command). */
const tensor = (data: number[], shape: number[] = [data.length]): RemoteTensor<"f64"> => opsOn(mesh).clone(host("f64", shape, data) as never) as RemoteTensor<"f64">
const close = (got: number[], want: number[]) => expect(got.map((v) => Number(v.toFixed(10)))).toEqual(want.map((v) => Number(v.toFixed(10))))
/** A ControllerError's message from synchronous model code. */
const refusal = (f: () => unknown) => rt.runPromise(eager(f).pipe(Effect.as("no refusal"), Effect.catchTag("ControllerError", (e) => Effect.succeed(e.message))))

describe("backward and grad", () => {
  test("backward() accumulates d loss/d leaf into .grad; a second loss adds to it; zeroGrad clears it", async () => {
    const w = tensor([1, -2, 3]).requiresGrad_(), x = tensor([0.5, 4, -1])
    ops.mul(w, x).sum().backward()                      // d/dw = x
    close(await values(w.grad!), [0.5, 4, -1])
    ops.mul(w, w).sum().backward()                      // += 2w
    close(await values(w.grad!), [2.5, 0, 5])
    expect(x.grad).toBeUndefined()
    const g = w.grad!
    zeroGrad([w])
    expect(w.grad).toBeUndefined()
    expect(g.released).toBe(true)
  })

  test("grad() returns the gradients in the inputs' order, zeros for an unused input, and leaves .grad alone", async () => {
    const a = tensor([1, 2]).requiresGrad_(), b = tensor([3, 4]).requiresGrad_(), unused = tensor([9]).requiresGrad_()
    const y = ops.div(ops.mul(a, a), b).sum()              // d/da = 2a/b, d/db = -a^2/b^2
    const [ga, gb, gu] = grad(y, [a, b, unused])
    close(await values(ga!), [2 / 3, 1])
    close(await values(gb!), [-1 / 9, -4 / 16])
    close(await values(gu!), [0])
    expect(a.grad).toBeUndefined()
  })

  test("a tensor used twice gets the sum of both paths; broadcasting is summed back to each input's shape", async () => {
    const x = tensor([1, 2, 3], [3, 1]).requiresGrad_(), b = tensor([10, 20], [2]).requiresGrad_()
    const y = ops.add(ops.mul(x, b), x).sum()               // [3,2]: d/dx = sum(b) + 2 per row; d/db = sum(x) per column
    const [gx, gb] = grad(y, [x, b])
    expect([gx!.shape, gb!.shape]).toEqual([[3, 1], [2]])
    close(await values(gx!), [32, 32, 32])
    close(await values(gb!), [6, 6])
  })

  test("a non-scalar output needs gradOutput", async () => {
    const x = tensor([1, 2]).requiresGrad_()
    expect(await refusal(() => ops.exp(x).backward())).toMatch(/implied only for a scalar output/)
    const [g] = grad(ops.mul(x, 3), [x], { gradOutput: tensor([1, -1]) })
    close(await values(g!), [3, -3])
  })
})

/** torch 1.13's gradients of the program below with respect to its intermediate h and its leaf w. */
const TORCH_INTERMEDIATE = `
import json, sys, torch
d = json.load(sys.stdin)
w = torch.tensor(d["w"], dtype=torch.float64).reshape(2, 3).requires_grad_()
x = torch.tensor(d["x"], dtype=torch.float64)
h = (w.tanh() * w).matmul(x)
a = h * h
loss = a.exp().sum() + (a * h).sum() + w.sum()
print(json.dumps([g.reshape(-1).tolist() for g in torch.autograd.grad(loss, [h, a, w])]))
`

describeUnless(torchMissing())("gradients of intermediates (not leaves), against torch 1.13", () => {
  const W = [0.3, -0.7, 1.1, 0.5, -0.2, 0.9], X = [0.4, -1.2, 0.6]
  let asked: number[][] | undefined
  const torchGrads = (): number[][] => (asked ??= JSON.parse(Bun.spawnSync([PYTHON, "-c", TORCH_INTERMEDIATE], { stdin: Buffer.from(JSON.stringify({ w: W, x: X })) }).stdout.toString()))
  const program = () => {
    const w = tensor(W, [2, 3]).requiresGrad_(), x = tensor(X)
    const h = w.tanh().mul(w).matmul(x), a = h.mul(h)
    return { w, h, a, loss: a.exp().sum().add(a.mul(h).sum()).add(w.sum()) }
  }
  const closeTo = (got: number[], want: number[]) => expect(got.map((v, i) => Math.abs(v - want[i]!) <= 1e-12 * Math.max(1, Math.abs(want[i]!)))).toEqual(want.map(() => true))

  test("grad(loss, [h, a, w]): h reached by two paths, a by two, w by two", async () => {
    const want = torchGrads()
    const { w, h, a, loss } = program()
    const got = grad(loss, [h, a, w])
    for (const [i, g] of got.entries()) closeTo(await values(g), want[i]!)
    expect(w.grad).toBeUndefined()
  })

  test("gradGenerator(loss, [w, h, a]) yields each as soon as it is final (a, then h, then w) with torch's values", async () => {
    const want = torchGrads()
    const { w, h, a, loss } = program()
    const order: string[] = []
    for (const [t, g] of gradGenerator(loss, [w, h, a])) {
      const name = t === w ? "w" : t === h ? "h" : "a"
      order.push(name)
      closeTo(await values(g), want[{ h: 0, a: 1, w: 2 }[name]]!)
    }
    expect(order).toEqual(["a", "h", "w"])
  })
})

describe("the graph", () => {
  test("detach() and noGrad cut it; requiresGrad says so", async () => {
    const w = tensor([2, 3]).requiresGrad_()
    const y = ops.mul(w, w)
    expect([w.requiresGrad, y.requiresGrad, y.detach().requiresGrad, noGrad(() => ops.mul(w, w)).requiresGrad]).toEqual([true, true, false, false])
    const [g] = grad(ops.mul(y.detach(), w).sum(), [w])   // the detached factor is a constant
    close(await values(g!), [4, 9])
  })

  test("refuses: an in-place op on a tensor that requires grad, a second backward, a root without grad, an integer leaf", async () => {
    const w = tensor([1, 2]).requiresGrad_()
    expect(await refusal(() => ops.add_(w, 1))).toMatch(/ops\.add_ changes RemoteTensor\(\d+ f64\[2\] on Mesh\(dp=1\)\), which requires grad, in place/)
    noGrad(() => ops.add_(w, 1))                              // an optimizer step
    close(await values(w), [2, 3])
    const loss = ops.exp(w).sum()
    loss.backward()
    expect(await refusal(() => loss.backward())).toMatch(/backward through ops\.sum a second time/)
    expect(await refusal(() => tensor([1], []).backward())).toMatch(/does not require grad/)
    expect(await refusal(() => opsOn(mesh).arange(3).requiresGrad_())).toMatch(/only floating tensors can require grad/)
  })

  test("customGrad: its own backward is what flows", async () => {
    // A straight-through round: the value is rounded, the gradient passes unchanged.
    const roundST = customGrad("roundST", (x: RemoteTensor) => ({ value: ops.round(x), backward: (g) => [ops.mul(g, 1)] }))
    const x = tensor([0.4, 1.6]).requiresGrad_()
    const y = roundST(x)
    close(await values(y), [0, 2])
    const [g] = grad(ops.mul(y, tensor([3, 5])).sum(), [x])
    close(await values(g!), [3, 5])
  })

  test("gradGenerator yields each gradient as soon as it is final, the last layer's first", async () => {
    const w1 = tensor([1, 2], [1, 2]).requiresGrad_(), w2 = tensor([3, 4], [2, 1]).requiresGrad_(), x = tensor([1], [1, 1])
    const loss = ops.matmul(ops.matmul(x, w1).tanh(), w2).sum()
    const seen: string[] = []
    const issued = spyOn(ctl.core, "command")
    for (const [p, g] of gradGenerator(loss, [w1, w2])) {
      seen.push(`${p === w1 ? "w1" : "w2"} after ${issued.mock.calls.length} commands`)
      expect(g.shape).toEqual(p.shape)
    }
    issued.mockRestore()
    // w2's gradient is final before backward has gone through the tanh and the first matmul.
    expect(seen.map((s) => s.slice(0, 2))).toEqual(["w2", "w1"])
    const [first, second] = seen.map((s) => Number(s.split(" ")[2]))
    expect(first!).toBeLessThan(second!)
    // Independent branches run the latest recorded first (torch's order), so the last layer's gradient comes out first.
    const a = tensor([1, 2]).requiresGrad_(), b = tensor([3, 4]).requiresGrad_()
    const order = [...gradGenerator(ops.add(ops.sum(ops.exp(a)), ops.sum(ops.exp(b))), [a, b])].map(([p]) => (p === a ? "a" : "b"))
    expect(order).toEqual(["b", "a"])
  })
})

/** The refs the commands issued by f define that were not deleted by the time it returned. */
const leftAlive = (f: () => void): number[] => {
  const issued = spyOn(ctl.core, "command"), deleted = spyOn(ctl.core, "release")
  try {
    f()
    const gone = new Set(deleted.mock.calls.flatMap(([, refs]) => refs))
    return issued.mock.calls.flatMap((c) => c[3] as number[]).filter((id) => !gone.has(id))
  } finally {
    issued.mockRestore()
    deleted.mockRestore()
  }
}

describe("lifetimes", () => {
  test("a saved tensor released before backward is kept until backward has read it, then deleted", async () => {
    const w = tensor([0.5, -1]).requiresGrad_()
    const h = ops.tanh(w)                                     // tanh saves its result
    const loss = ops.sum(h)
    const deleted = spyOn(ctl.core, "release")
    h.release()                                               // as a step scope would
    expect(h.released).toBe(false)
    expect(deleted.mock.calls.flatMap(([, refs]) => refs)).not.toContain(h.ref.id)
    loss.backward()
    expect(h.released).toBe(true)
    expect(deleted.mock.calls.flatMap(([, refs]) => refs)).toContain(h.ref.id)
    deleted.mockRestore()
    close(await values(w.grad!), [0.5, -1].map((v) => 1 - Math.tanh(v) ** 2))
  })

  test("releasing the outputs of an unused graph lets go of what it saved", async () => {
    const w = tensor([1, 2]).requiresGrad_()
    const h = ops.exp(w), y = ops.exp(h)
    w.release()                                              // held by exp(w)
    expect(w.released).toBe(false)
    y.release()                                              // y's node goes; h's node is still h's
    expect(w.released).toBe(false)
    const deleted = spyOn(ctl.core, "release")
    h.release()                                              // nothing can run backward now
    expect([w.released, h.released, y.released]).toEqual([true, true, true])
    // Each deleted once (a tensor its own node saved is not deleted twice).
    expect(deleted.mock.calls.flatMap(([, refs]) => refs).sort()).toEqual([w.ref.id, h.ref.id].sort())
    deleted.mockRestore()
  })

  test("backward releases its intermediate gradients and temporaries: only the leaves' gradients stay", async () => {
    const w = tensor([1, 2, 3]).requiresGrad_()
    const loss = ops.mean(ops.mul(ops.sigmoid(ops.mul(w, 2)), w))
    expect(leftAlive(() => loss.backward())).toEqual([w.grad!.ref.id])
  })

  test("the gradients a recorded backward returns are the tape's: released once used", async () => {
    const double = customGrad("double", (x: RemoteTensor) => ({ value: ops.mul(x, 2), backward: (g) => [ops.mul(g, 2)] }))
    const w = tensor([1, 2]).requiresGrad_()
    const loss = ops.sum(ops.exp(double(w)))
    expect(leftAlive(() => loss.backward())).toEqual([w.grad!.ref.id])
    close(await values(w.grad!), [1, 2].map((v) => 2 * Math.exp(2 * v)))
  })

  test("backward releases each temporary as soon as it is used: what is live stays flat along a deep chain", async () => {
    const w = tensor([0.1, 0.2]).requiresGrad_()
    let h = w
    for (let i = 0; i < 30; i++) h = ops.tanh(h)
    const loss = ops.sum(h)
    // How many tensors backward has made and not yet deleted, after each command and each delete, in order.
    const events: number[] = []
    const command = ctl.core.command.bind(ctl.core), release = ctl.core.release.bind(ctl.core)
    const c = spyOn(ctl.core, "command").mockImplementation(((...a: Parameters<typeof command>) => (events.push(a[3].length), command(...a))) as never)
    const r = spyOn(ctl.core, "release").mockImplementation(((ranks: ReadonlyArray<number>, refs: ReadonlyArray<number>) => (events.push(-refs.length), release(ranks, refs))) as never)
    loss.backward()
    c.mockRestore()
    r.mockRestore()
    let live = 0, peak = 0
    for (const e of events) peak = Math.max(peak, (live += e))
    // Each tanh node makes a few temporaries and the next gradient; without releasing them as it goes, 30 nodes would keep ~90.
    expect(peak).toBeLessThan(10)
  })

  // ~10 s on 2 loaded cores, most of it the worker running 90,000 commands.
  testUnless(process.env.MONARCH_LONG ? undefined : "long variant (a 30,000-op graph): set MONARCH_LONG=1")("a graph deeper than the stack: backward and dropping it both work", async () => {
    const w = tensor([1, 2]).requiresGrad_(), depth = 30_000
    const chain = () => {
      let h = w
      for (let i = 0; i < depth; i++) h = ops.mul(h, 1)
      return ops.sum(h)
    }
    chain().backward()
    close(await values(w.grad!), [1, 1])
    const unused = chain()
    unused.release()                                          // its whole graph is let go, node by node
    expect(unused.released).toBe(true)
  }, 120_000)

  test("a command that fails in forward poisons exactly the gradients that read it", async () => {
    const table = tensor([1, 2, 3, 4], [2, 2]).requiresGrad_(), v = tensor([5, 6]).requiresGrad_()
    const bad = opsOn(mesh).add(opsOn(mesh).zeros([1], { dtype: "i64" }), 7)          // row 7 of a 2-row table: fails on the worker
    const looked = ops.exp(ops.embedding(bad, table))                                   // exp saves its (poisoned) result
    const loss = ops.add(ops.sum(looked), ops.sum(ops.mul(v, v)))
    loss.backward()
    const outcome = (t: RemoteTensor) => rt.runPromise(t.fetch().pipe(Effect.map((h) => [...h.toArray()].map(Number)), Effect.catchTag("RemoteError", (e) => Effect.succeed(e.message))))
    expect(await outcome(loss)).toMatch(/out of range/)
    expect(await outcome(table.grad!)).toMatch(/out of range/)
    expect(await outcome(v.grad!)).toEqual([10, 12])
  })

  test("a command that fails in backward poisons exactly the gradients downstream of it", async () => {
    // A gradient computed by a user function that fails on the worker.
    const failing = customGrad("failing", (x: RemoteTensor) => ({
      value: ops.mul(x, 2),
      backward: (g) => [Effect.runSync(mesh.call("tests/controller/fixtures:failOnRank", [0, g], {}, { results: [g.meta!] }))],
    }))
    const w = tensor([1, 2]).requiresGrad_(), v = tensor([3, 4]).requiresGrad_()
    const loss = ops.add(ops.sum(failing(ops.exp(w))), ops.sum(ops.mul(v, v)))
    loss.backward()
    const outcome = (t: RemoteTensor) => rt.runPromise(t.fetch().pipe(Effect.map((h) => [...h.toArray()].map(Number)), Effect.catchTag("RemoteError", (e) => Effect.succeed(e.message))))
    expect(await outcome(w.grad!)).toMatch(/deliberate failure on rank 0/)
    expect(await outcome(v.grad!)).toEqual([6, 8])
    close(await outcome(loss) as number[], [2 * (Math.exp(1) + Math.exp(2)) + 25])
  })
})
