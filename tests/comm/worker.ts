/**
 * One worker process of the communicator tests (tests/comm, and tests/hosts across hosts):
 *   bun tests/comm/worker.ts <scenario> <rank> <size> <timeoutMs> <store port> [<store host> <own address>]
 * Communicators meet through the test's store server (src/comm/rendezvous.ts), under the
 * scenario's prefix; Gloo binds `own address` when given, as MONARCH_HOSTNAME tells a worker
 * to. After each open it reports how many shared all-reduce segments the process maps
 * (comm_shm.cc names its memfds so), which tells the test which all-reduce path it took.
 */
import { readFileSync } from "node:fs"
import { Duration, Effect } from "effect"
import { loadNative } from "../../ffi/native.ts"
import { rendezvous } from "../../src/comm/rendezvous.ts"
import { makeClient } from "../../src/store/client.ts"
import { prefixStore } from "../../src/store/prefix.ts"
import { emit, SCENARIOS } from "./scenarios.ts"

const [scenario = "", rankArg = "", sizeArg = "", timeoutArg = "", portArg = "", storeHost = "127.0.0.1", hostname = ""] = process.argv.slice(2)
const run = SCENARIOS[scenario]
if (run === undefined) throw new Error(`unknown scenario ${JSON.stringify(scenario)}`)
const rank = Number(rankArg), size = Number(sizeArg), timeoutMs = Number(timeoutArg)
const native = loadNative("cpu")
native.setCommShm(process.env.MONARCH_COMM_SHM !== "0") // as a worker's config sets it

const shmSegments = (): number =>
  readFileSync("/proc/self/maps", "utf8").split("\n").filter((line) => line.includes("/memfd:monarch-shm-allreduce")).length

await Effect.runPromise(
  Effect.scoped(
    Effect.gen(function* () {
      const timeout = Duration.millis(timeoutMs)
      const store = prefixStore(scenario, yield* makeClient({ host: storeHost, port: Number(portArg), timeout, connectTimeout: timeout }))
      yield* Effect.promise(() =>
        run({
          native,
          rank,
          size,
          timeoutMs,
          store,
          open: async (key, members) => {
            const comm = await Effect.runPromise(rendezvous({ native, store, key, members, rank, timeoutMs, hostname }))
            emit({ event: "opened", key, shmSegments: shmSegments(), transport: comm.transport() })
            return comm
          },
        }),
      )
      emit({ event: "done" })
    }),
  ),
)
