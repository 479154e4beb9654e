/**
 * The job's store on host 1, as its own process (the part torchrun's agent plays):
 *   bun rig/hostStore.ts <address> <port>
 * Binds that address (not loopback, so the other host reaches it), prints "store <host>:<port>"
 * once listening, and serves until it is killed or its stdin closes (the test that started it
 * is gone, even killed outright).
 */
import { startServer } from "../src/store/server.ts"

const [host = "", port = ""] = process.argv.slice(2)
const server = startServer({ host, port: Number(port) })
console.log(`store ${server.host}:${server.port}`)
const stop = () => {
  server.stop()
  process.exit(0)
}
for (const signal of ["SIGTERM", "SIGINT"] as const) process.on(signal, stop)
void (async () => {
  for await (const _ of Bun.stdin.stream());
  stop()
})()
