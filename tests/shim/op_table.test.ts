// c/shim.h's op tables against what the backend does with them: a code the table lacks is
// refused by every entry point taking that family's codes; each row's dtype category (the
// flags) is the one torch's semantics give the op, checked and run; every row has a kernel
// case for each dtype it admits (a missing case fails with "has no kernel", it does not
// compute another op or leave out unwritten); and scripts/abi.ts reads the tables as written.
// The cuda backend dispatches through the same table (c/cuda/elements.h's with_*_op, whose
// default fails the same way): compiled here, run by tests/cuda/parity.test.ts on a GPU.
import { afterEach, describe, expect, test } from "bun:test"
import { BinaryOp, BinaryOpFlags, OpFlag, ReduceOp, TernaryOp, UnaryOp, UnaryOpFlags, type UnaryOpName } from "../../ffi/abi.ts"
import { abiSource, parseOpTables } from "../../scripts/abi.ts"
import { DTYPES, empty, expectShimError, FLOATS, freeAll, native, tensor, valuesOf, type DType } from "./helpers.ts"

afterEach(freeAll)
const shim = native.shim
const check = (name: string, status: number) => native.check(status, name)

/** Codes each table lacks: one past its end, far past it, and negative (the tables have no gaps: see below). */
const fakeCodes = (table: Readonly<Record<string, number>>): number[] => [Object.keys(table).length, 1000, -1]

describe("a code the table lacks is refused", () => {
  const a = () => tensor("f32", [3], [1, 2, 3])
  const cases: ReadonlyArray<[string, Readonly<Record<string, number>>, (op: number) => void]> = [
    ["shim_unary", UnaryOp, (op) => check("shim_unary", shim.shim_unary(op, empty("f32", [3]).handle, a().handle, null))],
    ["shim_binary", BinaryOp, (op) => check("shim_binary", shim.shim_binary(op, empty("f32", [3]).handle, a().handle, a().handle, null))],
    ["shim_binary_scalar", BinaryOp, (op) => check("shim_binary_scalar", shim.shim_binary_scalar(op, empty("f32", [3]).handle, a().handle, 2, 0, null))],
    ["shim_ternary", TernaryOp, (op) => check("shim_ternary", shim.shim_ternary(op, empty("f32", [3]).handle, a().handle, a().handle, a().handle, 1, null))],
    ["shim_reduce", ReduceOp, (op) => check("shim_reduce", shim.shim_reduce(op, empty("f32", []).handle, a().handle, -1, null))],
  ]
  for (const [fn, table, run] of cases)
    for (const code of fakeCodes(table))
      test(`${fn}: op code ${code} is Invalid, naming the code`, () => {
        expectShimError(() => run(code), "Invalid", new RegExp(`${fn}: unknown op code ${code}\\b`))
      })

  test("the tables are dense from 0, so past the end is the only way to be missing", () => {
    for (const table of [UnaryOp, BinaryOp, TernaryOp, ReduceOp])
      expect<number[]>(Object.values(table).sort((x, y) => x - y)).toEqual(Object.keys(table).map((_, i) => i))
  })
})

// What torch's semantics (README's, c/shim.h's) say each unary op takes, written out here rather
// than read from the table, so a row's flags that drift fail below.
const EVERY = new Set<UnaryOpName>(["abs", "relu", "sign", "isnan", "isinf", "logical_not"])
const NOT_BOOL = new Set<UnaryOpName>(["neg", "floor", "ceil", "round", "trunc"])
const PREDICATES = new Set<UnaryOpName>(["isnan", "isinf", "logical_not"])
const admits = (op: UnaryOpName, dtype: DType): boolean =>
  (FLOATS as ReadonlyArray<DType>).includes(dtype) || EVERY.has(op) || (NOT_BOOL.has(op) && dtype !== "bool")

/** Inputs every dtype holds: negative (but u8, bool), zero, positive. */
const valuesFor = (dtype: DType): number[] => (dtype === "bool" ? [1, 0, 1] : dtype === "u8" ? [3, 0, 5] : [-3, 0, 5])

