/**
 * Members disagreeing on a collective's reduce op or a broadcast's root, timed: the "disagreeing"
 * scenario of tests/comm (two members, over shared memory and over TCP, comm timeout 20 s). Every
 * disagreement must fail with "members disagree" within DISAGREEMENT_MS, from the members'
 * agreement, never from the comm timeout.
 */
import { DISAGREEMENT_MS } from "../comm/scenarios.ts"
import { SHARED_MEMORY, TCP, WorkerGroup } from "../comm/spawn.ts"
import { attempt, type Trial } from "./trial.ts"

export const COMM_TIMEOUT_MS = 20_000
export { DISAGREEMENT_MS }

export const disagreeOnOpAndRoot = (): Promise<Trial> =>
  attempt(async (t) => {
    for (const path of [SHARED_MEMORY, TCP]) {
      await using group = WorkerGroup.start("disagreeing", 2, COMM_TIMEOUT_MS, path.env)
      const codes = await group.exits()
      t.check(codes.every((c) => c === 0), `${path.name}: exit codes ${codes}`)
      for (const w of group.workers) {
        const timed = w.checks().filter((c) => / op$| root$/.test(c.check))
        t.check(timed.length === 3, `${path.name}, member ${w.rank}: ${timed.length} op and root disagreements checked (all_reduce op, reduce_scatter op, broadcast root), expected 3`)
        for (const c of timed) t.check(c.ok, `${path.name}, member ${w.rank}: ${c.check}: ${c.detail}`)
        const slowest = Math.max(...timed.map((c) => c.ms ?? Infinity))
        t.figure(`slowest op/root disagreement (${path.name})`, Math.max(slowest, t.figures[`slowest op/root disagreement (${path.name})`] ?? 0))
      }
    }
  })
