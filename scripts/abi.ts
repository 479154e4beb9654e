/**
 * Generates ffi/abi.ts, the TypeScript twins of c/shim.h's enums (status codes, dtype codes,
 * op codes, limits) and of its op tables (each op's code and flags), so they are written once,
 * in the header. Run it after changing an enum or a table row:
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
  shim_op_flag: { name: "OpFlag", key: (c) => c.replace(/^SHIM_OPF_/, "").toLowerCase(), doc: "An op table row's flags (or'ed): what the op is defined on and writes." },
}

/** One row of an op table: X(ID, code, "name", flags). */
export interface OpRow { readonly id: string; readonly code: number; readonly name: string; readonly flags: number }

/** The header's op tables (#define SHIM_<FAMILY>_OPS(X) rows), by macro name; flags evaluated from shim_op_flag. */
export const parseOpTables = (header: string): Map<string, OpRow[]> => {
  const code = header.replace(/\/\*[\s\S]*?\*\//g, "").replace(/\\\n/g, " ")
  const flagEnum = /\benum\s+shim_op_flag\s*\{([^}]*)\}/.exec(code)?.[1] ?? ""
  const flagValues = new Map([...flagEnum.matchAll(/(SHIM_\w+)\s*=\s*(\d+)/g)].map(([, n, v]): [string, number] => [n!, Number(v)]))
  const flagsOf = (expr: string, where: string): number => expr.split("|").map((t) => t.trim()).reduce((acc, t) => {
    if (/^\d+$/.test(t)) return acc | Number(t)
    const alias = new RegExp(`#define\\s+${t}\\s+\\(([^)]*)\\)`).exec(code)
    if (alias) return acc | flagsOf(alias[1]!, where)
    const v = flagValues.get(t)
    if (v === undefined) throw new Error(`c/shim.h: ${where}: flag "${t}" is not in enum shim_op_flag`)
    return acc | v
  }, 0)
  const tables = new Map<string, OpRow[]>()
  for (const [, macro, body] of code.matchAll(/#define\s+(SHIM_\w+_OPS)\(X\)([^\n]*)/g)) {
    const rows = [...body!.matchAll(/X\(([^)]*)\)/g)].map(([, args]): OpRow => {
      const m = /^\s*(SHIM_\w+)\s*,\s*(\d+)\s*,\s*"(\w+)"\s*,\s*(.+?)\s*$/.exec(args!)
      if (!m) throw new Error(`c/shim.h: ${macro}: "X(${args})" is not X(SHIM_ID, code, "name", flags)`)
      return { id: m[1]!, code: Number(m[2]), name: m[3]!, flags: flagsOf(m[4]!, `${macro} row ${m[1]}`) }
    })
    tables.set(macro!, rows)
  }
  return tables
}

export const HEADER = new URL("../c/shim.h", import.meta.url).pathname
export const OUTPUT = new URL("../ffi/abi.ts", import.meta.url).pathname

/** The enums of a header: tag -> constants in order (name, value). Untagged enums are refused. An
 * enum built from an op table ({ SHIM_<FAMILY>_OPS(ROW) }) takes the table's rows. */
export const parseEnums = (header: string): Map<string, Array<[string, number]>> => {
  const code = header.replace(/\/\*[\s\S]*?\*\//g, "")
  const enums = new Map<string, Array<[string, number]>>()
  for (const [, tag, body] of code.matchAll(/\benum\s*(\w*)\s*\{([^}]*)\}/g)) {
    if (!tag) throw new Error(`c/shim.h: an enum without a tag ({${body!.trim()}}); tag it so scripts/abi.ts can name it`)
    const table = /^\s*(SHIM_\w+_OPS)\(\w+\)\s*$/.exec(body!)
    if (table) {
      const rows = parseOpTables(header).get(table[1]!)
      if (!rows) throw new Error(`c/shim.h: enum ${tag} is built from ${table[1]}, which is not defined`)
      enums.set(tag!, rows.map((r): [string, number] => [r.id, r.code]))
      continue
    }
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
  const tables = parseOpTables(header)
  for (const [tag, constants] of parseEnums(header)) {
    if (constants.length === 1) {
      const [name, value] = constants[0]!
      lines.push(`export const ${name.replace(/^SHIM_/, "")} = ${value}`, "")
      continue
    }
    const table = TABLES[tag]
    if (!table) throw new Error(`c/shim.h: enum ${tag} has no entry in scripts/abi.ts's TABLES`)
    // An enum built from an op table: its keys are the rows' names, and its flags come too.
    const rows = [...tables.values()].find((t) => t.length === constants.length && t.every((r, i) => r.id === constants[i]![0]))
    lines.push(`/** ${table.doc} */`, `export const ${table.name} = {`)
    constants.forEach(([name, value], i) => lines.push(`  ${rows ? rows[i]!.name : table.key(name)}: ${value},`))
    lines.push("} as const")
    if (table.names) lines.push(`export type ${table.name}Name = keyof typeof ${table.name}`)
    if (rows) {
      lines.push(`/** Each ${table.name} row's flags (OpFlag, or'ed), from c/shim.h's table. */`)
      lines.push(`export const ${table.name}Flags: { readonly [K in ${table.name}Name]: number } = {`)
      for (const r of rows) lines.push(`  ${r.name}: ${r.flags},`)
      lines.push("}")
    }
    lines.push("")
  }
  return lines.join("\n")
}

if (import.meta.main) {
  writeFileSync(OUTPUT, abiSource(readFileSync(HEADER, "utf8")))
  console.log(`wrote ${OUTPUT}`)
}
