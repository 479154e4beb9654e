// Interop with real torch (Debian's 1.13 at /usr/bin/python3, or TORCH_PYTHON): our client
// against torch.distributed.TCPStore as the server, torch clients against our server, and
// 2-process gloo init_process_group + all_reduce whose store is our server. The expectations
// follow the torch version found (1.x speaks the 1.13 dialect, 2.x the 2.x one); the key-path
// checks are the 1.13 ones. Skips when torch is missing.
import { afterAll, beforeAll, describe, expect, test } from "bun:test"
import { hostname } from "node:os"
import { Effect } from "effect"
import { makeClient } from "../../src/store/client.ts"
import { prefixStore } from "../../src/store/prefix.ts"
import { type RunningServer, startServer } from "../../src/store/server.ts"
import { describeUnless, testUnless } from "../skip.ts"
import { PythonPeer, run, runPython, text, torchAvailable } from "./helpers.ts"

const torch = torchAvailable()
const torchDialect = torch.ok && torch.version.startsWith("1.") ? "1.13" : "2.x"

describeUnless(torch.ok ? undefined : torch.reason)("our client, torch.distributed.TCPStore server", () => {
  let peer: PythonPeer
  let port = 0
  beforeAll(async () => {
    peer = PythonPeer.start("torch_server.py", [], 60_000)
    const hello = await peer.next()
    port = hello.port
    console.log(`torch ${hello.torch} TCPStore server on port ${port}`)
  })
  afterAll(() => peer.stop())

  const client = (timeout = 5000) => makeClient({ port, timeout })

  test(`auto detects ${torchDialect}, and the server survives the probe`, () =>
    run(
      Effect.gen(function* () {
        const c = yield* client()
        expect(c.dialect).toBe(torchDialect)
        const again = yield* client()
        expect(again.dialect).toBe(torchDialect)
      }),
    ))

  test("set, get, add, compareSet, numKeys, deleteKey, and what torch itself reads", () =>
    run(
      Effect.gen(function* () {
        const c = yield* client()
        yield* c.set("ours", "from-bun")
        const seen = yield* Effect.promise(() => peer.call({ op: "get", key: "ours" }))
        expect(seen.value).toBe("from-bun")
        yield* Effect.promise(() => peer.call({ op: "set", key: "theirs", value: "from-torch" }))
        expect(text(yield* c.get("theirs"))).toBe("from-torch")
        expect(yield* c.add("ctr", 4)).toBe(4)
        expect(yield* c.add("ctr", -1)).toBe(3)
        expect(text(yield* c.get("ctr"))).toBe("3")
        expect(text(yield* c.compareSet("cas", "x", "y"))).toBe("x")
        expect(yield* c.check(["cas"])).toBe(false)
        expect(text(yield* c.compareSet("cas", "", "first"))).toBe("first")
        expect(text(yield* c.compareSet("cas", "nope", "second"))).toBe("first")
        expect(text(yield* c.compareSet("cas", "first", "second"))).toBe("second")
        const n = yield* c.numKeys
        yield* c.set("extra", "1")
        expect(yield* c.numKeys).toBe(n + 1)
        expect(yield* c.deleteKey("extra")).toBe(true)
        expect(yield* c.deleteKey("extra")).toBe(false)
        expect((yield* c.multiGet(["ours", "theirs"])).map(text)).toEqual(["from-bun", "from-torch"])
        if (torchDialect === "1.13") {
          expect(yield* Effect.flip(c.append("ours", "x"))).toMatchObject({ reason: "Unsupported" })
        } else {
          yield* c.append("ours", "+x")
          expect(text(yield* c.get("ours"))).toBe("from-bun+x")
        }
      }),
    ))

  test("wait blocks until another client sets the key", () =>
    run(
      Effect.gen(function* () {
        const c = yield* client()
        const other = yield* client()
        const t0 = performance.now()
        yield* Effect.forkChild(Effect.andThen(Effect.sleep(200), other.set("later", "v")))
        expect(text(yield* c.get("later"))).toBe("v")
        expect(performance.now() - t0).toBeGreaterThanOrEqual(190)
      }),
    ))

  test("a timed-out wait, then a late set: the next replies are still right", () =>
    run(
      Effect.gen(function* () {
        const c = yield* client()
        const other = yield* client()
        const e = yield* Effect.flip(c.wait(["late"], 150))
        expect(e).toMatchObject({ _tag: "StoreTimeout", keys: ["late"], timeoutMs: 150 })
        yield* other.set("late", "x")
        yield* Effect.sleep(50) // torch's server sends the stale STOP_WAITING here
        expect(yield* c.numKeys).toBe(yield* other.numKeys)
        expect(yield* c.add("after-late", 2)).toBe(2)
      }),
    ))

  testUnless(torchDialect === "1.13" ? undefined : `torch ${torch.ok ? torch.version : ""} speaks the 2.x dialect itself`)("forced 2.x against torch 1.13 fails with Connect; the server keeps serving", () =>
    run(
      Effect.gen(function* () {
        const e = yield* Effect.flip(makeClient({ port, dialect: "2.x", timeout: 300 }))
        expect(e).toMatchObject({ _tag: "StoreError", reason: "Connect" })
        const c = yield* client()
        expect(yield* c.add("still-up", 1)).toBe(1)
      }),
    ))
})

