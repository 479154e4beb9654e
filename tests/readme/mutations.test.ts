// scripts/mutations.ts against the tree, as README.md's mutation paragraph says: each entry's
// edit text is found exactly once under src/, ffi/ and c/, and the test files it names exist.
// So a change that moves the code an entry breaks updates the entry in the same commit.
import { expect, test } from "bun:test"
import { locate } from "../../scripts/mutate.ts"
import { MUTATIONS } from "../../scripts/mutations.ts"

test("every entry of scripts/mutations.ts finds its edit exactly once and names test files that exist", () => {
  expect(locate(MUTATIONS).stale).toEqual([])
})
