/**
 * A store server on its own thread. A worker whose JS thread blocks in long native calls (Gloo
 * collectives) may still have to host the store for the others (torchrun c10d mode: rank 0
 * hosts it); on the main thread its event loop would stall with that call, and so would every
 * other rank's rendezvous. A Bun Worker has its own event loop and keeps serving.
 */
import { Effect, type Scope } from "effect"
import { StoreError } from "./errors.ts"
import type { ServerOptions } from "./server.ts"
import type { FromServerThread, ToServerThread } from "./serverWorker.ts"

export interface ServerThread {
  readonly host: string
  readonly port: number
  /** Stops the server and ends the thread. */
  readonly stop: () => Promise<void>
}

/** Starts the thread and its server; rejects with a StoreError when the address cannot be bound. */
export const startServerThread = (options: ServerOptions = {}): Promise<ServerThread> => {
  const worker = new Worker(new URL("./serverWorker.ts", import.meta.url).href)
  const post = (msg: ToServerThread) => worker.postMessage(msg)
  const next = () =>
    new Promise<FromServerThread>((resolve, reject) => {
      worker.onmessage = (event: MessageEvent<FromServerThread>) => resolve(event.data)
      worker.onerror = (event) => reject(new StoreError({ reason: "Thread", detail: `server thread: ${event.message}` }))
    })
  const started = next()
  post({ type: "start", options })
  return started.then((msg) => {
    if (msg.type !== "started") {
      worker.terminate()
      const detail = msg.type === "failed" ? msg.detail : `unexpected ${msg.type}`
      const address = `${options.host ?? "127.0.0.1"}:${options.port ?? 0}`
      throw new StoreError({ reason: "Listen", detail: `server thread on ${address}: ${detail}` })
    }
    return {
      host: msg.host,
      port: msg.port,
      stop: () => {
        const stopped = next()
        post({ type: "stop" })
        return stopped.then(() => void worker.terminate())
      },
    }
  })
}

/** The server thread as a scoped resource: stopped when the scope closes. */
export const serveOnThread = (options: ServerOptions = {}): Effect.Effect<ServerThread, StoreError, Scope.Scope> =>
  Effect.acquireRelease(
    Effect.tryPromise({
      try: () => startServerThread(options),
      catch: (e) => (e instanceof StoreError ? e : new StoreError({ reason: "Thread", detail: String(e) })),
    }),
    (thread) => Effect.promise(thread.stop),
  )
