// The bun:ffi table (ffi/symbols.ts) against the ABI header (c/shim.h): names, arity and types.
import { describe, expect, test } from "bun:test"
import { FFIType } from "bun:ffi"
import { readFileSync } from "node:fs"
import { symbols } from "../../ffi/symbols.ts"

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
