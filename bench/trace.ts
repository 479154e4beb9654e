/**
 * What tracing costs: the dispatch rate of one worker recording a timeline (MONARCH_TRACE_DIR)
 * against one that does not, in the same run, rounds interleaved. Commands are no-ops in
 * CommandGroups of 64, the case where per-command overhead shows most.
 *
 *   bun run bench/trace.ts [N]
 */
import { mkdtempSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import type { CallFunction } from "../src/protocol/messages.ts"
import { Ref } from "../src/protocol/values.ts"
import { startWorkers, type Harness } from "../rig/workers.ts"

const N = Number(process.argv[2] ?? 100_000)
const ROUNDS = 5, GROUP = 64
const STREAM = new Ref(1)
const dir = mkdtempSync(join(tmpdir(), "monarch-bench-trace-"))

const workers = { plain: await startWorkers({ world: 1 }), traced: await startWorkers({ world: 1, env: { MONARCH_TRACE_DIR: dir } }) }
const idents = new Map<Harness, number>([[workers.plain, 0], [workers.traced, 0]])
for (const h of Object.values(workers)) h.send(0, { _tag: "CreateStream", result: STREAM, default: true })

/** Sends n no-ops in groups to `h`; returns commands per second. */
const round = async (h: Harness, n: number): Promise<number> => {
  let ident = idents.get(h)!
  const noop = (): CallFunction => ({ _tag: "CallFunction", ident: ident++, results: [], mutates: [], function: "ops.noop", args: [], kwargs: {}, stream: STREAM })
  const t0 = performance.now()
  for (let sent = 0; sent < n; sent += GROUP) {
    h.send(0, { _tag: "CommandGroup", commands: Array.from({ length: Math.min(GROUP, n - sent) }, noop) })
    if (sent % (GROUP * 256) === 0) await Bun.sleep(0)
  }
  h.send(0, { _tag: "RequestStatus", ident: ident - 1 })
  await h.passed(0, ident - 1, 120_000)
  idents.set(h, ident)
  return n / ((performance.now() - t0) / 1000)
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!
const rates = { plain: [] as number[], traced: [] as number[] }
for (const h of Object.values(workers)) await round(h, Math.min(N, 20_000))
for (let r = 0; r < ROUNDS; r++) for (const k of ["plain", "traced"] as const) rates[k].push(await round(workers[k], N))

const fmt = (x: number) => Math.round(x).toLocaleString("en-US")
console.log(`tracing's cost: ops.noop in CommandGroups of ${GROUP} through 1 worker, N = ${N} per round, median of ${ROUNDS} interleaved rounds after 1 warm-up`)
console.log("| worker | commands/s (median) | min | max | ratio to untraced |")
console.log("|---|---:|---:|---:|---:|")
for (const k of ["plain", "traced"] as const)
  console.log(`| ${k === "plain" ? "untraced" : "tracing (MONARCH_TRACE_DIR)"} | ${fmt(median(rates[k]))} | ${fmt(Math.min(...rates[k]))} | ${fmt(Math.max(...rates[k]))} | ${(median(rates[k]) / median(rates.plain)).toFixed(2)} |`)
for (const h of Object.values(workers)) {
  h.send(0, { _tag: "Exit" })
  await h.close()
}
rmSync(dir, { recursive: true, force: true })
