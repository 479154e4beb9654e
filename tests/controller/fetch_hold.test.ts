// A fetch holds the process open while it waits on workers, and only then: one whose command
// throws as it is issued (its message cannot be made) leaves nothing open, so a program that
// ends after it exits by itself (fetch_hold_child.ts, in its own process).
import { expect, test } from "bun:test"

test("a fetch whose command throws as it is issued holds nothing open: the process exits by itself", async () => {
  const child = Bun.spawn([process.execPath, new URL("./fetch_hold_child.ts", import.meta.url).pathname], { stdout: "pipe", stderr: "pipe" })
  // Generous under load; a process held open by a keep-alive interval never exits.
  const timer = setTimeout(() => child.kill(), 20_000)
  const code = await child.exited
  clearTimeout(timer)
  expect({ code, out: (await new Response(child.stdout).text()).trim() }).toEqual({ code: 0, out: "died" })
}, 30_000)
