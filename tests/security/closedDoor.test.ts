// The closed door against a real controller (Controller.local, one real worker): listeners on
// loopback unless told otherwise, the controller link refusing every connection without the
// job's token (and logging it) while the real worker keeps working, and user functions
// loading only from the allowed roots on the worker itself.
import { afterAll, beforeAll, describe, expect, test } from "bun:test"
import { startController, type ControllerRig } from "../fuzz/controllerRig.ts"
import { checkConfiguredBind, checkFunctionsOnWorker, checkIntruders, checkLoopback, checkSilentConnections, checkWorkersServe, makeFunctionTree, type FunctionTree } from "./closedDoor.ts"

let rig: ControllerRig
let tree: FunctionTree
beforeAll(async () => {
  tree = makeFunctionTree()
  rig = await startController(1, [tree.root])
}, 60_000)
afterAll(async () => {
  await rig?.close()
  tree?.remove()
})

describe("listeners", () => {
  test("the controller listener and the launcher's store bind loopback; the worker listens on nothing", () => {
    const r = checkLoopback(rig)
    expect(r.controller?.address).toBe("127.0.0.1")
    expect(r.store?.address).toBe("127.0.0.1")
    for (const sockets of r.workers) expect(sockets).toEqual([])
    expect(r.exposed).toEqual([])
  })

  test("configured otherwise, both bind what they are told (so the check above can see a difference)", async () => {
    const r = await checkConfiguredBind()
    expect(r.controller?.address).toBe("0.0.0.0")
    expect(r.store?.address).toBe("0.0.0.0")
  })
})

describe("the job token", () => {
  test("every connection without it is closed and reported; the real worker still works", async () => {
    const results = await checkIntruders(rig)
    expect(results.length).toBeGreaterThanOrEqual(12)
    for (const r of results) expect({ name: r.name, closed: r.closed, reported: r.reported, problem: r.problem }).toMatchObject({ name: r.name, closed: true, reported: true })
    expect(await checkWorkersServe(rig)).toBe(true)
  }, 40_000)
})

describe("function roots on a real worker", () => {
  test("an allowed module runs; escapes fail as RemoteErrors naming the refusal, and nothing outside is imported", async () => {
    const r = await checkFunctionsOnWorker(rig, tree)
    expect(r.allowedRan).toBe(true)
    expect(r.refused.length).toBeGreaterThanOrEqual(13)
    for (const f of r.refused) {
      expect({ name: f.name, resolved: f.resolved, tag: f.tag }).toEqual({ name: f.name, resolved: false, tag: "RemoteError" })
      expect(f.message).toMatch(/FunctionNotFound: .*(not found under the allowed roots|absolute paths are not allowed|neither ops|does not export)/)
    }
    expect(tree.imported()).toEqual([])
    // The launcher's command line, named with an export it lacks, is refused without running
    // (it used to print its usage and exit 2 on every worker).
    expect(r.program).toMatchObject({ resolved: false, tag: "RemoteError" })
    expect(r.program.message).toMatch(/FunctionNotFound: .*src\/launch\.ts does not export "x".*it was not imported/)
    expect(r.servedAfter).toBe(true)
  }, 30_000)
})

describe("connections that never finish the handshake", () => {
  test("are closed and reported after the hello timeout; a worker that passed it stays", async () => {
    const timeoutMs = 300
    const r = await checkSilentConnections(timeoutMs)
    for (const s of r.silent) {
      expect({ name: s.name, closed: s.closed }).toEqual({ name: s.name, closed: true })
      expect(s.ms).toBeGreaterThanOrEqual(timeoutMs - 50)
    }
    expect(r.reported).toBe(r.silent.length)
    expect(r.helloKept).toBe(true)
  }, 20_000)
})
