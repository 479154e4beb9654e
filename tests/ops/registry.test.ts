// The op registry's pure part: binding arguments as torch does (position or keyword, defaults,
// refusals), the declared rules, the collective plan, and that the controller's import graph
// never reaches native code.
import { describe, expect, test } from "bun:test"
import { readFileSync } from "node:fs"
import { dirname, resolve } from "node:path"
import { planCollective } from "../../src/ops/collectives.ts"
import { isTensorMeta, type TensorMeta } from "../../src/ops/meta.ts"
import { inferOutputs, OPS, opNamed, signatures, UNKNOWN_TENSOR } from "../../src/ops/registry.ts"
import { DOC, documented, opsTable } from "../../scripts/opsdoc.ts"
import { infer, refusal, t } from "./infer.ts"

const ROOT = new URL("../..", import.meta.url).pathname

describe("binding a call to an op's parameters", () => {
  test("by position or by keyword, with defaults, gives the same result", () => {
    const x = t("f32", 2, 3)
    expect(infer("sum", [x, 1])).toEqual(infer("sum", [x], { dim: 1 }))
    expect(infer("sum", [x], { dim: 1, keepdim: true })).toEqual([t("f32", 2, 1)])
    expect(infer("sum", [x])).toEqual([t("f32")])
    expect(infer("to", [x], { dtype: "f64" })).toEqual([t("f64", 2, 3)])
    expect(infer("to", [x, "i32"])).toEqual([t("i32", 2, 3)])
    expect(infer("zeros", [[2, 2]], { dtype: "i64" })).toEqual([t("i64", 2, 2)])
    expect(infer("zeros", [4])).toEqual([t("f32", 4)])
  })

  test("an unknown keyword is refused, naming it and the signature", () => {
    expect(refusal(() => infer("sum", [t("f32", 3)], { axis: 0 }))).toBe("ops.sum: unexpected keyword argument 'axis' (sum(input, dim=None, keepdim=False, *, dtype=None))")
  })

  test("a wrong type, a missing argument, one given twice, too many positionals", () => {
    expect(refusal(() => infer("sum", [t("f32", 3)], { keepdim: 1 }))).toMatch(/keepdim must be a boolean, got number/)
    expect(refusal(() => infer("to", [t("f32", 3)], { dtype: "float32" }))).toMatch(/dtype must be a dtype \(f32, /)
    expect(refusal(() => infer("matmul", [t("f32", 2, 2)]))).toMatch(/missing argument 'other'/)
    expect(refusal(() => infer("sum", [t("f32", 3), 0], { dim: 0 }))).toMatch(/got two values for 'dim'/)
    expect(refusal(() => infer("neg", [t("f32", 3), 1]))).toMatch(/takes 1 positional argument/)
    expect(refusal(() => infer("zeros", [[2, -1]]))).toMatch(/size must be a size or a list of sizes/)
    expect(refusal(() => infer("add", ["a", 1]))).toMatch(/input must be a tensor or a number, got string/)
  })

  test("keyword-only parameters are refused by position", () => {
    expect(refusal(() => infer("zeros", [[2], "i32"]))).toMatch(/takes 1 positional argument/)
  })

  test("null asks for an optional parameter's default", () => {
    expect(infer("sum", [t("f32", 2, 3), null])).toEqual([t("f32")])
    expect(refusal(() => infer("matmul", [t("f32", 2, 2), null]))).toMatch(/missing argument 'other'/)
  })

  test("an input of unknown metadata is still bound and checked; its results are unknown", () => {
    const sum = opNamed("sum")!
    expect(inferOutputs(sum, [UNKNOWN_TENSOR], { dim: 0 }, false)).toEqual([undefined])
    expect(inferOutputs(opNamed("add_")!, [UNKNOWN_TENSOR, 1], {}, false)).toEqual([])
    expect(() => inferOutputs(sum, [UNKNOWN_TENSOR], { axis: 0 }, false)).toThrow(/unexpected keyword argument 'axis'/)
  })

  test("every op has a signature; in-place ops define nothing", () => {
    const all = signatures()
    expect(all.length).toBe(Object.keys(OPS).length)
    expect(all).toContain("ops.arange(start, end=None, step=1, *, dtype=None)")
    for (const op of Object.values(OPS)) if (op.mutates) expect(op.results).toBe(0)
  })

  test("docs/protocol.md lists every op as the registry declares it (else: bun run scripts/opsdoc.ts)", () => {
    const doc = documented(readFileSync(DOC, "utf8"))
    expect(doc).toBe(opsTable())
    for (const name of Object.keys(OPS)) expect(doc).toContain(`\`ops.${name}(`)
  })

  test("a name that is no op, or an inherited property, is not found", () => {
    expect(opNamed("nope")).toBeUndefined()
    expect(opNamed("constructor")).toBeUndefined()
    expect(opNamed("toString")).toBeUndefined()
  })
})

describe("the collective plan", () => {
  const x = t("f32", 4, 3)
  test("each reduction and scatter picks its collective and result", () => {
    expect(planCollective(x, 4, "sum", false, false)).toEqual({ collective: "all_reduce", result: x })
    expect(planCollective(x, 2, "stack", false, false)).toEqual({ collective: "all_gather", result: t("f32", 2, 4, 3) })
    expect(planCollective(x, 4, "avg", true, false)).toEqual({ collective: "reduce_scatter", result: t("f32", 3) })
    expect(planCollective(x, 3, "stack", true, true)).toEqual({ collective: "all_to_all", result: x })
  })
  test("what cannot run says why", () => {
    expect(planCollective(x, 2, "stack", false, true)).toMatch(/cannot be in place/)
    expect(planCollective(x, 4, "sum", true, true)).toMatch(/cannot be in place/)
    expect(planCollective(x, 3, "sum", true, false)).toMatch(/needs dim 0 of f32\[4, 3\] to equal the group size 3/)
    expect(planCollective(x, 5, "stack", true, false)).toMatch(/split into 5 chunks/)
    expect(planCollective(t("bool", 2), 2, "avg", false, false)).toMatch(/avg is not defined/)
  })
})

describe("metadata", () => {
  test("a tensor meta needs a known dtype and a shape array", () => {
    expect(isTensorMeta(t("f32", 2))).toBe(true)
    expect(isTensorMeta({ dtype: "float", shape: [2] })).toBe(false)
    expect(isTensorMeta({ dtype: "f32", shape: 2 })).toBe(false)
  })
})

/**
 * The modules `entry` imports (values, not types), transitively: each with the chain that reached
 * it. `onDemand`: also follow require() calls, which load a module only when the code runs them.
 */
const importGraph = (entry: string, onDemand = true): Map<string, string[]> => {
  const transpiler = new Bun.Transpiler({ loader: "ts" })
  const seen = new Map<string, string[]>([[entry, [entry]]])
  const queue = [entry]
  while (queue.length > 0) {
    const file = queue.shift()!
    for (const { path, kind } of transpiler.scanImports(readFileSync(file, "utf8"))) {
      if (!onDemand && kind === "require-call") continue
      const target = path.startsWith(".") ? resolve(dirname(file), path) : path
      if (seen.has(target)) continue
      seen.set(target, [...seen.get(file)!, target])
      if (target.startsWith("/") && target.endsWith(".ts")) queue.push(target)
    }
  }
  return seen
}

describe("the controller loads no native code", () => {
  for (const entry of ["src/controller/index.ts", "src/ops/registry.ts"]) {
    test(`${entry} does not reach bun:ffi or ffi/`, () => {
      const graph = importGraph(resolve(ROOT, entry), false)
      expect(graph.size).toBeGreaterThan(3)
      const native = [...graph].filter(([m]) => m === "bun:ffi" || m.startsWith(resolve(ROOT, "ffi") + "/"))
      expect(native.map(([, chain]) => chain.map((m) => m.replace(ROOT, "")).join(" -> "))).toEqual([])
    })
    test(`${entry} loads native code on demand only for shared memory (src/net/shm.ts's first segment)`, () => {
      const native = [...importGraph(resolve(ROOT, entry))].filter(([m]) => m === "bun:ffi" || m.startsWith(resolve(ROOT, "ffi") + "/"))
      const by = native.map(([, chain]) => chain.at(-2)!.replace(ROOT, ""))
      expect(by.filter((m) => m !== "src/net/shm.ts")).toEqual([])
    })
  }
  test("the worker's kernel table does reach it (the check can fail)", () => {
    expect(importGraph(resolve(ROOT, "src/worker/kernels/table.ts")).has("bun:ffi")).toBe(true)
  })
})
