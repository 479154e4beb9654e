// docs/protocol.md's message tables are what scripts/protocol-doc.ts writes from the one
// declaration of each message (src/protocol/messages.ts): rerun it after changing a message.
import { expect, test } from "bun:test"
import { readFileSync } from "node:fs"
import { DOC, messageTables, tablesInDoc } from "../../scripts/protocol-doc.ts"
import { MESSAGE_CODES, MESSAGE_FIELDS } from "../../src/protocol/messages.ts"

test("docs/protocol.md's message tables match the code (node_modules/.bin/bun run scripts/protocol-doc.ts)", () => {
  expect(tablesInDoc(readFileSync(DOC, "utf8"))).toBe(messageTables())
})

test("the generated tables hold every message's code and every field, in wire order", () => {
  const tables = messageTables()
  for (const [tag, code] of Object.entries(MESSAGE_CODES)) {
    const row = tables.split("\n").find((line) => line.startsWith(`| ${code} | ${tag} |`))
    expect(row).toBeDefined()
    const names = [...row!.matchAll(/(?:\| |, )(\w+)\??: /g)].map((m) => m[1])
    expect({ tag, names }).toEqual({ tag, names: [...MESSAGE_FIELDS[tag as keyof typeof MESSAGE_FIELDS]] })
  }
})
