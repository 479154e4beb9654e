/**
 * One process of the communicator checks across hosts:
 *   bun tests/hosts/comm_peer.ts <scenario> <rank> <size> <timeoutMs> <store host> <store port> <own address>
 * Runs a scenario of tests/comm/scenarios.ts (every check there computes its expected bytes
 * itself and prints them as JSON lines), with the store on host 1 and Gloo bound to this
 * host's own address, the way MONARCH_HOSTNAME tells a worker to.
 */
import { Duration, Effect } from "effect"
import { loadNative } from "../../ffi/native.ts"
import { openComm } from "../../src/comm/rendezvous.ts"
import { makeClient } from "../../src/store/client.ts"
import { prefixStore } from "../../src/store/prefix.ts"
import { emit, SCENARIOS } from "../comm/scenarios.ts"

const [scenario = "", rankArg = "", sizeArg = "", timeoutArg = "", storeHost = "", storePort = "", hostname = ""] = process.argv.slice(2)
const run = SCENARIOS[scenario]
if (run === undefined) throw new Error(`unknown scenario ${JSON.stringify(scenario)}`)
const rank = Number(rankArg), size = Number(sizeArg), timeoutMs = Number(timeoutArg)
const native = loadNative("cpu")

await Effect.runPromise(
  Effect.scoped(
    Effect.gen(function* () {
      const timeout = Duration.millis(timeoutMs)
      const store = prefixStore(`hosts/${scenario}`, yield* makeClient({ host: storeHost, port: Number(storePort), timeout, connectTimeout: timeout }))
      yield* Effect.promise(() =>
        run({
          native,
          rank,
          size,
          timeoutMs,
          store,
          open: (key, members) => Effect.runPromise(openComm({ native, store, key, members, rank, timeoutMs, hostname })),
        }),
      )
      emit({ event: "done" })
    }),
  ),
)
