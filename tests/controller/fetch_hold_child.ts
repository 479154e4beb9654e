// Run by fetch_hold.test.ts in its own process: a fetch whose message cannot be made (make throws),
// then nothing more. The process must exit by itself: the failed fetch holds nothing open.
import { Cause, Effect, Exit } from "effect"
import { Core } from "../../src/controller/core.ts"

const core = new Core({ world: 1, captureSites: false })
const exit = await Effect.runPromiseExit(core.fetch([0], [], "fetch", undefined, () => {
  throw new Error("this message cannot be made")
}))
console.log(Exit.isFailure(exit) && Cause.hasDies(exit.cause) ? "died" : `not a defect: ${String(exit)}`)
