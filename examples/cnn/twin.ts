/** Runs the CNN's torch twin (examples/cnn/twin.py): its per-step losses and its eval loss on the held-out batch. */
import { type AdamWOptions, TORCH_PYTHON } from "../gpt/twin.ts"
import { CNN_PARAMS, type ImageBatch } from "./data.ts"

export const cnnTorchLosses = async (dp: number, weights: ReadonlyMap<string, Float32Array>, batches: ReadonlyArray<ImageBatch>, heldOut: ImageBatch, optim: AdamWOptions): Promise<{ losses: number[]; eval: number }> => {
  const request = JSON.stringify({
    dp,
    weights: Object.fromEntries(CNN_PARAMS.map((p) => [p.name, { shape: p.shape, data: Array.from(weights.get(p.name)!) }])),
    batches,
    held_out: heldOut,
    optim,
  })
  const child = Bun.spawn([TORCH_PYTHON, new URL("twin.py", import.meta.url).pathname], { stdin: new Blob([request]), stdout: "pipe", stderr: "pipe" })
  const [out, err, code] = await Promise.all([new Response(child.stdout).text(), new Response(child.stderr).text(), child.exited])
  if (code !== 0) throw new Error(`the CNN's torch twin exited with ${code}: ${err.trim().split("\n").slice(-3).join(" | ")}`)
  return JSON.parse(out) as { losses: number[]; eval: number }
}
