// The CNN (examples/cnn/model.ts: conv2d, batch_norm in training and eval, max_pool2d, a grouped
// and dilated conv2d, group_norm, avg_pool2d, linear) trained on dp=2 against its torch twin
// (examples/cnn/twin.py): the same initial weights and synthetic images handed to torch, AdamW
// with the same hyper-parameters; every step's loss and the eval loss (each rank's running
// statistics) within 1e-4 relative, and the loss falls. 16 steps of 16 images; MONARCH_LONG=1
// trains 150 steps of 32. Skips, saying why, without torch.
import { afterAll, beforeAll, expect, test } from "bun:test"
import { Effect, ManagedRuntime } from "effect"
import { Controller, type ControllerApi } from "../../src/controller/index.ts"
import { cnnWeights, makeImageBatches, makeImages } from "../../examples/cnn/data.ts"
import { trainCnn } from "../../examples/cnn/model.ts"
import { cnnTorchLosses } from "../../examples/cnn/twin.ts"
import { generator } from "../../examples/gpt/data.ts"
import { type AdamWOptions, torchMissing } from "../../examples/gpt/twin.ts"
import { describeUnless } from "../skip.ts"

const ROOT = new URL("../..", import.meta.url).pathname
const LONG = process.env.MONARCH_LONG === "1"
const STEPS = LONG ? 150 : 16, ROWS = LONG ? 32 : 16
const OPTIM: AdamWOptions = { lr: 1e-2, betas: [0.9, 0.999], eps: 1e-8, weight_decay: 0.01 }
const TOLERANCE = 1e-4

let rt: ManagedRuntime.ManagedRuntime<Controller, unknown>
let ctl: ControllerApi

describeUnless(torchMissing())("the CNN on dp=2 against its torch twin", () => {
  beforeAll(async () => {
    rt = ManagedRuntime.make(Controller.local({ world: 2, functionPath: [ROOT], onWorkerLine: () => {} }))
    ctl = await rt.runPromise(Effect.service(Controller))
  }, 60_000)
  afterAll(() => rt?.dispose())

  test(`${STEPS} steps of ${ROWS} images: every loss and the eval loss within ${TOLERANCE} relative of torch's`, async () => {
    const weights = cnnWeights(3), batches = makeImageBatches(21, STEPS, ROWS), heldOut = makeImages(generator(77), 64)
    const mesh = await rt.runPromise(ctl.mesh({ dp: 2 }))
    const [ours, theirs] = await Promise.all([rt.runPromise(trainCnn(mesh, weights, batches, heldOut, OPTIM)), cnnTorchLosses(2, weights, batches, heldOut, OPTIM)])
    const within = (a: number, b: number) => Math.abs(a - b) <= TOLERANCE * Math.abs(b)
    const off = ours.losses.flatMap((l, i) => (within(l, theirs.losses[i]!) ? [] : [`step ${i + 1}: mesh ${l}, torch ${theirs.losses[i]}`]))
    expect(ours.losses.length).toBe(STEPS)
    expect(off).toEqual([])
    expect({ eval: ours.eval, within: within(ours.eval, theirs.eval) }).toEqual({ eval: ours.eval, within: true })
    const worst = Math.max(...ours.losses.map((l, i) => Math.abs(l - theirs.losses[i]!) / Math.abs(theirs.losses[i]!)))
    console.log(`cnn dp=2: first loss ${ours.losses[0]!.toFixed(4)}, last ${ours.losses.at(-1)!.toFixed(4)} (torch ${theirs.losses.at(-1)!.toFixed(4)}), eval ${ours.eval.toFixed(4)} (torch ${theirs.eval.toFixed(4)}), worst relative difference ${worst.toExponential(2)}`)
    // Training, not just agreeing: the loss fell.
    expect(ours.losses.at(-1)!).toBeLessThan(ours.losses[0]! * 0.8)
  }, LONG ? 600_000 : 120_000)
})
