/**
 * A stranger who can write the store (anyone who reaches it) names itself there as the
 * controller, as checks that return what they saw (impostor.test.ts asserts on it,
 * reliability.ts turns it into rows). A real controller attaches through the store; the
 * stranger overwrites `monarch/controller` with its own address; a real worker started without
 * CONTROLLER_ADDR then meets the impostor, which tries in turn:
 *   - a forged ControllerProof (random bytes);
 *   - a relay: it passes the worker's frames to the real controller over a connection of its
 *     own and the controller's back, and then reflects the controller's proof back to it as
 *     a WorkerHello;
 *   - a replay of the controller's proof it relayed, on the worker's next connection.
 * Then the store names the real controller again, and the worker must attach to it and serve.
 * Every byte the impostor received is kept and searched for the token and for fixed functions
 * of it (digests, encodings, MACs keyed by it over nothing the impostor chose).
 */
import { Duration, Effect, ManagedRuntime } from "effect"
import { createHash, createHmac, randomBytes } from "node:crypto"
import { Controller, type HostTensor } from "../../src/controller/index.ts"
import { decodeControllerMessage, decodeWorkerMessage } from "../../src/protocol/codec.ts"
import { makeClient } from "../../src/store/client.ts"
import { startServer } from "../../src/store/server.ts"
import { eventually } from "../fuzz/controllerRig.ts"
import { frame, framed, RawPeer } from "../fuzz/rawPeer.ts"

const WORKER = new URL("../../src/worker.ts", import.meta.url).pathname

/** The impostor's tries, in the order it makes them on the worker's connections. */
export const TRIES = ["forged proof", "relay to the real controller", "replayed proof"] as const

/** Byte strings derived from the token alone: what a stranger could use in its place. */
export const tokenDerivatives = (token: string): Array<[string, Uint8Array]> => {
  const t = Buffer.from(token)
  const digests = ["sha256", "sha1", "md5", "sha512"].flatMap((h): Array<[string, Uint8Array]> => {
    const d = createHash(h).update(t).digest()
    return [[h, d], [`${h} hex`, Buffer.from(d.toString("hex"))]]
  })
  return [
    ["the token", t],
    ["the token in hex", Buffer.from(t.toString("hex"))],
    ["the token in base64", Buffer.from(t.toString("base64"))],
    ["the token reversed", Buffer.from([...t].reverse())],
    ["the token's first half", t.subarray(0, t.length >> 1)],
    ...digests,
    ["HMAC-SHA256 keyed by the token over nothing", createHmac("sha256", t).update(Buffer.alloc(0)).digest()],
    ["HMAC-SHA256 keyed by nothing over the token", createHmac("sha256", Buffer.alloc(0)).update(t).digest()],
  ]
}

export interface ImpostorResult {
  /** Connections the worker made to the impostor, and what the impostor did on each. */
  readonly tries: ReadonlyArray<string>
  /** What the worker sent the impostor, by tag, over all its connections. */
  readonly workerSent: ReadonlyArray<string>
  /** Bytes the impostor received from the worker (relayed ones included). */
  readonly bytesSeen: number
  /** Which of tokenDerivatives occur in them (none may). */
  readonly found: ReadonlyArray<string>
  /** What the relay got from the real controller, by tag, and whether its reflected hello was refused. */
  readonly relayGot: ReadonlyArray<string>
  readonly relayRefused: boolean
  readonly controllerSaid: ReadonlyArray<string>
  /** The worker said on stderr that the peer was not its controller, this many times. */
  readonly warnings: number
  /** After the store named the real controller again: the worker attached, computed, exited 0. */
  readonly served: boolean
  readonly exit: number
  readonly stderr: string
}

/** Frames of `peer` decoded by `decode`, as tags ("invalid" where one does not decode). */
const tags = (bodies: ReadonlyArray<Uint8Array>, decode: (b: Uint8Array) => { _tag: string; success?: { _tag: string } }) =>
  bodies.map((b) => {
    const r = decode(b)
    return r._tag === "Success" ? r.success!._tag : "invalid"
  })

