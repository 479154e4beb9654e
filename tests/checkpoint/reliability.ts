/**
 * The checkpoint area's rows of the reliability table: a worker killed mid-save, a worker lost
 * mid-training under recovery, saves overlapping in one directory and host copies under the
 * memory limit, each tried a few times (more in long mode), and seeded single-bit flips of a
 * saved version, each a try. crash.test.ts, recover.test.ts, concurrent.test.ts,
 * memory.test.ts and tamper.test.ts run the same tries.
 */
import { CONCURRENT, concurrentSaves, subMeshDuringSave } from "./concurrent.ts"
import { crashMidSave, SHARD_MIB } from "./crash.ts"
import { hostCopiesCounted, LIMIT_MIB } from "./memory.ts"
import { KILL_AT, lostWorkerRecovered, SAVE_EVERY, STEPS } from "./recover.ts"
import { tamperRun, TAMPERS } from "./tamper.ts"
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
  {
    check: `${CONCURRENT} saves of one 2x2 mesh started together into one directory (keep 2)`,
    outcome: "every save's durable succeeded; LATEST named the last committed, the two committed last were kept, no temporary directory left; each kept version loaded the values its save was given",
    tries: { default: 2, long: 10 }, once: concurrentSaves,
  },
  {
    check: "a sub-mesh's save committing into the directory of a whole-mesh save still being written (rank 0 held up 1.5 s)",
    outcome: "the whole-mesh save succeeded with every rank's file, LATEST named it, both versions loaded what was saved",
    tries: { default: 2, long: 10 }, once: subMeshDuringSave,
  },
  {
    check: `MONARCH_MEMORY_LIMIT=${LIMIT_MIB}MiB, a 64 MiB tensor: 8 fetches in flight and 4 saves; then a 16 MiB one fetched and saved`,
    outcome: "each 64 MiB copy refused with the limit's NoMemory error, rank 0's peak RSS within 32 MiB of before and the guard's count back; the 16 MiB copies worked and were given back",
    tries: { default: 1, long: 5 }, once: hostCopiesCounted,
  },
] as const

export const run = async (mode: Mode): Promise<ReliabilityRow[]> => {
  const rows: ReliabilityRow[] = []
  for (const s of scenarios) {
    const trials: Trial[] = []
    for (let i = 0; i < s.tries[mode]; i++) trials.push(await s.once())
    const held = trials.filter((t) => t.problems.length === 0).length
    const first = trials.flatMap((t) => t.problems)[0]
    rows.push({ area: "checkpoint", check: s.check, tries: trials.length, held, detail: [s.outcome, summarise(trials), ...(first === undefined ? [] : [`first problem: ${first.split("\n")[0]}`])].filter((p) => p !== "").join("; ") })
  }
  const seed = Number(process.env.MONARCH_TAMPER_SEED ?? 1)
  const tampers = await tamperRun(TAMPERS[mode], seed)
  rows.push({
    area: "checkpoint", check: "single-bit flips of a saved 2x2 version's manifest and rank files' headers (seeded, one flip per load)", tries: tampers.tried, held: tampers.refused,
    detail: `each load refused with a CheckpointError (seed ${seed})${tampers.problems.length === 0 ? "" : `; ${tampers.problems.length} problems, the first: ${tampers.problems[0]}`}`,
  })
  return rows
}
