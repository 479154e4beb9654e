/**
 * Entry of the Bun Worker that hosts a store server on its own thread (serverThread.ts starts
 * it). Messages in: start(options), stop. Messages out: started(port) or failed(detail), stopped.
 */
import { type RunningServer, type ServerOptions, startServer } from "./server.ts"

export type ToServerThread = { readonly type: "start"; readonly options: ServerOptions } | { readonly type: "stop" }
export type FromServerThread =
  | { readonly type: "started"; readonly host: string; readonly port: number }
  | { readonly type: "failed"; readonly detail: string }
  | { readonly type: "stopped" }

declare const self: Worker

let server: RunningServer | null = null
const reply = (msg: FromServerThread) => self.postMessage(msg)

self.onmessage = (event: MessageEvent<ToServerThread>) => {
  const msg = event.data
  if (msg.type === "start") {
    try {
      server = startServer(msg.options)
      reply({ type: "started", host: server.host, port: server.port })
    } catch (e) {
      reply({ type: "failed", detail: e instanceof Error ? e.message : String(e) })
    }
  } else {
    server?.stop()
    server = null
    reply({ type: "stopped" })
  }
}
