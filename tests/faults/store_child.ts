/**
 * A store server in a process of its own, so a fault test can kill it with SIGKILL: prints
 * `listening <port>` once it accepts connections, then serves until killed.
 */
import { startServer } from "../../src/store/server.ts"

const server = startServer({ host: "127.0.0.1", port: 0 })
console.log(`listening ${server.port}`)
