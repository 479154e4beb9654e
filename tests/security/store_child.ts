/**
 * A store server in a process of its own, so that its memory can be read from /proc while a
 * stranger fills it: argv[2] is its ServerOptions as JSON; prints `listening <port>`, then
 * serves (saying on stderr why it closes a connection) until killed. It collects garbage every
 * 50 ms, so that its RSS shows what it holds rather than chunks it has read and dropped.
 */
import { startServer, type ServerOptions } from "../../src/store/server.ts"

const options = JSON.parse(process.argv[2] ?? "{}") as ServerOptions
const server = startServer({ host: "127.0.0.1", port: 0, ...options })
console.log(`listening ${server.port}`)
setInterval(() => Bun.gc(true), 50)
