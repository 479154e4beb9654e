// Controller.attach: workers started elsewhere (here plain processes with torchrun's
// environment and no controller address) find the controller through the store; the token comes
// from a file both sides are given (MONARCH_TOKEN_FILE), never from the store.
import { afterAll, expect, test } from "bun:test"
import { Cause, Duration, Effect } from "effect"
import { Controller, HostTensor } from "../../src/controller/index.ts"
import { PROGRESS_MS } from "../../src/controller/controller.ts"
import { randomBytes } from "node:crypto"
import { mkdtempSync, rmSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { readToken } from "../../src/net/token.ts"
import { makeClient } from "../../src/store/client.ts"
import { startServer } from "../../src/store/server.ts"
import { RawPeer, workerHandshake } from "../fuzz/rawPeer.ts"

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

/** Two workers with torchrun's environment on `store`, given `token`. */
const startWorkers = (storePort: number, token: string) => {
  const { MONARCH_TOKEN: _, MONARCH_TOKEN_FILE: __, CONTROLLER_ADDR: ___, ...env } = process.env
  const started = [0, 1].map((rank) => Bun.spawn([process.execPath, WORKER], {
    env: {
      ...env, RANK: String(rank), WORLD_SIZE: "2", LOCAL_RANK: String(rank), MASTER_ADDR: "127.0.0.1", MASTER_PORT: String(storePort), MONARCH_TOKEN: token,
      MONARCH_LOG: "error", MONARCH_CONNECT_TIMEOUT_MS: "30000",
    },
    stdout: "ignore", stderr: "ignore",
  }))
  procs.push(...started)
  return started
}

/** How an attach fails, how long it took, and what it said meanwhile. */
const attachFailure = async (o: Parameters<typeof Controller.attach>[0]) => {
  const problems: string[] = [], progress: string[] = []
  const t0 = performance.now()
  const exit = await Effect.runPromiseExit(Effect.service(Controller).pipe(
    Effect.provide(Controller.attach({ ...o, onProblem: (p) => void problems.push(p), onProgress: (l) => void progress.push(`${Math.round(performance.now() - t0)} ${l}`) })),
  ))
  const ms = performance.now() - t0
  if (exit._tag === "Success") throw new Error("the attach succeeded")
  return { message: String(Cause.squash(exit.cause)), ms, problems, progress }
}

test("a controller with another token than the workers' fails the attach within seconds, in one line naming the token and the workers", async () => {
  const own = startServer({ host: "127.0.0.1", port: 0 })
  try {
    const workers = startWorkers(own.port, randomBytes(16).toString("hex"))
    const f = await attachFailure({ world: 2, store: { host: "127.0.0.1", port: own.port }, token: randomBytes(16).toString("hex"), startTimeoutMs: 30_000 })
    expect(f.message).toMatch(/wrong job token: worker rank 0 \([^)]+\), rank 1 \([^)]+\) holds a token other than this controller's \(from attach's `token`\)/)
    expect(f.message).not.toContain("\n")
    expect(f.ms).toBeLessThan(8000)
    expect(f.problems.filter((p) => p.includes("closed the connection on the controller's proof: it holds another job token")).length).toBeGreaterThanOrEqual(2)
    for (const w of workers) w.kill("SIGKILL")
  } finally {
    own.stop()
  }
}, 40_000)

test("handshakes with another token that claim ranks outside the world are not kept: the wait names only ranks of its world", async () => {
  const own = startServer({ host: "127.0.0.1", port: 0 })
  try {
    const progress: string[] = []
    const waited = Effect.runPromiseExit(Effect.service(Controller).pipe(Effect.provide(Controller.attach({
      world: 2, store: { host: "127.0.0.1", port: own.port }, token: randomBytes(16).toString("hex"), startTimeoutMs: PROGRESS_MS + 2000,
      onProblem: () => {}, onProgress: (l) => void progress.push(l),
    }))))
    const address = await Effect.runPromise(Effect.scoped(Effect.gen(function* () {
      const client = yield* makeClient({ host: "127.0.0.1", port: own.port, timeout: Duration.seconds(10), connectTimeout: Duration.seconds(10) })
      return new TextDecoder().decode(yield* client.get("monarch/controller"))
    })))
    // A stranger (no token needed to get this far) claims rank 1, then ranks 2 to 41 of no
    // world the controller has, each closed on the controller's proof as a worker with another token closes.
    for (const rank of [1, ...Array.from({ length: 40 }, (_, i) => 2 + i)]) {
      const peer = await RawPeer.connect(address)
      expect((await workerHandshake(peer, { token: "another token", rank, world: 2, hello: false })).answer).toBe("ControllerProof")
      peer.end()
      await peer.until(() => peer.closed, 2000)
    }
    expect((await waited)._tag).toBe("Failure")
    const refused = progress.filter((l) => l.includes("refused handshakes with another job token"))
    expect(refused.length).toBeGreaterThan(0)
    for (const l of refused) expect(l).toContain("from ranks [1] (1 in all)")
  } finally {
    own.stop()
  }
}, 40_000)

test("a controller whose store dies while it waits fails the wait within its timeout, saying the store does not answer", async () => {
  const own = startServer({ host: "127.0.0.1", port: 0 })
  setTimeout(() => own.stop(), 1000)
  const f = await attachFailure({ world: 2, store: { host: "127.0.0.1", port: own.port }, token: randomBytes(16).toString("hex"), startTimeoutMs: 8000 })
  expect(f.message).toMatch(/^StartError: 0 of 2 workers connected within 8000 ms; the store (does not answer|did not answer within)/)
  expect(f.ms).toBeLessThan(8000 + 3000)
}, 40_000)

test("waiting under a prefix the workers do not use says so every few seconds: what it waits for and what the store holds", async () => {
  const own = startServer({ host: "127.0.0.1", port: 0 })
  try {
    const token = randomBytes(16).toString("hex")
    const workers = startWorkers(own.port, token)
    const f = await attachFailure({ world: 2, store: { host: "127.0.0.1", port: own.port }, token, prefix: "other", startTimeoutMs: 12_000 })
    expect(f.progress.length).toBeGreaterThanOrEqual(2)
    const first = f.progress[0]!
    const at = Number(first.split(" ")[0])
    expect(at).toBeLessThan(PROGRESS_MS + 2000)
    expect(first).toMatch(/waiting \d+ s of 12 s for ranks \[0,1\] at 127\.0\.0\.1:\d+ \(published as other\/controller in the store\): 0 of 2 workers connected/)
    expect(first).toContain(`the store has no worker keys under "other" (prefix), it has: monarch/comm/world/{0,1}`)
    expect(f.message).toContain(`the store has no worker keys under "other" (prefix), it has: monarch/comm/world/{0,1}`)
    for (const w of workers) w.kill("SIGKILL")
  } finally {
    own.stop()
  }
}, 40_000)
