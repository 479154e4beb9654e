/**
 * A recorded step against the same ops issued one by one: a step of
 * OPS tiny ops on a one-element tensor (a chain of fresh results, and in place), called CALLS
 * times then one fetch, through compile(step) and without it, at world 1 and 2, in the same run.
 * Rounds alternate: recorded, then unrecorded, per case.
 *
 *   bun run bench/recording.ts [--ops 1000] [--calls 50] [--rounds 5] [--worlds 1,2 (0: the worker table only)]
 *
 * Prints, per case, medians over the rounds: end-to-end us per op, the controller's CPU us per
 * call (this process, issuing and sending; the fetch's wait excluded), the workers' CPU us per
 * op (per worker, from /proc/<pid>/stat), and recorded / unrecorded. Then one worker alone,
 * driven over the wire: a call as one CallRecording against the same commands as a CommandGroup.
 */
import { Effect, type Layer, ManagedRuntime } from "effect"
import { compile, Controller, opsOn, type Mesh, type RemoteTensor } from "../src/controller/index.ts"
import type { CallFunction } from "../src/protocol/messages.ts"
import { Ref } from "../src/protocol/values.ts"
import { startWorkers } from "../rig/workers.ts"
import { cpuOf, load, median, selfCpu } from "./cpu.ts"

const args = process.argv.slice(2)
const flag = (name: string) => (args.includes(name) ? args[args.indexOf(name) + 1] : undefined)
const OPS = Number(flag("--ops") ?? 1000)
const CALLS = Number(flag("--calls") ?? 50)
const ROUNDS = Number(flag("--rounds") ?? 5)
const WORLDS = (flag("--worlds") ?? "1,2").split(",").map(Number).filter((w) => w > 0)
/** The steps: OPS ops each, returning the tensor to fetch. */
const STEPS: ReadonlyArray<{ readonly name: string; readonly step: (x: RemoteTensor) => RemoteTensor }> = [
  {
    name: "fresh results (h = h.add(1))",
    step: (x) => {
      let h = x
      for (let i = 0; i < OPS; i++) h = h.add(1)
      return h
    },
  },
  {
    name: "in place (x.add_(1))",
    step: (x) => {
      for (let i = 0; i < OPS; i++) x.add_(1)
      return x
    },
  },
]

interface Sample {
  readonly e2e: number
  readonly controller: number
  readonly worker: number
}

const runWorld = (world: number) =>
  Effect.gen(function* () {
    const ctl = yield* Controller
    const mesh: Mesh = yield* ctl.mesh({ all: world })
    const pids = ctl.workers().map((w) => w.pid)
    const x = opsOn(mesh).ones([1])
    const rows: Array<{ name: string; recorded: Sample[]; eager: Sample[] }> = []
    for (const { name, step } of STEPS) {
      const compiled = compile(step)
      const round = (recorded: boolean) =>
        Effect.gen(function* () {
          yield* mesh.fetch(x)
          // The other case's garbage (an unrecorded round makes 100,000 handles) is collected first, not billed to this round.
          Bun.gc(true)
          const w0 = pids.map(cpuOf), c0 = selfCpu(), t0 = performance.now()
          let last: RemoteTensor = x
          for (let c = 0; c < CALLS; c++) {
            if (last !== x) last.release()
            last = recorded ? yield* compiled(x) : step(x)
            // Each call's batch goes out before the next call, as a program's steps would.
            ctl.core.flush()
          }
          const issued = selfCpu()
          yield* mesh.fetch(last)
          const t1 = performance.now(), w1 = pids.map(cpuOf)
          if (last !== x) last.release()
          const worker = w1.reduce((s, w, r) => s + w - w0[r]!, 0) / world
          return { e2e: (t1 - t0) / 1000 / (CALLS * OPS), controller: (issued - c0) / CALLS, worker: worker / (CALLS * OPS) }
        })
      yield* round(true)
      yield* round(false)
      const row = { name, recorded: [] as Sample[], eager: [] as Sample[] }
      for (let r = 0; r < ROUNDS; r++) {
        row.recorded.push(yield* round(true))
        row.eager.push(yield* round(false))
      }
      rows.push(row)
    }
    return rows
  })

