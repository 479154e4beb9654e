// Members passing disagreeing tensors to one collective or transfer: the "disagreeing" scenario
// (scenarios.ts) on both all-reduce paths, at two world sizes. Each disagreement must end in the
// members' agreement, well before the 20 s comm timeout. The whole scenario takes about a
// second; one not over within ALL_WITHIN_MS fails at once, rather than when a disagreement the
// agreement missed ends in Gloo 20 s later.
import { expect, test } from "bun:test"
import { DISAGREEMENT_MS } from "./scenarios.ts"
import { SHARED_MEMORY, TCP, WorkerGroup } from "./spawn.ts"

const ALL_WITHIN_MS = 8000

for (const path of [SHARED_MEMORY, TCP])
  for (const size of [2, 3])
    test(`disagreeing members over ${path.name}, world size ${size} (count, dtype, reduce op, broadcast root): all fail each call with "members disagree" within ${DISAGREEMENT_MS} ms, nothing is lost, the comm goes on`, async () => {
      await using group = WorkerGroup.start("disagreeing", size, 20_000, path.env)
      const over = await Promise.race([group.exits().then(() => true), Bun.sleep(ALL_WITHIN_MS).then(() => false)])
      expect(over, `the disagreeing calls were still running after ${ALL_WITHIN_MS} ms (about 1 s when each disagreement fails at once), after ${group.workers.map((w) => w.checks().length)} checks`).toBe(true)
      const codes = await group.exits()
      const stderr = await Promise.all(group.workers.map((w) => w.stderr))
      expect({ codes, stderr }).toEqual({ codes: codes.map(() => 0), stderr: stderr.map(() => "") })
      for (const w of group.workers) {
        expect(w.checks().filter((c) => !c.ok)).toEqual([])
        // 104 calls and the all_reduce after each, the last large all_reduce, and the ring's agreeing transfers
        expect(w.checks().length).toBeGreaterThanOrEqual(104)
      }
    }, 120_000)
