/**
 * Command line of the launcher (src/launcher/):
 *
 *   bun run src/launch.ts --nproc N [--host ADDR] [--store-port PORT] -- <program> [args...]
 *
 * Exits with the status of the first process that failed, or 0. SIGINT and SIGTERM are
 * forwarded to every process. Given no MONARCH_TOKEN or MONARCH_TOKEN_FILE, it makes the job's
 * token, writes it to a file only its user can read, and says where (a controller attaches with
 * MONARCH_TOKEN_FILE set to it); the file goes when the launcher ends.
 */
import { Effect } from "effect"
import { parseArgs } from "node:util"
import { jobToken, launch } from "./launcher/index.ts"

const USAGE = "usage: bun run src/launch.ts --nproc N [--host ADDR] [--store-port PORT] -- <program> [args...]"

const main = Effect.gen(function* () {
  const split = process.argv.indexOf("--")
  const own = split < 0 ? process.argv.slice(2) : process.argv.slice(2, split)
  const command = split < 0 ? [] : process.argv.slice(split + 1)
  const { values } = parseArgs({
    args: own,
    options: { nproc: { type: "string" }, host: { type: "string" }, "store-port": { type: "string" }, help: { type: "boolean" } },
  })
  if (values.help || values.nproc === undefined || command.length === 0) {
    console.error(USAGE)
    return 2
  }
  const token = yield* jobToken
  const job = yield* launch({
    nproc: Number(values.nproc),
    command,
    env: token.MONARCH_TOKEN_FILE === undefined ? {} : { MONARCH_TOKEN_FILE: token.MONARCH_TOKEN_FILE },
    ...(values.host ? { host: values.host } : {}),
    ...(values["store-port"] ? { storePort: Number(values["store-port"]) } : {}),
  })
  const attach = token.MONARCH_TOKEN_FILE === undefined ? "" : `; no MONARCH_TOKEN or MONARCH_TOKEN_FILE was given, so the job's token is in ${token.MONARCH_TOKEN_FILE} (a controller attaches with MONARCH_TOKEN_FILE=${token.MONARCH_TOKEN_FILE}; the file goes when this launcher ends)`
  console.error(`launch: store at ${job.store.host}:${job.store.port}${attach}`)
  for (const sig of ["SIGINT", "SIGTERM"] as const) process.on(sig, () => job.signal(sig))
  const end = yield* job.done
  if (end.status !== 0) console.error(`launch: rank ${end.rank} exited with status ${end.status}${end.signal ? ` (${end.signal})` : ""}; stopped the others`)
  return end.status
}).pipe(Effect.scoped)

Effect.runPromise(main).then(
  (status) => process.exit(status),
  (e) => {
    console.error(`launch: ${e instanceof Error ? e.message : String(e)}`)
    process.exit(1)
  },
)
