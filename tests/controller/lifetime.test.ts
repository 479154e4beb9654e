// Deterministic release (src/controller/lifetime.ts) and the bound on commands in flight, against a
// controller core whose links decode every frame it writes (no processes): what a closing step
// scope sends, what the mesh counts, and when a step waits.
import { expect, spyOn, test } from "bun:test"
import { Effect, Exit, Fiber, Result } from "effect"
import { Core, type CoreOptions } from "../../src/controller/core.ts"
import { RemoteStream } from "../../src/controller/handles.ts"
import type { RemoteTensor } from "../../src/controller/tensor.ts"
import { escape, inStep, scoped, StepScope } from "../../src/controller/lifetime.ts"
import type { WorkerLink } from "../../src/controller/listener.ts"
import { createMesh } from "../../src/controller/mesh.ts"
import { opsOn } from "../../src/controller/ops.ts"
import { decodeWorkerMessage } from "../../src/protocol/codec.ts"
import type { WorkerMessage } from "../../src/protocol/messages.ts"
import { NDSlice } from "../../src/protocol/ndslice.ts"

/** A core of `world` ranks whose frames are decoded into `got[rank]` (each frame's messages, a group flattened). */
const setup = (world: number, options: Partial<CoreOptions> = {}) => {
  const core = new Core({ world, ...options })
  const got: WorkerMessage[][][] = Array.from({ length: world }, () => [])
  for (let rank = 0; rank < world; rank++) {
    const link: WorkerLink = {
      hello: { _tag: "WorkerHello", rank, world, pid: 1000 + rank, proof: new Uint8Array(32), device: "cpu" },
      host: "127.0.0.1",
      send: () => true,
      sendEncoded: (parts) => {
        const decoded = decodeWorkerMessage(Buffer.concat(parts.map((p) => Buffer.from(p))))
        if (Result.isFailure(decoded)) throw new Error(decoded.failure.message)
        const m = decoded.success
        got[rank]!.push(m._tag === "CommandGroup" ? [...m.commands] : [m])
        return true
      },
      sendRawForTestsOnly: () => {},
      close: () => {},
    }
    core.admit(link)
  }
  const mesh = createMesh(core, ["all"], NDSlice.contiguous([world]), new RemoteStream(core, core.newRef()))
  core.flush()
  for (const frames of got) frames.length = 0
  /** Every rank reports passing every command sent to it so far. */
  const caughtUp = () => {
    core.flush()
    for (let r = 0; r < world; r++) {
      const idents = got[r]!.flat().flatMap((m) => ("ident" in m ? [m.ident] : []))
      core.onMessage(r, { _tag: "Status", firstUncompletedIdent: Math.max(0, ...idents) + 1 })
    }
  }
  return { core, mesh, got, caughtUp }
}

const deletes = (frames: WorkerMessage[][]) => frames.flat().flatMap((m) => (m._tag === "DeleteRefs" ? [m] : []))

test("a step scope releases what it made but its result, in one DeleteRefs per rank; the mesh's counters follow", () => {
  const { core, mesh, got } = setup(2)
  const w = mesh.issue("ops.ones", [[4, 4]], {}, {})[0]!
  const before = { ...mesh.live }
  let made: RemoteTensor[] = []
  const loss = scoped(mesh, () => {
    const m = w.matmul(w), h = m.relu(), y = h.add(1)
    made = [m, h, y]
    return y.sum()
  })
  expect(made.every((t) => t.released)).toBe(true)
  expect(loss.released).toBe(false)
  expect(w.released).toBe(false)
  core.flush()
  for (let r = 0; r < 2; r++) {
    const d = deletes(got[r]!)
    expect(d.length).toBe(1)
    expect([...d[0]!.refs].sort()).toEqual(made.map((t) => t.ref.id).sort())
  }
  expect(mesh.live.refs).toBe(before.refs + 1)
  expect(mesh.live.bytes).toBe(before.bytes + 4)
  loss.release()
  expect(mesh.live).toEqual(before)
})

/** A message as a short word: the command's op, or the message's tag (a DeleteRefs with its refs). */
const word = (m: WorkerMessage): string =>
  m._tag === "CallFunction" ? String(m.function) : m._tag === "DeleteRefs" ? `delete ${m.refs.join(",")}` : m._tag

test("a release goes between the commands issued before and after it; releases in a row are one DeleteRefs, the same for every rank", () => {
  const { core, mesh, got } = setup(2)
  const on = opsOn(mesh)
  const a = on.ones([4]), b = on.ones([4])
  a.release()
  b.release()
  const c = on.ones([4])
  c.release()
  core.flush()
  for (let r = 0; r < 2; r++)
    expect({ rank: r, frame: got[r]![0]!.map(word) }).toEqual({ rank: r, frame: ["ops.ones", "ops.ones", `delete ${a.ref.id},${b.ref.id}`, "ops.ones", `delete ${c.ref.id}`] })
  expect(got[0]!.length).toBe(1)
})