export const checkImpostor = async (): Promise<ImpostorResult> => {
  const server = startServer()
  const token = randomBytes(16).toString("hex")
  const problems: string[] = []
  const rt = ManagedRuntime.make(Controller.attach({ world: 1, store: { host: "127.0.0.1", port: server.port }, token, startTimeoutMs: 60_000, onProblem: (p) => void problems.push(p) }))
  // Undefined when the controller never got its worker.
  const ready = rt.runPromise(Effect.service(Controller)).catch(() => undefined)
  const store = await Effect.runPromise(Effect.scoped(Effect.gen(function* () {
    const client = yield* makeClient({ host: "127.0.0.1", port: server.port, timeout: Duration.seconds(20), connectTimeout: Duration.seconds(20) })
    return { address: new TextDecoder().decode(yield* client.get("monarch/controller")) }
  })))
  const setController = (address: string) =>
    Effect.runPromise(Effect.scoped(Effect.gen(function* () {
      const client = yield* makeClient({ host: "127.0.0.1", port: server.port, timeout: Duration.seconds(5), connectTimeout: Duration.seconds(5) })
      yield* client.set("monarch/controller", address)
    })))

  const fromWorker: RawPeer[] = []
  const tries: string[] = []
  let relayGot: string[] = [], relayRefused = false, captured: Uint8Array | undefined
  const said: string[] = []
  const impostor = RawPeer.listen((peer) => {
    fromWorker.push(peer)
    const kind = TRIES[tries.length] ?? "forged proof"
    tries.push(kind)
    void (async () => {
      if (!(await eventually(() => peer.bodies.length > 0 || peer.closed, 10_000)) || peer.closed) return
      if (kind === "forged proof") return peer.write(framed({ _tag: "ControllerProof", nonce: new Uint8Array(randomBytes(32)), proof: new Uint8Array(randomBytes(32)) }))
      if (kind === "replayed proof") return peer.write(captured ?? new Uint8Array(0))
      // The relay: the worker's challenge to the real controller, its answer back.
      const upstream = await RawPeer.connect(store.address)
      const before = problems.length
      upstream.write(frame(peer.bodies[0]!))
      await eventually(() => upstream.bodies.length > 0 || upstream.closed, 5000)
      if (upstream.bodies.length > 0) {
        captured = frame(upstream.bodies[0]!)
        peer.write(captured)
      }
      // Whatever the worker sends next goes up too; then the controller's own proof is reflected.
      await eventually(() => peer.closed || peer.bodies.length > 1, 5000)
      for (const b of peer.bodies.slice(1)) upstream.write(frame(b))
      const answer = upstream.bodies.length > 0 ? decodeWorkerMessage(upstream.bodies[0]!) : undefined
      if (answer?._tag === "Success" && answer.success._tag === "ControllerProof")
        upstream.write(framed({ _tag: "WorkerHello", rank: 0, world: 1, pid: 1, proof: answer.success.proof, device: "cpu" }))
      relayRefused = await eventually(() => upstream.closed, 5000)
      await eventually(() => problems.length > before, 1000)
      said.push(...problems.slice(before))
      relayGot = tags(upstream.bodies, decodeWorkerMessage)
      upstream.end()
    })()
  })

  let worker: Bun.Subprocess<"ignore", "ignore", "pipe"> | undefined
  try {
    await setController(impostor.address)
    const { MONARCH_TOKEN: _, MONARCH_TOKEN_FILE: __, CONTROLLER_ADDR: ___, ...env } = process.env
    worker = Bun.spawn([process.execPath, WORKER], {
      env: { ...env, RANK: "0", WORLD_SIZE: "1", LOCAL_RANK: "0", MASTER_ADDR: "127.0.0.1", MASTER_PORT: String(server.port), MONARCH_TOKEN: token, MONARCH_LOG: "warn", MONARCH_CONNECT_TIMEOUT_MS: "60000" },
      stdin: "ignore", stdout: "ignore", stderr: "pipe",
    })
    let stderr = ""
    void (async () => {
      for await (const chunk of worker!.stderr) stderr += new TextDecoder().decode(chunk)
    })()
    // Each try ends with the worker closing the connection; then it reads the store again.
    await eventually(() => fromWorker.length >= TRIES.length && fromWorker.every((p) => p.closed), 30_000)
    await Bun.sleep(200)
    await setController(store.address)

    const ctl = await Promise.race([ready, Bun.sleep(30_000).then(() => undefined)])
    let served = false
    if (ctl !== undefined) {
      const sum = await Promise.race([rt.runPromise(Effect.gen(function* () {
        const mesh = yield* ctl.mesh({ x: 1 })
        const t = yield* mesh.call("ops.full", [[2], 4])
        return yield* mesh.fetch(yield* mesh.call("ops.add", [t, t]))
      })), Bun.sleep(20_000).then(() => undefined)])
      served = sum !== undefined && [...(sum as HostTensor).toArray()].join() === "8,8"
    }
    await rt.dispose()
    const exit = await Promise.race([worker.exited, Bun.sleep(10_000).then(() => -1)])
    const seen = Buffer.concat(fromWorker.flatMap((p) => p.chunks))
    return {
      tries,
      workerSent: fromWorker.flatMap((p) => tags(p.bodies, decodeControllerMessage)),
      bytesSeen: seen.length,
      found: tokenDerivatives(token).filter(([, bytes]) => seen.includes(bytes)).map(([name]) => name),
      relayGot, relayRefused, controllerSaid: said,
      warnings: stderr.split("\n").filter((l) => l.includes("is not this job's controller")).length,
      served, exit, stderr,
    }
  } finally {
    worker?.kill("SIGKILL")
    await rt.dispose()
    impostor.stop()
    server.stop()
  }
}
