/**
 * The controller program of the multi-host check, run on host 1 as a user would run theirs:
 *   bun tests/hosts/controller.ts <host 1 address> <store port> <world>
 * Controller.attach with its listener bound to host 1's address (not the loopback default),
 * publishing that address in the store on host 1 (the token comes from MONARCH_TOKEN, as the
 * workers' does); then every step of plan.ts on a { host, local } mesh. Prints one JSON line (plan.ts ControllerReport) and exits 0, or the
 * failure on stderr and exits 1.
 */
import { Effect } from "effect"
import { Controller, type HostTensor, type Mesh, type RemoteTensor } from "../../src/controller/index.ts"
import type { DType } from "../../src/protocol/values.ts"
import { M, N, type ControllerReport } from "./plan.ts"

const [address = "", storePort = "", worldArg = ""] = process.argv.slice(2)
const FIXTURES = "tests/hosts/fixtures"

const vector = (mesh: Mesh, dtype: DType) => mesh.call(`${FIXTURES}:vector`, [dtype], {}, { results: [{ dtype, shape: [N] }] })
const rows = (mesh: Mesh, dtype: DType, count: number) => mesh.call(`${FIXTURES}:rows`, [dtype, count], {}, { results: [{ dtype, shape: [count, M] }] })

const program = Effect.gen(function* () {
  const ctl = yield* Controller
  const attached = performance.now()
  const mesh = yield* ctl.mesh({ host: 2, local: 2 })
  const world = ["host", "local"]
  const host1 = yield* mesh.slice({ host: 0 }), host2 = yield* mesh.slice({ host: 1 })

  const placement = (yield* mesh.fetchAll(null, { fn: `${FIXTURES}:addresses` })) as string[][]
  const inPlace = yield* vector(mesh, "f32")
  const steps: Record<string, RemoteTensor> = {
    "all_reduce sum over the world": yield* mesh.reduce(yield* vector(mesh, "f32"), world, "sum"),
    "all_reduce max across hosts": yield* mesh.reduce(yield* vector(mesh, "i64"), "host", "max"),
    "all_reduce avg across hosts": yield* mesh.reduce(yield* vector(mesh, "f64"), "host", "avg"),
    "all_reduce sum in place within a host": yield* mesh.reduce(inPlace, "local", "sum", { inplace: true }),
    "all_gather over the world": yield* mesh.reduce(yield* vector(mesh, "f32"), world, "stack"),
    "all_gather across hosts": yield* mesh.reduce(yield* vector(mesh, "i32"), "host", "stack"),
    "reduce_scatter sum over the world": yield* mesh.reduce(yield* rows(mesh, "f32", 4), world, "sum", { scatter: true }),
    "reduce_scatter sum across hosts": yield* mesh.reduce(yield* rows(mesh, "f64", 2), "host", "sum", { scatter: true }),
    "all_to_all over the world": yield* mesh.reduce(yield* rows(mesh, "f32", 4), world, "stack", { scatter: true }),
    "all_to_all across hosts": yield* mesh.reduce(yield* rows(mesh, "i64", 2), "host", "stack", { scatter: true }),
    "send host 1 -> host 2": yield* ctl.send(yield* vector(host1, "f32"), host2),
    "send host 2 -> host 1": yield* ctl.send(yield* vector(host2, "i64"), host1),
  }
  const results: Record<string, ControllerReport["results"][string]> = {}
  for (const [name, t] of Object.entries(steps)) {
    const fetched = yield* t.mesh.fetchAll(t)
    results[name] = fetched.map((v, i) => {
      const h = v as HostTensor
      return { rank: t.mesh.ranks[i]!, dtype: h.dtype, shape: h.shape, values: Array.from(h.toArray(), Number) }
    })
  }
  const report: ControllerReport = { placement, results, runMs: performance.now() - attached }
  console.log(JSON.stringify(report))
})

const layer = Controller.attach({
  world: Number(worldArg),
  // The workers on the other host connect here, so the listener binds host 1's own address.
  host: address,
  store: { host: address, port: Number(storePort) },
  startTimeoutMs: 60_000,
  onProblem: (p) => console.error(`problem: ${p}`),
})

Effect.runPromise(program.pipe(Effect.provide(layer))).then(
  () => process.exit(0),
  (e) => {
    console.error(`controller failed: ${e instanceof Error ? e.message : String(e)}`)
    process.exit(1)
  },
)
