// User functions load only from the allowed roots (src/worker/functions.ts): absolute paths,
// `..` escapes, symlinks (file or directory) that lead outside, a sibling directory whose name
// extends the root's, node: builtins, bare package names, node_modules and dot folders (as
// roots or on the way) and modules without the named export are all refused before anything
// is imported; names inside the root, including through symlinks that stay inside, resolve.
import { afterAll, beforeAll, describe, expect, test } from "bun:test"
import { readConfig } from "../../src/worker/config.ts"
import { checkHiddenRoots, functionNames, HIDDEN_NAMES, makeFunctionTree, resolveAll, type FunctionTree } from "./closedDoor.ts"

let tree: FunctionTree
beforeAll(() => {
  tree = makeFunctionTree()
})
afterAll(() => tree?.remove())

describe.each([["the root", false], ["the root given through a symlink", true]] as const)("function roots: %s", (_label, viaLink) => {
  const roots = () => [viaLink ? tree.rootLink : tree.root]

  test("names inside the root resolve", async () => {
    const got = await resolveAll(roots(), functionNames(tree).allowed)
    expect(got.filter((r) => !r.resolved)).toEqual([])
  })

  test("names that leave it are refused with FunctionNotFound, and nothing is imported", async () => {
    const cases = functionNames(tree).refused
    const got = await resolveAll(roots(), cases.map(([name]) => name))
    for (const [i, r] of got.entries()) {
      expect({ name: r.name, why: cases[i]![1], resolved: r.resolved, tag: r.tag }).toEqual({ name: r.name, why: cases[i]![1], resolved: false, tag: "FunctionNotFound" })
    }
    expect(got.find((r) => r.name.startsWith("/"))?.message).toContain("absolute paths are not allowed")
    expect(got.find((r) => r.name === "link-out:run")?.message).toContain("not found under the allowed roots")
    expect(got.find((r) => r.name === "no-export:run")?.message).toMatch(/no-export\.ts does not export "run" \(exports: other;.*it was not imported/)
    for (const name of HIDDEN_NAMES)
      expect(got.find((r) => r.name === name)?.message).toContain("node_modules and dot folders are never searched")
    expect(tree.imported()).toEqual([])
  })
})

test("roots inside node_modules or a dot folder are not used", async () => {
  const got = await checkHiddenRoots(tree)
  expect(got.length).toBe(2)
  for (const r of got) {
    expect({ resolved: r.resolved, tag: r.tag }).toEqual({ resolved: false, tag: "FunctionNotFound" })
    expect(r.message).toContain("roots not used, being in node_modules or a dot folder")
  }
  expect(tree.imported()).toEqual([])
})

test("a worker has no function root unless MONARCH_FUNCTION_PATH names some (not the working directory)", () => {
  const env = { RANK: "0", WORLD_SIZE: "1", MASTER_ADDR: "127.0.0.1", MASTER_PORT: "1", MONARCH_TOKEN: "t" }
  expect(readConfig(env).functionRoots).toEqual([])
  expect(readConfig({ ...env, MONARCH_FUNCTION_PATH: "/a::/b" }).functionRoots).toEqual(["/a", "/b"])
})

test("a control: the evil module does leave its mark when its directory is a root", async () => {
  // Shows that evilImported() would notice an import, so its `false` above means something.
  const own = makeFunctionTree()
  try {
    const [r] = await resolveAll([own.outside], ["evil:run"])
    expect(r!.resolved).toBe(true)
    expect(own.evilImported()).toBe(true)
  } finally {
    own.remove()
  }
})
