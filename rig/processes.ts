/** Whether a process is alive, for the rigs that clean up after processes of earlier runs. */
import { readFileSync } from "node:fs"

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
