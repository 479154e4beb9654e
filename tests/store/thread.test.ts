// The server on its own thread keeps serving while this (the main) JS thread is blocked, as it
// is during a long native call; and it stops cleanly, as a function and as a layer.
import { expect, test } from "bun:test"
import { Effect, Layer } from "effect"
import { Store, StoreServer } from "../../src/store/service.ts"
import { startServerThread } from "../../src/store/serverThread.ts"
import { run, text } from "./helpers.ts"

test("a server thread serves another process while the main thread is blocked", async () => {
  const thread = await startServerThread({ host: "127.0.0.1", port: 0 })
  expect(thread.port).toBeGreaterThan(0)
  const child = Bun.spawn([process.execPath, `${import.meta.dir}/child_client.ts`, String(thread.port)], {
    stdout: "pipe",
    stderr: "inherit",
  })
  const killer = setTimeout(() => child.kill("SIGKILL"), 15_000)
  try {
    const reader = child.stdout.getReader()
    let out = ""
    const readMore = async () => {
      const { value, done } = await reader.read()
      out += new TextDecoder().decode(value)
      return !done
    }
    while (!out.includes("ready\n")) if (!(await readMore())) throw new Error(`child ended early: ${out}`)
    // Block this thread completely, the way a Gloo collective called through FFI would.
    const blockStart = Date.now()
    Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 2000)
    const blockEnd = Date.now()
    while (await readMore());
    expect(await child.exited).toBe(0)
    const [, doneAt, count] = out.match(/done (\d+) (\d+)/)!
    expect(Number(count)).toBe(100)
    expect(Number(doneAt)).toBeGreaterThan(blockStart)
    expect(Number(doneAt)).toBeLessThan(blockEnd)
  } finally {
    clearTimeout(killer)
    await thread.stop()
  }
  const refused = await Bun.connect({ hostname: "127.0.0.1", port: thread.port, socket: { data() {} } }).then(
    (s) => (s.end(), false),
    () => true,
  )
  expect(refused).toBe(true)
}, 20_000)

test("StoreServer.layerThread serves a Store client", () =>
  run(
    Effect.gen(function* () {
      const store = yield* Store
      yield* store.set("t", "threaded")
      expect(text(yield* store.get("t"))).toBe("threaded")
    }).pipe(
      Effect.provide(
        Layer.unwrap(Effect.map(Effect.service(StoreServer), ({ port }) => Store.layerClient({ port }))).pipe(
          Layer.provide(StoreServer.layerThread()),
        ),
      ),
    ),
  ))

test("a server thread that cannot bind rejects with StoreError Listen", async () => {
  const taken = Bun.listen({ hostname: "127.0.0.1", port: 0, socket: { data() {} } })
  try {
    await expect(startServerThread({ port: taken.port })).rejects.toMatchObject({ _tag: "StoreError", reason: "Listen" })
  } finally {
    taken.stop(true)
  }
})
