/**
 * Runs the torch twin (examples/gpt/twin.py) on Debian's python3 with torch 1.13: hands it the
 * config, the initial weights and the batches, and returns its per-step losses.
 */
import type { Batch } from "./data.ts"
import type { GPTConfig } from "./weights.ts"

/** Debian's python3-torch (the python3 on PATH may be another, without torch). */
export const TORCH_PYTHON = "/usr/bin/python3"

export interface AdamWOptions {
  readonly lr: number
  readonly betas: readonly [number, number]
  readonly eps: number
  readonly weight_decay: number
  /** clip_grad_norm_'s max_norm before each step, if any. */
  readonly clip?: number
  /** Each step's learning rate (a schedule's), in place of lr. */
  readonly lrs?: ReadonlyArray<number>
}

/** The same hyper-parameters as src/optim's AdamW takes them. */
export const adamw = (o: AdamWOptions) => ({ lr: o.lr, betas: o.betas, eps: o.eps, weightDecay: o.weight_decay })

/** Why the twin cannot run here, or undefined when torch imports. */
export const torchMissing = (): string | undefined => {
  const r = Bun.spawnSync([TORCH_PYTHON, "-c", "import torch; print(torch.__version__)"], { stdout: "pipe", stderr: "pipe" })
  return r.exitCode === 0 ? undefined : `torch does not import with ${TORCH_PYTHON} (${r.stderr.toString().trim().split("\n").at(-1) ?? `exit ${r.exitCode}`})`
}

/** The twin's loss at each step, training from `weights` on `batches` (each the whole step's batch, every dp part); its forward under torch's CPU autocast when `autocast` is given. */
export const torchLosses = async (config: GPTConfig, weights: ReadonlyMap<string, Float32Array>, shapes: ReadonlyMap<string, ReadonlyArray<number>>, batches: ReadonlyArray<Batch>, optim: AdamWOptions, autocast?: "bf16"): Promise<number[]> => {
  const request = JSON.stringify({
    config,
    autocast,
    weights: Object.fromEntries([...weights].map(([name, data]) => [name, { shape: shapes.get(name), data: Array.from(data) }])),
    batches,
    optim,
  })
  const child = Bun.spawn([TORCH_PYTHON, new URL("twin.py", import.meta.url).pathname], { stdin: new Blob([request]), stdout: "pipe", stderr: "pipe" })
  const [out, err, code] = await Promise.all([new Response(child.stdout).text(), new Response(child.stderr).text(), child.exited])
  if (code !== 0) throw new Error(`the torch twin exited with ${code}: ${err.trim().split("\n").slice(-3).join(" | ")}`)
  return (JSON.parse(out) as { losses: number[] }).losses
}
