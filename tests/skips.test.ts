// Every skip prints why: bun's own skips (test.skip, skipIf, if, todo) say nothing of the
// reason, so tests/ uses testUnless and describeUnless (tests/skip.ts) instead.
import { expect, test } from "bun:test"
import { readdirSync, readFileSync } from "node:fs"
import { join, relative } from "node:path"

const TESTS = new URL(".", import.meta.url).pathname
const SELF = ["skip.ts", "skips.test.ts"]
const BUN_SKIP = /\b(test|it|describe)\s*\.\s*(skip|skipIf|if|todo|todoIf)\b/

const files = (dir: string): string[] =>
  readdirSync(dir, { withFileTypes: true }).flatMap((e) =>
    e.isDirectory() ? files(join(dir, e.name)) : e.name.endsWith(".ts") ? [join(dir, e.name)] : [])

test("no test file skips through bun directly, where no reason is printed", () => {
  const found = files(TESTS)
    .filter((f) => !SELF.includes(relative(TESTS, f)))
    .flatMap((f) => readFileSync(f, "utf8").split("\n").flatMap((line, i) => (BUN_SKIP.test(line) ? [`${relative(TESTS, f)}:${i + 1}: ${line.trim()}`] : [])))
  expect(found, "these skip without saying why; use testUnless or describeUnless from tests/skip.ts").toEqual([])
})
