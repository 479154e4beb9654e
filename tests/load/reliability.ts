/**
 * The load area of RELIABILITY.md (see scripts/reliability.ts): runs the load check
 * (load.ts) once, small by default and at 1M commands per worker in long mode, and turns
 * its figures into rows. tests/load/load.test.ts asserts on the same rows.
 */
import { runLoad, type LoadOptions, type LoadResult } from "./load.ts"
import type { Mode, ReliabilityRow } from "../reliability.ts"


export const OPTIONS: Record<"default" | "long", LoadOptions> = {
  default: { world: 4, commandsPerWorker: 20_000, fetchEvery: 16, inFlight: 16, warmupCommands: 5_000, readings: 3 },
  long: { world: 4, commandsPerWorker: 1_000_000, fetchEvery: 16, inFlight: 16, warmupCommands: 100_000, readings: 10 },
}

/**
 * Memory counts as flat when the RSS at the end is at most FLAT_FRACTION, or MARGIN_BYTES,
 * above the RSS right after the warm-up; every reading is taken after a forced collection
 * and a settling pause (fixtures.ts), and the readings in between show any trend.
 */
export const FLAT_FRACTION = 0.1
export const MARGIN_BYTES = 4 * 2 ** 20

export interface Flatness {
  readonly start: number
  readonly end: number
  readonly flat: boolean
}

export const flatness = (series: ReadonlyArray<number>): Flatness => {
  const start = series[0]!, end = series.at(-1)!
  return { start, end, flat: end <= start * (1 + FLAT_FRACTION) || end - start <= MARGIN_BYTES }
}

const mib = (bytes: number) => (bytes / 2 ** 20).toFixed(1)
const count = (n: number) => (n >= 1e6 ? `${n / 1e6}M` : n >= 1e3 ? `${n / 1e3}k` : String(n))
const memory = (series: ReadonlyArray<number>, f: Flatness) =>
  `${mib(f.start)} -> ${mib(f.end)} MiB (${f.end >= f.start ? "+" : ""}${((100 * (f.end - f.start)) / f.start).toFixed(1)}%), readings ${mib(Math.min(...series))}..${mib(Math.max(...series))}`

export const rows = (o: LoadOptions, r: LoadResult): ReliabilityRow[] => {
  const area = "load"
  const controller = r.readings.map((x) => x.rss.controller)
  const workers = r.readings[0]!.rss.workers.map((_, rank) => r.readings.map((x) => x.rss.workers[rank]!))
  const flat = `at the end within ${100 * FLAT_FRACTION}% or ${mib(MARGIN_BYTES)} MiB of RSS after a ${count(o.warmupCommands)}-command warm-up; ` +
    `${r.readings.length} readings, each after a forced GC`
  const controllerFlat = flatness(controller), workersFlat = workers.map(flatness)
  return [
    {
      area,
      check: `${o.world} workers x ${count(o.commandsPerWorker)} in-place steps on a counter (negate, add i: they do not commute) through the controller library, ` +
        `a fetch every ${o.fetchEvery} with ${o.inFlight} in flight: every fetched value exact (nothing lost, repeated, swapped or from the wrong rank)`,
      tries: r.fetches, held: r.fetches - r.wrongValues,
      detail: `${count(r.commands * o.world)} commands, ${r.wrongValues} wrong${r.wrongExamples.length > 0 ? ` (${r.wrongExamples.join("; ")})` : ""}; ` +
        `${Math.round(r.commandsPerSecond).toLocaleString("en-US")} commands/s over all workers; CPU per command: controller ${r.controllerMicrosPerCommand.toFixed(1)} us, ` +
        `worker ${r.workerMicrosPerCommand.toFixed(1)} us; ${Math.round(r.commandsPerFrame)} commands per frame`,
    },
    {
      area, check: `the same stream: fetches complete in issue order, ${o.inFlight} always in flight`,
      tries: r.fetches, held: r.fetches - r.outOfOrder,
      detail: `${r.outOfOrder} out of order; fewest in flight while issuing: ${r.minInFlight}`,
    },
    {
      area, check: "the same stream: no command refused by a worker (ProtocolError)",
      tries: 1, held: r.problems.length === 0 ? 1 : 0,
      detail: r.problems.length === 0 ? "none reported" : r.problems.slice(0, 3).join("; "),
    },
    {
      area, check: `the same stream: controller RSS flat (${flat})`,
      tries: 1, held: controllerFlat.flat ? 1 : 0,
      detail: `RSS ${memory(controller, controllerFlat)}`,
    },
    {
      area, check: "the same stream: each worker's RSS flat (as for the controller)",
      tries: workers.length, held: workersFlat.filter((f) => f.flat).length,
      detail: workers.map((series, rank) => `rank ${rank} ${memory(series, workersFlat[rank]!)}`).join("; "),
    },
  ]
}

export const run = async (mode: "default" | "long"): Promise<ReliabilityRow[]> => {
  const o = OPTIONS[mode]
  return rows(o, await runLoad(o))
}
