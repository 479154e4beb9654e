// The job token cannot be stolen by naming oneself in the store: a stranger who overwrites
// monarch/controller with its own address meets a real worker, and tries a forged proof, a
// relay to the real controller (then reflecting the controller's proof back to it), and a
// replay of the relayed proof. The worker sends it nothing but its challenges (no token, no
// digest or encoding of it, no proof of its own), refuses each try saying so on stderr, and
// attaches to the real controller once the store names it again; the relay gets nothing from
// the real controller but its proof, and its reflected hello is refused.
import { expect, test } from "bun:test"
import { checkImpostor, TRIES } from "./impostor.ts"

test("an impostor named in the store gets no token bytes and no commands; the worker then attaches to the real controller", async () => {
  const r = await checkImpostor()
  expect(r.tries.slice(0, TRIES.length)).toEqual([...TRIES])
  expect(r.bytesSeen).toBeGreaterThan(0)
  expect(r.found).toEqual([])
  expect(new Set(r.workerSent)).toEqual(new Set(["WorkerChallenge"]))
  expect(r.relayGot).toEqual(["ControllerProof"])
  expect(r.relayRefused).toBe(true)
  expect(r.controllerSaid.join("; ")).toContain("refused a connection whose WorkerHello did not prove it holds the job token")
  expect(r.warnings, r.stderr).toBeGreaterThanOrEqual(TRIES.length)
  expect(r.served, r.stderr).toBe(true)
  expect(r.exit).toBe(0)
}, 120_000)
