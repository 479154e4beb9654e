// Numerics against torch 1.13: each case runs as a built-in on a CPU worker and in one torch
// process (tests/ops/torch_ref.py) serving every case, and the two must agree: dtype, shape,
// and values within the tolerance of the result's dtype (TOLERANCE, the one table). Without
// torch the cases skip, saying so.
import { afterAll, beforeAll, expect, test } from "bun:test"
import { existsSync } from "node:fs"
import { HostTensor, type DType } from "../../src/protocol/values.ts"
import { call, createStream, fetch, host, ref } from "../worker/build.ts"
import { startWorkers, type Harness } from "../worker/harness.ts"
import { describeUnless } from "../skip.ts"

const PYTHON = "/usr/bin/python3"
const SERVER = new URL("./torch_ref.py", import.meta.url).pathname
const torchMissing = (): string | undefined => {
  if (!existsSync(PYTHON)) return `${PYTHON} not found`
  const r = Bun.spawnSync([PYTHON, "-c", "import torch"], { stderr: "pipe" })
  return r.exitCode === 0 ? undefined : `torch does not import in ${PYTHON}: ${r.stderr.toString().trim().split("\n").at(-1)}`
}
const missing = torchMissing()

/** |ours - torch| <= atol + rtol * |torch|, per result dtype; integers and bool exactly. */
const TOLERANCE: Readonly<Record<DType, { rtol: number; atol: number }>> = {
  f64: { rtol: 1e-12, atol: 1e-12 }, f32: { rtol: 2e-6, atol: 1e-6 }, f16: { rtol: 2e-3, atol: 1e-3 }, bf16: { rtol: 1.6e-2, atol: 1e-2 },
  i64: { rtol: 0, atol: 0 }, i32: { rtol: 0, atol: 0 }, u8: { rtol: 0, atol: 0 }, bool: { rtol: 0, atol: 0 },
}

/** A seeded tensor: values from a small LCG, integers in [-5, 5) (bool 0/1, u8 [0, 10)). */
let seed = 12345
const rnd = () => ((seed = (seed * 1103515245 + 12345) % 2 ** 31) / 2 ** 31)
interface T { readonly t: DType; readonly shape: number[]; readonly data: number[] }
const tensor = (t: DType, shape: number[], scale = 3): T => {
  const n = shape.reduce((a, b) => a * b, 1)
  const data = Array.from({ length: n }, () => t === "bool" ? Math.floor(rnd() * 2) : t === "u8" ? Math.floor(rnd() * 10)
    : t === "i32" || t === "i64" ? Math.floor(rnd() * 10) - 5 : Math.fround((rnd() * 2 - 1) * scale))
  return { t, shape, data }
}
const ints = (t: "i64", shape: number[], values: number[]): T => ({ t, shape, data: values })
const isT = (v: unknown): v is T => typeof v === "object" && v !== null && "t" in v && "data" in v
const toWire = (v: unknown): unknown => isT(v) ? host(v.t, v.shape, v.data) : Array.isArray(v) ? v.map(toWire) : v

interface Case { readonly name: string; readonly op: string; readonly args: unknown[]; readonly kwargs?: Record<string, unknown> }
const c = (name: string, op: string, args: unknown[], kwargs: Record<string, unknown> = {}): Case => ({ name, op, args, kwargs })

