// Controller.attach: workers started elsewhere (here plain processes with torchrun's
// environment and no controller address) find the controller through the store; the token comes
// from a file both sides are given (MONARCH_TOKEN_FILE), never from the store.
import { afterAll, expect, test } from "bun:test"
import { Effect } from "effect"
import { Controller, HostTensor } from "../../src/controller/index.ts"
import { randomBytes } from "node:crypto"
import { mkdtempSync, rmSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { readToken } from "../../src/net/token.ts"
import { startServer } from "../../src/store/server.ts"

const WORKER = new URL("../../src/worker.ts", import.meta.url).pathname
const store = startServer({ host: "127.0.0.1", port: 0 })
const procs: Bun.Subprocess[] = []
const tokenDir = mkdtempSync(join(tmpdir(), "monarch-attach-"))
const tokenFile = join(tokenDir, "token")
writeFileSync(tokenFile, `${randomBytes(16).toString("hex")}\n`, { mode: 0o600 })
afterAll(() => {
  for (const p of procs) p.kill("SIGKILL")
  store.stop()
  rmSync(tokenDir, { recursive: true, force: true })
})

test("two workers with only RANK, WORLD_SIZE and MASTER_ADDR/PORT meet an attaching controller", async () => {
  const { MONARCH_TOKEN: _, CONTROLLER_ADDR: __, ...env } = process.env
  const token = readToken({ MONARCH_TOKEN_FILE: tokenFile })
  if (!("token" in token) || token.token === undefined) throw new Error(`the token file: ${JSON.stringify(token)}`)
  for (const rank of [0, 1])
    procs.push(Bun.spawn([process.execPath, WORKER], {
      env: { ...env, RANK: String(rank), WORLD_SIZE: "2", LOCAL_RANK: String(rank), MASTER_ADDR: "127.0.0.1", MASTER_PORT: String(store.port), MONARCH_TOKEN_FILE: tokenFile, MONARCH_LOG: "warn" },
      stdout: "inherit", stderr: "inherit",
    }))
  const got = await Effect.runPromise(Effect.gen(function* () {
    const ctl = yield* Controller
    const mesh = yield* ctl.mesh({ x: 2 })
    const t = yield* mesh.call("ops.full", [[2], 3])
    return yield* mesh.fetch(yield* mesh.reduce(t, "x", "sum"), 1)
  }).pipe(Effect.provide(Controller.attach({ world: 2, store: { host: "127.0.0.1", port: store.port }, token: token.token, startTimeoutMs: 20_000 }))))
  expect([...(got as HostTensor).toArray()]).toEqual([6, 6])
  // The layer's end sent Exit: both workers leave cleanly.
  expect(await Promise.all(procs.map((p) => p.exited))).toEqual([0, 0])
}, 40_000)
