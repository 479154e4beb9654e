/**
 * The README's timeline picture: runs the demo with MONARCH_TRACE, then has headless Chromium
 * (Debian's `chromium`) draw one training step of the trace in the viewer and save it.
 *
 *   bun run scripts/timeline.ts [docs/timeline.png] [step]
 *   bun run scripts/timeline.ts --gpt [docs/overlap.png] [step]
 *
 * --gpt: a training step of the GPT demo's model on dp=4 (examples/gpt/model.ts's trainStep,
 * each gradient all-reduced as backward yields it), where each rank's communication-thread
 * track, under its stream's, shows the gradients' all-reduces running while backward's calls
 * go on above them.
 *
 * Also the browser helpers the trace test uses.
 */
import { mkdtempSync, readFileSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import type { ChromeTrace } from "../src/trace/merge.ts"

export const CHROMIUM = process.env.MONARCH_CHROMIUM ?? "chromium"

/** Whether headless Chromium can run here, or why not. */
export const browserMissing = (): string | undefined => {
  const r = Bun.spawnSync(["sh", "-c", `command -v ${CHROMIUM}`], { stdout: "pipe", stderr: "pipe" })
  return r.exitCode === 0 ? undefined : `${CHROMIUM} is not installed (scripts/setup.sh installs Debian's chromium)`
}

const headless = (args: string[], timeoutMs = 60_000) => {
  const profile = mkdtempSync(join(tmpdir(), "monarch-chromium-"))
  try {
    const r = Bun.spawnSync([CHROMIUM, "--headless=new", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", `--user-data-dir=${profile}`, ...args], { stdout: "pipe", stderr: "pipe", timeout: timeoutMs })
    if (r.exitCode !== 0) throw new Error(`${CHROMIUM} exited ${r.exitCode}: ${r.stderr.toString().slice(-2000)}`)
    return r.stdout.toString()
  } finally {
    rmSync(profile, { recursive: true, force: true })
  }
}

/** Saves a screenshot of `url` (a file:// URL) as `png`. */
export const screenshot = (url: string, png: string, size = "1400,330") => void headless([`--window-size=${size}`, `--screenshot=${png}`, url])

/** The page's DOM after its scripts ran. */
export const renderedDom = (url: string) => headless(["--dump-dom", "--virtual-time-budget=5000", url])

/** The window of training step `step` (1-based) on rank 0: from the end of the previous loss fetch to the end of its own. */
export const stepWindow = (trace: ChromeTrace, step: number): { from: number; to: number } => {
  const spans = trace.traceEvents.filter((e) => e.ph === "X") as Array<{ pid: number; cat: string; ts: number; dur: number }>
  const first = Math.min(...spans.map((s) => s.ts))
  const fetches = spans.filter((s) => s.pid === 0 && s.cat === "fetch").sort((a, b) => a.ts - b.ts)
  const ms = (s: { ts: number; dur: number } | undefined) => (s === undefined ? 0 : (s.ts + s.dur - first) / 1000)
  if (fetches.length < step) throw new Error(`the trace has ${fetches.length} fetches on rank 0, not ${step}`)
  return { from: ms(fetches[step - 2]), to: ms(fetches[step - 1]) }
}

/** Trains the GPT demo's model on dp=4 for `steps` steps with a timeline written to `trace`, fetching each step's loss (the step windows' ends). */
const tracedGpt = async (trace: string, steps: number): Promise<void> => {
  const { Effect, ManagedRuntime } = await import("effect")
  const { Controller } = await import("../src/controller/index.ts")
  const { AdamW } = await import("../src/optim/index.ts")
  const { blockSize, makeBatches, VOCAB } = await import("../examples/gpt/data.ts")
  const { distributeBatch, GPT, trainStep } = await import("../examples/gpt/model.ts")
  const { initialWeights } = await import("../examples/gpt/weights.ts")
  const config = { vocab: VOCAB, block: blockSize(8), dim: 64, heads: 4, layers: 2, tied: true }
  const root = new URL("..", import.meta.url).pathname
  const rt = ManagedRuntime.make(Controller.local({ world: 4, functionPath: [root], trace, env: { MONARCH_CPU_THREADS: "1" }, onWorkerLine: () => {} }))
  await rt.runPromise(Effect.gen(function* () {
    const ctl = yield* Controller
    const mesh = yield* ctl.mesh({ dp: 4, tp: 1 })
    const model = yield* GPT.make(mesh, config, initialWeights(config, 1))
    const opt = new AdamW(model.parameters, { lr: 3e-3 })
    for (const b of makeBatches(2, steps, 32, 8)) {
      const [x, y] = yield* distributeBatch(mesh, b)
      yield* (yield* trainStep(model, opt, x, y)).fetch()
      x.release()
      y.release()
    }
  })).finally(() => rt.dispose())
}

if (import.meta.main && process.argv[2] === "--gpt") {
  const out = process.argv[3] ?? "docs/overlap.png"
  const step = Number(process.argv[4] ?? 6)
  const missing = browserMissing()
  if (missing) throw new Error(missing)
  const dir = mkdtempSync(join(tmpdir(), "monarch-timeline-"))
  try {
    const trace = join(dir, "gpt.json")
    await tracedGpt(trace, step + 1)
    const { from, to } = stepWindow(JSON.parse(readFileSync(trace, "utf8")) as ChromeTrace, step)
    screenshot(`file://${join(dir, "gpt.html")}#from=${from.toFixed(3)}&to=${to.toFixed(3)}`, out, "1600,620")
    console.log(`step ${step} (${from.toFixed(1)}-${to.toFixed(1)} ms) drawn to ${out}`)
  } finally {
    rmSync(dir, { recursive: true, force: true })
  }
} else if (import.meta.main) {
  const out = process.argv[2] ?? "docs/timeline.png"
  const step = Number(process.argv[3] ?? 20)
  const missing = browserMissing()
  if (missing) throw new Error(missing)
  const dir = mkdtempSync(join(tmpdir(), "monarch-timeline-"))
  try {
    const trace = join(dir, "demo.json")
    const demo = Bun.spawnSync([process.execPath, new URL("../examples/demo.ts", import.meta.url).pathname], { env: { ...process.env, MONARCH_TRACE: trace }, stdout: "inherit", stderr: "inherit" })
    if (demo.exitCode !== 0) process.exit(demo.exitCode ?? 1)
    const { from, to } = stepWindow(JSON.parse(readFileSync(trace, "utf8")) as ChromeTrace, step)
    screenshot(`file://${join(dir, "demo.html")}#from=${from.toFixed(3)}&to=${to.toFixed(3)}`, out)
    console.log(`step ${step} (${from.toFixed(1)}-${to.toFixed(1)} ms) drawn to ${out}`)
  } finally {
    rmSync(dir, { recursive: true, force: true })
  }
}