describeUnless(torch.ok ? undefined : torch.reason)("torch clients, our server", () => {
  let server: RunningServer
  beforeAll(() => {
    server = startServer()
  })
  afterAll(() => server.stop())

  test("torch's set, get, add, compare_set, num_keys, delete_key, wait (and its timeout)", async () => {
    await run(Effect.flatMap(makeClient({ port: server.port }), (c) => c.set("from_ts", "hi")))
    const r = await runPython("torch_client.py", [String(server.port)], 60_000)
    if (r.code !== 0) console.log(r.stderr)
    expect(r.code).toBe(0)
    const out = JSON.parse(r.stdout)
    console.log("torch client results:", r.stdout.trim())
    expect(out).toMatchObject({
      from_ts: "hi",
      get_k1: "v1",
      add_3: 3,
      add_minus_1: 2,
      get_ctr: "2",
      add_on_text: 42,
      cas_missing_empty: "first",
      cas_mismatch: "first",
      cas_match: "second",
      cas_missing_nonempty: "x",
      cas_missing_created: false,
      delete_existing: true,
      delete_again: false,
      blocking_get: "y",
      after_timeout_add: 12,
    })
    expect(out.wait_blocked_s).toBeGreaterThanOrEqual(0.25)
    expect(out.get_blocked_s).toBeGreaterThanOrEqual(0.25)
    expect(out.wait_timeout).toMatch(/timeout/i)
    expect(out.wait_timeout_s).toBeGreaterThanOrEqual(0.25)
    expect(out.wait_timeout_s).toBeLessThan(5)
    // what torch wrote, read back by our client: raw bytes, and a key under torch's nested
    // PrefixStore("a", PrefixStore("b", store)), read through ours built the same way
    await run(
      Effect.gen(function* () {
        const c = yield* makeClient({ port: server.port })
        expect([...(yield* c.get("from_torch"))]).toEqual([0, 255, ...new TextEncoder().encode("bytes")])
        expect(text(yield* prefixStore("a", prefixStore("b", c)).get("pk"))).toBe("pv")
        expect(text(yield* c.get("b/a/pk"))).toBe("pv")
        expect(yield* c.numKeys).toBe(out.num_keys_at_end)
      }),
    )
  }, 60_000)

  // Where gloo's rank_0 key (value: that rank's hostname) lands. With an explicit store= torch
  // 1.13 adds only the group ("0") and gloo device ("0") prefixes; env:// with the agent store
  // adds /worker/attempt_0 and default_pg as well.
  const modes = [
    ["store", "store=TCPStore(our server)", "0/0/rank_0"],
    ["agent", "env:// with TORCHELASTIC_USE_AGENT_STORE=True", "/worker/attempt_0/default_pg/0/0/rank_0"],
  ] as const
  test.each(modes)("gloo init_process_group (%s: %s) + all_reduce in 2 processes", async (mode, _how, rank0Key) => {
    const ranks = await Promise.all(
      [0, 1].map((rank) => runPython("torch_gloo.py", [String(server.port), String(rank), mode], 90_000)),
    )
    for (const r of ranks) {
      if (r.code !== 0) console.log(r.stderr)
      expect(r.code).toBe(0)
    }
    const results = ranks.map((r) => JSON.parse(r.stdout))
    console.log(`gloo ranks (${mode}):`, results.map((r) => JSON.stringify(r)).join(" "))
    const expected = [1 + 2, 10 * 1 + 10 * 2]
    expect(results.map((r) => r.sum)).toEqual([expected, expected])
    if (torchDialect !== "1.13") return console.log("key-path check skipped: it is the 1.13 layout")
    const rank0Host = await run(Effect.flatMap(makeClient({ port: server.port }), (c) => c.get(rank0Key, 1000)))
    expect(text(rank0Host)).toBe(hostname())
  }, 100_000)
})
