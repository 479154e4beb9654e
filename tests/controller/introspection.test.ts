// What a controller program can see of its job: the level MONARCH_LOG sets in the shell reaches
// the workers Controller.local starts (and with it why `auto` chose cpu, logged at info), each
// worker's pid, host and device from the API, and sub-meshes that print their place in the
// mesh they were sliced from.
import { afterAll, beforeAll, describe, expect, test } from "bun:test"
import { Effect, ManagedRuntime } from "effect"
import { Controller, type ControllerApi } from "../../src/controller/index.ts"
import { isAlive } from "../processes.ts"

/** Starts four local workers with MONARCH_LOG as the shell would have it; keeps their lines. */
const start = async (log: string | undefined, device: string) => {
  const lines: string[] = []
  const before = process.env.MONARCH_LOG
  if (log === undefined) delete process.env.MONARCH_LOG
  else process.env.MONARCH_LOG = log
  const rt = ManagedRuntime.make(Controller.local({ world: 4, device, onWorkerLine: (r, l) => void lines.push(`[${r}] ${l}`) }))
  try {
    return { rt, lines, ctl: await rt.runPromise(Effect.service(Controller)) }
  } finally {
    if (before === undefined) delete process.env.MONARCH_LOG
    else process.env.MONARCH_LOG = before
  }
}

describe("Controller.local with MONARCH_LOG=info and device auto", () => {
  let job: { rt: ManagedRuntime.ManagedRuntime<Controller, unknown>; lines: string[]; ctl: ControllerApi }
  beforeAll(async () => void (job = await start("info", "auto")), 60_000)
  afterAll(() => job?.rt.dispose())

  test("the workers log at info, saying why auto chose cpu", () => {
    const chose = job.lines.filter((l) => /INFO .* on cpu \(MONARCH_DEVICE=auto chose cpu: .+\)/.test(l))
    expect(chose.length === 4 ? chose.length : job.lines.join("\n")).toBe(4)
  })

  test("ctl.workers() gives each rank's pid, host and device; ctl.device the device", () => {
    const workers = job.ctl.workers()
    expect(workers.map((w) => w.rank)).toEqual([0, 1, 2, 3])
    expect(new Set(workers.map((w) => w.pid)).size).toBe(4)
    for (const w of workers) {
      expect(isAlive(w.pid)).toBe(true)
      expect(w.pid).not.toBe(process.pid)
      expect({ host: w.host, device: w.device }).toEqual({ host: "127.0.0.1", device: "cpu" })
    }
    expect(job.ctl.device).toBe("cpu")
  })

  test("sub-meshes print their place in the parent, so errors about them are unambiguous", async () => {
    const [pp1, cell, flat, refusal] = await job.rt.runPromise(Effect.gen(function* () {
      const mesh = yield* job.ctl.mesh({ pp: 2, dp: 2 })
      const pp1 = yield* mesh.slice({ pp: 1 })
      const cell = yield* pp1.slice({ dp: 0 })
      const flat = yield* pp1.flatten("all")
      const t = yield* pp1.call("ops.ones", [[2]])
      const refusal = yield* Effect.flip(job.ctl.send(t, mesh))
      return [String(pp1), String(cell), String(flat), refusal.message]
    }))
    expect(pp1).toBe("Mesh(pp=1 of 2, dp=2)")
    expect(cell).toBe("Mesh(pp=1 of 2, dp=0 of 2)")
    expect(flat).toBe("Mesh(pp=1 of 2, all=2)")
    expect(refusal).toContain("from Mesh(pp=1 of 2, dp=2) to Mesh(pp=2, dp=2)")
  })
})

test("without MONARCH_LOG, Controller.local's workers log warnings only", async () => {
  const job = await start(undefined, "cpu")
  try {
    expect(job.lines.filter((l) => / INFO /.test(l))).toEqual([])
  } finally {
    await job.rt.dispose()
  }
}, 60_000)
