/** Process and port helpers shared by the multi-process tests. */
import { readFileSync } from "node:fs"
import { createServer } from "node:net"

/** True while `pid` exists and is not a zombie. */
export const isAlive = (pid: number): boolean => {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "latin1")
    return stat.slice(stat.lastIndexOf(")") + 2, stat.lastIndexOf(")") + 3) !== "Z"
  } catch {
    return false
  }
}

/** A TCP port that was free on loopback a moment ago (bound to 0, then closed). */
export const freePort = (): Promise<number> =>
  new Promise((resolve, reject) => {
    const server = createServer()
    server.once("error", reject)
    server.listen(0, "127.0.0.1", () => {
      const { port } = server.address() as { port: number }
      server.close(() => resolve(port))
    })
  })
