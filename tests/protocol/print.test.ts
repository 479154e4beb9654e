// A HostTensor prints its values as torch 1.13 prints a tensor: formatTensor with torch's
// prefix and dtype names against torch's own repr (tests/protocol/torch_repr.py) over seeded
// random tensors of every dtype: 0 to 3 dims, fixed, integral and scientific values, NaN and
// infinities, all zeros, empty shapes, rows that wrap at 80 characters, and tensors past 1000
// elements (abbreviated to the first and last 3 of each dim longer than 6; a dim of exactly 6
// prints whole). console.log and Bun.inspect of a HostTensor print the same text under its own
// name, not its bytes.
import { expect, test } from "bun:test"
import { formatTensor } from "../../base/print.ts"
import { HostTensor, type DType } from "../../src/protocol/values.ts"
import { describeUnless } from "../skip.ts"
import { fromJson, PYTHON, torchMissing } from "../torch.ts"

const TORCH_NAMES: Readonly<Record<DType, string>> = {
  f32: "torch.float32", f64: "torch.float64", f16: "torch.float16", bf16: "torch.bfloat16", i32: "torch.int32", i64: "torch.int64", u8: "torch.uint8", bool: "torch.bool",
}
const SEED = Number(process.env.PRINT_SEED ?? 20261201)

interface Case { readonly dtype: DType; readonly shape: number[]; readonly data: Array<number | string> }

const cases = (seed: number): Case[] => {
  let s = seed
  const rnd = () => ((s = (s * 1103515245 + 12345) % 2 ** 31) / 2 ** 31)
  const pick = <T>(xs: readonly T[]): T => xs[Math.floor(rnd() * xs.length)]!
  const out: Case[] = []
  const shapes = [[], [1], [5], [9], [30], [0], [2, 0], [0, 3], [3, 4], [2, 13], [6, 2], [2, 3, 4], [1, 1, 1], [1001], [40, 40], [11, 11, 11], [2, 700], [6, 170]]
  for (const shape of shapes)
    for (const dtype of ["f32", "f64", "f16", "bf16", "i32", "i64", "u8", "bool"] as const)
      for (let k = 0; k < 2; k++) {
        const n = shape.reduce((a, b) => a * b, 1)
        const style = pick(["normal", "integral", "tiny", "huge", "special", "zeros", "mixed", "ties"])
        const data = Array.from({ length: n }, (): number | string => {
          if (dtype === "bool") return rnd() < 0.5 ? 0 : 1
          if (dtype === "u8") return Math.floor(rnd() * 256)
          if (dtype === "i32" || dtype === "i64") return Math.floor((rnd() - 0.5) * (style === "huge" ? 2e9 : 200))
          switch (style) {
            case "integral": return Math.floor((rnd() - 0.5) * 100)
            case "tiny": return (rnd() - 0.5) * 1e-5
            case "huge": return (rnd() - 0.5) * 1e10
            case "special": return pick([1.5, -2.25, "nan", "inf", "-inf", 0])
            case "zeros": return 0
            case "mixed": return (rnd() - 0.5) * 10 ** Math.floor(rnd() * 6 - 2)
            case "ties": return Math.floor((rnd() - 0.5) * 64) / 32
            default: return (rnd() - 0.5) * 6
          }
        })
        out.push({ dtype, shape, data })
      }
  return out
}

const elementsOf = (dtype: DType, values: ReadonlyArray<number | string | boolean>) =>
  dtype === "i64" ? BigInt64Array.from(values, (v) => BigInt(v as number))
  : dtype === "bool" || dtype === "u8" ? Uint8Array.from(values, (v) => Number(v))
  : dtype === "i32" ? Int32Array.from(values as number[])
  : Float64Array.from(values, (v) => fromJson(v as number | string))

describeUnless(torchMissing())("a host tensor prints as torch 1.13 prints it", () => {
  test(`formatTensor equals torch's repr on random tensors of every dtype (seed ${SEED}; PRINT_SEED=n to vary)`, () => {
    const all = cases(SEED)
    const r = Bun.spawnSync([PYTHON, new URL("./torch_repr.py", import.meta.url).pathname], { stdin: Buffer.from(JSON.stringify(all)), stdout: "pipe", stderr: "pipe" })
    expect(r.stderr.toString()).toBe("")
    const answers = JSON.parse(r.stdout.toString()) as Array<{ repr: string; values: Array<number | string | boolean> }>
    const wrong = all.map((c, i) => ({ dtype: c.dtype, shape: c.shape, ours: formatTensor("tensor", c.dtype, c.shape, elementsOf(c.dtype, answers[i]!.values), (d) => TORCH_NAMES[d]), torch: answers[i]!.repr }))
      .filter((x) => x.ours !== x.torch)
    if (wrong.length > 0) console.error(`seed ${SEED}: ${wrong.length} of ${all.length} differ; the first:\n${wrong[0]!.ours}\n---- torch:\n${wrong[0]!.torch}`)
    expect(wrong.slice(0, 3)).toEqual([])
    // The cases reach every layout: wrapped rows, abbreviated dims, scientific and integral floats, empty tensors.
    const texts = answers.map((a) => a.repr).join("\n")
    for (const mark of ["...", "e+", "e-", "nan", "inf", "size=(", "dtype=torch.float64", "True", "\n\n"]) expect({ mark, seen: texts.includes(mark) }).toEqual({ mark, seen: true })
  }, 60_000) // torch's import alone can take seconds on a loaded machine
})

test("console.log and Bun.inspect of a HostTensor print its values (abbreviated past 1000 elements), not its bytes", () => {
  const h = new HostTensor("f64", [2, 2], new Uint8Array(Float64Array.from([1.5, -2, 0.25, 3]).buffer))
  expect(Bun.inspect(h)).toBe("HostTensor([[ 1.5000, -2.0000],\n            [ 0.2500,  3.0000]], dtype=f64)")
  expect(`${h}`).toBe(Bun.inspect(h))
  const big = new HostTensor("i32", [2000], new Uint8Array(Int32Array.from({ length: 2000 }, (_, i) => i).buffer))
  expect(Bun.inspect(big)).toBe("HostTensor([   0,    1,    2,  ..., 1997, 1998, 1999], dtype=i32)")
})
