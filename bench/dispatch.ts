/**
 * Dispatch rate through one worker, measured from the controller side: send N CallFunctions
 * (a no-op, and a one-element ops.neg), then RequestStatus, and wait for the Status that
 * says all N completed. Single messages (one frame each) and CommandGroups of 64.
 *
 *   bun run bench/dispatch.ts [N] [--device cpu|cuda] [--json FILE]
 *
 * --device sets the worker's MONARCH_DEVICE (otherwise it inherits ours, cpu by default);
 * --json also writes the rows, with microseconds per command, for scripts/gpu/summary.ts.
 */
import { writeFileSync } from "node:fs"
import { startWorkers } from "../rig/workers.ts"
import type { CallFunction, WorkerMessage } from "../src/protocol/messages.ts"
import { Ref } from "../src/protocol/values.ts"

const args = process.argv.slice(2)
const flag = (name: string) => (args.includes(name) ? args[args.indexOf(name) + 1] : undefined)
const device = flag("--device")
const json = flag("--json")
const N = Number(args.find((a, i) => !a.startsWith("--") && !args[i - 1]?.startsWith("--")) ?? 200_000)
const ROUNDS = 5
const STREAM = new Ref(1), ONE = new Ref(2), OUT = new Ref(3)

// A worker that cannot start (no GPU, say) ends the run at once, its own lines in the message.
const h = await startWorkers({ world: 1, ...(device === undefined ? {} : { env: { MONARCH_DEVICE: device } }) }).catch((e: Error) => {
  console.log(`bench/dispatch: the worker did not start: ${e.message}`)
  process.exit(1)
})
h.send(0, { _tag: "CreateStream", result: STREAM, default: true })
h.send(0, { _tag: "CallFunction", ident: 0, results: [ONE], mutates: [], function: "ops.ones", args: [[1]], kwargs: {}, stream: STREAM })
let ident = 1

const command = (fn: string): CallFunction =>
  fn === "ops.noop"
    ? { _tag: "CallFunction", ident: ident++, results: [], mutates: [], function: fn, args: [], kwargs: {}, stream: STREAM }
    : { _tag: "CallFunction", ident: ident++, results: [OUT], mutates: [], function: fn, args: [ONE], kwargs: {}, stream: STREAM }

/** Sends n commands (grouped by `group`, 1 = single frames), returns commands per second. */
const round = async (fn: string, n: number, group: number): Promise<number> => {
  const t0 = performance.now()
  for (let sent = 0; sent < n; sent += group) {
    const k = Math.min(group, n - sent)
    const msg: WorkerMessage = group === 1 ? command(fn) : { _tag: "CommandGroup", commands: Array.from({ length: k }, () => command(fn)) }
    h.send(0, msg)
    // Let the socket drain now and then, as a controller's event loop would.
    if (sent % (group * 256) === 0) await Bun.sleep(0)
  }
  const last = ident - 1
  h.send(0, { _tag: "RequestStatus", ident: last })
  await h.passed(0, last, 120_000)
  return n / ((performance.now() - t0) / 1000)
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!
const failuresBefore = h.seen(0, "RemoteFunctionFailed").length

/** One row of --json: rates in commands per second. */
export interface DispatchRow {
  readonly command: string
  /** Commands per message: 1 (single messages) or 64 (CommandGroup). */
  readonly group: number
  readonly device: string
  readonly median: number
  readonly min: number
  readonly max: number
  /** 1e6 / median: the host's cost of one command. */
  readonly usPerCommand: number
  readonly failures: number
}

const rows: DispatchRow[] = []
console.log(`dispatch through 1 worker (${h.links[0]!.hello.device}), N = ${N} per round, median of ${ROUNDS} rounds after 1 warm-up`)
console.log("| command | batching | commands/s (median) | min | max | failures |")
console.log("|---|---|---:|---:|---:|---:|")
for (const fn of ["ops.noop", "ops.neg"]) {
  for (const group of [1, 64]) {
    await round(fn, Math.min(N, 20_000), group)
    const rates: number[] = []
    for (let r = 0; r < ROUNDS; r++) rates.push(await round(fn, N, group))
    const failures = h.seen(0, "RemoteFunctionFailed").length - failuresBefore
    const fmt = (x: number) => Math.round(x).toLocaleString("en-US")
    console.log(`| ${fn}${fn === "ops.neg" ? " (1 element)" : ""} | ${group === 1 ? "single messages" : "CommandGroup of 64"} | ${fmt(median(rates))} | ${fmt(Math.min(...rates))} | ${fmt(Math.max(...rates))} | ${failures} |`)
    rows.push({ command: fn, group, device: h.links[0]!.hello.device, median: median(rates), min: Math.min(...rates), max: Math.max(...rates), usPerCommand: 1e6 / median(rates), failures })
  }
}
if (json !== undefined) writeFileSync(json, JSON.stringify(rows, null, 2))
h.send(0, { _tag: "Exit" })
await h.close()
