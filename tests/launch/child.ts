/**
 * The program the launcher tests start: `bun tests/launch/child.ts <mode>`, one behaviour per
 * mode, reporting what it saw as lines on stdout (the launcher prefixes them with the rank).
 *   env     prints the launcher's variables as one JSON line
 *   env-wait  the same, then sleeps for a minute
 *   lines   prints three numbered lines, one of them on stderr, and a partial last line
 *   fail    prints its pid; rank 1 exits 3 once every rank is up, the others sleep for a minute
 *   signal  prints "ready", then on SIGTERM/SIGINT prints which and exits 128 + its number
 *   store   rank 0 sets a key in the launcher's store; every other rank gets it and prints it
 */
import { Duration, Effect } from "effect"
import type { StoreApi } from "../../src/store/api.ts"
import { makeClient } from "../../src/store/client.ts"

/** Runs `use` with a client of the launcher's store (STORE_HOSTNAME/STORE_PORT). */
const withStore = <E>(use: (store: StoreApi) => Effect.Effect<void, E>) =>
  Effect.runPromise(Effect.scoped(Effect.gen(function* () {
    const store = yield* makeClient({ host: process.env.STORE_HOSTNAME!, port: Number(process.env.STORE_PORT), timeout: Duration.seconds(20) })
    yield* use(store)
  })))

const rank = Number(process.env.RANK)
const mode = process.argv[2]
const NAMES = ["RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "STORE_HOSTNAME", "STORE_PORT", "MASTER_ADDR", "MASTER_PORT", "MONARCH_TOKEN", "EXTRA"]

switch (mode) {
  case "env":
  case "env-wait":
    console.log(JSON.stringify(Object.fromEntries(NAMES.map((n) => [n, process.env[n] ?? null]))))
    if (mode === "env-wait") await Bun.sleep(60_000)
    break
  case "lines":
    console.log(`line 1 of ${rank}`)
    console.error(`line 2 of ${rank}`)
    process.stdout.write(`line 3 of ${rank}`)
    break
  case "fail":
    console.log(`pid ${process.pid}`)
    // Every rank says it is up through the store; rank 1 fails once all are, so none is
    // stopped before it has printed its pid.
    await withStore((store) => Effect.gen(function* () {
      yield* store.set(`fail-test/${rank}`, "up")
      if (rank === 1) yield* store.wait(Array.from({ length: Number(process.env.WORLD_SIZE) }, (_, r) => `fail-test/${r}`))
    }))
    if (rank === 1) process.exit(3)
    await Bun.sleep(60_000)
    break
  case "signal": {
    const numbers = { SIGINT: 2, SIGTERM: 15 } as const
    for (const sig of ["SIGINT", "SIGTERM"] as const)
      process.on(sig, () => {
        console.log(`got ${sig}`)
        process.exit(128 + numbers[sig])
      })
    console.log("ready")
    await Bun.sleep(60_000)
    break
  }
  case "store":
    await withStore((store) => Effect.gen(function* () {
      if (rank === 0) {
        yield* store.set("launch-test/greeting", `hello from ${process.pid}`)
        console.log(`set by ${process.pid}`)
      } else {
        console.log(`got ${new TextDecoder().decode(yield* store.get("launch-test/greeting"))}`)
      }
    }))
    break
  default:
    console.error(`unknown mode ${mode}`)
    process.exit(2)
}
