// Gradients after in-place writes, and in-place writes whose input overlaps what they write,
// checked against torch 1.13 on a real worker:
//   - torch's version counter: every in-place write (ops, copy_, an optimizer step, a user
//     function's mutates, an in-place collective) moves the count of the written tensor's
//     memory, which its views and detach() share; a backward through a node whose saved tensor
//     moved is refused, naming the tensor, the op and where it was called, and nothing changes;
//   - the three cases that gave wrong gradients, and the rule of which tensors an op saves (exp
//     its result, log its input, mul the other operand only when that one's gradient is wanted,
//     mean its input along dims), with each rule reading only those (relu its result);
//   - the randomised differential tests of both (inplace.ts) run as the autograd area's
//     reliability rows (reliability.ts): random programs with random in-place writes, and
//     random pairs of overlapping views, each against torch's decision; and log_softmax and
//     cross_entropy of rows offset far from 0 against a float64 reference (offset_rows.ts).
import { afterAll, beforeAll, describe, expect, test } from "bun:test"
import { Effect, ManagedRuntime } from "effect"
import { compile, Controller, eager, grad, noGrad, ops, opsOn, type ControllerApi, type Mesh, type RemoteTensor } from "../../src/controller/index.ts"
import { SGD } from "../../src/optim/index.ts"
import { describeUnless } from "../skip.ts"
import { torchMissing } from "../torch.ts"
import { host } from "../worker/build.ts"

let rt: ManagedRuntime.ManagedRuntime<Controller, unknown>
let mesh: Mesh
beforeAll(async () => {
  rt = ManagedRuntime.make(Controller.local({ world: 1, functionPath: [new URL("../..", import.meta.url).pathname], onWorkerLine: () => {} }))
  const ctl: ControllerApi = await rt.runPromise(Effect.service(Controller))
  mesh = await rt.runPromise(ctl.mesh({ dp: 1 }))
}, 60_000)
afterAll(() => rt?.dispose())

const values = (t: RemoteTensor): Promise<number[]> => rt.runPromise(t.fetch()).then((h) => [...h.toArray()].map(Number))
const tensor = (data: number[], shape: number[] = [data.length]): RemoteTensor<"f64"> => opsOn(mesh).clone(host("f64", shape, data) as never) as RemoteTensor<"f64">
/** The refusal of synchronous model code: its reason and message, or undefined when it ran. */
const refusal = (f: () => unknown) => rt.runPromise(eager(f).pipe(Effect.as(undefined), Effect.catchTag("ControllerError", (e) => Effect.succeed({ reason: e.reason, message: e.message }))))
const MODIFIED = /^one of the variables needed for gradient computation has been modified by an inplace operation: RemoteTensor\(\d+ f64\[\d*\] on Mesh\(dp=1\)\), saved by ops\.(\w+) \(called at .*inplace\.test\.ts:\d+:\d+\)\), is at version (\d+); expected version (\d+) instead$/

describe("the version counter", () => {
  test("every in-place write moves it; views and detach() share their base's; a fresh result starts at 0", async () => {
    const x = tensor([1, 2, 3, 4]), v = x.narrow(0, 1, 2), d = x.detach(), r = x.reshape([2, 2])
    expect([x.version, v.version, d.version, r.version]).toEqual([0, 0, 0, 0])
    v.add_(1)
    expect([x.version, v.version, d.version, r.version]).toEqual([1, 1, 1, 1])
    ops.copy_(d, tensor([0, 0, 0, 0]))
    expect(x.version).toBe(2)
    // An inner dim's narrow is a view too (strided, as torch's); a reshape torch would copy is memory of its own, as an out-of-place result is.
    const col = r.narrow(1, 0, 1), flat = r.t().reshape([4]), y = x.add(1)
    col.mul_(2)
    flat.mul_(2)
    y.mul_(2)
    expect([x.version, col.version, flat.version, y.version]).toEqual([3, 3, 1, 1])
    // A function called with mutates (as a user function is), and an optimizer step's in-place updates.
    await rt.runPromise(mesh.run("ops.add_", [x, 1], {}, { mutates: [x] }))
    expect(x.version).toBe(4)
    // An in-place collective writes its input; one that is not in place makes a fresh result.
    const reduced = await rt.runPromise(mesh.reduce(x, "dp", "sum"))
    await rt.runPromise(mesh.reduce(x, "dp", "sum", { inplace: true }))
    expect([x.version, reduced.version]).toEqual([5, 0])
    const w = tensor([1, 2]).requiresGrad_()
    w.mul(w).sum().backward()
    const before = w.version
    new SGD([w], { lr: 0.1 }).step()
    expect(w.version).toBe(before + 1)
  })
})

