// The bun:ffi table (ffi/symbols.ts) against the ABI header (c/shim.h): names, arity and types;
// and the header's enums against their generated twins (ffi/abi.ts) and the wire's dtypes.
import { describe, expect, test } from "bun:test"
import { FFIType } from "bun:ffi"
import { readFileSync } from "node:fs"
import { DTypeCode } from "../../ffi/abi.ts"
import { symbols } from "../../ffi/symbols.ts"
import { abiSource, OUTPUT, parseEnums } from "../../scripts/abi.ts"
import { DTYPES } from "../../src/protocol/values.ts"

const header = readFileSync(new URL("../../c/shim.h", import.meta.url), "utf8")

/** The FFI type a C declaration maps to (the mapping documented in ffi/symbols.ts). */
const ffiTypeOf = (decl: string): FFIType => {
  const t = decl.replace(/\b[a-z_0-9]+$/, "").replace(/\s+/g, " ").trim() // drop the parameter name
  if (t.includes("*")) return t === "const char *" ? FFIType.cstring : FFIType.ptr
  const scalars: Record<string, FFIType> = {
    int: FFIType.i32, int32_t: FFIType.i32, int64_t: FFIType.i64, uint64_t: FFIType.u64, double: FFIType.f64,
  }
  const mapped = scalars[t]
  if (mapped === undefined) throw new Error(`c/shim.h: no FFI mapping for C type "${t}"`)
  return mapped
}

interface Prototype { name: string; returns: FFIType; args: FFIType[] }

const prototypes: Prototype[] = [...header.replace(/\/\*[\s\S]*?\*\//g, "").matchAll(/^(int|const char \*)\s*(shim_\w+)\(([^)]*)\);/gm)]
  .map(([, ret, name, params]) => ({
    name: name!,
    returns: ret === "int" ? FFIType.i32 : FFIType.cstring,
    args: params!.trim() === "void" || params!.trim() === "" ? [] : params!.split(",").map((p) => ffiTypeOf(p.trim())),
  }))

describe("ffi/symbols.ts matches c/shim.h", () => {
  test("the header parses into a plausible number of prototypes", () => {
    expect(prototypes.length).toBeGreaterThan(30)
  })

  test("same names in the same order", () => {
    expect(Object.keys(symbols)).toEqual(prototypes.map((p) => p.name))
  })

  for (const p of prototypes) {
    test(`${p.name}: arity and types`, () => {
      const entry = (symbols as Record<string, { args: readonly FFIType[]; returns: FFIType }>)[p.name]
      expect(entry).toBeDefined()
      expect({ args: [...entry!.args], returns: entry!.returns }).toEqual({ args: p.args, returns: p.returns })
    })
  }

  test("the mapping rejects a C type it does not know", () => {
    expect(() => ffiTypeOf("float x")).toThrow(/no FFI mapping/)
  })
})

describe("ffi/abi.ts is generated from c/shim.h's enums", () => {
  test("the file is what scripts/abi.ts writes now (else: bun run scripts/abi.ts)", () => {
    expect(readFileSync(OUTPUT, "utf8")).toBe(abiSource(header))
  })

  test("the header's enums parse, the codes the ABI needs among them", () => {
    const enums = parseEnums(header)
    expect([...enums.keys()]).toEqual(expect.arrayContaining(["shim_status", "shim_dtype", "shim_max_dims", "shim_unary_op", "shim_binary_op", "shim_reduce_op"]))
    expect(enums.get("shim_status")![0]).toEqual(["SHIM_OK", 0])
  })

  test("the wire's dtypes are the header's, in code order", () => {
    expect(Object.entries(DTypeCode) as Array<[string, number]>).toEqual(DTYPES.map((d, i): [string, number] => [d, i]))
  })

  test("an untagged enum, or a tagged one without a table entry, is refused", () => {
    expect(() => parseEnums("enum { SHIM_A = 0, SHIM_B = 1 };")).toThrow(/an enum without a tag/)
    expect(() => abiSource("enum shim_new_op { SHIM_A = 0, SHIM_B = 1 };")).toThrow(/shim_new_op has no entry/)
    expect(() => parseEnums("enum shim_x { SHIM_A = 1 << 2 };")).toThrow(/is not SHIM_NAME = number/)
  })
})
