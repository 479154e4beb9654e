// One path rule for exportFile and importFile: a relative path is under the checkpoint root
// (exportFile writes there on the controller's host, importFile reads it back on the workers),
// whatever the controller's folder; a path leading out of the root, or a relative one with no
// root, is refused. The package's python/monarch_safetensors.py (standard library and torch
// 1.13 only) loads an export into a torch module, the README's line, and torch's forward pass
// equals the mesh's; it reads every dtype bit for bit and refuses a truncated file.
import { afterAll, expect, test } from "bun:test"
import { Effect } from "effect"
import { existsSync, mkdtempSync, readFileSync, rmSync, truncateSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { Controller, ControllerError, eager, exportFile, importFile, opsOn, shard, type HostTensor, type RemoteTensor } from "../../src/controller/index.ts"
import { describeUnless } from "../skip.ts"
import { PYTHON, torchMissing } from "../torch.ts"

const ROOT = join(import.meta.dir, "../..")
const root = mkdtempSync(join(tmpdir(), "monarch-torchload-"))
afterAll(() => rmSync(root, { recursive: true, force: true }))
const README = readFileSync(join(ROOT, "README.md"), "utf8")

/** The README's python line that loads an export into a torch module. */
const readmeLine = README.split("\n").find((l) => l.includes("monarch_safetensors.load_into("))

const python = (code: string) => {
  const r = Bun.spawnSync([PYTHON, "-c", code], { cwd: root, env: { ...process.env, PYTHONPATH: join(ROOT, "python"), PYTHONDONTWRITEBYTECODE: "1" }, stdout: "pipe", stderr: "pipe" })
  return { status: r.exitCode, stdout: r.stdout.toString(), stderr: r.stderr.toString() }
}

describeUnless(torchMissing())("exports under the checkpoint root, loaded in torch 1.13 by the package's reader", () => {
  test("a relative exportFile path is under the checkpoint root, where importFile reads it; torch loads it into a Linear with the README's line", async () => {
    const ours = await Effect.runPromise(Effect.gen(function* () {
      const mesh = yield* (yield* Controller).mesh({ tp: 2 })
      const on = opsOn(mesh)
      const { w, b, x, ids, half } = yield* eager(() => {
        const w = on.randn([2, 6], { seed: 3 }).add(on.arange(2).reshape([2, 1]).to("f32")).place({ tp: shard(0) })
        const b = on.randn([4], { seed: 4 }), x = on.randn([3, 6], { seed: 5 })
        return { w, b, x, ids: on.arange(5).mul(7), half: on.randn([3], { seed: 6 }).to("bf16") }
      })
      const written = yield* exportFile(mesh, { params: { weight: w, bias: b }, x, ids, half }, "linear/model.safetensors")
      const back = yield* importFile(mesh, "linear/model.safetensors", { "params.weight": { tp: shard(0) } })
      const wb = yield* mesh.fetchAll(back.get("params.weight")!), w0 = yield* mesh.fetchAll(w)
      const whole = yield* mesh.reduce(w, "tp", "stack")
      const out = yield* eager(() => x.matmul(whole.reshape([4, 6]).t()).add(b))
      const values = (t: RemoteTensor) => t.fetch().pipe(Effect.map((h) => [...(h as HostTensor).toArray()].map(Number)))
      return {
        written,
        sameBlocks: wb.map((h) => [...(h as HostTensor).data]).join() === w0.map((h) => [...(h as HostTensor).data]).join(),
        out: yield* values(out), x: yield* values(x), ids: yield* values(ids), half: yield* values(half),
      }
    }).pipe(Effect.provide(Controller.local({ world: 2, checkpoints: root }))))
    const file = join(root, "linear/model.safetensors")
    expect(ours.written.path).toBe(file)
    expect(existsSync(file)).toBe(true)
    expect(existsSync(join(process.cwd(), "linear/model.safetensors"))).toBe(false)
    expect(ours.sameBlocks).toBe(true)

    expect(readmeLine).toBeDefined()
    const torch = python([
      "import json, torch, monarch_safetensors",
      "model = torch.nn.Linear(6, 4)",
      readmeLine!.trim().replace(/#.*$/, "").replace(/"ckpt\/[^"]*"/, JSON.stringify(file)),
      `t = monarch_safetensors.load_file(${JSON.stringify(file)})`,
      "out = model(t['x'])",
      "print(json.dumps({'out': out.detach().reshape(-1).tolist(), 'dtypes': {k: str(v.dtype) for k, v in t.items()}, 'ids': t['ids'].tolist(), 'half': t['half'].float().tolist()}))",
    ].join("\n"))
    expect(torch.stderr).toBe("")
    const r = JSON.parse(torch.stdout) as { out: number[]; dtypes: Record<string, string>; ids: number[]; half: number[] }
    expect(r.dtypes).toEqual({ "params.weight": "torch.float32", "params.bias": "torch.float32", x: "torch.float32", ids: "torch.int64", half: "torch.bfloat16" })
    expect(r.ids).toEqual(ours.ids)
    expect(r.half).toEqual(ours.half)
    r.out.forEach((v, i) => expect(Math.abs(v - ours.out[i]!)).toBeLessThan(1e-5))

    // A truncated file is refused with the reason, not read as garbage.
    const cut = join(root, "cut.safetensors")
    writeFileSync(cut, readFileSync(file))
    truncateSync(cut, readFileSync(file).byteLength - 3)
    const refused = python(`import monarch_safetensors\nmonarch_safetensors.load_file(${JSON.stringify(cut)})`)
    expect(refused.status).not.toBe(0)
    expect(refused.stderr).toMatch(/ValueError: .*cut\.safetensors: .* has data_offsets \[\d+, \d+\], not \d+ bytes inside the data/)
  }, 90_000)

  test("exportFile refuses a relative path leading out of the checkpoint root, and a relative path when the controller has no root", async () => {
    const refusals = await Effect.runPromise(Effect.gen(function* () {
      const mesh = yield* (yield* Controller).mesh({ all: 1 })
      const t = opsOn(mesh).ones([2])
      return [yield* Effect.flip(exportFile(mesh, { t }, "../out.safetensors")), yield* Effect.flip(exportFile(mesh, { t }, "."))]
    }).pipe(Effect.provide(Controller.local({ world: 1, checkpoints: root }))))
    for (const e of refusals) {
      expect(e).toBeInstanceOf(ControllerError)
      expect(e.message).toContain("leads out of the checkpoint root")
    }
    // No `checkpoints` and no MONARCH_CHECKPOINT_DIR here: no root.
    const saved = process.env.MONARCH_CHECKPOINT_DIR
    delete process.env.MONARCH_CHECKPOINT_DIR
    try {
      const none = await Effect.runPromise(Effect.gen(function* () {
        const mesh = yield* (yield* Controller).mesh({ all: 1 })
        return yield* Effect.flip(exportFile(mesh, { t: opsOn(mesh).ones([2]) }, "x.safetensors"))
      }).pipe(Effect.provide(Controller.local({ world: 1 }))))
      expect(none.message).toMatch(/a relative path is under the checkpoint root, and this controller has none/)
    } finally {
      if (saved !== undefined) process.env.MONARCH_CHECKPOINT_DIR = saved
    }
  }, 60_000)
})
