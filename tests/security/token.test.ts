// The job token on its own: a WorkerHello that would be admitted in every other way (its rank
// free, its world right) is refused when its proof was made with a wrong token alone; and the
// controller's own proof holds only for the right token. The intruder checks in
// closedDoor.ts claim a rank already taken, which the core refuses anyway, so there only the
// text of the refusal tells the token check from the rank check.
import { afterEach, beforeEach, expect, test } from "bun:test"
import { Effect, Exit, Scope } from "effect"
import { Core } from "../../src/controller/core.ts"
import { listen } from "../../src/controller/listener.ts"
import { RawPeer, workerHandshake } from "../fuzz/rawPeer.ts"

const TOKEN = "the-job-token-0123456789"
let scope: Scope.Closeable
let core: Core
let address: string
const problems: string[] = []

beforeEach(async () => {
  problems.length = 0
  scope = Effect.runSync(Scope.make())
  core = new Core({ world: 2, captureSites: false, onProblem: (p) => void problems.push(p) })
  // Wired as the controller wires it: the listener checks the token, the core the rank.
  const l = await Effect.runPromise(Scope.provide(scope)(listen({
    token: TOKEN,
    onWorker: (link) => {
      if (!core.admit(link)) {
        problems.push(`refused rank ${link.hello.rank}`)
        link.close()
      }
    },
    onMessage: (rank, m) => core.onMessage(rank, m),
    onDisconnect: (rank) => core.onDisconnect(rank),
    onProblem: (p) => void problems.push(p),
  })))
  address = l.address
})
afterEach(() => Effect.runPromise(Scope.close(scope, Exit.void)))

/** Connects, passes the handshake with `token` for rank 1 of 2 (free), and waits until it is closed or admitted (1 s at most). */
const tryHello = async (token: string) => {
  const peer = await RawPeer.connect(address)
  try {
    const { proven } = await workerHandshake(peer, { token, rank: 1, world: 2 })
    for (const deadline = performance.now() + 1000; !peer.closed && core.connected === 0 && performance.now() < deadline;) await Bun.sleep(5)
    return { closed: peer.closed, admitted: core.connected, proven }
  } finally {
    peer.end()
  }
}

test("a wrong token is refused for a rank that is free, by the token check itself", async () => {
  for (const wrong of ["", "not-the-token", TOKEN.slice(0, -1) + "X", TOKEN + "0"]) {
    const r = await tryHello(wrong)
    expect(r.admitted, `a WorkerHello with the wrong token ${JSON.stringify(wrong)} was admitted for a free rank`).toBe(0)
    expect(r.closed, `the connection with the wrong token ${JSON.stringify(wrong)} was left open`).toBe(true)
    expect(r.proven, `the controller's proof held for the wrong token ${JSON.stringify(wrong)}`).toBe(false)
  }
  expect(problems.length).toBe(4)
  for (const p of problems) expect(p).toBe("refused a connection whose WorkerHello did not prove it holds the job token")
})

test("the same hello with the right token is admitted to that rank (so the rank was free)", async () => {
  const r = await tryHello(TOKEN)
  expect(r.admitted).toBe(1)
  expect(r.closed).toBe(false)
  expect(r.proven).toBe(true)
  expect(problems).toEqual([])
})
