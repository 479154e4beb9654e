// RemoteTensor's API is declared in one class (tensor.ts): a process that loads that module
// alone, and nothing that used to patch the class (ops, autograd, placement, printing), finds
// every method on it: the op methods from the registry, fetch, placement, autograd, inspect.
import { expect, test } from "bun:test"
import { join, resolve } from "node:path"

const ROOT = resolve(import.meta.dir, "../..")

test("a process that imports only tensor.ts finds the ops, fetch, placement, autograd and inspect on RemoteTensor", () => {
  const probe = `
    const { RemoteTensor } = await import(${JSON.stringify(join(ROOT, "src/controller/tensor.ts"))})
    const has = (n) => n in RemoteTensor.prototype
    const names = ["add", "matmul", "relu", "sum", "view", "add_", "fetch", "place", "placement", "requiresGrad", "requiresGrad_", "grad", "backward", "detach"]
    console.log(JSON.stringify({ missing: names.filter((n) => !has(n)), inspect: has(Symbol.for("nodejs.util.inspect.custom")) }))
  `
  const run = Bun.spawnSync([process.execPath, "-e", probe], { cwd: ROOT, stderr: "pipe" })
  expect(run.stderr.toString()).toBe("")
  expect(JSON.parse(run.stdout.toString())).toEqual({ missing: [], inspect: true })
})