const f = (...s: number[]) => tensor("f32", s)
const CASES: Case[] = [
  // broadcasting and promotion
  c("add [3,4] + [4]", "add", [f(3, 4), f(4)]),
  c("mul [2,1,3] * [4,1]", "mul", [f(2, 1, 3), f(4, 1)]),
  c("sub [1] - [2,3]", "sub", [f(1), f(2, 3)]),
  c("add i64 + f32 promotes", "add", [tensor("i64", [3]), f(3)]),
  c("add i32 + i64", "add", [tensor("i32", [2, 3]), tensor("i64", [3])]),
  c("add f32 + f64", "add", [f(2, 2), tensor("f64", [2, 2])]),
  c("div i64 / i64 is true division", "div", [tensor("i64", [4]), ints("i64", [4], [1, 2, -3, 4])]),
  c("add bool + 2 is i64", "add", [tensor("bool", [3]), 2]),
  c("add i64 + 2.5 is f32", "add", [tensor("i64", [3]), 2.5]),
  c("mul f32 * 3 keeps f32", "mul", [f(2, 3), 3]),
  c("sub 1 - f32 (number first)", "sub", [1, f(3)]),
  c("maximum broadcast", "maximum", [f(3, 1), f(1, 4)]),
  c("pow f32 ^ 2", "pow", [f(4), 2]),
  c("lt [3,1] < [4]", "lt", [f(3, 1), f(4)]),
  c("eq i64 == f32", "eq", [tensor("i64", [3]), ints("i64", [3], [1, -2, 0])]),
  c("ge f32 >= 0.5", "ge", [f(5), 0.5]),
  c("empty broadcast [0,3] + [3]", "add", [f(0, 3), f(3)]),
  c("0-d + [2]", "add", [f(), f(2)]),
  // unary
  ...["neg", "abs", "exp", "tanh", "sigmoid", "relu"].map((op) => c(`${op} f32`, op, [f(2, 3)])),
  c("exp of i64 is f32", "exp", [tensor("i64", [4])]),
  ...["erf", "expm1", "sin", "cos", "reciprocal", "silu", "gelu"].map((op) => c(`${op} f32`, op, [f(2, 5)])),
  c("log1p f64", "log1p", [{ ...tensor("f64", [4]), data: [0, 1e-10, 0.5, 3] }]),
  c("rsqrt f32", "rsqrt", [{ ...f(3), data: [0.25, 1, 9] }]),
  c("gelu tanh form", "gelu", [f(2, 5)], { approximate: "tanh" }),
  c("gelu of f64", "gelu", [tensor("f64", [6])]),
  ...["floor", "ceil", "round", "trunc"].map((op) => c(`${op} f32, halves included`, op, [{ ...f(8), data: [-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 2.7, -2.2] }])),
  c("round of i64 is itself", "round", [tensor("i64", [4])]),
  c("sqrt f64", "sqrt", [{ ...tensor("f64", [4]), data: [0, 1, 2, 9] }]),
  c("log f32", "log", [{ ...f(3), data: [0.5, 1, 4] }]),
  c("clamp", "clamp", [f(6)], { min: -1, max: 0.5 }),
  // creation
  c("arange(5) is i64", "arange", [5]),
  c("arange(0, 1, 0.25) is f32", "arange", [0, 1, 0.25]),
  c("arange(2, 11, 3)", "arange", [2, 11, 3]),
  // reductions
  c("sum dim list keepdim", "sum", [f(2, 3, 4)], { dim: [0, 2], keepdim: true }),
  c("sum negative dim", "sum", [f(2, 3)], { dim: -1 }),
  c("sum of bool is i64", "sum", [tensor("bool", [5])]),
  c("sum of i32 is i64", "sum", [tensor("i32", [2, 3])], { dim: 1 }),
  c("mean all", "mean", [f(3, 4)]),
  c("mean dims", "mean", [f(2, 3, 4)], { dim: [1, 2] }),
  c("amax dim 0", "amax", [f(3, 4)], { dim: 0 }),
  c("amin dims keepdim", "amin", [f(2, 3, 4)], { dim: [-1, 0], keepdim: true }),
  c("prod dim", "prod", [f(3, 2)], { dim: 1 }),
  // nn
  c("softmax last dim", "softmax", [f(3, 5)], { dim: -1 }),
  c("softmax dim 0", "softmax", [f(4, 3)], { dim: 0 }),
  c("softmax large values", "softmax", [tensor("f32", [2, 4], 1000)], { dim: 1 }),
  c("log_softmax large values", "log_softmax", [tensor("f32", [3, 4], 1000)], { dim: 1 }),
  c("log_softmax f64 3-D middle dim", "log_softmax", [tensor("f64", [2, 3, 4])], { dim: 1 }),
  c("linear with bias", "linear", [f(4, 3), f(5, 3), f(5)]),
  c("linear 3-D input, no bias", "linear", [f(2, 4, 3), f(5, 3)]),
  c("cross_entropy mean", "cross_entropy", [f(4, 5), ints("i64", [4], [0, 4, 2, 1])]),
  c("cross_entropy sum, ignore_index", "cross_entropy", [f(4, 5), ints("i64", [4], [0, -100, 2, 1])], { reduction: "sum" }),
  c("cross_entropy none", "cross_entropy", [f(3, 4), ints("i64", [3], [3, 0, 1])], { reduction: "none" }),
  c("cross_entropy mean, ignored, label_smoothing", "cross_entropy", [f(4, 5), ints("i64", [4], [0, 7, 2, 1])], { ignore_index: 7, label_smoothing: 0.1 }),
  c("layer_norm with weight and bias", "layer_norm", [f(2, 3, 4), [4], f(4), f(4)]),
  c("layer_norm over two dims", "layer_norm", [f(2, 3, 4), [3, 4]]),
  c("embedding", "embedding", [ints("i64", [2, 3], [0, 4, 1, 1, 3, 2]), f(5, 3)]),
  // layout and indexing
  c("cat dim 1", "cat", [[f(2, 3), f(2, 1)]], { dim: 1 }),
  c("cat dim -1 promotes", "cat", [[f(2, 2), tensor("f64", [2, 3])]], { dim: -1 }),
  c("cat dim 0", "cat", [[f(1, 3), f(2, 3), f(0, 3)]]),
  c("stack dim 1", "stack", [[f(2, 3), f(2, 3)]], { dim: 1 }),
  c("expand", "expand", [f(3, 1), [2, 3, 4]]),
  c("permute", "permute", [f(2, 3, 4), [2, 0, 1]]),
  c("transpose negative dims", "transpose", [f(2, 3, 4), -1, 0]),
  c("t", "t", [f(2, 3)]),
  c("narrow", "narrow", [f(4, 5), 1, 1, 3]),
  c("select negative index", "select", [f(3, 4), 0, -1]),
  c("slice with a step", "slice", [f(3, 8), 1, 1, 7, 2]),
  c("slice negative start", "slice", [f(6)], { start: -4 }),
  c("flip two dims", "flip", [f(2, 3, 2), [0, 2]]),
  c("index_select", "index_select", [f(4, 3), 0, ints("i64", [3], [3, 0, 3])]),
  c("index_select dim 1", "index_select", [f(2, 4), 1, ints("i64", [2], [1, 2])]),
  c("gather", "gather", [f(3, 4), 1, ints("i64", [3, 2], [0, 3, 1, 1, 2, 0])]),
  c("reshape -1", "reshape", [f(2, 6), [3, -1]]),
  c("flatten", "flatten", [f(2, 3, 4)], { start_dim: 1 }),
  c("squeeze", "squeeze", [f(2, 1, 3, 1)], { dim: 1 }),
  c("unsqueeze -1", "unsqueeze", [f(2, 3), -1]),
  c("to f64", "to", [f(3)], { dtype: "f64" }),
  // matmul rules
  c("matmul 2-D", "matmul", [f(3, 4), f(4, 2)]),
  c("matmul 1-D @ 2-D", "matmul", [f(4), f(4, 2)]),
  c("matmul 2-D @ 1-D", "matmul", [f(3, 4), f(4)]),
  c("matmul 1-D @ 1-D", "matmul", [f(4), f(4)]),
  c("matmul batched @ 2-D", "matmul", [f(2, 3, 4), f(4, 5)]),
  c("matmul broadcast batch", "matmul", [f(2, 1, 3, 4), f(3, 4, 2)]),
  c("matmul 2-D @ batched", "matmul", [f(3, 4), f(2, 4, 2)]),
  c("bmm", "bmm", [f(2, 3, 4), f(2, 4, 2)]),
]

