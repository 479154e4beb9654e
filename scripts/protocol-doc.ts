/**
 * Writes the message tables of docs/protocol.md (§2) from the one declaration of each
 * message, src/protocol/messages.ts: code, name, and each field's name and wire type. Run it
 * after changing a message:
 *   node_modules/.bin/bun run scripts/protocol-doc.ts
 * tests/protocol/doc.test.ts fails when the doc's tables are not what this would write.
 */
import { readFileSync, writeFileSync } from "node:fs"
import { CONTROLLER_MESSAGES, WORKER_MESSAGES, type MessageSpec } from "../src/protocol/messages.ts"

export const DOC = new URL("../docs/protocol.md", import.meta.url).pathname
const BEGIN = "<!-- message tables: generated from src/protocol/messages.ts by scripts/protocol-doc.ts -->"
const END = "<!-- end of the generated message tables -->"

const table = (title: string, messages: Readonly<Record<string, MessageSpec>>): string => {
  const rows = Object.entries(messages).map(([tag, m]) => {
    const fields = m.fields.map(([name, kind, note]) => `${name}${kind.optional ? "?" : ""}: ${kind.wire}${note === undefined ? "" : ` (${note})`}`)
    return `| ${m.code} | ${tag} | ${fields.length === 0 ? "(none)" : fields.join(", ")} |`
  })
  return [`### ${title}`, "", "| code | message | fields |", "|---:|---|---|", ...rows].join("\n")
}

/** The generated part, markers included. */
export const messageTables = (): string =>
  [BEGIN, "", table("Controller → worker", WORKER_MESSAGES), "", table("Worker → controller", CONTROLLER_MESSAGES), "", END].join("\n")

/** The generated part as the doc has it now, or undefined when its markers are missing. */
export const tablesInDoc = (doc: string): string | undefined => {
  const from = doc.indexOf(BEGIN), to = doc.indexOf(END)
  return from < 0 || to < from ? undefined : doc.slice(from, to + END.length)
}

if (import.meta.main) {
  const doc = readFileSync(DOC, "utf8")
  const now = tablesInDoc(doc)
  if (now === undefined) throw new Error(`${DOC} has no generated message tables (markers ${BEGIN} ... ${END})`)
  writeFileSync(DOC, doc.replace(now, messageTables()))
  console.log(`wrote the message tables of ${DOC}`)
}
