// torch's type promotion (src/ops/promotion.ts) against torch 1.13: every pair and triple of
// operands of every dtype and tier (a tensor with dims, a 0-d tensor, a boolean, an integer or a
// float number) against torch.result_type (tests/ops/torch_promotion.py), and the rules of the ops
// that use it, on the controller's inference (the worker runs the same rules: its results are
// checked against torch in tests/ops/parity.test.ts, and through the wire in tests/ops/floats.test.ts).
import { expect, test } from "bun:test"
import { broadcastShapes, resultType, type Scalar } from "../../src/ops/promotion.ts"
import { DTYPES, float, type DType } from "../../src/protocol/values.ts"
import { describeUnless } from "../skip.ts"
import { PYTHON, torchMissing } from "../torch.ts"
import { infer, refusal, t } from "./infer.ts"

type Operand = { readonly t: DType; readonly dims: 0 | 1 } | { readonly n: "bool" | "int" | "float" }
const OPERANDS: Operand[] = [...DTYPES.flatMap((d) => [{ t: d, dims: 1 as const }, { t: d, dims: 0 as const }]), { n: "bool" }, { n: "int" }, { n: "float" }]
const meta = (o: Operand) => ("n" in o ? (o.n === "bool" ? true : o.n === "int" ? 2 : float(2)) : t(o.t, ...(o.dims ? [2] : [])))
const text = (o: Operand) => ("n" in o ? `${o.n} number` : `${o.t}${o.dims ? "[2]" : " 0-d"}`)

const torchTypes = <A = DType>(cases: ReadonlyArray<Operand[] | { inplace: string; operands: Operand[] }>): A[] => {
  const run = Bun.spawnSync([PYTHON, new URL("./torch_promotion.py", import.meta.url).pathname], { stdin: Buffer.from(JSON.stringify(cases)) })
  if (run.exitCode !== 0) throw new Error(run.stderr.toString())
  return JSON.parse(run.stdout.toString())
}

const withTensor = (c: Operand[]) => c.some((o) => !("n" in o))

describeUnless(torchMissing())("type promotion against torch 1.13", () => {
  test("every pair and every triple of (dtype, tier) gives torch.result_type's dtype", () => {
    const pairs = OPERANDS.flatMap((a) => OPERANDS.map((b) => [a, b])).filter(withTensor)
    const triples = OPERANDS.flatMap((a) => OPERANDS.flatMap((b) => OPERANDS.map((c) => [a, b, c]))).filter(withTensor)
    const cases = [...pairs, ...triples], want = torchTypes(cases)
    const wrong = cases.flatMap((c, i) => {
      const ours = resultType(c.map(meta) as Array<ReturnType<typeof meta>>)
      return ours === want[i] ? [] : [`${c.map(text).join(" with ")}: ${ours}, torch ${want[i]}`]
    })
    expect(cases.length).toBe(19 ** 2 - 3 ** 2 + 19 ** 3 - 3 ** 3)
    expect(wrong.slice(0, 10)).toEqual([])
  }, 60_000)

  test("an in-place op runs or is refused (its result cannot be cast back) as torch's, for every input dtype and other operand", () => {
    const inputs = OPERANDS.filter((o) => "t" in o && o.dims === 1 && o.t !== "bool")
    const cases = ["add_", "mul_", "div_", "pow_", "clamp_"].flatMap((op) => inputs.flatMap((x) => OPERANDS.filter((o) => !("t" in o && o.t === "bool")).map((o) => ({ inplace: op, operands: [x, o] }))))
    const want = torchTypes<"ok" | "refused" | "unsupported">(cases)
    const wrong = cases.flatMap((c, i) => {
      if (want[i] === "unsupported") return []
      let ours: string
      try {
        infer(c.inplace, c.operands.map(meta))
        ours = "ok"
      } catch {
        ours = "refused"
      }
      return ours === want[i] ? [] : [`${text(c.operands[0]!)}.${c.inplace}(${text(c.operands[1]!)}): ${ours}, torch ${want[i]}`]
    })
    expect(want.filter((w) => w === "refused").length).toBeGreaterThan(50)
    expect(wrong.slice(0, 10)).toEqual([])
  }, 60_000)
})

