/**
 * The ragged area's rows (the contract of tests/reliability.ts): every case of
 * cases.ts on both transports, through a direct protocol client; the shim's own "disagreeing"
 * scenario (tests/comm/scenarios.ts) on both all-reduce paths; and the hang report of hang.ts.
 * Each runs once (five times in long mode); a try holds when every condition of its case held.
 */
import { DISAGREEMENT_MS } from "../comm/scenarios.ts"
import { SHARED_MEMORY, TCP, WorkerGroup } from "../comm/spawn.ts"
import type { Mode, ReliabilityRow } from "../reliability.ts"
import { CASES, COMMANDS, MISMATCHES, Rig, TRANSPORTS, type Transport } from "./cases.ts"
import { BLOCK_MS, HANG_AFTER_MS, hangNamesRunningCommand } from "./hang.ts"

const AREA = "ragged"
const PASSES: Record<Mode, number> = { default: 1, long: 5 }

interface Tally {
  tries: number
  held: number
  readonly failures: string[]
  ms: number
}
const tally = (): Tally => ({ tries: 0, held: 0, failures: [], ms: 0 })

const record = async (t: Tally, what: string, once: () => Promise<void>): Promise<void> => {
  t.tries++
  const start = performance.now()
  try {
    await once()
    t.held++
  } catch (e) {
    t.failures.push(`${what}: ${(e instanceof Error ? e.message : String(e)).split("\n")[0]}`)
  }
  t.ms += performance.now() - start
}

const detail = (t: Tally, what: string): string =>
  `${what}; ${(t.ms / Math.max(t.tries, 1)).toFixed(0)} ms a try${t.failures.length > 0 ? `; first failure: ${t.failures[0]}` : ""}`

/** The worker-level cases, split into input mismatches and differing factories. */
export const runCases = async (passes: number): Promise<{ inputs: Tally; factories: Tally }> => {
  const inputs = tally(), factories = tally()
  for (const transport of Object.keys(TRANSPORTS) as Transport[]) {
    const rig = await Rig.start(transport)
    try {
      for (let pass = 0; pass < passes; pass++)
        for (const c of CASES) await record(c.factoriesDiffer ? factories : inputs, `${c.name} (${transport})`, () => c.run(rig))
    } finally {
      await rig.close()
    }
  }
  return { inputs, factories }
}

/** The shim-level scenario: every member's checks passed and every process exited cleanly. */
export const runShimScenario = async (passes: number): Promise<Tally> => {
  const t = tally()
  for (let pass = 0; pass < passes; pass++)
    for (const path of [SHARED_MEMORY, TCP])
      for (const size of [2, 3])
        await record(t, `${path.name}, world size ${size}`, async () => {
          await using group = WorkerGroup.start("disagreeing", size, 20_000, path.env)
          const codes = await group.exits()
          if (codes.some((c) => c !== 0)) throw new Error(`exit codes ${codes}: ${(await Promise.all(group.workers.map((w) => w.stderr))).join(" | ").slice(0, 300)}`)
          for (const w of group.workers) {
            const bad = w.checks().filter((c) => !c.ok)
            if (bad.length > 0) throw new Error(`member ${w.rank}: ${bad[0]!.check}: ${bad[0]!.detail}`)
            if (w.checks().length < 104) throw new Error(`member ${w.rank} ran ${w.checks().length} checks, expected at least 104`)
          }
        })
  return t
}

export const run = async (mode: Mode): Promise<ReliabilityRow[]> => {
  const passes = PASSES[mode]
  const { inputs, factories } = await runCases(passes)
  const shim = await runShimScenario(passes)
  const hang = tally()
  for (let pass = 0; pass < passes; pass++) await record(hang, `pass ${pass}`, async () => void (await hangNamesRunningCommand()))
  const kinds = `${COMMANDS.length} commands (all_reduce sum/prod/min/max/avg, reduce_scatter of each, all_reduce in place, stack, stack with scatter, send)`
  const inputMismatches = MISMATCHES.filter((m) => !m.factoriesDiffer).map((m) => m.name).join(", ")
  const factoryMismatches = MISMATCHES.filter((m) => m.factoriesDiffer).map((m) => m.name.replace(/^different factories /, "")).join(", ")
  return [
    {
      area: AREA,
      check: `a rank's input other than its factory (${inputMismatches}) in ${kinds}, over shared memory and TCP`,
      tries: inputs.tries, held: inputs.held,
      detail: detail(inputs, "the rank failed with InputMismatch naming both, its peer got the collective over its zeros, no worker died, the group all-reduced right after"),
    },
    {
      area: AREA,
      check: `ranks given different factories (${factoryMismatches}) in the same ${COMMANDS.length} commands, over shared memory and TCP`,
      tries: factories.tries, held: factories.held,
      detail: detail(factories, "both ranks failed with CommError (members disagree, or rank 1's own refusal) before any transfer, no worker died, the group all-reduced right after"),
    },
    {
      area: AREA,
      check: "the shim's members disagreeing (count, across path thresholds, dtype, reduce op, broadcast root, empty, refusals) in every collective, broadcast and p2p; shared memory and TCP, 2 and 3 members (comm timeout 20 s)",
      tries: shim.tries, held: shim.held,
      detail: detail(shim, `every touched member failed each call (Invalid, members disagree) within ${DISAGREEMENT_MS / 1000} s, agreeing transfers arrived, the comm all-reduced right after each, processes exited 0`),
    },
    {
      area: AREA,
      check: `hang reports while rank 1 blocks ${BLOCK_MS / 1000} s in a user function after an ops.ones and rank 0 waits for it in an all_reduce (hangAfterMs ${HANG_AFTER_MS})`,
      tries: hang.tries, held: hang.held,
      detail: detail(hang, "no report blamed the finished ops.ones; the block's report put rank 1 in it; the all_reduce's put rank 0 in the all_reduce and rank 1 in the block"),
    },
  ]
}
