/** Process and port helpers shared by the multi-process tests. */
import { createServer } from "node:net"

export { isAlive } from "../rig/processes.ts"

export const freePort = (): Promise<number> =>
  new Promise((resolve, reject) => {
    const server = createServer()
    server.once("error", reject)
    server.listen(0, "127.0.0.1", () => {
      const { port } = server.address() as { port: number }
      server.close(() => resolve(port))
    })
  })