test("dims over 0-d over numbers, a higher category winning from a lower tier (torch.result_type's examples)", () => {
  expect(resultType([t("i32", 3), t("f64")])).toBe("f64")
  expect(resultType([t("f16", 3, 4), t("f32")])).toBe("f16")
  expect(resultType([t("i64"), t("i32", 3, 4)])).toBe("i32")
  expect(resultType([t("f64"), t("f32", 3, 4)])).toBe("f32")
  expect(resultType([t("bool", 3), t("i64")])).toBe("i64")
  expect(resultType([t("u8", 3), t("i64")])).toBe("u8")
  expect(resultType([t("i32"), float(2)])).toBe("f32")
  expect(resultType([t("f16"), 2.5])).toBe("f16")
  expect(resultType([2, float(2)] as Scalar[])).toBe("f32")
  expect(resultType([2, 3])).toBe("i64")
  expect(resultType([t("bool", 3), true])).toBe("bool")
  expect(resultType([t("bool", 3), 1])).toBe("i64")
  expect(resultType([t("u8", 3), true])).toBe("u8")
})

test("broadcasting: a size-1 dim takes the other's size (0 included); a 0 against a 3 is refused, in either order", () => {
  expect(broadcastShapes("add", [[1, 3], [0, 1]])).toEqual([0, 3])
  expect(broadcastShapes("add", [[3], [2, 1]])).toEqual([2, 3])
  for (const shapes of [[[0], [3]], [[3], [0]], [[2, 3], [2, 0]]]) expect(() => broadcastShapes("add", shapes)).toThrow(/shapes do not broadcast/)
})

test("the ops that promote use the tiers: binary, comparison, where, clamp with tensor bounds, addcmul", () => {
  const dtypeOf = (op: string, args: unknown[], kwargs: Record<string, unknown> = {}) => infer(op, args, kwargs)[0]!.dtype
  expect(dtypeOf("add", [t("f32", 3, 4), t("f64")])).toBe("f32")
  expect(dtypeOf("mul", [t("f16", 3, 4), t("f32")])).toBe("f16")
  expect(dtypeOf("sub", [t("i64"), t("i32", 3, 4)])).toBe("i32")
  expect(dtypeOf("pow", [t("i32", 3), t("f64")])).toBe("f64")
  expect(dtypeOf("div", [t("i32", 3), t("i64")])).toBe("f32")
  expect(dtypeOf("maximum", [t("u8", 3), t("i64")])).toBe("u8")
  expect(dtypeOf("where", [t("bool", 3), t("f32", 3), t("f64")])).toBe("f32")
  expect(dtypeOf("where", [t("bool", 3), 2, float(1)])).toBe("f32")
  expect(dtypeOf("where", [t("bool", 3), 2, 1])).toBe("i64")
  expect(dtypeOf("clamp", [t("f32", 3), t("f64"), t("f64")])).toBe("f32")
  expect(dtypeOf("clamp", [t("i32", 3), t("f64"), t("i64")])).toBe("f64")
  expect(dtypeOf("addcmul", [t("f16", 3), t("f32"), t("f32")])).toBe("f16")
})

test("an in-place op is refused where the promoted result cannot be cast back, as torch's", () => {
  // torch: i32.add_(f32 tensor) and i64.mul_(2.0) are refused; i32.add_(0-d f64) too (its category wins); f32.add_(f64) is not.
  expect(refusal(() => infer("add_", [t("i32", 3), t("f32", 3)]))).toContain("result type f32 can't be cast to the input's i32")
  expect(refusal(() => infer("mul_", [t("i64", 3), float(2)]))).toContain("result type f32 can't be cast to the input's i64")
  expect(refusal(() => infer("add_", [t("i32", 3), t("f64")]))).toContain("result type f64 can't be cast to the input's i32")
  expect(infer("mul_", [t("i64", 3), 2])).toEqual([])
  expect(infer("add_", [t("f32", 3), t("f64", 3)])).toEqual([])
  expect(infer("clamp_", [t("f16", 3), t("f64"), t("f64")])).toEqual([])
  expect(refusal(() => infer("clamp_", [t("i64", 3), float(0), float(1)]))).toContain("can't be cast")
})

test("a float number where an integer is expected is refused naming it", () => {
  expect(refusal(() => infer("sum", [t("f32", 3), float(0)]))).toBe("ops.sum: dim must be a dim or a list of dims, got float(0)")
})
