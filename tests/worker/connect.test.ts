// A worker meeting its controller: it retries with backoff while nothing listens at
// CONTROLLER_ADDR, and gives up after MONARCH_CONNECT_TIMEOUT_MS saying so (status 1).
import { expect, test } from "bun:test"
import { startServer } from "../../src/store/server.ts"
import { spawnWorkers } from "../faults/procs.ts"
import { freePort } from "../processes.ts"

test("with no controller, a worker retries until MONARCH_CONNECT_TIMEOUT_MS, then exits saying why", async () => {
  const server = startServer({ port: 0 })
  const nobody = `127.0.0.1:${await freePort()}`
  const [worker] = spawnWorkers(1, { host: "127.0.0.1", port: server.port }, { CONTROLLER_ADDR: nobody, MONARCH_TOKEN: "t", MONARCH_CONNECT_TIMEOUT_MS: "2500" })
  await using w = worker!
  try {
    const waiting = await w.line(/waiting for a controller: cannot reach the controller/, 20_000)
    expect(waiting?.text ?? w.tail()).toContain(nobody)
    const end = await w.exit(15_000)
    expect(end?.status ?? `still running:\n${w.tail()}`).toBe(1)
    // Between the first refusal and giving up, about the deadline passed (not one try).
    expect(end!.at - waiting!.at).toBeGreaterThan(1500)
    expect(w.lines.map((l) => l.text).join("\n")).toContain("no controller admitted this worker within 2500 ms (MONARCH_CONNECT_TIMEOUT_MS)")
  } finally {
    server.stop()
  }
}, 40_000)