describe("the version counter through compile", () => {
  test("each replay of a step moves the version of what it writes in place: an argument, and a captured tensor through a view", async () => {
    const captured = tensor([1, 2, 3, 4])
    const step = compile((x: RemoteTensor) => {
      x.mul_(2)
      captured.narrow(0, 0, 2).add_(1)
      return x.add(1)
    })
    const x = tensor([1, 2]), w = tensor([3, 4]).requiresGrad_()
    for (let call = 1; call <= 3; call++) {
      const [vx, vc] = [x.version, captured.version]
      // A node that saved x before the call: the call's write to x makes its backward refused.
      const loss = x.mul(w).sum(), kept = w.mul(w).sum()
      await rt.runPromise(step(x))
      expect(x.version).toBeGreaterThan(vx)
      expect(captured.version).toBeGreaterThan(vc)
      expect((await refusal(() => loss.backward()))?.reason).toBe("modified-inplace")
      kept.backward()
    }
    expect(step.traces).toBe(1)
    expect(await values(x)).toEqual([8, 16])
    expect(await values(captured)).toEqual([4, 5, 3, 4])
  })
})

describe("backward after an in-place write", () => {
  test("x in x.mul(w) changed before backward: refused (it gave grad w 20 where it is 2), naming x, the op and the call site; .grad is untouched", async () => {
    const x = tensor([2]), w = tensor([3]).requiresGrad_()
    const loss = x.mul(w).sum()
    noGrad(() => x.mul_(10))
    const r = await refusal(() => loss.backward())
    expect(r?.reason).toBe("modified-inplace")
    expect(r?.message).toMatch(MODIFIED)
    expect(r?.message).toContain(`${x}`)
    expect(r!.message.match(MODIFIED)!.slice(1)).toEqual(["mul", "1", "0"])
    expect(w.grad).toBeUndefined()
  })

  test("a leaf changed under noGrad after its use: refused where the op saved it, not where it did not", async () => {
    const w = tensor([0.5, 2]).requiresGrad_()
    const logged = w.log().sum(), exped = w.exp().sum(), summed = w.sum()
    noGrad(() => w.add_(1))
    expect((await refusal(() => logged.backward()))?.message).toMatch(/saved by ops\.log/)
    // exp saved its result, which did not change; sum saved nothing: torch's gradients.
    exped.backward()
    expect(await values(w.grad!)).toEqual([Math.exp(0.5), Math.exp(2)])
    summed.backward()
    expect(await values(w.grad!)).toEqual([Math.exp(0.5) + 1, Math.exp(2) + 1])
  })

  test("a detach() of a saved tensor changed in place: refused", async () => {
    const w = tensor([1, 2]).requiresGrad_()
    const h = w.mul(2), y = h.mul(h).sum()
    h.detach().add_(1)
    expect((await refusal(() => y.backward()))?.message).toMatch(/saved by ops\.mul .* is at version 1; expected version 0 instead/)
    // grad() of an intermediate is refused the same way; a node that saved its result is hit by a write to the result only.
    const e = w.exp(), z = e.sum()
    noGrad(() => e.mul_(2))
    expect((await refusal(() => grad(z, [w])))?.message).toMatch(/saved by ops\.exp/)
  })

  test("mean along a dim saves its input, over everything nothing (torch 1.13's mean.dim and mean)", async () => {
    const w = tensor([1, 2, 3, 4], [2, 2]).requiresGrad_()
    const along = w.mean(-1).sum(), all = w.mean()
    noGrad(() => w.mul_(2))
    expect((await refusal(() => along.backward()))?.message).toMatch(/saved by ops\.mean/)
    all.backward()
    expect(await values(w.grad!)).toEqual([0.25, 0.25, 0.25, 0.25])
  })

  test("a rule reads only what its op saved: relu its result, div's divisor gradient its operands (torch's gradients after writes torch allows)", async () => {
    const x = tensor([-1, 2, 3]).requiresGrad_()
    const r = x.relu().sum()
    // relu saved its result: its input may change, and the gradient is still where the input was positive.
    noGrad(() => x.sub_(2.5))
    r.backward()
    expect(await values(x.grad!)).toEqual([0, 1, 1])
    const a = tensor([1, 4]), b = tensor([2, 4]).requiresGrad_()
    const q = a.div(b)
    // div saved its operands, not its result: the result may change, and d(a/b)/db = -a/b^2.
    q.detach().mul_(3)
    q.sum().backward()
    expect(await values(b.grad!)).toEqual([-0.25, -0.25])
  })

  test("mul saves the other operand only for the input whose gradient is wanted (torch's rule)", async () => {
    const x = tensor([2]), w = tensor([3]).requiresGrad_()
    const loss = x.mul(w).sum()
    // w is not saved (x does not require grad): changing it leaves grad w = x.
    noGrad(() => w.mul_(5))
    loss.backward()
    expect(await values(w.grad!)).toEqual([2])
  })
})

describeUnless(torchMissing())("against torch 1.13", () => {
  test("the reliability rows (default mode) all hold: random in-place programs, overlapping view pairs, and log_softmax and cross_entropy of rows offset far from 0 against f64", async () => {
    const { run } = await import("./reliability.ts")
    const rows = await run("default")
    expect(rows.length).toBe(3)
    for (const r of rows) expect({ check: r.check, held: r.held, detail: r.detail }).toEqual({ check: r.check, held: r.tries, detail: r.detail })
  }, 300_000)
})
