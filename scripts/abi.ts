/**
 * Generates ffi/abi.ts, the TypeScript twins of c/shim.h's enums (status codes, dtype codes,
 * op codes, limits), so they are written once, in the header. Run it after changing an enum:
 *   node_modules/.bin/bun run scripts/abi.ts
 * tests/ffi/symbols.test.ts fails when ffi/abi.ts is not what this would write.
 */
import { readFileSync, writeFileSync } from "node:fs"

/** Each tagged enum of more than one constant: its TypeScript name and how a constant's name becomes a key. */
/** Op tables also get a type of their keys (UnaryOpName, ...). */
const TABLES: Readonly<Record<string, { readonly name: string; readonly key: (c: string) => string; readonly doc: string; readonly names?: true }>> = {
  shim_status: { name: "ShimStatus", key: (c) => c.replace(/^SHIM_(E_)?/, ""), doc: "Status codes every shim function returns." },
  shim_dtype: { name: "DTypeCode", key: (c) => c.replace(/^SHIM_/, "").toLowerCase(), doc: "Element type codes (src/protocol/values.ts's DTYPES is in this order)." },
  shim_unary_op: { name: "UnaryOp", key: (c) => c.replace(/^SHIM_/, "").toLowerCase(), doc: "shim_unary's op codes.", names: true },
  shim_binary_op: { name: "BinaryOp", key: (c) => c.replace(/^SHIM_/, "").toLowerCase(), doc: "shim_binary's and shim_binary_scalar's op codes.", names: true },
  shim_ternary_op: { name: "TernaryOp", key: (c) => c.replace(/^SHIM_/, "").toLowerCase(), doc: "shim_ternary's op codes.", names: true },
  shim_reduce_op: { name: "ReduceOp", key: (c) => c.replace(/^SHIM_/, "").toLowerCase(), doc: "shim_reduce's op codes.", names: true },
  shim_scatter_op: { name: "ScatterOp", key: (c) => c.replace(/^SHIM_SCATTER_/, "").toLowerCase(), doc: "shim_scatter's op codes.", names: true },
  shim_loss_reduction: { name: "LossReduction", key: (c) => c.replace(/^SHIM_LOSS_/, "").toLowerCase(), doc: "shim_nll_loss's and shim_mse_loss's reductions.", names: true },
  shim_comm_op: { name: "CommOp", key: (c) => c.replace(/^SHIM_OP_/, "").toLowerCase(), doc: "The collectives' reduce op codes.", names: true },
  shim_p2p_kind: { name: "P2P", key: (c) => c.replace(/^SHIM_/, "").toLowerCase(), doc: "shim_p2p's kinds." },
  shim_optim_flag: { name: "OptimFlag", key: (c) => c.replace(/^SHIM_OPTIM_/, "").toLowerCase(), doc: "shim_sgd's and shim_adamw's flags (or'ed)." },
  shim_matmul_flag: { name: "MatmulFlag", key: (c) => c.replace(/^SHIM_MATMUL_/, "").toLowerCase(), doc: "shim_matmul's transpose flags (or'ed)." },
}

export const HEADER = new URL("../c/shim.h", import.meta.url).pathname
export const OUTPUT = new URL("../ffi/abi.ts", import.meta.url).pathname

/** The enums of a header: tag -> constants in order (name, value). Untagged enums are refused. */
export const parseEnums = (header: string): Map<string, Array<[string, number]>> => {
  const code = header.replace(/\/\*[\s\S]*?\*\//g, "")
  const enums = new Map<string, Array<[string, number]>>()
  for (const [, tag, body] of code.matchAll(/\benum\s*(\w*)\s*\{([^}]*)\}/g)) {
    if (!tag) throw new Error(`c/shim.h: an enum without a tag ({${body!.trim()}}); tag it so scripts/abi.ts can name it`)
    const constants = body!.split(",").map((c) => c.trim()).filter((c) => c.length > 0).map((c): [string, number] => {
      const m = /^(SHIM_\w+)\s*=\s*(-?\d+)$/.exec(c)
      if (!m) throw new Error(`c/shim.h: enum ${tag}: "${c}" is not SHIM_NAME = number`)
      return [m[1]!, Number(m[2])]
    })
    enums.set(tag!, constants)
  }
  return enums
}

/** The text of ffi/abi.ts for a header. */
export const abiSource = (header: string): string => {
  const lines = [
    "// Generated from c/shim.h by scripts/abi.ts: do not edit (tests/ffi/symbols.test.ts checks it).",
    "",
  ]
  for (const [tag, constants] of parseEnums(header)) {
    if (constants.length === 1) {
      const [name, value] = constants[0]!
      lines.push(`export const ${name.replace(/^SHIM_/, "")} = ${value}`, "")
      continue
    }
    const table = TABLES[tag]
    if (!table) throw new Error(`c/shim.h: enum ${tag} has no entry in scripts/abi.ts's TABLES`)
    lines.push(`/** ${table.doc} */`, `export const ${table.name} = {`)
    for (const [name, value] of constants) lines.push(`  ${table.key(name)}: ${value},`)
    lines.push("} as const")
    if (table.names) lines.push(`export type ${table.name}Name = keyof typeof ${table.name}`)
    lines.push("")
  }
  return lines.join("\n")
}

if (import.meta.main) {
  writeFileSync(OUTPUT, abiSource(readFileSync(HEADER, "utf8")))
  console.log(`wrote ${OUTPUT}`)
}
