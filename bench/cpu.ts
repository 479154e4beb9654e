/** CPU time and medians, shared by the benchmarks that measure processes (controller, recording). */
import { readFileSync } from "node:fs"

const CLOCK_TICKS = 100

/** User plus system CPU seconds of a process (from /proc/<pid>/stat, in clock ticks of 10 ms). */
export const cpuOf = (pid: number): number => {
  const stat = readFileSync(`/proc/${pid}/stat`, "utf8")
  const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ")
  return (Number(fields[11]) + Number(fields[12])) / CLOCK_TICKS
}

/** This process's user plus system CPU seconds. */
export const selfCpu = (): number => {
  const u = process.cpuUsage()
  return (u.user + u.system) / 1e6
}

export const median = (xs: ReadonlyArray<number>): number => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!

/** The load average, for a table's heading. */
export const load = (): string => readFileSync("/proc/loadavg", "utf8").split(" ").slice(0, 3).join(" ")
