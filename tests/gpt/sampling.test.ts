// examples/gpt/sampling.ts on a local worker: sampleNext's draws against torch 1.13's
// distribution of softmax(top-k masked logits / temperature) by a chi-square test (fixed seed;
// torch's generator cannot be matched, so its probabilities are the reference), and generate's
// loop, where top-k of 1 must give the greedy tokens.
import { afterAll, beforeAll, expect, test } from "bun:test"
import { Effect, ManagedRuntime } from "effect"
import { Controller, HostTensor, type ControllerApi, type Mesh, opsOn } from "../../src/controller/index.ts"
import { GPT } from "../../examples/gpt/model.ts"
import { generate, sampleNext } from "../../examples/gpt/sampling.ts"
import { initialWeights, type GPTConfig } from "../../examples/gpt/weights.ts"
import { testUnless } from "../skip.ts"
import { PYTHON, torchMissing } from "../torch.ts"
import { host } from "../worker/build.ts"

/** The repository root: the model's user functions load from it (examples/gpt/shards). */
const ROOT = new URL("../..", import.meta.url).pathname

let rt: ManagedRuntime.ManagedRuntime<Controller, unknown>
let mesh: Mesh
beforeAll(async () => {
  rt = ManagedRuntime.make(Controller.local({ world: 1, functionPath: [ROOT], onWorkerLine: () => {} }))
  const ctl: ControllerApi = await rt.runPromise(Effect.service(Controller))
  mesh = await rt.runPromise(ctl.mesh({ dp: 1, tp: 1 }))
}, 60_000)
afterAll(() => rt?.dispose())

const LOGITS = [1.5, -0.5, 2.25, 0.25, 3, -2, 1, 0.75], TEMPERATURE = 0.8, TOP_K = 5

/** torch's probabilities of each token: softmax of the logits over the temperature, all but the top k -inf. */
const torchProbabilities = (): number[] => {
  const script = `import torch, json
x = torch.tensor(${JSON.stringify(LOGITS)}, dtype=torch.float64) / ${TEMPERATURE}
v, _ = torch.topk(x, ${TOP_K})
x[x < v[-1]] = -float("inf")
print(json.dumps(torch.softmax(x, -1).tolist()))`
  const r = Bun.spawnSync([PYTHON, "-c", script])
  if (r.exitCode !== 0) throw new Error(r.stderr.toString())
  return JSON.parse(r.stdout.toString()) as number[]
}

/** The chi-square distribution's 0.999 quantile for 4 degrees of freedom (top-k of 5): a right sampler fails once in a thousand seeds. */
const CRITICAL_4_DOF = 18.47

testUnless(torchMissing())("sampleNext draws as torch's probabilities say, never past the top k (chi-square, 4 dof, p = 0.001)", async () => {
  const rows = 4000, on = opsOn(mesh)
  on.manual_seed(21)
  const logits = on.clone(host("f32", [rows, LOGITS.length], Array.from({ length: rows }, () => LOGITS).flat()) as never)
  const drawn = [...((await rt.runPromise(mesh.fetch(sampleNext(logits, { temperature: TEMPERATURE, topK: TOP_K })))) as HostTensor<"i64">).toArray()].map(Number)
  const p = torchProbabilities(), counts = p.map((_, k) => drawn.filter((v) => v === k).length)
  expect(counts.filter((_, k) => p[k] === 0)).toEqual([0, 0, 0])
  const x2 = p.reduce((s, q, k) => (q === 0 ? s : s + (counts[k]! - rows * q) ** 2 / (rows * q)), 0)
  expect(x2).toBeLessThan(CRITICAL_4_DOF)
}, 60_000)

test("generate: top-k of 1 gives the greedy tokens; a prompt past the block is refused", async () => {
  const config: GPTConfig = { vocab: 11, block: 8, dim: 16, heads: 2, layers: 1, tied: false }
  const model = await rt.runPromise(GPT.make(mesh, config, initialWeights(config, 3)))
  const prompts = [[1, 2, 3], [4, 5, 6], [7, 8, 9]]
  const greedy = await rt.runPromise(generate(mesh, model, prompts, 5, { temperature: 0 }))
  const topOne = await rt.runPromise(generate(mesh, model, prompts, 5, { temperature: 1.3, topK: 1 }))
  expect(greedy.map((r) => r.length)).toEqual([5, 5, 5])
  expect(topOne).toEqual(greedy)
  const sampled = await rt.runPromise(generate(mesh, model, prompts, 5, { temperature: 1 }))
  expect(sampled.flat().every((t) => Number.isInteger(t) && t >= 0 && t < config.vocab)).toBe(true)
  await expect(rt.runPromise(generate(mesh, model, prompts, 6, { temperature: 1 }))).rejects.toThrow(/3 prompt tokens and 6 more exceed the block of 8/)
  expect(() => sampleNext(model.parameters[0]!, { temperature: -1 })).toThrow(/temperature must be non-negative/)
}, 120_000)
