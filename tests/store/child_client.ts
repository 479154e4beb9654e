// Run by thread.test.ts as a separate process: connects our client to the store at argv[2],
// prints "ready", pauses 200 ms (the parent blocks its JS thread meanwhile), runs 300 requests,
// then prints "done <epoch ms> <last value>".
import { Effect } from "effect"
import { makeClient } from "../../src/store/client.ts"

const port = Number(process.argv[2])
await Effect.runPromise(
  Effect.scoped(
    Effect.gen(function* () {
      const c = yield* makeClient({ port, timeout: 10_000 })
      console.log("ready")
      yield* Effect.sleep(200)
      for (let i = 0; i < 100; i++) {
        yield* c.set(`k${i}`, `v${i}`)
        yield* c.get(`k${i}`)
        yield* c.add("count", 1)
      }
      console.log(`done ${Date.now()} ${yield* c.add("count", 0)}`)
    }),
  ),
)
