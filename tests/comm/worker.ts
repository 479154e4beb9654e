/**
 * One worker process of the communicator tests:
 *   bun tests/comm/worker.ts <scenario> <rank> <size> <timeoutMs> <store port>
 * Communicators meet through the test's store server (src/comm/rendezvous.ts).
 */
import { Duration, Effect } from "effect"
import { loadNative } from "../../ffi/native.ts"
import { openComm } from "../../src/comm/rendezvous.ts"
import { makeClient } from "../../src/store/client.ts"
import { emit, SCENARIOS } from "./scenarios.ts"

const [scenario = "", rankArg = "", sizeArg = "", timeoutArg = "", portArg = ""] = process.argv.slice(2)
const run = SCENARIOS[scenario]
if (run === undefined) throw new Error(`unknown scenario ${JSON.stringify(scenario)}`)
const rank = Number(rankArg), size = Number(sizeArg), timeoutMs = Number(timeoutArg)
const native = loadNative("cpu")

await Effect.runPromise(
  Effect.scoped(
    Effect.gen(function* () {
      const store = yield* makeClient({ port: Number(portArg), timeout: Duration.millis(timeoutMs) })
      yield* Effect.promise(() =>
        run({
          native,
          rank,
          size,
          timeoutMs,
          store,
          open: (key, members) => Effect.runPromise(openComm({ native, store, key, members, rank, timeoutMs })),
        }),
      )
      emit({ event: "done" })
    }),
  ),
)
