/** What /proc says about a process: its resident memory, and whether it is still there. */
import { readFileSync } from "node:fs"

/** VmRSS of `pid` in KiB (throws when the process is gone). */
export const rssKiB = (pid: number): number => {
  const line = readFileSync(`/proc/${pid}/status`, "utf8").split("\n").find((l) => l.startsWith("VmRSS:"))
  if (line === undefined) throw new Error(`/proc/${pid}/status has no VmRSS line`)
  return Number(line.split(/\s+/)[1])
}

/** VmHWM of `pid` in KiB: the most it has been resident since it started. */
export const peakRssKiB = (pid: number): number => {
  const line = readFileSync(`/proc/${pid}/status`, "utf8").split("\n").find((l) => l.startsWith("VmHWM:"))
  if (line === undefined) throw new Error(`/proc/${pid}/status has no VmHWM line`)
  return Number(line.split(/\s+/)[1])
}

export { isAlive } from "../processes.ts"

export const mib = (kib: number): string => (kib / 1024).toFixed(1)

/** "61.2 -> 62.0 MiB (+1.3%)" */
export const rssChange = (before: number, after: number): string => {
  const percent = Math.round((1000 * (after - before)) / before) / 10 + 0 // + 0 turns -0 into 0
  return `RSS ${mib(before)} -> ${mib(after)} MiB (${percent >= 0 ? "+" : ""}${percent.toFixed(1)}%)`
}

/** The environment `pid` was started with. */
export const environOf = (pid: number): Record<string, string> =>
  Object.fromEntries(readFileSync(`/proc/${pid}/environ`, "utf8").split("\0").filter((e) => e.includes("=")).map((e) => [e.slice(0, e.indexOf("=")), e.slice(e.indexOf("=") + 1)]))
