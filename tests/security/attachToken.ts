/**
 * Attach mode's token, as checks that return what they saw (attachToken.test.ts
 * asserts on it, reliability.ts turns it into rows). Controller.attach meets workers through the
 * store, which authenticates no one; so the job token must never cross it. A recording proxy in
 * front of the store sees every byte the controller, the workers and a stranger exchange with it;
 * the stranger reads what it can from the store and tries the handshake as rank 0 before the real workers.
 */
import type { Socket } from "bun"
import { Duration, Effect, ManagedRuntime } from "effect"
import { randomBytes } from "node:crypto"
import { Controller, type HostTensor } from "../../src/controller/index.ts"
import { makeClient } from "../../src/store/client.ts"
import { startServer } from "../../src/store/server.ts"
import { readConfig } from "../../src/worker/config.ts"
import { eventually } from "../fuzz/controllerRig.ts"
import { RawPeer, workerHandshake } from "../fuzz/rawPeer.ts"

const WORKER = new URL("../../src/worker.ts", import.meta.url).pathname

/** A TCP proxy on loopback in front of `port`, keeping every byte that passes either way. */
const recordingProxy = (port: number) => {
  const seen: Uint8Array[] = []
  /** A client's side: its upstream once connected, and what it sent before that. */
  interface Client { upstream: Socket<undefined> | undefined; readonly early: Uint8Array[] }
  const listener = Bun.listen<Client>({
    hostname: "127.0.0.1", port: 0,
    socket: {
      binaryType: "uint8array",
      open(client) {
        client.data = { upstream: undefined, early: [] }
        Bun.connect<undefined>({
          hostname: "127.0.0.1", port,
          socket: {
            binaryType: "uint8array",
            open(upstream) {
              client.data.upstream = upstream
              for (const c of client.data.early.splice(0)) upstream.write(c)
            },
            data: (_upstream, chunk) => {
              seen.push(chunk.slice())
              client.write(chunk)
            },
            close: () => void client.end(),
            error: () => void client.end(),
          },
        }).catch(() => client.end())
      },
      data(client, chunk) {
        seen.push(chunk.slice())
        if (client.data.upstream === undefined) client.data.early.push(chunk.slice())
        else client.data.upstream.write(chunk)
      },
      close: (client) => void client.data.upstream?.end(),
      error: (client) => void client.data.upstream?.end(),
    },
  })
  return { port: listener.port, seen, stop: () => listener.stop(true) }
}

/** Whether `needle` occurs in the bytes, as one run (chunks joined). */
const occurs = (chunks: ReadonlyArray<Uint8Array>, needle: string): boolean => Buffer.concat(chunks).includes(Buffer.from(needle))

export interface AttachTokenResult {
  /** Bytes the proxy saw, and whether the token was among them. */
  readonly storeBytes: number
  readonly tokenInStore: boolean
  /** What the stranger found under <prefix>/token (undefined: nothing there). */
  readonly found: string | undefined
  /** The stranger's hello as rank 0, sent before any worker existed: refused and reported, or admitted. */
  readonly impostorClosed: boolean
  readonly impostorReported: boolean
  readonly impostorAdmitted: boolean
  /** The real workers attached, computed an all-reduce, and exited 0 on the layer's Exit. */
  readonly served: boolean
  readonly exits: ReadonlyArray<number>
}

/**
 * The controller attaches with a fresh token through the proxy; a stranger with a store client
 * waits for the controller's address there, reads `monarch/token` if it exists, and says hello
 * as rank 0 with what it found (or a guess); then two real workers start, given the token in
 * their environment, and the program runs.
 */
