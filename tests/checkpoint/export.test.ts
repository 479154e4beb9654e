// Consolidated export: a 2x2 mesh's state gathered into one safetensors file that torch 1.13
// reads (parsed with the standard library and numpy) and runs the mesh's forward pass on; and
// the reverse: a file torch's side wrote, imported onto meshes of tp 4 and tp 1, re-sharded.
import { afterAll, expect, test } from "bun:test"
import { Effect } from "effect"
import { mkdtempSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { Controller, eager, exportFile, importFile, opsOn, shard, type HostTensor } from "../../src/controller/index.ts"
import { describeUnless } from "../skip.ts"
import { PYTHON, torchMissing } from "../torch.ts"

const ROOT = mkdtempSync(join(tmpdir(), "monarch-export-"))
afterAll(() => rmSync(ROOT, { recursive: true, force: true }))
const SCRIPT = join(import.meta.dir, "safetensors_torch.py")
const missing = torchMissing()

const python = (...args: string[]) => {
  const r = Bun.spawnSync([PYTHON, SCRIPT, ...args], { stderr: "pipe" })
  if (r.exitCode !== 0) throw new Error(`${SCRIPT} ${args.join(" ")}: ${r.stderr.toString()}`)
  return r.stdout.toString()
}

const local = () => Controller.local({ world: 4, checkpoints: ROOT })

describeUnless(missing)("consolidated export and import (torch 1.13)", () => {
  test("a tp-sharded weight, gathered whole: torch's forward pass on the file matches the mesh's", async () => {
    const ours = await Effect.runPromise(Effect.gen(function* () {
      const mesh = yield* (yield* Controller).mesh({ dp: 2, tp: 2 })
      const on = opsOn(mesh)
      const { w, x, y } = yield* eager(() => {
        const w = on.randn([4, 6], { seed: 21 }).add(on.arange(4).reshape([4, 1]).to("f32")).place({ tp: shard(0) })
        const x = on.randn([3, 6], { seed: 22 })
        return { w, x, y: x.matmul(w.t()) }
      })
      const stacked = yield* mesh.reduce(y, "tp", "stack")
      const written = yield* exportFile(mesh, { params: { w }, x, y: stacked, step: 7 }, join(ROOT, "model.safetensors"))
      const blocks = yield* mesh.fetchAll(w)
      const sum = blocks.filter((_, i) => i < 2).flatMap((b) => [...(b as HostTensor).toArray() as Float32Array]).reduce((a, b) => a + b, 0)
      return { bytes: written.bytes, sum }
    }).pipe(Effect.provide(local())))
    const torch = JSON.parse(python("check", join(ROOT, "model.safetensors")))
    expect(torch.tensors).toEqual({ "params.w": ["torch.float32", [8, 6]], x: ["torch.float32", [3, 6]], y: ["torch.float32", [2, 3, 4]] })
    expect(torch.max_error).toBeLessThan(1e-5)
    expect(Math.abs(torch.w_sum - ours.sum)).toBeLessThan(1e-3)
    expect(torch.tree).toEqual({ params: { w: { $tensor: "params.w" } }, x: { $tensor: "x" }, y: { $tensor: "y" }, step: 7 })
    expect(ours.bytes).toBe(Bun.file(join(ROOT, "model.safetensors")).size)
  }, 60_000)

  test("a file torch's side wrote starts meshes of tp 4 and tp 1: each rank holds its rows of w", async () => {
    python("write", join(ROOT, "torch.safetensors"))
    const whole = Array.from({ length: 48 }, (_, i) => Math.fround(i / 7))
    await Effect.runPromise(Effect.gen(function* () {
      const ctl = yield* Controller
      for (const dims of [{ dp: 1, tp: 4 }, { dp: 4, tp: 1 }, { dp: 2, tp: 2 }]) {
        const mesh = yield* ctl.mesh(dims)
        const t = yield* importFile(mesh, "torch.safetensors", { w: { tp: shard(0) } })
        const rows = 8 / dims.tp
        const blocks = yield* mesh.fetchAll(t.get("w")!)
        blocks.forEach((b, i) => {
          const tp = i % dims.tp
          expect((b as HostTensor).shape).toEqual([rows, 6])
          expect([...(b as HostTensor).toArray() as Float32Array]).toEqual(whole.slice(tp * rows * 6, (tp + 1) * rows * 6))
        })
        const ids = (yield* mesh.fetch(t.get("ids")!)) as HostTensor
        expect([...ids.toArray() as BigInt64Array]).toEqual([5n, -4n, 3n, 2n ** 40n, -(2n ** 40n)])
      }
    }).pipe(Effect.provide(local())))
  }, 60_000)
})