test("scopes nest: what an inner scope returns joins the outer one; keep() and escape() hold past it; `using` closes it", () => {
  const { mesh } = setup(1)
  const w = mesh.issue("ops.ones", [[2]], {}, {})[0]!
  let inner: RemoteTensor | undefined, kept: RemoteTensor | undefined, grad: RemoteTensor | undefined, dropped: RemoteTensor | undefined
  {
    using outer = new StepScope(mesh)
    inner = scoped(mesh, () => w.add(1).mul(2))
    expect(inner.released).toBe(false)
    kept = outer.keep(w.add(3))
    grad = w.mul(5)
    escape(grad)
    dropped = w.sub(1)
    expect(outer.size).toBe(4)
  }
  expect(inner.released).toBe(true)
  expect(dropped.released).toBe(true)
  expect(kept.released).toBe(false)
  expect(grad.released).toBe(false)
})

test("a leaf's gradient made in a step scope outlives it; the step's other tensors do not", () => {
  const { mesh } = setup(1)
  const w = scoped(mesh, () => mesh.issue("ops.ones", [[3]], {}, {})[0]!.requiresGrad_())
  let square: RemoteTensor | undefined
  scoped(mesh, () => {
    square = w.mul(w)
    square.sum().backward()
  })
  expect(square!.released).toBe(true)
  expect(w.grad?.released).toBe(false)
})

test("inStep releases on failure too, and waits while the mesh has more commands in flight than the bound", async () => {
  const { core, mesh, got, caughtUp } = setup(2, { maxInFlight: 100 })
  const w = mesh.issue("ops.ones", [[2]], {}, {})[0]!
  let made: RemoteTensor | undefined
  const failed = await Effect.runPromiseExit(inStep(mesh, Effect.suspend(() => {
    made = w.add(1)
    return Effect.fail("no")
  })))
  expect(Exit.isFailure(failed)).toBe(true)
  expect(made!.released).toBe(true)
  caughtUp()
  for (let i = 0; i < 300; i++) w.add_(1)
  expect(mesh.inFlight).toBe(300)
  const sentBefore = got[0]!.length
  const step = Effect.runFork(inStep(mesh, Effect.sync(() => w.add(1))))
  await Bun.sleep(20)
  // Still waiting: nothing has passed the 300 commands, and the step has made nothing.
  expect(step.pollUnsafe()).toBeUndefined()
  // The waiting step asked the workers where they are, with the batch it flushed.
  expect(got[0]!.slice(sentBefore).flat().some((m) => m._tag === "RequestStatus")).toBe(true)
  expect(core.inFlight(mesh.ranks)).toBe(300)
  caughtUp()
  const y = await Effect.runPromise(Fiber.join(step))
  expect(y.released).toBe(false)
})

test("a released handle, once collected, is not deleted or uncounted again; a dropped one is", async () => {
  const { core, mesh, got } = setup(1)
  const before = mesh.live.refs
  const collected = spyOn(core, "collected")
  const released = new Set<number>(), dropped = new Set<number>()
  ;(() => {
    for (let i = 0; i < 50; i++) {
      const [t] = mesh.issue("ops.ones", [[2]], {}, {})
      t!.release()
      released.add(t!.ref.id)
      dropped.add(mesh.issue("ops.ones", [[2]], {}, {})[0]!.ref.id)
    }
  })()
  core.flush()
  for (const frames of got) frames.length = 0
  const ids = () => collected.mock.calls.map(([, id]) => id)
  for (let i = 0; i < 20 && ids().length < 50; i++) {
    Bun.gc(true)
    await Bun.sleep(10)
  }
  // GC did run the registry's callbacks: some dropped handles were deleted.
  expect(ids().length).toBeGreaterThan(0)
  expect(ids().filter((id) => released.has(id))).toEqual([])
  expect(ids().every((id) => dropped.has(id))).toBe(true)
  core.flush()
  expect(deletes(got[0]!).flatMap((d) => [...d.refs]).sort()).toEqual(ids().sort())
  expect(mesh.live.refs).toBe(before + 50 - ids().length)
  collected.mockRestore()
})

test("with gcRelease off, a dropped handle is reported as a leak and not deleted", async () => {
  const leaks: string[] = []
  const { core, mesh, got } = setup(1, { gcRelease: false, onLeak: (h) => void leaks.push(h) })
  const before = mesh.live.refs
  ;(() => {
    for (let i = 0; i < 50; i++) mesh.issue("ops.ones", [[2]], {}, {})
  })()
  core.flush()
  for (let i = 0; i < 20 && core.leaks < 50; i++) {
    Bun.gc(true)
    await Bun.sleep(10)
  }
  expect(core.leaks).toBeGreaterThan(0)
  expect(leaks.length).toBe(core.leaks)
  expect(leaks[0]).toMatch(/^RemoteTensor\(\d+ on Mesh\(all=1\)\)$/)
  core.flush()
  expect(deletes(got[0]!)).toEqual([])
  // Still on the workers, so still counted.
  expect(mesh.live.refs).toBe(before + 50)
})
