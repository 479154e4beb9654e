// Members passing disagreeing tensors to one collective or transfer: the "disagreeing" scenario
// (scenarios.ts) on both all-reduce paths, at two world sizes. Each disagreement must end in the
// members' agreement, well before the 20 s comm timeout.
import { expect, test } from "bun:test"
import { DISAGREEMENT_MS } from "./scenarios.ts"
import { SHARED_MEMORY, TCP, WorkerGroup } from "./spawn.ts"

for (const path of [SHARED_MEMORY, TCP])
  for (const size of [2, 3])
    test(`disagreeing members over ${path.name}, world size ${size} (count, dtype, reduce op, broadcast root): all fail each call with "members disagree" within ${DISAGREEMENT_MS} ms, nothing is lost, the comm goes on`, async () => {
      await using group = WorkerGroup.start("disagreeing", size, 20_000, path.env)
      const codes = await group.exits()
      const stderr = await Promise.all(group.workers.map((w) => w.stderr))
      expect({ codes, stderr }).toEqual({ codes: codes.map(() => 0), stderr: stderr.map(() => "") })
      for (const w of group.workers) {
        expect(w.checks().filter((c) => !c.ok)).toEqual([])
        // 104 calls and the all_reduce after each, the last large all_reduce, and the ring's agreeing transfers
        expect(w.checks().length).toBeGreaterThanOrEqual(104)
      }
    }, 120_000)