const numbersOf = (h: HostTensor): number[] => [...h.toArray()].map(Number)

describeUnless(missing)("ops against torch 1.13", () => {
  let h: Harness
  let torch: ReturnType<typeof Bun.spawn<"pipe", "pipe", "inherit">>
  const answers = new Map<number, unknown>()
  const waiting = new Map<number, (v: unknown) => void>()
  const reference = (id: number, cs: Case): Promise<any> => {
    torch.stdin.write(JSON.stringify({ id, op: cs.op, args: cs.args, kwargs: cs.kwargs }) + "\n")
    torch.stdin.flush()
    return answers.has(id) ? Promise.resolve(answers.get(id)) : new Promise((resolve) => waiting.set(id, resolve))
  }

  // torch's import can take seconds on a loaded machine: the first case waits for it here.
  beforeAll(async () => {
    h = await startWorkers({ world: 1 })
    h.send(0, createStream)
    torch = Bun.spawn([PYTHON, SERVER], { stdin: "pipe", stdout: "pipe", stderr: "inherit", env: { ...process.env, OMP_NUM_THREADS: "1" } })
    void (async () => {
      let buf = ""
      for await (const chunk of torch.stdout) {
        buf += new TextDecoder().decode(chunk)
        let nl: number
        while ((nl = buf.indexOf("\n")) >= 0) {
          const answer = JSON.parse(buf.slice(0, nl)) as { id: number }
          buf = buf.slice(nl + 1)
          const w = waiting.get(answer.id)
          if (w) w(answer)
          else answers.set(answer.id, answer)
        }
      }
    })()
    expect((await reference(-1, c("warm-up", "neg", [f(1)]))).error).toBeUndefined()
  }, 90_000)
  afterAll(async () => {
    torch?.stdin.end()
    await h?.close()
  })

  /** The fetched result of command `call` (fetched by call + 1), or its failure, found by ident. */
  const answerOf = async (call: number): Promise<HostTensor> => {
    for (const deadline = Date.now() + 20_000; Date.now() < deadline; await Bun.sleep(2)) {
      const failed = h.seen(0, "RemoteFunctionFailed").find((m) => m.ident === call)
      if (failed) throw new Error(failed.error.message)
      const got = h.seen(0, "FetchResult").find((m) => m.ident === call + 1)
      if (got) return got.value as HostTensor
    }
    throw new Error(`no answer to command ${call} within 20 s`)
  }

  let ident = 0
  for (const [i, cs] of CASES.entries()) {
    test(cs.name, async () => {
      const expected = reference(i, cs)
      const id = ident, result = 10_000 + i
      ident += 2
      h.send(0, call(id, [result], `ops.${cs.op}`, toWire(cs.args) as never, { kwargs: toWire(cs.kwargs) as never }))
      h.send(0, fetch(id + 1, ref(result)))
      const ours = await answerOf(id), want = await expected
      expect(want.error).toBeUndefined()
      expect({ dtype: ours.dtype, shape: [...ours.shape] }).toEqual({ dtype: want.dtype, shape: want.shape })
      const { rtol, atol } = TOLERANCE[ours.dtype]
      const mine = numbersOf(ours), theirs = (want.data as Array<number | string>).map(Number)
      const bad = mine.map((v, j) => [j, v, theirs[j]!] as const).filter(([, v, w]) => !(Object.is(v, w) || Math.abs(v - w) <= atol + rtol * Math.abs(w) || (Number.isNaN(v) && Number.isNaN(w))))
      expect(bad.slice(0, 4)).toEqual([])
    }, 30_000)
  }
})
