// Members passing disagreeing tensors to one collective or transfer (issue 14, item 1): the
// "disagreeing" scenario (scenarios.ts) on both all-reduce paths, at two world sizes.
import { expect, test } from "bun:test"
import { SHARED_MEMORY, TCP, WorkerGroup } from "./spawn.ts"

for (const path of [SHARED_MEMORY, TCP])
  for (const size of [2, 3])
    test(`disagreeing members over ${path.name}, world size ${size}: all fail each call, nothing is lost, the comm goes on`, async () => {
      await using group = WorkerGroup.start("disagreeing", size, 20_000, path.env)
      const codes = await group.exits()
      const stderr = await Promise.all(group.workers.map((w) => w.stderr))
      expect({ codes, stderr }).toEqual({ codes: codes.map(() => 0), stderr: stderr.map(() => "") })
      for (const w of group.workers) {
        expect(w.checks().filter((c) => !c.ok)).toEqual([])
        // 103 calls and the all_reduce after each, the last large all_reduce, and the ring's agreeing transfers
        expect(w.checks().length).toBeGreaterThanOrEqual(103)
      }
    }, 120_000)
