// README.md's layout block against the tree: every folder is listed and every entry exists,
// each test area is named; and the import rules it states hold for every source file.
import { describe, expect, test } from "bun:test"
import { existsSync, readdirSync, readFileSync, statSync } from "node:fs"
import { dirname, join, relative, resolve } from "node:path"

const ROOT = resolve(import.meta.dir, "../..")
const README = readFileSync(join(ROOT, "README.md"), "utf8")

/** The block under "## How it is built": its lines. */
const layoutBlock = (): string[] => {
  const at = README.indexOf("## How it is built")
  const open = README.indexOf("```\n", at) + 4
  return README.slice(open, README.indexOf("```\n", open)).split("\n")
}

/** The paths the block names (a line's first word; two spaces of indent per level). */
const named = (): string[] => {
  const parents: string[] = []
  const paths: string[] = []
  for (const line of layoutBlock()) {
    const m = /^( *)(\S+)/.exec(line)
    if (!m || m[1]!.length >= 18) continue // a continuation of the text beside an entry
    const depth = m[1]!.length / 2
    const path = (parents.slice(0, depth).join("") + m[2]!)
    paths.push(path)
    parents[depth] = m[2]!.endsWith("/") ? m[2]! : ""
  }
  return paths
}

/** Every folder of the tree that holds files, dot-folders, build outputs and tests/ areas aside. */
const folders = (dir = "", out: string[] = []): string[] => {
  for (const entry of readdirSync(join(ROOT, dir))) {
    if (entry.startsWith(".") || ["node_modules", "build"].includes(entry)) continue
    const rel = join(dir, entry)
    if (!statSync(join(ROOT, rel)).isDirectory()) continue
    if (dir === "tests") continue
    out.push(`${rel}/`)
    folders(rel, out)
  }
  return out
}

describe("README's layout block", () => {
  test("lists every folder", () => {
    const listed = new Set(named())
    expect(folders().filter((f) => !listed.has(f))).toEqual([])
  })

  test("names only what exists", () => {
    expect(named().filter((p) => !existsSync(join(ROOT, p)))).toEqual([])
  })

  test("names every test area", () => {
    const text = layoutBlock().join(" ")
    const areas = readdirSync(join(ROOT, "tests")).filter((a) => statSync(join(ROOT, "tests", a)).isDirectory())
    expect(areas.filter((a) => !new RegExp(`\\b${a}\\b`).test(text.slice(text.indexOf("tests/"))))).toEqual([])
  })
})

/** Which room a source file is in: "protocol", "ffi", "base", "worker.ts" (an entry), ... */
const roomOf = (file: string): string => {
  const rel = relative(ROOT, file).split("/")
  if (rel[0] === "ffi" || rel[0] === "base") return rel[0]
  return rel[1]!
}

/** What each room may import besides itself (types included). */
const MAY_IMPORT: Readonly<Record<string, ReadonlyArray<string>>> = {
  base: [],
  protocol: ["base"],
  net: ["protocol"],
  store: ["net", "protocol"],
  ffi: ["base"],
  ops: ["protocol", "base"],
  comm: ["ffi", "store", "protocol"],
  launcher: ["net", "store"],
  trace: ["protocol"],
  checkpoint: ["protocol"],
  worker: ["protocol", "net", "store", "comm", "ops", "ffi", "trace", "checkpoint"],
  autograd: ["ops", "protocol"],
  controller: ["protocol", "net", "store", "ops", "autograd", "launcher", "trace", "comm/errors.ts", "worker/function.ts", "checkpoint"],
  optim: ["controller", "ops"],
  "worker.ts": ["worker"],
  "launch.ts": ["launcher"],
}

const sources = (dir: string): string[] =>
  readdirSync(dir).flatMap((e) => {
    const path = join(dir, e)
    return statSync(path).isDirectory() ? sources(path) : path.endsWith(".ts") ? [path] : []
  })

/** The folders whose files the rules cover. */
const ROOMS = ["src", "base", "ffi"]

const IMPORT = /^(?:import|export)\s+(?:type\s+)?(?:[^"';]*?\sfrom\s+)?["'](\.[^"']+)["']/gm

describe("import rules", () => {
  test("every room is in the table", () => {
    const rooms = new Set(ROOMS.flatMap((r) => sources(join(ROOT, r))).map(roomOf))
    expect([...rooms].filter((r) => !(r in MAY_IMPORT))).toEqual([])
  })

  test("each source file imports only what its room may", () => {
    const broken: string[] = []
    for (const file of ROOMS.flatMap((r) => sources(join(ROOT, r)))) {
      const room = roomOf(file)
      for (const [, spec] of readFileSync(file, "utf8").matchAll(IMPORT)) {
        const target = resolve(dirname(file), spec!)
        const to = roomOf(target), path = relative(join(ROOT, "src"), target)
        if (to === room || MAY_IMPORT[room]!.includes(to) || MAY_IMPORT[room]!.includes(path)) continue
        broken.push(`${relative(ROOT, file)} -> ${relative(ROOT, target)}`)
      }
    }
    expect(broken).toEqual([])
  })
})

/** What a file names by a relative path: its imports and the files it locates with `new URL(...)` (a script it spawns). */
const REFERENCE = /(?:^(?:import|export)\s+(?:type\s+)?(?:[^"';]*?\sfrom\s+)?|new URL\()["'](\.[^"']+)["']/gm

describe("benchmarks and rigs", () => {
  test("bench/ and rig/ import nothing from tests/ (what they share with the tests lives in rig/)", () => {
    const broken: string[] = []
    for (const file of ["bench", "rig"].flatMap((d) => sources(join(ROOT, d)))) {
      for (const [, spec] of readFileSync(file, "utf8").matchAll(REFERENCE)) {
        const target = resolve(dirname(file), spec!)
        if (relative(ROOT, target).startsWith("tests/")) broken.push(`${relative(ROOT, file)} -> ${relative(ROOT, target)}`)
      }
    }
    expect(broken).toEqual([])
  })
})