describe("each unary row's dtype category", () => {
  test("the table's flags are the categories written out here", () => {
    for (const op of Object.keys(UnaryOp) as UnaryOpName[]) {
      const f = UnaryOpFlags[op]
      expect({ op, int: (f & OpFlag.int) !== 0, bool: (f & OpFlag.bool) !== 0, predicate: (f & OpFlag.writes_bool) !== 0 })
        .toEqual({ op, int: EVERY.has(op) || NOT_BOOL.has(op), bool: EVERY.has(op), predicate: PREDICATES.has(op) })
    }
  })

  for (const dtype of DTYPES)
    test(`${dtype}: every op runs where admitted (a kernel case exists) and is Unsupported elsewhere`, () => {
      const xs = valuesFor(dtype)
      for (const op of Object.keys(UnaryOp) as UnaryOpName[]) {
        const a = tensor(dtype, [3], xs), out = empty(PREDICATES.has(op) ? "bool" : dtype, [3])
        const run = () => check(`shim_unary(${op})`, shim.shim_unary(UnaryOp[op], out.handle, a.handle, null))
        if (!admits(op, dtype)) {
          expectShimError(run, "Unsupported", new RegExp(`shim_unary\\(${op}\\): not defined on ${dtype}`))
          continue
        }
        run()
        if (!isFloatDtype(dtype)) expect({ op, values: valuesOf(out) }).toEqual({ op, values: integerResult(op, dtype, xs) })
      }
    })
})

const isFloatDtype = (d: DType) => (FLOATS as ReadonlyArray<DType>).includes(d)

/** The expected integer (or bool) results of the ops admitted on dtype (so a case left out, leaving out unwritten, fails). */
const integerResult = (op: UnaryOpName, dtype: DType, xs: number[]): number[] => {
  const wrap = (x: number) => (dtype === "u8" ? (x + 256) % 256 : x)
  const table: Partial<Record<UnaryOpName, (x: number) => number>> = {
    neg: (x) => wrap(-x), abs: Math.abs, relu: (x) => Math.max(x, 0), sign: Math.sign, floor: (x) => x, ceil: (x) => x, round: (x) => x,
    trunc: (x) => x, isnan: () => 0, isinf: () => 0, logical_not: (x) => (x === 0 ? 1 : 0),
  }
  return xs.map((x) => table[op]!(x) + 0) // + 0: sign(0) and -0 are 0
}

describe("each binary row's bool category", () => {
  const REFUSED_ON_BOOL = ["sub", "div", "pow", "floor_divide", "remainder", "fmod"]
  for (const op of Object.keys(BinaryOp) as Array<keyof typeof BinaryOp>)
    test(`${op} on bool: ${REFUSED_ON_BOOL.includes(op) ? "Unsupported" : "runs"}`, () => {
      const a = tensor("bool", [2], [1, 0]), out = empty("bool", [2])
      const run = () => check(`shim_binary(${op})`, shim.shim_binary(BinaryOp[op], out.handle, a.handle, a.handle, null))
      if (REFUSED_ON_BOOL.includes(op)) expectShimError(run, "Unsupported", new RegExp(`shim_binary\\(${op}\\): not defined on bool`))
      else run()
    })

  test("integers take every binary op (the table says so)", () => {
    for (const op of Object.keys(BinaryOp) as Array<keyof typeof BinaryOp>) expect({ op, int: (BinaryOpFlags[op] & OpFlag.int) !== 0 }).toEqual({ op, int: true })
  })
})

describe("scripts/abi.ts reads the tables", () => {
  const header = (rows: string) => `enum shim_op_flag { SHIM_OPF_INT = 1, SHIM_OPF_BOOL = 2 };
#define SHIM_OPF_ANY (SHIM_OPF_INT | SHIM_OPF_BOOL)
#define SHIM_UNARY_OPS(X) \\
${rows}
#define SHIM_OP_ENUM_ROW(id, code, name, flags) id = code,
enum shim_unary_op { SHIM_UNARY_OPS(SHIM_OP_ENUM_ROW) };`

  test("rows with comments, an alias of flags and a gap in the codes", () => {
    const h = header('  X(SHIM_NEG, 0, "neg", SHIM_OPF_INT) /* wraps */ \\\n  X(SHIM_ABS, 3, "abs", SHIM_OPF_ANY)')
    expect(parseOpTables(h).get("SHIM_UNARY_OPS")).toEqual([
      { id: "SHIM_NEG", code: 0, name: "neg", flags: 1 },
      { id: "SHIM_ABS", code: 3, name: "abs", flags: 3 },
    ])
    const source = abiSource(h)
    expect(source).toContain("export const UnaryOp = {\n  neg: 0,\n  abs: 3,\n} as const")
    expect(source).toContain("export const UnaryOpFlags: { readonly [K in UnaryOpName]: number } = {\n  neg: 1,\n  abs: 3,\n}")
  })

  test("a row not of the form X(SHIM_ID, code, \"name\", flags), or with an unknown flag, is refused", () => {
    expect(() => parseOpTables(header('  X(SHIM_NEG, "neg", 0)'))).toThrow(/is not X\(SHIM_ID, code, "name", flags\)/)
    expect(() => parseOpTables(header('  X(SHIM_NEG, 0, "neg", SHIM_OPF_FLOAT)'))).toThrow(/flag "SHIM_OPF_FLOAT" is not in enum shim_op_flag/)
  })
})
