// The Effect services: server and client layers, prefix stores composing like torch's
// PrefixStore, and a server layer that cannot bind.
import { expect, test } from "bun:test"
import { Effect, Layer } from "effect"
import { makeClient } from "../../src/store/client.ts"
import { prefixStore } from "../../src/store/prefix.ts"
import { Store, StoreServer } from "../../src/store/service.ts"
import { run, text } from "./helpers.ts"

/** A server on a free port, and a client of it as the Store. */
const StoreLive = Layer.unwrap(
  Effect.map(Effect.service(StoreServer), ({ port }) => Store.layerClient({ port, timeout: 2000 })),
).pipe(Layer.provideMerge(StoreServer.layer()))

test("Store.layerClient over StoreServer.layer", () =>
  run(
    Effect.gen(function* () {
      const store = yield* Store
      yield* store.set("a", "1")
      expect(yield* store.add("a", 1)).toBe(2)
      expect(text(yield* store.get("a"))).toBe("2")
      expect((yield* StoreServer).port).toBeGreaterThan(0)
    }).pipe(Effect.provide(StoreLive)),
  ))

test("prefixes map k to prefix/k, nest outermost-last like torch, and share numKeys", () =>
  run(
    Effect.gen(function* () {
      const root = yield* Store
      const inner = Effect.gen(function* () {
        const s = yield* Store
        yield* s.set("k", "nested")
        yield* s.multiSet([["m", "multi"]])
        expect(text(yield* s.get("k"))).toBe("nested")
        expect(yield* s.check(["k", "m"])).toBe(true)
        return yield* s.numKeys
      })
      // withPrefix("b") inside withPrefix("a") is PrefixStore("b", PrefixStore("a", root))
      const n = yield* inner.pipe(Store.withPrefix("b"), Store.withPrefix("a"))
      expect(text(yield* root.get("a/b/k"))).toBe("nested")
      expect(text(yield* root.get("a/b/m"))).toBe("multi")
      expect(n).toBe(yield* root.numKeys)
      const direct = prefixStore("x", prefixStore("y", root))
      yield* direct.set("k", "direct")
      expect(text(yield* root.get("y/x/k"))).toBe("direct")
      expect(yield* Effect.flip(direct.wait(["never"], 50))).toMatchObject({ keys: ["y/x/never"] })
      const viaLayer = yield* Effect.service(Store).pipe(Effect.provide(Store.layerPrefix("p")))
      yield* viaLayer.set("k", "layered")
      expect(text(yield* root.get("p/k"))).toBe("layered")
    }).pipe(Effect.provide(StoreLive)),
  ))

test("a server layer on a port in use fails with StoreError Listen", async () => {
  const taken = Bun.listen({ hostname: "127.0.0.1", port: 0, socket: { data() {} } })
  try {
    const e = await run(Effect.flip(Layer.build(StoreServer.layer({ port: taken.port }))))
    expect(e).toMatchObject({ _tag: "StoreError", reason: "Listen" })
    expect(e.message).toContain(String(taken.port))
  } finally {
    taken.stop(true)
  }
})

test("closing the client's scope closes it for good", () =>
  run(
    Effect.gen(function* () {
      const { port } = yield* StoreServer
      const c = yield* Effect.scoped(
        Effect.gen(function* () {
          const c = yield* makeClient({ port })
          yield* c.set("k", "v")
          return c
        }),
      )
      expect(yield* Effect.flip(c.numKeys)).toMatchObject({ _tag: "StoreError", reason: "ConnectionLost" })
    }).pipe(Effect.provide(StoreServer.layer())),
  ))