export const checkAttachToken = async (): Promise<AttachTokenResult> => {
  const server = startServer()
  const proxy = recordingProxy(server.port)
  const token = randomBytes(16).toString("hex")
  const problems: string[] = []
  const rt = ManagedRuntime.make(Controller.attach({ world: 2, store: { host: "127.0.0.1", port: proxy.port }, token, startTimeoutMs: 20_000, onProblem: (p) => void problems.push(p) }))
  const workers: Bun.Subprocess[] = []
  try {
    // Undefined when the controller never got its workers (the stranger held rank 0, say).
    const ready = rt.runPromise(Effect.service(Controller)).catch(() => undefined)
    const stranger = await Effect.runPromise(Effect.scoped(Effect.gen(function* () {
      const store = yield* makeClient({ host: "127.0.0.1", port: proxy.port, timeout: Duration.seconds(10), connectTimeout: Duration.seconds(10) })
      const address = new TextDecoder().decode(yield* store.get("monarch/controller"))
      const found = (yield* store.check(["monarch/token"])) ? new TextDecoder().decode(yield* store.get("monarch/token")) : undefined
      return { address, found }
    })))
    const before = problems.length
    const impostor = await RawPeer.connect(stranger.address)
    await workerHandshake(impostor, { token: stranger.found ?? "a-guess-at-the-token", rank: 0, world: 2 })
    const impostorClosed = await impostor.until(() => impostor.closed, 3000)
    await eventually(() => problems.length > before, 1000)
    const impostorReported = problems.slice(before).some((p) => p.includes("whose WorkerHello did not prove it holds the job token"))

    const { MONARCH_TOKEN: _, MONARCH_TOKEN_FILE: __, CONTROLLER_ADDR: ___, ...env } = process.env
    for (const rank of [0, 1])
      workers.push(Bun.spawn([process.execPath, WORKER], {
        env: { ...env, RANK: String(rank), WORLD_SIZE: "2", LOCAL_RANK: String(rank), MASTER_ADDR: "127.0.0.1", MASTER_PORT: String(proxy.port), MONARCH_TOKEN: token, MONARCH_LOG: "warn" },
        stdout: "ignore", stderr: "ignore",
      }))
    let served = false
    const ctl = await ready
    // The stranger got rank 0 when the real rank 0 was refused as a second claimant.
    const impostorAdmitted = !impostorClosed || problems.some((p) => p.includes("refused a second or out-of-range worker claiming rank 0"))
    if (ctl !== undefined && !impostorAdmitted) {
      const sum = await Promise.race([rt.runPromise(Effect.gen(function* () {
        const mesh = yield* ctl.mesh({ x: 2 })
        const t = yield* mesh.call("ops.full", [[2], 5])
        return yield* mesh.fetch(yield* mesh.reduce(t, "x", "sum"), 1)
      })), Bun.sleep(20_000).then(() => undefined)])
      served = sum !== undefined && [...(sum as HostTensor).toArray()].join() === "10,10"
    }
    impostor.end()
    await rt.dispose()
    const exits = await Promise.all(workers.map((w) => Promise.race([w.exited, Bun.sleep(10_000).then(() => -1)])))
    const seen = proxy.seen
    return {
      storeBytes: seen.reduce((n, c) => n + c.length, 0), tokenInStore: occurs(seen, token),
      found: stranger.found, impostorClosed, impostorReported, impostorAdmitted, served, exits,
    }
  } finally {
    for (const w of workers) w.kill("SIGKILL")
    await rt.dispose()
    proxy.stop()
    server.stop()
  }
}

/** Attach without any token, or with a short one: refused at start, naming what to set. */
export const checkAttachRefusals = async (): Promise<{ readonly none: string; readonly short: string; readonly worker: string }> => {
  const saved = { MONARCH_TOKEN: process.env.MONARCH_TOKEN, MONARCH_TOKEN_FILE: process.env.MONARCH_TOKEN_FILE }
  delete process.env.MONARCH_TOKEN
  delete process.env.MONARCH_TOKEN_FILE
  const server = startServer()
  const attachFails = async (token: string | undefined) => {
    const layer = Controller.attach({ world: 1, store: { host: "127.0.0.1", port: server.port }, startTimeoutMs: 2000, ...(token === undefined ? {} : { token }) })
    const exit = await Effect.runPromise(Effect.flip(Effect.scoped(Effect.provide(Effect.service(Controller), layer))).pipe(Effect.map((e) => e.message), Effect.catch(() => Effect.succeed("it started"))))
    return exit
  }
  try {
    const none = await attachFails(undefined)
    const short = await attachFails("short-token")
    let worker = "no ConfigError"
    try {
      readConfig({ RANK: "0", WORLD_SIZE: "1", MASTER_ADDR: "127.0.0.1", MASTER_PORT: "1" })
    } catch (e) {
      worker = (e as Error).message
    }
    return { none, short, worker }
  } finally {
    for (const [k, v] of Object.entries(saved)) if (v !== undefined) process.env[k] = v
    server.stop()
  }
}
