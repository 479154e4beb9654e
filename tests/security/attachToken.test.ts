// Attach mode never lets the job token through the store: a recording proxy in
// front of the store sees every byte the controller, the workers and a stranger exchange with it,
// and the token is not among them; the stranger, who waits for the controller's address there
// and tries the handshake as rank 0 before any worker exists, is refused and reported; the real workers,
// given the token in their environment, attach, compute and exit 0. Attach without a token, or
// with a short one, and a worker without one are refused at start, naming what to set.
import { expect, test } from "bun:test"
import { mkdtempSync, rmSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { MAX_TOKEN_LENGTH, readToken } from "../../src/net/token.ts"
import { checkAttachRefusals, checkAttachToken } from "./attachToken.ts"

test("the token never crosses the store; a stranger saying hello first is refused; the real workers attach", async () => {
  const r = await checkAttachToken()
  expect(r.storeBytes).toBeGreaterThan(0)
  expect(r.tokenInStore).toBe(false)
  expect(r.found).toBeUndefined()
  expect({ closed: r.impostorClosed, reported: r.impostorReported, admitted: r.impostorAdmitted }).toEqual({ closed: true, reported: true, admitted: false })
  expect(r.served).toBe(true)
  expect(r.exits).toEqual([0, 0])
}, 60_000)

test("attach with no token or a short one, and a worker with none, are refused at start naming MONARCH_TOKEN", async () => {
  const r = await checkAttachRefusals()
  expect(r.none).toContain("Controller.attach needs the job token: set MONARCH_TOKEN (or MONARCH_TOKEN_FILE)")
  expect(r.short).toContain("use at least 16")
  expect(r.worker).toContain("neither MONARCH_TOKEN nor MONARCH_TOKEN_FILE is set")
}, 20_000)

test("MONARCH_TOKEN_FILE: its contents less a trailing newline; unreadable, empty or too long files are refused", () => {
  const dir = mkdtempSync(join(tmpdir(), "monarch-token-"))
  try {
    const file = (name: string, text: string) => (writeFileSync(join(dir, name), text), join(dir, name))
    expect(readToken({ MONARCH_TOKEN_FILE: file("ok", "s3cret-token-value\n") })).toEqual({ token: "s3cret-token-value" })
    expect(readToken({ MONARCH_TOKEN: "from-env", MONARCH_TOKEN_FILE: file("ignored", "x") })).toEqual({ token: "from-env" })
    expect(readToken({})).toEqual({ token: undefined })
    expect(readToken({ MONARCH_TOKEN_FILE: join(dir, "missing") })).toMatchObject({ problem: expect.stringContaining("cannot be read") })
    expect(readToken({ MONARCH_TOKEN_FILE: file("empty", "\n") })).toMatchObject({ problem: expect.stringContaining("is empty") })
    expect(readToken({ MONARCH_TOKEN_FILE: file("long", "x".repeat(MAX_TOKEN_LENGTH + 1)) })).toMatchObject({ problem: expect.stringContaining(`at most ${MAX_TOKEN_LENGTH}`) })
  } finally {
    rmSync(dir, { recursive: true, force: true })
  }
})
