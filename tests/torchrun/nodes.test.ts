// torchrun across nodes (tests/torchrun/nodes.ts): the controller on node 1 attaches through the
// store worker rank 0 hosts. First tests/hosts/controller.ts's collectives and sends, exact; then
// the GPT demo (examples/gpt.ts --store-file), whose losses must equal the one-host run's.
// Skips when torch is missing or namespaces cannot be made.
import { expect, test } from "bun:test"
import { describeUnless } from "../skip.ts"
import { mismatch, STEPS, type ControllerReport } from "../hosts/plan.ts"
import { HostProcess } from "../../rig/hostProcess.ts"
import { NAMES, nodesUnavailable, ROOT, TOKEN, twoNodeJobs } from "./nodes.ts"

/** Steps of the demo in each run: enough for the losses to move apart were anything different. */
const DEMO_STEPS = "6"

describeUnless(nodesUnavailable())("torchrun --nnodes 2 --nproc_per_node 2 (c10d) on two hosts", () => {
  const jobs = twoNodeJobs()

  test("the controller on node 1 drives both nodes: collectives over the world and across the nodes, sends each way, exact", async () => {
    const [h1, h2] = jobs.hosts()
    const { agents, store, explain } = await jobs.start()
    // Rank 0 is on node 1 (c10d ranks the agents by hostname) and hosts the store at its name.
    expect(store).toMatchObject({ host: NAMES[0], prefix: "monarch" })
    const controller = new HostProcess("controller", h1, [process.execPath, `${ROOT}/tests/hosts/controller.ts`, h1.address, String(store.port), "4"], { MONARCH_TOKEN: TOKEN })
    const line = await controller.line((l) => l.startsWith("{"), 90_000).catch((e) => { throw new Error(`${e.message}\n${controller.tail()}\n${explain()}`) })
    const report = JSON.parse(line) as ControllerReport
    expect(await controller.exit(10_000)).toBe(0)
    expect(report.placement).toEqual([[h1.address], [h1.address], [h2.address], [h2.address]])
    for (const step of STEPS) expect({ step: step.name, why: mismatch(step, report.results[step.name]) }).toEqual({ step: step.name, why: undefined })
    await jobs.finish(agents, explain)
  }, 150_000)

  test("the GPT demo trains across the two nodes with the losses of the one-host run", async () => {
    const [h1] = jobs.hosts()
    // The one-host run: Controller.local's four workers on this host (all_reduce through shared
    // memory there, over TCP across the hosts), bit for bit.
    const local = Bun.spawn([process.execPath, `${ROOT}/examples/gpt.ts`, "--losses", "--no-torch"], {
      env: { ...process.env, MONARCH_DEMO_STEPS: DEMO_STEPS }, stdout: "pipe", stderr: "pipe",
    })
    const { agents, storeFile, explain } = await jobs.start()
    const demo = new HostProcess("demo", h1, [process.execPath, `${ROOT}/examples/gpt.ts`, "--store-file", storeFile, "--host", h1.address, "--losses", "--no-torch"], {
      MONARCH_TOKEN: TOKEN, MONARCH_DEMO_STEPS: DEMO_STEPS,
    })
    const across = await demo.line((l) => l.startsWith("losses "), 120_000).catch((e) => { throw new Error(`${e.message}\n${demo.tail()}\n${explain()}`) })
    expect(await demo.exit(60_000)).toBe(0)
    const [out, code] = await Promise.all([new Response(local.stdout).text(), local.exited])
    expect(code).toBe(0)
    const here = out.split("\n").find((l) => l.startsWith("losses "))
    const losses = JSON.parse(across.slice("losses ".length)) as number[]
    expect(losses.length).toBe(Number(DEMO_STEPS))
    expect(losses).toEqual(JSON.parse(here!.slice("losses ".length)))
    await jobs.finish(agents, explain)
  }, 180_000)
})
