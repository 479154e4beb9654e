// User functions load only from the allowed roots (src/worker/functions.ts): absolute paths,
// `..` escapes, symlinks (file or directory) that lead outside, a sibling directory whose name
// extends the root's, node: builtins and bare package names are all refused before anything
// is imported; names inside the root, including through symlinks that stay inside, resolve.
import { afterAll, beforeAll, describe, expect, test } from "bun:test"
import { functionNames, makeFunctionTree, resolveAll, type FunctionTree } from "./closedDoor.ts"

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
    expect(tree.evilImported()).toBe(false)
  })
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