const us = (s: number) => (s * 1e6).toFixed(2)
console.log(`bench/recording: a step of ${OPS} ops on a one-element tensor, ${CALLS} calls then a fetch per round, ${ROUNDS} rounds, medians; load ${load()}`)
console.log("")
console.log("| world | step | recorded: end to end us/op | unrecorded | recorded: controller CPU us/call | unrecorded | recorded: worker CPU us/op | unrecorded | worker us/op recorded / unrecorded |")
console.log("|---:|---|---:|---:|---:|---:|---:|---:|---:|")
for (const world of WORLDS) {
  const rt = ManagedRuntime.make(Controller.local({ world, onWorkerLine: () => {} }) as Layer.Layer<Controller, unknown>)
  try {
    for (const { name, recorded, eager } of await rt.runPromise(runWorld(world))) {
      const m = (ss: Sample[], f: (s: Sample) => number) => median(ss.map(f))
      console.log(`| ${world} | ${name} | ${us(m(recorded, (s) => s.e2e))} | ${us(m(eager, (s) => s.e2e))} | ${us(m(recorded, (s) => s.controller))} | ${us(m(eager, (s) => s.controller))} | ${us(m(recorded, (s) => s.worker))} | ${us(m(eager, (s) => s.worker))} | ${(m(recorded, (s) => s.worker) / m(eager, (s) => s.worker)).toFixed(2)}x |`)
    }
  } finally {
    await rt.dispose()
  }
}

// ---- the worker alone ----------------------------------------------------------------------
// One worker process driven straight over the wire (rig/workers.ts): the same OPS
// commands sent CALLS times as a CommandGroup each, or as one CallRecording each of a recording
// defined once; the time until its Status passes the last, and its CPU per command. Here the
// worker is the only thing working, so this is its cost per op without the controller's.
const h = await startWorkers({ world: 1 })
const STREAM = new Ref(1), X = new Ref(2), FORMAL = new Ref(3)
h.send(0, { _tag: "CreateStream", result: STREAM, default: true })
h.send(0, { _tag: "CallFunction", ident: 0, results: [X], mutates: [], function: "ops.ones", args: [[1]], kwargs: {}, stream: STREAM })
let ident = 1
const inPlace = (on: Ref, k: number): CallFunction => ({ _tag: "CallFunction", ident: k, results: [], mutates: [on], function: "ops.add_", args: [on, 1], kwargs: {}, stream: STREAM })
h.send(0, { _tag: "DefineRecording", recording: 1, idents: OPS, formals: [FORMAL.id], params: [], results: [FORMAL.id], commands: Array.from({ length: OPS }, (_, k) => inPlace(FORMAL, k)) })
const pid = h.links[0]!.hello.pid
const workerRound = async (recorded: boolean): Promise<{ wall: number; cpu: number }> => {
  const c0 = cpuOf(pid), t0 = performance.now()
  for (let c = 0; c < CALLS; c++) {
    const base = ident
    ident += OPS
    h.send(0, recorded
      ? { _tag: "CallRecording", ident: base, recording: 1, results: [X], actuals: [X], params: [] }
      : { _tag: "CommandGroup", commands: Array.from({ length: OPS }, (_, k) => inPlace(X, base + k)) })
    if (c % 8 === 7) await Bun.sleep(0)
  }
  h.send(0, { _tag: "RequestStatus", ident: ident - 1 })
  await h.passed(0, ident - 1, 300_000)
  return { wall: (performance.now() - t0) / 1000 / (CALLS * OPS), cpu: (cpuOf(pid) - c0) / (CALLS * OPS) }
}
await workerRound(true)
await workerRound(false)
const worker = { recorded: [] as Array<{ wall: number; cpu: number }>, group: [] as Array<{ wall: number; cpu: number }> }
for (let r = 0; r < ROUNDS; r++) {
  worker.recorded.push(await workerRound(true))
  worker.group.push(await workerRound(false))
}
console.log("")
console.log(`One worker alone, ${OPS} one-element x.add_(1) per call, ${CALLS} calls per round, ${ROUNDS} rounds, medians; load ${load()}`)
console.log("")
console.log("| sent as | us/op until its Status | worker CPU us/op |")
console.log("|---|---:|---:|")
for (const [name, ss] of [["one CallRecording per call", worker.recorded], ["one CommandGroup per call", worker.group]] as const)
  console.log(`| ${name} | ${us(median(ss.map((s) => s.wall)))} | ${us(median(ss.map((s) => s.cpu)))} |`)
console.log(`| recorded / CommandGroup | ${(median(worker.recorded.map((s) => s.wall)) / median(worker.group.map((s) => s.wall))).toFixed(2)}x | ${(median(worker.recorded.map((s) => s.cpu)) / median(worker.group.map((s) => s.cpu))).toFixed(2)}x |`)
h.send(0, { _tag: "Exit" })
await h.close()
