/**
 * The checkpoint area's rows of the reliability table: a worker killed mid-save and a worker
 * lost mid-training under recovery, each tried a few times (more in long mode).
 * crash.test.ts and recover.test.ts run the same tries.
 */
import { crashMidSave, SHARD_MIB } from "./crash.ts"
import { KILL_AT, lostWorkerRecovered, SAVE_EVERY, STEPS } from "./recover.ts"
import { summarise, type Trial } from "../faults/trial.ts"
import type { Mode, ReliabilityRow } from "../reliability.ts"

const scenarios = [
  {
    check: `kill -9 of rank 1 while it writes its ${SHARD_MIB} MiB shard of a save (2x2 mesh)`,
    outcome: "the save's durable failed with WorkerLost rank 1; LATEST still named the previous version, the only one in the directory; a fresh mesh loaded it with every rank's block intact",
    tries: { default: 2, long: 10 }, once: crashMidSave,
  },
  {
    check: `kill -9 of rank 2 mid-training under Controller.local({ recover }) (2x2 mesh, ${STEPS} steps, a save every ${SAVE_EVERY}, killed at step ${KILL_AT})`,
    outcome: `4 new workers started, the step-${Math.floor((KILL_AT - 1) / SAVE_EVERY) * SAVE_EVERY} checkpoint loaded and reported; the losses from there on and the final loss bitwise equal to an uninterrupted run's`,
    tries: { default: 1, long: 10 }, once: lostWorkerRecovered,
  },
] as const

export const run = async (mode: Mode): Promise<ReliabilityRow[]> => {
  const rows: ReliabilityRow[] = []
  for (const s of scenarios) {
    const trials: Trial[] = []
    for (let i = 0; i < s.tries[mode]; i++) trials.push(await s.once())
    const held = trials.filter((t) => t.problems.length === 0).length
    const first = trials.flatMap((t) => t.problems)[0]
    rows.push({ area: "checkpoint", check: s.check, tries: trials.length, held, detail: `${s.outcome}; ${summarise(trials)}${first === undefined ? "" : `; first problem: ${first.split("\n")[0]}`}` })
  }
  return rows
}
